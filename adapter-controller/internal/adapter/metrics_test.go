package adapter

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

func TestRecorders(t *testing.T) {
	RegisterMetrics()
	if n := testutil.CollectAndCount(listRequests); n < 2 {
		t.Errorf("%d list request series after registration, want started and shared exposed at zero", n)
	}
	loads := testutil.ToFloat64(loadsTotal.WithLabelValues("vllm", string(ResultSuccess)))
	reloads := testutil.ToFloat64(reloadsTotal.WithLabelValues("vllm", string(ReloadInPlace), string(ResultSuccess)))
	failed := testutil.ToFloat64(reloadsTotal.WithLabelValues("sglang", string(ReloadUnloadLoad), string(engine.ReasonEngineRejected)))
	recordLoad(engine.KindVLLM, "", nil)
	recordLoad(engine.KindVLLM, ReloadInPlace, nil)
	recordLoad(engine.KindSGLang, ReloadUnloadLoad, &engine.Error{Reason: engine.ReasonEngineRejected})
	if got := testutil.ToFloat64(loadsTotal.WithLabelValues("vllm", string(ResultSuccess))) - loads; got != 2 {
		t.Errorf("vllm successful loads grew by %v, want 2 (a load and a reload)", got)
	}
	if got := testutil.ToFloat64(reloadsTotal.WithLabelValues("vllm", string(ReloadInPlace), string(ResultSuccess))) - reloads; got != 1 {
		t.Errorf("in-place reloads grew by %v, want 1", got)
	}
	if got := testutil.ToFloat64(reloadsTotal.WithLabelValues("sglang", string(ReloadUnloadLoad), string(engine.ReasonEngineRejected))) - failed; got != 1 {
		t.Errorf("failed sglang reloads grew by %v, want 1", got)
	}
	count := func() uint64 {
		m := &dto.Metric{}
		if err := engineRequestDuration.WithLabelValues("vllm", "load").(prometheus.Histogram).Write(m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	requests, observed := testutil.ToFloat64(engineRequests.WithLabelValues("vllm", "load", "200")), count()
	ObserveEngineRequest("vllm", "load", "200", 30*time.Millisecond)
	if got := testutil.ToFloat64(engineRequests.WithLabelValues("vllm", "load", "200")) - requests; got != 1 {
		t.Errorf("engine requests grew by %v, want 1", got)
	}
	if got := count() - observed; got != 1 {
		t.Errorf("engine request durations observed %d times, want 1", got)
	}
	if got := resultOf(nil); got != ResultSuccess {
		t.Errorf("resultOf(nil) = %q, want success", got)
	}
	if got := resultOf(&engine.Error{Reason: engine.ReasonEngineTimeout}); got != "EngineTimeout" {
		t.Errorf("resultOf(timeout) = %q, want EngineTimeout", got)
	}
}

// instancesIn returns the loraplane_adapter_instances values (desired, ready) of the
// adapters of one namespace by name, and how many series they are. Only that namespace is
// read: the envtest suite's controller runs in this process and publishes its own adapters'
// series meanwhile.
func instancesIn(t *testing.T, namespace string) (map[string][2]int, int) {
	t.Helper()
	ch := make(chan prometheus.Metric)
	go func() { adapterInstances.Collect(ch); close(ch) }()
	got, series := map[string][2]int{}, 0
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{}
		for _, l := range pb.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["namespace"] != namespace {
			continue
		}
		series++
		v := got[labels["name"]]
		switch InstanceState(labels["state"]) {
		case InstancesDesired:
			v[0] = int(pb.GetGauge().GetValue())
		case InstancesReady:
			v[1] = int(pb.GetGauge().GetValue())
		default:
			t.Errorf("series with state %q", labels["state"])
		}
		got[labels["name"]] = v
	}
	return got, series
}

// TestAdapterInstancesMetric: a reconcile publishes the desired and ready instances of an
// adapter (two series); the series go when the adapter is being deleted and when it is gone
// from the cache, whoever deleted it.
func TestAdapterInstancesMetric(t *testing.T) {
	RegisterMetrics()
	// Only namespace "ns" is this test's: the envtest suite's series are left alone.
	forget := func() { adapterInstances.DeletePartialMatch(prometheus.Labels{"namespace": "ns"}) }
	forget()
	t.Cleanup(forget)

	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	var objs []client.Object
	for i := range 2 {
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprintf("p%d", i)),
				Labels: map[string]string{v1alpha1.ModelNameLabel: "m"}},
			Status: corev1.PodStatus{PodIP: fmt.Sprintf("127.0.41.%d", i+1),
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.ModelNameLabel: "m"}}
	adapter := func(name string) *v1alpha1.ModelAdapter {
		return &v1alpha1.ModelAdapter{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:       v1alpha1.ModelAdapterSpec{PodSelector: selector, ArtifactURL: "huggingface://org/" + name},
		}
	}
	one := adapter("one")
	one.Spec.Replicas = ptr.To[int32](1)
	unplaced := adapter("unplaced")
	unplaced.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.ModelNameLabel: "none"}}
	leaving := adapter("leaving")
	leaving.Finalizers = []string{Finalizer}
	leaving.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	objs = append(objs, adapter("all"), one, unplaced, leaving)

	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, podModelIndex, podModel).
		WithStatusSubresource(&v1alpha1.ModelAdapter{}).Build()
	r := NewReconciler(c, c, newFakeEngine(), events.NewFakeRecorder(100), clock.RealClock{}, DefaultOptions())
	reconcileAll := func(names ...string) {
		t.Helper()
		for _, n := range names {
			if _, err := r.Reconcile(t.Context(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: n}}); err != nil {
				t.Fatalf("reconciling %s: %v", n, err)
			}
		}
	}
	// Series of adapters this process knew and that are now gone (deleted while the
	// reconcile of the deletion ran elsewhere) or leaving.
	recordInstances("ns", "gone", 3, 3)
	recordInstances("ns", "leaving", 2, 1)

	reconcileAll("all", "one", "unplaced", "leaving", "gone")
	want := map[string][2]int{"all": {2, 2}, "one": {1, 1}, "unplaced": {0, 0}}
	if got, _ := instancesIn(t, "ns"); !maps.Equal(got, want) {
		t.Errorf("after the first reconciles: (desired, ready) by adapter %v, want %v", got, want)
	}

	if err := c.Delete(t.Context(), adapter("all")); err != nil {
		t.Fatal(err)
	}
	reconcileAll("all") // sees the deletion: unloads, releases the finalizer
	reconcileAll("all") // gone from the cache
	want = map[string][2]int{"one": {1, 1}, "unplaced": {0, 0}}
	got, series := instancesIn(t, "ns")
	if !maps.Equal(got, want) {
		t.Errorf("after deleting ns/all: (desired, ready) by adapter %v, want %v", got, want)
	}
	if series != 2*len(got) {
		t.Errorf("%d series for %d adapters, want 2 per adapter", series, len(got))
	}
}
