package adapter

import (
	"context"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// notListeningYet is a fakeEngine whose first listings fail as a connection refused: a pod
// Ready before its engine listens (kwok and the soak's fake engine fleet, or a readiness probe
// that does not cover the OpenAI server), or any listing that fails once.
type notListeningYet struct {
	*fakeEngine
	mu    sync.Mutex
	fails int
}

func (e *notListeningYet) ListAdapters(ctx context.Context, ep engine.Endpoint) ([]engine.Adapter, error) {
	e.mu.Lock()
	fail := e.fails > 0
	e.fails--
	e.mu.Unlock()
	if fail {
		return nil, &engine.Error{Reason: engine.ReasonEngineUnreachable, Op: engine.OpList, Message: "connection refused"}
	}
	return e.fakeEngine.ListAdapters(ctx, ep)
}

// TestLoadNeverFillsAnEngineBeyondCapacity: a pod of capacity 1 whose engine holds an adapter
// this controller does not know of. The load that would take the pod's last free slot lists
// the engine first and is not sent; the adapter waits for room (InsufficientCapacity) and the
// engine keeps what it held. Issue 39's soak finding (seed 1796605333806277818, step 4): the
// engine of a new pod held a static adapter (--lora-modules) and its first listing, before
// placing, was refused (the engine started listening 3 ms later); the controller placed by
// what it knew (nothing) and the load evicted the static adapter. The same with an adapter
// another client loaded after the controller's last listing.
func TestLoadNeverFillsAnEngineBeyondCapacity(t *testing.T) {
	tests := map[string]struct {
		firstListingsFail int  // listings refused before the engine answers
		listedBefore      bool // the pod was listed (empty) before the other adapter came
	}{
		"first listing refused, static adapter":        {firstListingsFail: 1},
		"another client loaded since the last listing": {listedBefore: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			fe := newFakeEngine()
			eng := &notListeningYet{fakeEngine: fe, fails: tc.firstListingsFail}
			pod := readyPods(1)[0].(*corev1.Pod)
			pod.Annotations = map[string]string{v1alpha1.AdapterCapacityAnnotation: "1"}
			ip := pod.Status.PodIP
			a := testAdapter()
			r, c, _ := testReconciler(t, eng, clock.RealClock{}, DefaultOptions(), interceptor.Funcs{}, pod, a)
			if tc.listedBefore {
				r.inventory.record(pod, nil)
			}
			fe.load(ip, "other") // --lora-modules, or another client

			for range 3 {
				reconcileAdapter(t, r) //nolint:errcheck // the outcome is checked on the engine and the status
			}
			if got := fe.holds(ip); len(got) > 1 {
				t.Errorf("the engine of capacity 1 was given %v: the load evicted the adapter it held", got)
			}
			if got := fe.holds(ip); !slices.Contains(got, "other") {
				t.Errorf("the engine holds %v, want the adapter it held (other)", got)
			}
			cur := &v1alpha1.ModelAdapter{}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(a), cur); err != nil {
				t.Fatal(err)
			}
			if cond := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionScheduled); cond == nil || cond.Reason != ReasonInsufficientCapacity {
				t.Errorf("Scheduled condition %+v, want reason %s", cond, ReasonInsufficientCapacity)
			}
		})
	}
}
