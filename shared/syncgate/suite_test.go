package syncgate_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/shared/syncgate"
	"github.com/loraplane/loraplane/test/testenv"
)

var (
	env    *testenv.Env
	scheme = runtime.NewScheme()
)

func TestMain(m *testing.M) {
	flag.Parse()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if testing.Short() {
		os.Exit(m.Run())
	}
	var err error
	if env, err = testenv.Start(); err != nil {
		panic(err)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping envtest:", err)
	}
	os.Exit(code)
}

func needEnv(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
}

func newSlowProxy(t *testing.T, cfg *rest.Config) *testenv.SlowProxy {
	t.Helper()
	p, err := testenv.NewSlowProxy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// probe GETs a path of the health probe server and returns the status and body.
func probe(addr, path string) (int, string) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	n, _ := resp.Body.Read(buf)
	return resp.StatusCode, string(buf[:n])
}

// waitFor polls cond every 50ms until it holds or the timeout passes, then fails with what.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, timeout, 50*time.Millisecond, what, func() (bool, string) { return cond(), "" })
}

// metric returns the first series of the family whose labels include want, or nil.
func metric(t *testing.T, family string, want map[string]string) *dto.Metric {
	t.Helper()
	ms, err := testenv.Metrics(family, want)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		return nil
	}
	return ms[0]
}

func labels(controller, kind string) map[string]string {
	return map[string]string{"controller": controller, "kind": kind}
}

func describe(m *dto.Metric) string {
	if m == nil {
		return "<missing>"
	}
	return strings.TrimSpace(m.String())
}

func background(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx, cancel
}

// waitOpen waits for the gate to open, failing the test after 30s.
func waitOpen(t *testing.T, g *syncgate.Gate) {
	t.Helper()
	select {
	case <-g.Opened():
	case <-time.After(30 * time.Second):
		t.Fatal("timed out after 30s waiting for the sync gate to open")
	}
}
