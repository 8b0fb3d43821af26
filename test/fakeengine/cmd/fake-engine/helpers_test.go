package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/loraplane/loraplane/test/fakeengine"
	"github.com/loraplane/loraplane/test/testenv"
)

// Tests use addresses in 127.0.19.0/24 only, a distinct one per test.

// podOpt changes a test pod.
type podOpt func(*corev1.Pod)

func withLabel(k, v string) podOpt { return func(p *corev1.Pod) { p.Labels[k] = v } }
func withUID(uid string) podOpt    { return func(p *corev1.Pod) { p.UID = types.UID(uid) } }
func withPhase(ph corev1.PodPhase) podOpt {
	return func(p *corev1.Pod) { p.Status.Phase = ph }
}
func withRuntime() podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: runtimeContainer})
	}
}
func createdAt(sec int64) podOpt {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.Unix(sec, 0) }
}

// pod is a Running pod of namespace "ns" serving base model "llama" on ip.
func pod(name, ip string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:         "ns",
			Name:              name,
			UID:               types.UID(name + "-uid"),
			Labels:            map[string]string{labelName: "llama"},
			CreationTimestamp: metav1.Unix(1000, 0),
		},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "engine"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// warnings records what a manager warns about.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) warnf(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, fmt.Sprintf(format, args...))
}

func (w *warnings) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}

// newTestManager returns a manager whose engines are closed at the end of the test.
func newTestManager(t *testing.T, opts fakeengine.Options) (*manager, *warnings) {
	t.Helper()
	m := newManager(ktesting.NewLogger(t, ktesting.NewConfig()), opts)
	w := &warnings{}
	m.warnf = w.warnf
	t.Cleanup(m.closeAll)
	return m, w
}

// client does not reuse connections: engines come and go on the same addresses.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

type answer struct {
	status int
	body   string
}

func call(t *testing.T, method, url, body string) (answer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{resp.StatusCode, string(b)}, nil
}

func must(t *testing.T, method, url, body string) answer {
	t.Helper()
	a, err := call(t, method, url, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return a
}

// listening reports whether something accepts connections on addr.
func listening(addr string) bool {
	c, err := net.DialTimeout("tcp4", addr, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// eventually polls cond until it holds or 10s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, what, func() (bool, string) { return cond(), "" })
}
