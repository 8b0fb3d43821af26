package adapter

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/shared/aibrix"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// waitForAIBrix reports, once per adapter and episode of AIBrix's controllers running
// (aibrix.Status.Episode), that the adapter is not acted on: AIBrix's
// model-adapter-controller would race every load and unload.
func (r *Reconciler) waitForAIBrix(ctx context.Context, a *v1alpha1.ModelAdapter, st aibrix.Status) {
	if !r.aibrixWaits.first(client.ObjectKeyFromObject(a), st.Episode) {
		return
	}
	klog.FromContext(ctx).Info("Not acting on the adapter: AIBrix's controllers are running", "reason", st.Reason)
	r.recorder.Eventf(a, nil, corev1.EventTypeWarning, ReasonAIBrixRunning, "Wait",
		"Not acting on this adapter while AIBrix's controllers run: %s; stop AIBrix's model-adapter-controller (docs/switching-from-aibrix.md)", st.Reason)
}

// reportedOnce remembers which adapters were told something in which episode, so that each
// is told once per episode.
type reportedOnce struct {
	mu   sync.Mutex
	seen map[types.NamespacedName]uint64
}

func newReportedOnce() *reportedOnce {
	return &reportedOnce{seen: map[types.NamespacedName]uint64{}}
}

// first reports whether key was not told yet in episode, and marks it told.
func (o *reportedOnce) first(key types.NamespacedName, episode uint64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if told, ok := o.seen[key]; ok && told == episode {
		return false
	}
	o.seen[key] = episode
	return true
}

// reset forgets every key (between episodes: nothing to remember then).
func (o *reportedOnce) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	clear(o.seen)
}
