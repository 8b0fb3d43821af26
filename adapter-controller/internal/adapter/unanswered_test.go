package adapter

import (
	"slices"
	"testing"

	"time"

	corev1 "k8s.io/api/core/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// TestLateLoadAfterUnloadIsUndone: a load ends without an answer; the pod stops being wanted
// and its unload, sent before the load's horizon, is answered "not loaded" (and the inventory
// notes the pod without the adapter); the load then lands. After the horizon the adapter is
// unloaded there, though no listing showed it. (Before: at the horizon the pod was dropped
// from the record as not holding, and the late load stayed for good.)
func TestLateLoadAfterUnloadIsUndone(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	eng := newFakeEngine()
	eng.loadErr = &engine.Error{Reason: engine.ReasonEngineTimeout, Op: engine.OpLoad, Retryable: true, Message: "the engine did not answer in time"}
	opts := DefaultOptions()
	opts.EngineLoadTimeout = time.Minute
	r, c, _ := testReconciler(t, eng, clk, opts, interceptor.Funcs{}, append(readyPods(1), testAdapter())...)
	if _, err := reconcileAdapter(t, r); err != nil {
		t.Fatal(err)
	}
	if err := r.inventory.poll(t.Context()); err != nil { // lists p0: not there (yet)
		t.Fatal(err)
	}
	a := &v1alpha1.ModelAdapter{}
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: "ns", Name: "lora"}, a); err != nil {
		t.Fatal(err)
	}
	a.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.ModelNameLabel: "other"}}
	if err := c.Update(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	if _, err := reconcileAdapter(t, r); err != nil { // the unload before the horizon: "not loaded"
		t.Fatal(err)
	}
	eng.load("127.0.50.1", "lora") // the late load lands
	clk.Step(2 * time.Minute)
	for range 2 {
		if _, err := reconcileAdapter(t, r); err != nil {
			t.Fatal(err)
		}
	}
	if got := eng.holds("127.0.50.1"); slices.Contains(got, "lora") {
		t.Errorf("p0's engine holds %v after the horizon: the late load leaked", got)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(a), a); err != nil {
		t.Fatal(err)
	}
	if got := scheduledPods(a); len(got) != 0 {
		t.Errorf("scheduled pods %v after the unload, want none", got)
	}
}

// TestNotReadyGraceLeavesReadyHoldersTheirReplicas: replicas 2 → 1 while one of the two
// holders is not Ready (within the grace): the Ready holder keeps the adapter and stays
// published. (Before: the kept pod took the only replica, nothing was desired, and the Ready
// holder was de-published and unloaded.)
func TestNotReadyGraceLeavesReadyHoldersTheirReplicas(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	eng := newFakeEngine()
	a := testAdapter()
	a.Spec.Replicas = ptr.To[int32](2)
	r, c, _ := testReconciler(t, eng, clk, DefaultOptions(), interceptor.Funcs{}, append(readyPods(2), a)...)
	if _, err := reconcileAdapter(t, r); err != nil {
		t.Fatal(err)
	}
	p0 := &corev1.Pod{}
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: "ns", Name: "p0"}, p0); err != nil {
		t.Fatal(err)
	}
	p0.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(clk.Now())}}
	if err := c.Status().Update(t.Context(), p0); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(a), a); err != nil {
		t.Fatal(err)
	}
	a.Spec.Replicas = ptr.To[int32](1)
	if err := c.Update(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		clk.Step(time.Second)
		if _, err := reconcileAdapter(t, r); err != nil {
			t.Fatal(err)
		}
	}
	if got := eng.holds("127.0.50.2"); !slices.Contains(got, "lora") {
		t.Errorf("the Ready holder p1 holds %v, want the adapter", got)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(a), a); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Status.Instances, []string{"p1"}) {
		t.Errorf("status.instances %v, want [p1]", a.Status.Instances)
	}
}

// TestForeignServiceDoesNotHoldRemovalsBack: the adapter's Service is replaced by one that is
// not ours; a scale-down still unloads (our EndpointSlices go, so nothing stays published).
// (Before: the slices were left as they were, the pod stayed "published" in them, and its
// unload was put off on every pass.)
func TestForeignServiceDoesNotHoldRemovalsBack(t *testing.T) {
	eng := newFakeEngine()
	a := testAdapter()
	r, c, _ := testReconciler(t, eng, clocktesting.NewFakeClock(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)), DefaultOptions(), interceptor.Funcs{}, append(readyPods(2), a)...)
	for range 2 {
		if _, err := reconcileAdapter(t, r); err != nil {
			t.Fatal(err)
		}
	}
	svc := &corev1.Service{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(a), svc); err != nil {
		t.Fatalf("our Service: %v", err)
	}
	if err := c.Delete(t.Context(), svc); err != nil {
		t.Fatal(err)
	}
	foreign := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lora"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	if err := c.Create(t.Context(), foreign); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(a), a); err != nil {
		t.Fatal(err)
	}
	a.Spec.Replicas = ptr.To[int32](1)
	if err := c.Update(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := reconcileAdapter(t, r); err != nil {
			t.Fatal(err)
		}
	}
	held := 0
	for _, host := range []string{"127.0.50.1", "127.0.50.2"} {
		if slices.Contains(eng.holds(host), "lora") {
			held++
		}
	}
	if held != 1 {
		t.Errorf("the adapter is held by %d pods after the scale-down to 1, want 1", held)
	}
}
