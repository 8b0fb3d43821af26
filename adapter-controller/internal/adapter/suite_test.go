package adapter_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/setup"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/fakeengine"
	"github.com/loraplane/loraplane/test/testenv"
)

var (
	env *testenv.Env
	k8s client.Client
	// nextIP hands each test its own loopback addresses (127.0.20.1, 127.0.20.2, ...).
	nextIP atomic.Int32
)

const inventoryPeriod = time.Second

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	var err error
	if env, err = testenv.Start(); err != nil {
		panic(err)
	}
	if k8s, err = client.New(env.Config, client.Options{Scheme: setup.Scheme()}); err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- setup.Run(ctx, testOptions(), env.Config) }()
	code := m.Run()
	cancel()
	// A run of a few quick tests may end before the controller has finished starting: an
	// error that only says the start was cancelled is not a failure.
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "controller:", err)
		code = 1
	}
	if n := panics(); n > 0 {
		fmt.Fprintf(os.Stderr, "controller_runtime_reconcile_panics_total = %v\n", n)
		code = 1
	}
	_ = env.Stop()
	os.Exit(code)
}

func testOptions() *setup.Options {
	o := setup.NewOptions()
	o.MetricsBindAddress = "0"
	o.HealthProbeBindAddress = testenv.FreeAddr()
	o.Adapter.InventoryPeriod = inventoryPeriod
	o.Adapter.RetryLimit = 2
	o.Adapter.BaseBackoff = 200 * time.Millisecond
	o.Adapter.MaxBackoff = time.Second
	o.Adapter.DeletionRetryLimit = 2
	// Stray loads are kept in a ConfigMap, as in a cluster (the controller's namespace).
	o.Adapter.StrayNamespace = "default"
	o.EngineTimeout = 2 * time.Second
	o.Adapter.EngineLoadTimeout = 2 * time.Second
	o.GracefulShutdownTimeout = 5 * time.Second
	// AIBrix's Lease is one the tests create when they play AIBrix's controller-manager.
	o.AIBrixControllerLeases = []string{aibrixLeaseKey.String()}
	o.AIBrixCheckPeriod = 200 * time.Millisecond
	return o
}

func panics() float64 {
	v, _ := testenv.MetricSum("controller_runtime_reconcile_panics_total", nil)
	return v
}

func needEnv(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "adapter-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// newIP returns an unused loopback address for a fake engine pod.
func newIP() string {
	n := nextIP.Add(1)
	return fmt.Sprintf("127.0.%d.%d", 20+n/250, 1+n%250)
}

// engine starts a fake engine on ip:port, closed at the end of the test.
func engine(t *testing.T, ip string, port int, opts fakeengine.Options) *fakeengine.Engine {
	t.Helper()
	e, err := fakeengine.Start(ip, port, opts)
	if err != nil {
		t.Fatalf("starting a fake engine on %s:%d: %v", ip, port, err)
	}
	t.Cleanup(e.Close)
	return e
}

// modelPod creates a Ready pod with the given IP, as a kubelet would report it.
func modelPod(t *testing.T, ns, name, ip string, labels map[string]string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	pod, err := testenv.CreateReadyPod(ctxFor(t), k8s, ns, name, ip, labels, mutate...)
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func modelLabels(model string) map[string]string {
	return map[string]string{v1alpha1.ModelNameLabel: model, v1alpha1.AdapterEnabledLabel: "true"}
}

func newAdapter(ns, name, model string, mutate ...func(*v1alpha1.ModelAdapter)) *v1alpha1.ModelAdapter {
	a := &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.ModelAdapterSpec{
			PodSelector: &metav1.LabelSelector{MatchLabels: modelLabels(model)},
			ArtifactURL: "huggingface://org/" + name,
		},
	}
	for _, m := range mutate {
		m(a)
	}
	return a
}

// waitAdapter polls the adapter until cond holds, failing with what and the last status.
func waitAdapter(t *testing.T, key types.NamespacedName, timeout time.Duration, what string, cond func(*v1alpha1.ModelAdapter) bool) *v1alpha1.ModelAdapter {
	t.Helper()
	a := &v1alpha1.ModelAdapter{}
	testenv.Eventually(t, timeout, 100*time.Millisecond, what, func() (bool, string) {
		err := k8s.Get(context.Background(), key, a)
		return err == nil && cond(a), fmt.Sprintf("error %v, status %+v", err, a.Status)
	})
	return a
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, timeout, 100*time.Millisecond, what, func() (bool, string) { return cond(), "" })
}

func running(n int) func(*v1alpha1.ModelAdapter) bool {
	return func(a *v1alpha1.ModelAdapter) bool {
		return a.Status.Phase == v1alpha1.ModelAdapterRunning && len(a.Status.Instances) == n
	}
}

// readyCondition returns the Ready condition of the adapter, or nil.
func readyCondition(a *v1alpha1.ModelAdapter) *metav1.Condition {
	for i := range a.Status.Conditions {
		if a.Status.Conditions[i].Type == v1alpha1.ConditionReady {
			return &a.Status.Conditions[i]
		}
	}
	return nil
}

func joined(s []string) string { return strings.Join(s, ",") }

type metav1OwnerReference = metav1.OwnerReference

type metav1Condition = metav1.Condition

func metav1ObjectMeta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name}
}

type eventsList = eventsv1.EventList

// metricValue sums the counter, gauge or histogram count of the series of a family whose
// labels include want.
func metricValue(t *testing.T, family string, want map[string]string) float64 {
	t.Helper()
	v, err := testenv.MetricSum(family, want)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
