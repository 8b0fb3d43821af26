package syncgate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/loraplane/loraplane/shared/metrics"
)

// DefaultTimeout is how long each resource may take to sync when Options.Timeout is zero.
const DefaultTimeout = 2 * time.Minute

// ErrNotStarted is returned by WaitOpen when the manager has not been started: waiting
// there would block forever, which is the deadlock this package prevents.
var ErrNotStarted = errors.New("sync gate: the manager has not been started; waiting before Start would block forever")

// Options configure a Gate.
type Options struct {
	// Controller names the controller in logs and metric labels.
	Controller string
	// Timeout bounds the wait of each resource, from the start of the wait (default 2m).
	Timeout time.Duration
	// ProcessStart is when the process started; the startup metric measures from it.
	// Zero means the time New is called.
	ProcessStart time.Time
	// RetryInterval is the pause between attempts to register a resource whose discovery
	// failed before start (default 1s).
	RetryInterval time.Duration
	// SlowHandlerSync is how long a controller's event handler may take to receive the
	// initial list of its kind before a log line and readiness name it slow (default 10s).
	SlowHandlerSync time.Duration
	// Clock is injected for tests (default: the real clock).
	Clock clock.Clock
}

// Gate holds controllers back until every declared informer cache has synced.
type Gate struct {
	opts Options
	mgr  manager.Manager
	log  logr.Logger

	mu        sync.Mutex
	started   bool
	resources []*tracked
	// byGVK holds the resources too, for the informer constructor, which runs under the
	// cache's lock and so must not take mu (Register holds it while creating informers).
	byGVK sync.Map // schema.GroupVersionKind -> *tracked
	// controllers are the controller-runtime controllers added to the gated manager.
	controllers []*ctrlDelivery
	// gaugeMu orders the updates of loraplane_handler_synced.
	gaugeMu sync.Mutex

	open    chan struct{}
	failed  chan struct{}
	failErr error
}

// New creates the gate of one controller. Build the manager with Options.NewCache =
// gate.NewCache, then hand it to Manage before setting up controllers.
func New(opts Options) (*Gate, error) {
	if opts.Controller == "" {
		return nil, errors.New("sync gate: a controller name is required")
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("sync gate: timeout must not be negative, got %s", opts.Timeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = time.Second
	}
	if opts.SlowHandlerSync <= 0 {
		opts.SlowHandlerSync = DefaultSlowHandlerSync
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.ProcessStart.IsZero() {
		opts.ProcessStart = opts.Clock.Now()
	}
	metrics.Register()
	return &Gate{
		opts:   opts,
		open:   make(chan struct{}),
		failed: make(chan struct{}),
	}, nil
}

// NewCache is the manager's cache constructor (manager.Options.NewCache). The cache it
// builds is controller-runtime's, except that WaitForCacheSync follows the gate: the
// manager's own startup wait, which has no timeout and cannot be interrupted once an
// informer is stuck, ends when the gate opens or fails instead.
//
// Unless opts.NewInformer is set, every informer is built with the watch error handler of
// its declared resource already in place, so that the list and watch failures of an
// informer that starts at once (one created after the gate opened, by Activate) are counted
// and classified too.
func (g *Gate) NewCache(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
	if opts.NewInformer == nil {
		scheme := opts.Scheme
		opts.NewInformer = func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
			inf := toolscache.NewSharedIndexInformer(lw, obj, resync, indexers)
			if gvk, err := apiutil.GVKForObject(obj, scheme); err == nil {
				if t, ok := g.byGVK.Load(gvk); ok {
					// Cannot fail: the informer has not started.
					_ = inf.SetWatchErrorHandlerWithContext(t.(*tracked).onWatchError)
				}
			}
			return inf
		}
	}
	c, err := cache.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	return &gateCache{Cache: c, gate: g}, nil
}

// Manage binds the gate to a manager that has not been started and whose cache came from
// NewCache, adds the "sync-gate" readiness check, and returns the manager to set
// controllers up on: runnables added to it (controllers from the builder, startup work such
// as garbage collection) start only after the gate opens, its cache refuses informers of
// kinds that were not registered, and its Start runs the manager behind the gate.
func (g *Gate) Manage(mgr manager.Manager) (manager.Manager, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mgr != nil {
		return nil, errors.New("sync gate: already bound to a manager")
	}
	if gc, ok := mgr.GetCache().(*gateCache); !ok || gc.gate != g {
		return nil, errors.New("sync gate: the manager's cache must be built by this gate's NewCache (manager.Options.NewCache)")
	}
	if err := mgr.AddReadyzCheck("sync-gate", g.readyCheck); err != nil {
		return nil, fmt.Errorf("sync gate: adding readiness check: %w", err)
	}
	g.mgr = mgr
	g.log = mgr.GetLogger().WithName("sync-gate").WithValues("controller", g.opts.Controller)
	return &gatedManager{Manager: mgr, gate: g}, nil
}

// Register declares resources the controller reads and creates their informers without
// waiting for them. It must be called before the manager starts. A required resource whose
// API is not served fails at once with an error naming its group/version/kind; an optional
// one is skipped. A resource whose discovery fails for another reason (API server not
// reachable yet) is retried after start, within the timeout.
func (g *Gate) Register(ctx context.Context, resources ...Resource) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mgr == nil {
		return errors.New("sync gate: bind a manager with Manage before registering resources")
	}
	if g.started {
		return errors.New("sync gate: resources must be registered before the manager starts")
	}
	for _, r := range resources {
		if r.Object == nil {
			return errors.New("sync gate: resource without an object")
		}
		gvk, err := apiutil.GVKForObject(r.Object, g.mgr.GetScheme())
		if err != nil {
			return fmt.Errorf("sync gate: declaring %T: %w", r.Object, err)
		}
		for _, t := range g.resources {
			if t.gvk == gvk {
				return fmt.Errorf("sync gate: %s is declared twice", GVKString(gvk))
			}
		}
		t := &tracked{res: r, gvk: gvk, labels: metrics.ResourceLabels{Controller: g.opts.Controller, GVK: gvk}, clock: g.opts.Clock}
		metrics.CacheSynced.WithLabelValues(t.labels.Values()...).Set(0)
		metrics.CacheSkipped.WithLabelValues(t.labels.Values()...).Set(0)
		for _, reason := range []Reason{ReasonForbidden, ReasonNotFound, ReasonUnreachable, ReasonOther} {
			// Expose zero, not absence, so rate() and alerts work from the first scrape.
			metrics.CacheWatchErrors.WithLabelValues(append(t.labels.Values(), string(reason))...).Add(0)
		}
		g.byGVK.Store(gvk, t)
		log := g.log.WithValues("group", gvk.Group, "version", gvk.Version, "kind", gvk.Kind)
		switch err := g.register(ctx, t); {
		case err == nil:
			log.V(2).Info("Registered informer", "optional", r.Optional)
		case meta.IsNoMatchError(err) && r.Optional:
			t.skip()
			log.Info("Skipping optional resource: its API is not served")
		case meta.IsNoMatchError(err):
			return fmt.Errorf("sync gate: required resource %s is not served by the API server (is its CRD installed?): %w", GVKString(gvk), err)
		default:
			t.recordErr(err)
			log.Info("Discovery failed, retrying after start", "reason", Classify(err), "err", err.Error())
		}
		if err := g.mgr.AddReadyzCheck(checkName(gvk), t.readyCheck); err != nil {
			return fmt.Errorf("sync gate: adding readiness check for %s: %w", GVKString(gvk), err)
		}
		g.resources = append(g.resources, t)
	}
	return nil
}

// register resolves the resource and creates its informer without blocking.
func (g *Gate) register(ctx context.Context, t *tracked) error {
	mapping, err := g.mgr.GetRESTMapper().RESTMapping(t.gvk.GroupKind(), t.gvk.Version)
	if err != nil {
		return err
	}
	t.setResource(mapping.Resource)
	inf, err := g.mgr.GetCache().GetInformer(ctx, t.res.Object, cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	// The cache's informer constructor (NewCache) gave the informer its resource's error
	// handler already; this covers a cache built with a constructor of its own, for informers
	// registered before start. One registered late has started and keeps the handler it has.
	if s, ok := inf.(interface {
		SetWatchErrorHandlerWithContext(toolscache.WatchErrorHandlerWithContext) error
	}); ok {
		if err := s.SetWatchErrorHandlerWithContext(t.onWatchError); err != nil {
			g.log.V(4).Info("Keeping the default watch error handler", "kind", t.gvk.Kind, "err", err.Error())
		}
	}
	if s, ok := inf.(interface{ GetStore() toolscache.Store }); ok {
		store := s.GetStore()
		count := func() int { return len(store.ListKeys()) }
		metrics.CacheObjects.Set(t.labels, count)
		t.setObjectCount(count)
	}
	t.setInformer(inf)
	return nil
}

// Opened is closed when the gate opens.
func (g *Gate) Opened() <-chan struct{} { return g.open }

// WaitOpen blocks until the gate opens, the gate fails or ctx ends. Called before the
// manager started it returns ErrNotStarted at once instead of blocking forever.
func (g *Gate) WaitOpen(ctx context.Context) error {
	g.mu.Lock()
	started := g.started
	g.mu.Unlock()
	if !started {
		return ErrNotStarted
	}
	select {
	case <-g.open:
		return nil
	case <-g.failed:
		return g.failErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// start runs the manager behind the gate: it starts the manager (and so the caches), waits
// for every declared resource and opens the gate, or stops the manager and returns a
// *SyncError when a resource does not sync in time.
func (g *Gate) start(ctx context.Context) error {
	g.mu.Lock()
	if g.started {
		g.mu.Unlock()
		return errors.New("sync gate: manager already started")
	}
	g.started = true
	g.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- g.mgr.Start(ctx) }()
	waitDone := make(chan error, 1)
	go func() { waitDone <- g.waitAll(ctx) }()

	select {
	case err := <-mgrDone:
		cancel()
		if waitErr := <-waitDone; waitErr != nil && !errors.Is(waitErr, context.Canceled) {
			g.log.V(2).Info("Stopped waiting for caches", "err", waitErr.Error())
		}
		return err
	case err := <-waitDone:
		if err != nil {
			g.fail(err)
			cancel()
			if mgrErr := <-mgrDone; mgrErr != nil {
				g.log.Error(mgrErr, "Stopping the manager after the failed sync")
			}
			return err
		}
	}
	return <-mgrDone
}

// waitAll waits for each resource concurrently, each with the same deadline, then opens the
// gate or reports every resource that did not sync.
func (g *Gate) waitAll(ctx context.Context) error {
	start := g.opts.Clock.Now()
	g.log.Info("Waiting for informer caches to sync", "resources", len(g.resources), "timeout", g.opts.Timeout)
	waitCtx, cancel := context.WithTimeout(ctx, g.opts.Timeout)
	defer cancel()

	var wg sync.WaitGroup
	for _, t := range g.resources {
		if t.isSkipped() {
			continue
		}
		wg.Go(func() { g.waitOne(waitCtx, t, start) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}

	var pending []PendingResource
	for _, t := range g.resources {
		if t.state() != stateSynced && !t.isSkipped() {
			lastErr := t.lastError()
			reason := Classify(lastErr)
			if lastErr == nil {
				reason = ReasonOther
				lastErr = errors.New("initial list did not complete and no list/watch error was observed")
			}
			pending = append(pending, PendingResource{GVK: t.gvk, Reason: reason, Err: lastErr})
			g.log.Error(lastErr, "Cache did not sync", "group", t.gvk.Group, "version", t.gvk.Version,
				"kind", t.gvk.Kind, "reason", reason, "timeout", g.opts.Timeout)
		}
	}
	if len(pending) > 0 {
		return &SyncError{Controller: g.opts.Controller, Timeout: g.opts.Timeout, Pending: pending}
	}

	startup := g.opts.Clock.Since(g.opts.ProcessStart)
	metrics.StartupDuration.WithLabelValues(g.opts.Controller).Set(startup.Seconds())
	g.log.Info("Caches synced, opening the gate", "wait", g.opts.Clock.Since(start), "sinceProcessStart", startup)
	close(g.open)
	return nil
}

// waitOne registers the resource if discovery failed before start, then waits for its
// informer to sync or ctx to end.
func (g *Gate) waitOne(ctx context.Context, t *tracked, start time.Time) {
	for t.informer() == nil {
		err := g.register(ctx, t)
		switch {
		case err == nil:
			continue
		case meta.IsNoMatchError(err) && t.res.Optional:
			t.skip()
			g.log.Info("Skipping optional resource: its API is not served", "kind", t.gvk.Kind, "group", t.gvk.Group)
			return
		}
		t.recordErr(err)
		select {
		case <-ctx.Done():
			return
		case <-g.opts.Clock.After(g.opts.RetryInterval):
		}
	}
	select {
	case <-t.informer().HasSyncedChecker().Done():
	case <-ctx.Done():
		return
	}
	took := g.opts.Clock.Since(start)
	t.markSynced()
	metrics.CacheSyncDuration.WithLabelValues(t.labels.Values()...).Observe(took.Seconds())
	metrics.InformerInitDuration.WithLabelValues(metrics.InformerValues(g.opts.Controller, t.resource())...).Observe(took.Seconds())
	metrics.CacheSynced.WithLabelValues(t.labels.Values()...).Set(1)
	metrics.CacheSkipped.WithLabelValues(t.labels.Values()...).Set(0)
	g.log.V(2).Info("Cache synced", "group", t.gvk.Group, "version", t.gvk.Version, "kind", t.gvk.Kind, "took", took)
}

// fail records the first failure (a cache that did not sync, or a controller that did not
// start) and closes failed.
func (g *Gate) fail(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.failed:
		return
	default:
	}
	g.failErr = err
	close(g.failed)
}

// readyCheck backs the "sync-gate" readiness check: the caches (first stage), then every
// controller's event handlers (second stage).
func (g *Gate) readyCheck(_ *http.Request) error {
	select {
	case <-g.failed:
		return g.failErr
	default:
	}
	select {
	case <-g.open:
		return g.deliveryCheck()
	default:
	}
	var pending []string
	for _, t := range g.resources {
		if t.state() == statePending {
			pending = append(pending, checkName(t.gvk))
		}
	}
	sort.Strings(pending)
	return fmt.Errorf("waiting for informer caches to sync: %s", strings.Join(pending, ", "))
}

// PendingResource is a resource that did not sync in time, with its classified cause.
type PendingResource struct {
	GVK    schema.GroupVersionKind
	Reason Reason
	Err    error
}

// SyncError reports every resource that did not sync within the timeout.
type SyncError struct {
	Controller string
	Timeout    time.Duration
	Pending    []PendingResource
}

func (e *SyncError) Error() string {
	parts := make([]string, 0, len(e.Pending))
	for _, p := range e.Pending {
		parts = append(parts, fmt.Sprintf("%s (%s: %v)", GVKString(p.GVK), p.Reason, p.Err))
	}
	return fmt.Sprintf("caches of %s did not sync within %s: %s", e.Controller, e.Timeout, strings.Join(parts, "; "))
}

// GVKString renders a kind as group/version/Kind, or version/Kind for the core group, the
// form used in this package's errors and by the flags that name kinds.
func GVKString(gvk schema.GroupVersionKind) string {
	if gvk.Group == "" {
		return gvk.Version + "/" + gvk.Kind
	}
	return gvk.Group + "/" + gvk.Version + "/" + gvk.Kind
}

// isExpired reports watch errors that are part of normal operation (a resource version
// that is too old); the reflector relists and they are not failures.
func isExpired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}
