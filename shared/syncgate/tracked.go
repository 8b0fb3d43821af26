package syncgate

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/loraplane/loraplane/shared/metrics"
)

type syncState int

const (
	statePending syncState = iota
	stateSynced
	stateSkipped
	// stateActivating: an optional resource whose informer Activate is creating and waiting
	// for after the gate opened.
	stateActivating
)

// tracked is the state of one declared resource.
type tracked struct {
	res    Resource
	gvk    schema.GroupVersionKind
	labels metrics.ResourceLabels
	clock  clock.PassiveClock

	mu    sync.Mutex
	inf   cache.Informer
	st    syncState
	last  error
	count int
	// gvr is the resolved API resource (set when the informer is registered).
	gvr schema.GroupVersionResource
	// objects counts the objects in the informer's store (when it has one).
	objects func() int
	// handlers are the event handlers controllers registered on the informer.
	handlers []*handlerDelivery
}

func (t *tracked) setResource(gvr schema.GroupVersionResource) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gvr = gvr
}

func (t *tracked) resource() schema.GroupVersionResource {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.gvr
}

func (t *tracked) setObjectCount(count func() int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.objects = count
}

// objectCount is how many objects the informer holds, 0 when unknown.
func (t *tracked) objectCount() int {
	t.mu.Lock()
	count := t.objects
	t.mu.Unlock()
	if count == nil {
		return 0
	}
	return count()
}

func (t *tracked) addHandler(d *handlerDelivery) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.handlers = append(t.handlers, d)
}

// handlersOf returns the handlers c registered on the informer.
func (t *tracked) handlersOf(c *ctrlDelivery) []*handlerDelivery {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*handlerDelivery
	for _, d := range t.handlers {
		if d.ctrl == c {
			out = append(out, d)
		}
	}
	return out
}

// takeHandlers returns and forgets every handler registered on the informer.
func (t *tracked) takeHandlers() []*handlerDelivery {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.handlers
	t.handlers = nil
	return out
}

func (t *tracked) setInformer(inf cache.Informer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inf = inf
}

func (t *tracked) informer() cache.Informer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inf
}

func (t *tracked) state() syncState {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st
}

func (t *tracked) isSkipped() bool { return t.state() == stateSkipped }

func (t *tracked) skip() {
	t.mu.Lock()
	t.st = stateSkipped
	t.mu.Unlock()
	metrics.CacheSynced.WithLabelValues(t.labels.Values()...).Set(0)
	metrics.CacheSkipped.WithLabelValues(t.labels.Values()...).Set(1)
}

// beginActivation moves a skipped resource to stateActivating, with a clean error record,
// and reports whether it did. loraplane_cache_resource_skipped stays 1 until the informer
// has synced: an activation that fails (forbidden, say) is not a cache anything waits for.
func (t *tracked) beginActivation() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.st != stateSkipped {
		return false
	}
	t.st = stateActivating
	t.last, t.count = nil, 0
	return true
}

func (t *tracked) markSynced() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.st = stateSynced
}

func (t *tracked) recordErr(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last = err
	t.count++
}

func (t *tracked) lastError() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

// onWatchError is the informer's watch error handler: it records and counts the failure (not
// a 410 Gone, after which the informer relists), then defers to client-go's default handler,
// which logs it.
func (t *tracked) onWatchError(ctx context.Context, r *toolscache.Reflector, err error) {
	if !isExpired(err) {
		t.recordErr(err)
		values := append(t.labels.Values(), string(Classify(err)))
		metrics.CacheWatchErrors.WithLabelValues(values...).Inc()
	}
	toolscache.DefaultWatchErrorHandler(ctx, r, err)
}

// readyCheck backs /readyz/<resource>.
func (t *tracked) readyCheck(_ *http.Request) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch t.st {
	case stateSynced:
		return t.deliveryLocked()
	case stateSkipped, stateActivating:
		// An optional resource: skipped, or coming up after the gate opened (Activate). The
		// replica serves every other resource meanwhile, so it stays ready.
		return nil
	}
	if t.last != nil {
		return fmt.Errorf("%s pending: initial list not complete; last error (%s, %d so far): %w",
			GVKString(t.gvk), Classify(t.last), t.count, t.last)
	}
	return fmt.Errorf("%s pending: initial list not complete", GVKString(t.gvk))
}

// deliveryLocked is the readiness of a synced resource: nil unless a controller that is
// starting still receives its initial list through a handler it registered (the second stage
// of startup), which it then names with its progress. A handler registered after its
// controller started (an optional kind activated later) holds nothing back.
func (t *tracked) deliveryLocked() error {
	now := t.clock.Now()
	var parts []string
	for _, d := range t.handlers {
		if d.gating && d.pending() {
			parts = append(parts, d.ctrl.name+" "+d.progress(now))
		}
	}
	if len(parts) == 0 {
		return nil
	}
	sort.Strings(parts)
	return fmt.Errorf("%s informer synced; event handlers still receiving its initial list (delivered/objects): %s",
		GVKString(t.gvk), strings.Join(parts, ", "))
}
