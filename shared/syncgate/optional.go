package syncgate

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/loraplane/loraplane/shared/metrics"
)

// Optional resources after start. The startup wait decides once whether an optional resource
// is watched; a CRD installed or removed later is followed with Activate and Deactivate,
// called by whoever re-checks discovery (the gate does not poll).

// Synced reports whether the informer of a declared resource holds its initial list and
// serves reads now: after the startup wait, or after Activate. It is false for a resource
// that is undeclared, pending, skipped or being activated.
func (g *Gate) Synced(gvk schema.GroupVersionKind) bool {
	t := g.lookup(gvk)
	return t != nil && t.state() == stateSynced
}

// Activate starts watching an optional resource after the gate opened: one skipped because
// its API was not served (at registration, or by Deactivate) and served now. It is
// sync-then-start for that one resource: it resolves the kind, calls prepare (which may add
// field indexes; the informer may already exist then, and client-go indexes the objects it
// holds), creates the informer and waits for it to sync, at most the gate's timeout. The
// wait is recorded in loraplane_cache_sync_duration_seconds and loraplane_cache_synced like
// the startup wait. Until Activate returns nil, Synced is false and the declared cache
// refuses the kind, so nothing acts on a half-filled cache. On error - the API is not served
// (a no-match error), prepare failed, the informer did not sync in time (a *SyncError) or ctx
// ended - the informer is removed again and the resource stays skipped; the replica stays
// ready throughout. A resource that is already synced is left alone.
func (g *Gate) Activate(ctx context.Context, obj client.Object, prepare func(context.Context) error) error {
	t, err := g.optional(obj)
	if err != nil {
		return err
	}
	if !t.beginActivation() {
		if t.state() == stateSynced {
			return nil
		}
		return fmt.Errorf("sync gate: %s is already being activated", GVKString(t.gvk))
	}
	start := g.opts.Clock.Now()
	log := g.log.WithValues("group", t.gvk.Group, "version", t.gvk.Version, "kind", t.gvk.Kind)
	log.V(2).Info("Activating optional resource: its API is served now", "timeout", g.opts.Timeout)
	synced := false
	defer func() {
		if !synced {
			g.stop(ctx, t)
		}
	}()
	if _, err := g.mgr.GetRESTMapper().RESTMapping(t.gvk.GroupKind(), t.gvk.Version); err != nil {
		return fmt.Errorf("sync gate: resolving %s: %w", GVKString(t.gvk), err)
	}
	if prepare != nil {
		if err := prepare(ctx); err != nil {
			return fmt.Errorf("sync gate: preparing the informer of %s: %w", GVKString(t.gvk), err)
		}
	}
	waitCtx, cancel := context.WithTimeout(ctx, g.opts.Timeout)
	defer cancel()
	g.waitOne(waitCtx, t, start)
	switch {
	case t.state() == stateSynced:
		synced = true
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case t.isSkipped():
		return fmt.Errorf("sync gate: optional resource %s is not served", GVKString(t.gvk))
	}
	lastErr := t.lastError()
	reason := Classify(lastErr)
	if lastErr == nil {
		reason = ReasonOther
		lastErr = errors.New("initial list did not complete; list/watch errors of an informer started after the gate opened are logged by client-go")
	}
	return &SyncError{Controller: g.opts.Controller, Timeout: g.opts.Timeout,
		Pending: []PendingResource{{GVK: t.gvk, Reason: reason, Err: lastErr}}}
}

// Deactivate stops watching an optional resource whose API is no longer served (its CRD was
// deleted): the informer is stopped and removed from the cache, Synced turns false at once,
// the declared cache refuses the kind and the metrics say skipped, as for a resource skipped
// at startup. Objects are not reported deleted: whoever reads the kind must stop relying on
// it. A skipped resource is left alone.
func (g *Gate) Deactivate(ctx context.Context, obj client.Object) error {
	t, err := g.optional(obj)
	if err != nil {
		return err
	}
	switch t.state() {
	case stateSkipped:
		return nil
	case stateActivating:
		return fmt.Errorf("sync gate: %s is being activated", GVKString(t.gvk))
	}
	g.stop(ctx, t)
	g.log.V(2).Info("Deactivated optional resource", "group", t.gvk.Group, "version", t.gvk.Version, "kind", t.gvk.Kind)
	return nil
}

// stop marks the resource skipped, then removes its informer (which stops it), also one that
// prepare created before the gate registered it.
func (g *Gate) stop(ctx context.Context, t *tracked) {
	t.skip()
	if err := g.mgr.GetCache().RemoveInformer(ctx, t.res.Object); err != nil && t.informer() != nil {
		g.log.Error(err, "Removing the informer of an optional resource", "kind", t.gvk.Kind, "group", t.gvk.Group)
	}
	t.setInformer(nil)
	metrics.CacheObjects.Delete(t.labels)
	g.dropHandlers(t)
}

// optional returns the tracked optional resource of obj once the gate is open.
func (g *Gate) optional(obj client.Object) (*tracked, error) {
	select {
	case <-g.open:
	default:
		return nil, errors.New("sync gate: optional resources are activated and deactivated after the gate opened")
	}
	gvk, err := apiutil.GVKForObject(obj, g.mgr.GetScheme())
	if err != nil {
		return nil, err
	}
	t := g.lookup(gvk)
	switch {
	case t == nil:
		return nil, fmt.Errorf("sync gate: %s was not declared", GVKString(gvk))
	case !t.res.Optional:
		return nil, fmt.Errorf("sync gate: %s is required, not optional", GVKString(gvk))
	case formOf(t.res.Object) != formOf(obj):
		return nil, fmt.Errorf("sync gate: %s is declared %s but requested %s", GVKString(gvk), formOf(t.res.Object), formOf(obj))
	}
	return t, nil
}

func (g *Gate) lookup(gvk schema.GroupVersionKind) *tracked {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range g.resources {
		if t.gvk == gvk {
			return t
		}
	}
	return nil
}
