package adapter

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// TestEngineRestartInvalidatesTheListing: the engine of a pod restarts inside the pod (its
// container's restartCount goes up) and loses the adapter; the next reconcile, before any
// new inventory poll, loads it again instead of trusting the listing made before the
// restart. (Before: the old listing said "loaded" until the next poll, up to an inventory
// period, and the adapter stayed Running on an engine without it.)
func TestEngineRestartInvalidatesTheListing(t *testing.T) {
	eng := newFakeEngine()
	pods := readyPods(1)
	pod := pods[0].(*corev1.Pod)
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "vllm", Ready: true}}
	ip := pod.Status.PodIP
	r, c, _ := testReconciler(t, eng, clock.RealClock{}, DefaultOptions(), interceptor.Funcs{}, append(pods, testAdapter())...)
	if _, err := reconcileAdapter(t, r); err != nil {
		t.Fatal(err)
	}
	if got := eng.holds(ip); !slices.Contains(got, "lora") {
		t.Fatalf("the engine holds %v after the first pass", got)
	}
	// The engine restarts: its runtime adapters are gone.
	eng.mu.Lock()
	eng.loaded[ip] = nil
	eng.mu.Unlock()
	cur := &corev1.Pod{}
	if err := c.Get(t.Context(), types.NamespacedName{Namespace: "ns", Name: "p0"}, cur); err != nil {
		t.Fatal(err)
	}
	cur.Status.ContainerStatuses[0].RestartCount = 1
	if err := c.Status().Update(t.Context(), cur); err != nil {
		t.Fatal(err)
	}
	loads := eng.count(&eng.loads)
	if _, err := reconcileAdapter(t, r); err != nil {
		t.Fatal(err)
	}
	if got := eng.holds(ip); !slices.Contains(got, "lora") || eng.count(&eng.loads) != loads+1 {
		t.Errorf("after the engine restarted: the engine holds %v after %d more loads, want lora after one", got, eng.count(&eng.loads)-loads)
	}
	a := &v1alpha1.ModelAdapter{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(testAdapter()), a); err != nil {
		t.Fatal(err)
	}
	if a.Status.Phase != v1alpha1.ModelAdapterRunning {
		t.Errorf("phase %s after the reload, want Running", a.Status.Phase)
	}
}
