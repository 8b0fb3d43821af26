package syncgate

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
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

	mu    sync.Mutex
	inf   cache.Informer
	st    syncState
	last  error
	count int
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
		return nil
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
