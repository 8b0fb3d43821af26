package adapter

import (
	"fmt"
	"maps"
	"slices"
	"strings"
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

	"github.com/modelplane/modelplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/modelplane/modelplane/shared/api/model/v1alpha1"
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

// instanceSeries renders the modelplane_adapter_instances series of the adapters named in
// keys ("namespace/name"), for testutil.CollectAndCompare.
func instanceSeries(values map[string][2]int) string {
	var b strings.Builder
	b.WriteString("# HELP modelplane_adapter_instances Engine pods per ModelAdapter: desired (placed on) and ready (loaded and verified). Two series per adapter, removed when the adapter is deleted.\n")
	b.WriteString("# TYPE modelplane_adapter_instances gauge\n")
	for _, key := range slices.Sorted(maps.Keys(values)) {
		ns, name, _ := strings.Cut(key, "/")
		v := values[key]
		fmt.Fprintf(&b, "modelplane_adapter_instances{name=%q,namespace=%q,state=\"desired\"} %d\n", name, ns, v[0])
		fmt.Fprintf(&b, "modelplane_adapter_instances{name=%q,namespace=%q,state=\"ready\"} %d\n", name, ns, v[1])
	}
	return b.String()
}

// TestAdapterInstancesMetric: a reconcile publishes the desired and ready instances of an
// adapter (two series); the series go when the adapter is being deleted and when it is gone
// from the cache, whoever deleted it.
func TestAdapterInstancesMetric(t *testing.T) {
	RegisterMetrics()
	adapterInstances.Reset()
	t.Cleanup(adapterInstances.Reset)

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
	want := instanceSeries(map[string][2]int{"ns/all": {2, 2}, "ns/one": {1, 1}, "ns/unplaced": {0, 0}})
	if err := testutil.CollectAndCompare(adapterInstances, strings.NewReader(want)); err != nil {
		t.Errorf("after the first reconciles:\n%v", err)
	}

	if err := c.Delete(t.Context(), adapter("all")); err != nil {
		t.Fatal(err)
	}
	reconcileAll("all") // sees the deletion: unloads, releases the finalizer
	reconcileAll("all") // gone from the cache
	want = instanceSeries(map[string][2]int{"ns/one": {1, 1}, "ns/unplaced": {0, 0}})
	if err := testutil.CollectAndCompare(adapterInstances, strings.NewReader(want)); err != nil {
		t.Errorf("after deleting ns/all:\n%v", err)
	}
	if n := testutil.CollectAndCount(adapterInstances); n != 4 {
		t.Errorf("%d series for 2 adapters, want 2 per adapter", n)
	}
}
