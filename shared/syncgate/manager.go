package syncgate

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// gatedManager is the manager controllers are set up on: it holds back every runnable until
// the gate opens, refuses undeclared informers and starts behind the gate.
type gatedManager struct {
	manager.Manager
	gate *Gate
}

// Add holds the runnable back until the gate opens. Caches, HTTP servers and webhook
// servers are not held back: the gate itself needs them running. A controller-runtime
// controller warms up once the gate opened (on every replica) and readiness waits until its
// event handlers have received their initial lists (delivery.go).
func (m *gatedManager) Add(r manager.Runnable) error {
	switch r.(type) {
	case interface{ GetCache() cache.Cache }, *manager.Server, webhook.Server:
		// Caches and servers: the gate itself needs them running.
		return m.Manager.Add(r)
	}
	if c := m.gate.addController(r); c != nil {
		return m.Manager.Add(&gatedController{gatedRunnable: gatedRunnable{inner: r, gate: m.gate}, ctrl: c})
	}
	return m.Manager.Add(&gatedRunnable{inner: r, gate: m.gate})
}

// Start runs the manager behind the gate (see Gate.start).
func (m *gatedManager) Start(ctx context.Context) error { return m.gate.start(ctx) }

// GetCache returns the cache that only hands out informers of declared resources.
func (m *gatedManager) GetCache() cache.Cache {
	return &declaredCache{Cache: m.Manager.GetCache(), gate: m.gate}
}

// gateCache is the manager's cache with WaitForCacheSync tied to the gate. Its answer is
// true once the gate has opened (every declared informer synced) and also once it has
// failed: the manager then proceeds, sees its context cancelled by the gate and shuts
// down, instead of spinning in its startup wait forever. After the gate opened it does not
// wait for the cache's informers either: the only ones that can be unsynced then are those
// of optional resources being activated, which Activate waits for with its own timeout, and
// which must not hold back a controller that starts meanwhile (a new leader) - its sources
// would wait on them, up to failing its start.
type gateCache struct {
	cache.Cache
	gate *Gate
}

func (c *gateCache) WaitForCacheSync(ctx context.Context) bool {
	select {
	case <-c.gate.open:
		return true
	case <-c.gate.failed:
		return true
	case <-ctx.Done():
		return false
	}
}

// gatedRunnable starts its runnable once the gate is open.
type gatedRunnable struct {
	inner manager.Runnable
	gate  *Gate
}

func (r *gatedRunnable) Start(ctx context.Context) error {
	select {
	case <-r.gate.open:
		return r.inner.Start(ctx)
	case <-ctx.Done():
		return nil
	}
}

// NeedLeaderElection keeps the runnable's own choice; runnables that do not say need it,
// as in controller-runtime.
func (r *gatedRunnable) NeedLeaderElection() bool {
	if le, ok := r.inner.(manager.LeaderElectionRunnable); ok {
		return le.NeedLeaderElection()
	}
	return true
}

// declaredCache refuses to create informers for resources that were not registered with the
// gate, so no controller can wait on (or act on) a cache the gate did not sync. The sources of
// a gated controller get informers that track the event handlers registered on them.
type declaredCache struct {
	cache.Cache
	gate *Gate
}

func (c *declaredCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	gvk, err := apiutil.GVKForObject(obj, c.gate.mgr.GetScheme())
	if err != nil {
		return nil, err
	}
	if err := c.gate.declared(gvk, formOf(obj)); err != nil {
		return nil, c.watched(ctx, gvk, nil, err)
	}
	inf, err := c.Cache.GetInformer(ctx, obj, opts...)
	return inf, c.watched(ctx, gvk, &inf, err)
}

func (c *declaredCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	if err := c.gate.declared(gvk, formTyped); err != nil {
		return nil, c.watched(ctx, gvk, nil, err)
	}
	inf, err := c.Cache.GetInformerForKind(ctx, gvk, opts...)
	return inf, c.watched(ctx, gvk, &inf, err)
}

// watched wraps the informer a controller's source asked for (ctx carries the controller)
// so that the handlers it adds are tracked, and records a failed lookup as the controller's;
// it returns err.
func (c *declaredCache) watched(ctx context.Context, gvk schema.GroupVersionKind, inf *cache.Informer, err error) error {
	ctrl := controllerFrom(ctx)
	switch {
	case ctrl == nil:
	case err != nil:
		ctrl.recordLookup(gvk, err)
	default:
		if t := c.gate.lookup(gvk); t != nil {
			*inf = &watchedInformer{Informer: *inf, gate: c.gate, ctrl: ctrl, res: t, ctx: ctx}
		}
	}
	return err
}

type form string

const (
	formTyped        form = "typed"
	formMetadata     form = "metadata-only"
	formUnstructured form = "unstructured"
)

func formOf(obj client.Object) form {
	switch obj.(type) {
	case *metav1.PartialObjectMetadata:
		return formMetadata
	case *unstructured.Unstructured:
		return formUnstructured
	default:
		return formTyped
	}
}

// declared returns an error unless the resource was registered in the same form.
func (g *Gate) declared(gvk schema.GroupVersionKind, f form) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range g.resources {
		if t.gvk != gvk {
			continue
		}
		if have := formOf(t.res.Object); have != f {
			return fmt.Errorf("sync gate: %s is declared %s but requested %s", GVKString(gvk), have, f)
		}
		switch t.state() {
		case stateSkipped:
			return fmt.Errorf("sync gate: optional resource %s was skipped: its API is not served", GVKString(gvk))
		case stateActivating:
			return fmt.Errorf("sync gate: optional resource %s is being activated: its cache has not synced yet", GVKString(gvk))
		}
		return nil
	}
	return fmt.Errorf("sync gate: %s was not declared; register it with the gate before starting the manager", GVKString(gvk))
}
