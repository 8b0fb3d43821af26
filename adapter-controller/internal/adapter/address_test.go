package adapter

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestLoadNotSentToAReusedAddress: the pass reads team-a's pod, then lists its engine before
// placing (Learn); while that listing is in flight team-a's pod goes and a pod of team-b takes
// its address, with an engine of its own that needs no key. The load that follows must not
// go out: it would land on team-b's engine, with team-a's key, where no ModelAdapter records
// it (the soak of issue 39's finding: there it evicted an adapter of a capacity-1 engine).
// Two things the cache may show by then: the old pod gone, or still there but terminating (a
// kubelet frees the address when the containers are gone, before the pod object goes).
func TestLoadNotSentToAReusedAddress(t *testing.T) {
	for name, terminating := range map[string]bool{"old pod gone": false, "old pod terminating": true} {
		t.Run(name, func(t *testing.T) {
			eng := newFakeEngine()
			const ip = "127.0.50.1"
			eng.keys[ip] = "key-a"
			eng.hold = make(chan struct{})
			a := keyedAdapter("team-a", "uid-a")
			podA := readyPods(1)[0].(*corev1.Pod)
			podA.Namespace = "team-a"
			if terminating {
				podA.Finalizers = []string{"example.com/hold"} // the deletion leaves it terminating
			}
			r, c, _ := testReconciler(t, eng, clock.RealClock{}, DefaultOptions(), interceptor.Funcs{}, podA, a, credsSecret("team-a", "key-a"))

			done := make(chan error, 1)
			go func() {
				_, err := r.Reconcile(t.Context(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "team-a", Name: "lora"}})
				done <- err
			}()
			select {
			case <-eng.listStarted:
			case <-time.After(10 * time.Second):
				t.Fatal("timed out after 10s waiting for the pass to list team-a's pod before placing on it")
			}
			// The address changes hands while the listing is in flight.
			if err := c.Delete(t.Context(), podA); err != nil {
				t.Fatal(err)
			}
			podB := readyPods(1)[0].(*corev1.Pod)
			podB.Namespace, podB.Name, podB.UID = "team-b", "b0", "uid-b0"
			if err := c.Create(t.Context(), podB); err != nil {
				t.Fatal(err)
			}
			eng.mu.Lock()
			eng.keys[ip] = ""
			delete(eng.keysSeen, ip)
			eng.mu.Unlock()
			close(eng.hold)
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("timed out after 10s waiting for the reconcile to end")
			}

			if got := eng.holds(ip); slices.Contains(got, "lora") {
				t.Errorf("team-b's engine holds %v: team-a's load was sent to the pod that took team-a's address", got)
			}
			if got := eng.seen(ip); len(got) > 0 {
				t.Errorf("team-b's engine was sent the API keys %q after it took the address; want no request at all", got)
			}
		})
	}
}
