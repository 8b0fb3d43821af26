// Package aibrixcrd_test runs the adapter-controller on an API server that serves AIBrix's own
// ModelAdapter CRD (test/aibrixfixture/crd) instead of loraplane's: the setup a helm install
// over an AIBrix cluster keeps. That CRD prunes the status fields it does not know, so a
// status write can change nothing on the server (same resourceVersion, no watch event).
package aibrixcrd_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/setup"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/fakeengine"
	"github.com/loraplane/loraplane/test/testenv"
)

var (
	env    *testenv.Env
	k8s    client.Client
	nextIP atomic.Int32
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := testenv.AIBrixCRDDir()
	if err != nil {
		panic(err)
	}
	if env, err = testenv.StartWithCRDs(dir); err != nil {
		panic(err)
	}
	if k8s, err = client.New(env.Config, client.Options{Scheme: setup.Scheme()}); err != nil {
		panic(err)
	}
	o := setup.NewOptions()
	o.MetricsBindAddress = "0"
	o.HealthProbeBindAddress = testenv.FreeAddr()
	o.Adapter.InventoryPeriod = time.Second
	o.EngineTimeout = 2 * time.Second
	o.Adapter.EngineLoadTimeout = 2 * time.Second
	o.GracefulShutdownTimeout = 5 * time.Second
	o.AIBrixControllerLeases = nil
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- setup.Run(ctx, o, env.Config) }()
	code := m.Run()
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "controller:", err)
		code = 1
	}
	if v, _ := testenv.MetricSum("controller_runtime_reconcile_panics_total", nil); v > 0 {
		fmt.Fprintf(os.Stderr, "controller_runtime_reconcile_panics_total = %v\n", v)
		code = 1
	}
	_ = env.Stop()
	os.Exit(code)
}

// newIP returns an unused loopback address for a fake engine pod (127.0.70.1, ...).
func newIP() string {
	n := nextIP.Add(1)
	return fmt.Sprintf("127.0.%d.%d", 70+n/250, 1+n%250)
}

func modelPod(t *testing.T, ns, name string) (*corev1.Pod, *fakeengine.Engine) {
	t.Helper()
	ip := newIP()
	e, err := fakeengine.Start(ip, 8000, fakeengine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	pod, err := testenv.CreateReadyPod(t.Context(), k8s, ns, name, ip,
		map[string]string{v1alpha1.ModelNameLabel: "qwen", v1alpha1.AdapterEnabledLabel: "true"})
	if err != nil {
		t.Fatal(err)
	}
	return pod, e
}

// TestAIBrixCRDKeepsReconciling: Running, then a pod added gets the adapter and a pod
// deleted leaves status.instances and the EndpointSlice, more than one pass after the
// status writes that the CRD's pruning made no-ops. (Before: the adapter froze about one
// pass after Running — the pod added never got the adapter.)
func TestAIBrixCRDKeepsReconciling(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "aibrixcrd-"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	p0, _ := modelPod(t, ns.Name, "qwen-0")
	p1, _ := modelPod(t, ns.Name, "qwen-1")
	a := &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "qwen-lora"},
		Spec: v1alpha1.ModelAdapterSpec{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.ModelNameLabel: "qwen"}},
			ArtifactURL: "huggingface://org/qwen-lora",
		},
	}
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	instances := func(want ...string) func() (bool, string) {
		return func() (bool, string) {
			got := &v1alpha1.ModelAdapter{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(a), got); err != nil {
				return false, err.Error()
			}
			return got.Status.Phase == v1alpha1.ModelAdapterRunning && slices.Equal(got.Status.Instances, want),
				fmt.Sprintf("phase %s, instances %v", got.Status.Phase, got.Status.Instances)
		}
	}
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, "Running on qwen-0 and qwen-1", instances(p0.Name, p1.Name))
	// Wait until the controller is done with the adapter (no reconcile for 2 s): the pass
	// after the Running write has made its status write, which the pruning made a no-op.
	reconciles := func() float64 {
		v, _ := testenv.MetricSum("controller_runtime_reconcile_total", map[string]string{"controller": "modeladapter"})
		return v
	}
	last, since := reconciles(), time.Now()
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, "no reconcile of the adapter for 2 s", func() (bool, string) {
		if n := reconciles(); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) >= 2*time.Second, fmt.Sprintf("%v reconciles, the last %v ago", last, time.Since(since))
	})

	p2, e2 := modelPod(t, ns.Name, "qwen-2")
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, "the added pod qwen-2 in status.instances", instances(p0.Name, p1.Name, p2.Name))
	if !slices.Contains(e2.Loaded(), "qwen-lora") {
		t.Errorf("qwen-2's engine holds %v", e2.Loaded())
	}

	if err := k8s.Delete(ctx, p0, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, "the deleted pod qwen-0 out of status.instances", instances(p1.Name, p2.Name))
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, "the EndpointSlice with qwen-1 and qwen-2 only", func() (bool, string) {
		eps := &discoveryv1.EndpointSlice{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(a), eps); err != nil {
			return false, err.Error()
		}
		var addrs []string
		for _, e := range eps.Endpoints {
			addrs = append(addrs, e.Addresses...)
		}
		slices.Sort(addrs)
		want := []string{testenv.TestAddress(p1.Status.PodIP), testenv.TestAddress(p2.Status.PodIP)}
		slices.Sort(want)
		return slices.Equal(addrs, want), fmt.Sprintf("addresses %v, want %v", addrs, want)
	})
}
