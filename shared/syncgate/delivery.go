package syncgate

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/loraplane/loraplane/shared/metrics"
)

// Handler delivery, the second stage of sync-then-start.
//
// Once the informers have synced, every controller-runtime controller registers an event
// handler per watch on the informer of the watched kind, and the informer replays its store to
// it: each object of the initial list goes through the handler's predicates and mapping
// function into the controller's queue. controller-runtime (since v0.23, its PR 3406) starts a
// controller's workers only when each of these registrations reports HasSynced (every initial
// object delivered), and fails the controller when that takes longer than its
// CacheSyncTimeout. A slow mapping function makes this stage last long - with tens of
// thousands of objects, past the timeout - and it is invisible in the informer stage. The gate
// makes it visible and part of readiness:
//
//   - A controller warms up (controller-runtime's EnableWarmup, which shared/app turns on): its
//     sources start once the gate opened on every replica, standbys included, so a standby
//     receives the initial lists too and a new leader starts its workers at once.
//   - The name of the controller travels in the context of its sources, and the gated cache
//     wraps the informers they ask for: each handler registration is tracked - when it was
//     registered, how many initial objects it has received, when it has them all.
//   - Readiness holds until every controller's sources have synced; /readyz/<kind> names each
//     controller still receiving that kind's initial list, how far it got and whether it is
//     slow (past Options.SlowHandlerSync, also logged).
//   - A controller whose sources do not sync within its timeout fails the process with a
//     *DeliveryError naming the controller and each kind with its cause, one log line per kind,
//     as a failed cache sync does.

// DefaultSlowHandlerSync is the default Options.SlowHandlerSync.
const DefaultSlowHandlerSync = 10 * time.Second

type ctrlState int

const (
	// ctrlWaiting: added to the gated manager, sources not started yet.
	ctrlWaiting ctrlState = iota
	// ctrlStarting: its sources are starting: handlers registered, initial lists delivered.
	ctrlStarting
	// ctrlStarted: every source synced (or the controller does not warm up).
	ctrlStarted
	// ctrlFailed: a source did not sync within the controller's timeout.
	ctrlFailed
)

// ctrlDelivery is the start of one controller-runtime controller added to the gated manager.
type ctrlDelivery struct {
	name    string
	timeout time.Duration
	warmup  bool

	mu       sync.Mutex
	state    ctrlState
	since    time.Time
	handlers []*handlerDelivery
	// lookups are the informer lookups of its sources that failed while it started.
	lookups map[schema.GroupVersionKind]error
}

// handlerDelivery is one event handler a controller registered on an informer.
type handlerDelivery struct {
	ctrl       *ctrlDelivery
	res        *tracked
	registered time.Time
	// objects is how many objects the informer held when the handler was registered: the
	// initial events to come.
	objects int
	// gating: registered while its controller was starting, so readiness waits for it. A
	// handler registered later (the watch of an optional kind activated after start) is
	// measured and named when slow, but holds nothing back.
	gating bool
	reg    toolscache.ResourceEventHandlerRegistration

	delivered atomic.Int64
	slow      atomic.Bool
	// stopped: its informer was stopped (an optional kind deactivated).
	stopped atomic.Bool
}

func (d *handlerDelivery) pending() bool { return !d.stopped.Load() && !d.reg.HasSynced() }

func (d *handlerDelivery) labels(controller string) metrics.HandlerLabels {
	return metrics.HandlerLabels{Controller: controller, Reconciler: d.ctrl.name, GVK: d.res.gvk}
}

// progress says how far the delivery got, e.g. "120/300 for 4s, slow".
func (d *handlerDelivery) progress(now time.Time) string {
	s := fmt.Sprintf("%d/%d for %s", d.delivered.Load(), d.objects, now.Sub(d.registered).Round(100*time.Millisecond))
	if d.slow.Load() {
		s += ", slow"
	}
	return s
}

// controllerKey carries the controller whose sources run in a context.
type controllerKey struct{}

func withController(ctx context.Context, c *ctrlDelivery) context.Context {
	return context.WithValue(ctx, controllerKey{}, c)
}

func controllerFrom(ctx context.Context) *ctrlDelivery {
	c, _ := ctx.Value(controllerKey{}).(*ctrlDelivery)
	return c
}

// controllerFields reads what the gate needs of a controller-runtime controller: its name,
// the start timeout of its sources (CacheSyncTimeout) and whether it warms up. The type,
// sigs.k8s.io/controller-runtime/pkg/internal/controller.Controller[request], is internal and
// has no accessors for them; they are exported fields it sets at construction and never
// changes. TestControllerFields pins them, so that an upgrade that renames them fails a test
// rather than the gate.
func controllerFields(r manager.Runnable) (name string, timeout time.Duration, warmup, ok bool) {
	if _, isWarmup := r.(interface{ Warmup(context.Context) error }); !isWarmup {
		return "", 0, false, false
	}
	v := reflect.ValueOf(r)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return "", 0, false, false
	}
	v = v.Elem()
	n, t, w := v.FieldByName("Name"), v.FieldByName("CacheSyncTimeout"), v.FieldByName("EnableWarmup")
	if !n.IsValid() || n.Kind() != reflect.String || n.String() == "" ||
		!t.IsValid() || t.Type() != reflect.TypeFor[time.Duration]() ||
		!w.IsValid() || w.Type() != reflect.TypeFor[*bool]() {
		return "", 0, false, false
	}
	return n.String(), time.Duration(t.Int()), !w.IsNil() && w.Elem().Bool(), true
}

// addController starts tracking a controller added to the gated manager; nil for a runnable
// that is not a controller.
func (g *Gate) addController(r manager.Runnable) *ctrlDelivery {
	name, timeout, warmup, ok := controllerFields(r)
	if !ok {
		return nil
	}
	c := &ctrlDelivery{name: name, timeout: timeout, warmup: warmup, lookups: map[schema.GroupVersionKind]error{}}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.controllers = append(g.controllers, c)
	return c
}

// gatedController is a gated controller: it warms up once the gate opened, its sources
// carrying it in their context so that the cache tracks the handlers they register.
type gatedController struct {
	gatedRunnable
	ctrl *ctrlDelivery
}

// Warmup is called by the manager on every replica, leader or not, after the caches (the
// gate) and before leader election; it returns once the controller's sources synced.
func (r *gatedController) Warmup(ctx context.Context) error {
	select {
	case <-r.gate.open:
	case <-r.gate.failed:
		return nil
	case <-ctx.Done():
		return nil
	}
	warm := r.inner.(interface{ Warmup(context.Context) error }) // controllerFields checked it
	return r.gate.warmup(ctx, r.ctrl, warm.Warmup)
}

// Start starts the controller (on the leader). Its sources started in Warmup, unless it does
// not warm up: then they start here, and are tracked all the same.
func (r *gatedController) Start(ctx context.Context) error {
	return r.gatedRunnable.Start(withController(ctx, r.ctrl))
}

// warmup runs the controller's warmup (which starts its sources and waits for them to sync)
// and records how it went.
func (g *Gate) warmup(ctx context.Context, c *ctrlDelivery, warm func(context.Context) error) error {
	log := g.log.WithValues("reconciler", c.name)
	c.mu.Lock()
	if !c.warmup {
		c.state, c.since = ctrlStarted, g.opts.Clock.Now()
		c.mu.Unlock()
		log.Info("Controller does not warm up (EnableWarmup off): readiness does not wait for its event handlers, which receive their initial lists only when it leads")
		return nil
	}
	if c.state == ctrlWaiting {
		c.state, c.since = ctrlStarting, g.opts.Clock.Now()
	}
	since := c.since
	c.mu.Unlock()
	log.V(2).Info("Starting the event sources of the controller", "timeout", c.timeout)
	if err := warm(withController(ctx, c)); err != nil {
		if ctx.Err() != nil {
			return nil //nolint:nilerr // stopping: a source cut short by the shutdown is no failure
		}
		return g.controllerFailed(c, err)
	}
	c.mu.Lock()
	c.state = ctrlStarted
	n := len(c.handlers)
	c.mu.Unlock()
	log.Info("Controller's event handlers received their initial lists", "handlers", n, "took", g.opts.Clock.Since(since))
	return nil
}

// controllerFailed reports a controller whose sources did not sync: one log line per kind
// still pending, with its cause, and a *DeliveryError that fails the gate.
func (g *Gate) controllerFailed(c *ctrlDelivery, cause error) error {
	c.mu.Lock()
	c.state = ctrlFailed
	c.mu.Unlock()
	pending := c.pendingKinds()
	for _, p := range pending {
		g.log.Error(p.Err, "Controller did not receive the initial list of a kind in time", "reconciler", c.name,
			"group", p.GVK.Group, "version", p.GVK.Version, "kind", p.GVK.Kind, "reason", p.Reason,
			"delivered", p.Delivered, "objects", p.Objects, "timeout", c.timeout)
	}
	err := &DeliveryError{Controller: g.opts.Controller, Reconciler: c.name, Timeout: c.timeout, Pending: pending, Err: cause}
	if len(pending) == 0 {
		g.log.Error(cause, "Controller did not start", "reconciler", c.name, "timeout", c.timeout)
	}
	g.fail(err)
	return err
}

// pendingKinds are the kinds whose handlers had not received their initial lists, and those
// whose informer could not be had, each with its cause.
func (c *ctrlDelivery) pendingKinds() []PendingHandler {
	c.mu.Lock()
	defer c.mu.Unlock()
	byGVK := map[schema.GroupVersionKind]*PendingHandler{}
	for _, d := range c.handlers {
		if d.reg.HasSynced() {
			continue
		}
		p := byGVK[d.res.gvk]
		if p == nil {
			p = &PendingHandler{GVK: d.res.gvk, Reason: ReasonSlowHandler}
			if d.res.state() != stateSynced {
				// The informer itself is not synced (an optional kind being activated):
				// its own failure is the cause.
				p.Reason, p.Err = ReasonOther, d.res.lastError()
				if p.Err != nil {
					p.Reason = Classify(p.Err)
				}
			}
			byGVK[d.res.gvk] = p
		}
		p.Delivered += int(d.delivered.Load())
		p.Objects += d.objects
	}
	for gvk, err := range c.lookups {
		if _, ok := byGVK[gvk]; !ok {
			byGVK[gvk] = &PendingHandler{GVK: gvk, Reason: Classify(err), Err: err}
		}
	}
	out := make([]PendingHandler, 0, len(byGVK))
	for _, p := range byGVK {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return GVKString(out[i].GVK) < GVKString(out[j].GVK) })
	return out
}

// recordLookup remembers a failed informer lookup of the controller's sources while it starts.
func (c *ctrlDelivery) recordLookup(gvk schema.GroupVersionKind, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == ctrlWaiting || c.state == ctrlStarting {
		c.lookups[gvk] = err
	}
}

// waiting describes a controller readiness waits for, or "" when it has started.
func (c *ctrlDelivery) waiting(now time.Time) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case ctrlStarted:
		return ""
	case ctrlFailed:
		return c.name + " (failed)"
	case ctrlWaiting:
		return c.name + " (event sources not started)"
	}
	var parts []string
	for _, d := range c.handlers {
		if d.gating && d.pending() {
			parts = append(parts, checkName(d.res.gvk)+" "+d.progress(now))
		}
	}
	if len(parts) == 0 {
		return c.name + " (registering its event handlers)"
	}
	slices.Sort(parts)
	return c.name + " (" + strings.Join(parts, "; ") + ")"
}

// deliveryCheck is the part of readiness after the gate opened: every controller started.
func (g *Gate) deliveryCheck() error {
	g.mu.Lock()
	ctrls := slices.Clone(g.controllers)
	g.mu.Unlock()
	now := g.opts.Clock.Now()
	var waiting []string
	for _, c := range ctrls {
		if w := c.waiting(now); w != "" {
			waiting = append(waiting, w)
		}
	}
	if len(waiting) == 0 {
		return nil
	}
	return fmt.Errorf("caches synced; waiting for controllers to receive the initial list of every kind they watch: %s", strings.Join(waiting, ", "))
}

// watchedInformer is the informer a controller's source gets from the gated cache: handlers
// added through it are tracked.
type watchedInformer struct {
	cache.Informer
	gate *Gate
	ctrl *ctrlDelivery
	res  *tracked
	//nolint:containedctx // the context of the source that asked for the informer: its end ends the tracking
	ctx context.Context
}

func (i *watchedInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandlerWithOptions(h, toolscache.HandlerOptions{})
}

func (i *watchedInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandlerWithOptions(h, toolscache.HandlerOptions{ResyncPeriod: &resync})
}

func (i *watchedInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	d := &handlerDelivery{ctrl: i.ctrl, res: i.res, registered: i.gate.opts.Clock.Now(), objects: i.res.objectCount()}
	reg, err := i.Informer.AddEventHandlerWithOptions(countingHandler{ResourceEventHandler: h, delivered: &d.delivered}, opts)
	if err != nil {
		return nil, err
	}
	d.reg = reg
	i.gate.handlerAdded(i.ctx, d)
	return reg, nil
}

// countingHandler counts the initial objects delivered to the handler it wraps.
type countingHandler struct {
	toolscache.ResourceEventHandler
	delivered *atomic.Int64
}

func (h countingHandler) OnAdd(obj any, isInInitialList bool) {
	h.ResourceEventHandler.OnAdd(obj, isInInitialList)
	if isInInitialList {
		h.delivered.Add(1)
	}
}

// handlerAdded starts tracking a registered handler until it has its initial list or its
// source stops.
func (g *Gate) handlerAdded(ctx context.Context, d *handlerDelivery) {
	c := d.ctrl
	c.mu.Lock()
	d.gating = c.state == ctrlWaiting || c.state == ctrlStarting
	c.handlers = append(c.handlers, d)
	c.mu.Unlock()
	d.res.addHandler(d)
	g.updateHandlerSynced(c, d.res)
	go g.watchDelivery(ctx, d)
}

func (g *Gate) watchDelivery(ctx context.Context, d *handlerDelivery) {
	log := g.log.WithValues("reconciler", d.ctrl.name, "group", d.res.gvk.Group, "version", d.res.gvk.Version, "kind", d.res.gvk.Kind)
	slow := g.opts.Clock.NewTimer(g.opts.SlowHandlerSync)
	defer slow.Stop()
	slowC := slow.C()
	for {
		select {
		case <-d.reg.HasSyncedChecker().Done():
			took := g.opts.Clock.Since(d.registered)
			metrics.HandlerSyncDuration.WithLabelValues(d.labels(g.opts.Controller).Values()...).Observe(took.Seconds())
			g.updateHandlerSynced(d.ctrl, d.res)
			if d.slow.Load() {
				log.Info("Event handler received its initial list", "objects", d.delivered.Load(), "took", took)
			} else {
				log.V(2).Info("Event handler received its initial list", "objects", d.delivered.Load(), "took", took)
			}
			return
		case <-slowC:
			slowC = nil
			d.slow.Store(true)
			log.Info("Event handler still receiving its initial list: the controller's mapping functions or predicates are slow",
				"delivered", d.delivered.Load(), "objects", d.objects, "for", g.opts.Clock.Since(d.registered),
				"threshold", g.opts.SlowHandlerSync, "timeout", d.ctrl.timeout, "holdsReadiness", d.gating)
		case <-ctx.Done():
			// The source gave up (its controller's start timed out) or stopped: the gauge
			// keeps saying what was last known.
			return
		}
	}
}

// updateHandlerSynced sets loraplane_handler_synced of a controller and kind from its live
// handlers, or removes the series when it has none.
func (g *Gate) updateHandlerSynced(c *ctrlDelivery, t *tracked) {
	g.gaugeMu.Lock()
	defer g.gaugeMu.Unlock()
	live, synced := 0, 0
	for _, d := range t.handlersOf(c) {
		if d.stopped.Load() {
			continue
		}
		live++
		if d.reg.HasSynced() {
			synced++
		}
	}
	values := metrics.HandlerLabels{Controller: g.opts.Controller, Reconciler: c.name, GVK: t.gvk}.Values()
	switch {
	case live == 0:
		metrics.HandlerSynced.DeleteLabelValues(values...)
	case synced == live:
		metrics.HandlerSynced.WithLabelValues(values...).Set(1)
	default:
		metrics.HandlerSynced.WithLabelValues(values...).Set(0)
	}
}

// dropHandlers forgets the handlers on the informer of a resource that is being stopped.
func (g *Gate) dropHandlers(t *tracked) {
	for _, d := range t.takeHandlers() {
		d.stopped.Store(true)
		g.updateHandlerSynced(d.ctrl, t)
		metrics.HandlerSynced.DeleteLabelValues(d.labels(g.opts.Controller).Values()...)
	}
}

// PendingHandler is a kind whose initial list a controller had not received when its start
// timed out, with the classified cause: slow-handler when the informer had synced and its
// handlers were still receiving the list, else the informer's own failure.
type PendingHandler struct {
	GVK    schema.GroupVersionKind
	Reason Reason
	// Delivered of Objects: initial objects the kind's handlers had received, of those the
	// informer held when they were registered.
	Delivered, Objects int
	// Err is the cause when it is an error (nil for slow-handler).
	Err error
}

// DeliveryError reports a controller whose event sources did not sync within its start
// timeout (--controller-start-timeout): controller-runtime's error, and each kind whose
// initial list its handlers had not received.
type DeliveryError struct {
	// Controller is the binary, Reconciler the controller-runtime controller.
	Controller string
	Reconciler string
	Timeout    time.Duration
	Pending    []PendingHandler
	Err        error
}

func (e *DeliveryError) Error() string {
	if len(e.Pending) == 0 {
		return fmt.Sprintf("controller %s of %s did not start within %s: %v", e.Reconciler, e.Controller, e.Timeout, e.Err)
	}
	parts := make([]string, 0, len(e.Pending))
	for _, p := range e.Pending {
		if p.Err != nil {
			parts = append(parts, fmt.Sprintf("%s (%s: %v)", GVKString(p.GVK), p.Reason, p.Err))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s (%s: %d of %d initial objects delivered)", GVKString(p.GVK), p.Reason, p.Delivered, p.Objects))
	}
	return fmt.Sprintf("controller %s of %s did not receive the initial lists of its watched kinds within %s: %s",
		e.Reconciler, e.Controller, e.Timeout, strings.Join(parts, "; "))
}

func (e *DeliveryError) Unwrap() error { return e.Err }
