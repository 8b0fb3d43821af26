package controller

import (
	"context"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
)

// garbageCollector enqueues, once the gate is open, every model named by a source, every
// model and namespace of the routes and grants we own, and the namespaces of AIBrix's
// grants (to be retired). Reconciling them removes what was
// orphaned while the controller was down (a workload deleted meanwhile) and repairs drift.
// It runs on the gated manager, so it starts only after every cache has synced, and only on
// the leader. It never deletes anything itself: the reconciler decides from synced caches.
type garbageCollector struct {
	r   *RouteReconciler
	out chan<- event.TypedGenericEvent[Key]
}

var (
	_ manager.Runnable               = (*garbageCollector)(nil)
	_ manager.LeaderElectionRunnable = (*garbageCollector)(nil)
)

// NeedLeaderElection keeps garbage collection on the leader.
func (g *garbageCollector) NeedLeaderElection() bool { return true }

// Start enqueues every key once and returns.
func (g *garbageCollector) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("router-gc")
	// Cache reads after sync do not fail in practice; if they do, retry until they work or
	// the manager stops. The watches enqueue every object meanwhile; only the sweep waits.
	var (
		keys   []Key
		listed bool
	)
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Steps: math.MaxInt32, Cap: 30 * time.Second}
	_ = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		var err error
		if keys, err = g.r.allKeys(ctx); err != nil {
			log.Error(err, "Listing objects for garbage collection, retrying")
			return false, nil
		}
		listed = true
		return true, nil
	})
	if !listed {
		return nil // the manager is stopping
	}
	log.Info("Enqueuing every model and owned object for garbage collection", "keys", len(keys))
	for _, k := range keys {
		select {
		case g.out <- event.TypedGenericEvent[Key]{Object: k}:
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

// allKeys lists, from the caches, every model claimed by a source of an active kind, and
// the keys of every route and grant we own.
func (r *RouteReconciler) allKeys(ctx context.Context) ([]Key, error) {
	keys := map[Key]bool{}
	for _, k := range r.activeKinds(ctx) {
		list := k.list()
		if err := r.cache.List(ctx, list); err != nil {
			return nil, err
		}
		for i := range list.Items {
			if m := routes.ClaimedModel(k.GVK.Kind, &list.Items[i]); m != "" {
				keys[ModelKey(m)] = true
			}
		}
	}

	var routeList gatewayv1.HTTPRouteList
	if err := r.cache.List(ctx, &routeList, client.InNamespace(r.cfg.Routes.GatewayNamespace),
		client.MatchingLabels{routes.ManagedByLabel: routes.ManagedByValue}); err != nil {
		return nil, err
	}
	for i := range routeList.Items {
		for _, k := range r.routeToKeys(ctx, &routeList.Items[i]) {
			keys[k] = true
		}
	}

	var grants gatewayv1beta1.ReferenceGrantList
	if err := r.cache.List(ctx, &grants); err != nil {
		return nil, err
	}
	for i := range grants.Items {
		if g := &grants.Items[i]; r.ownsGrant(g) || (r.cfg.AdoptAIBrix && routes.IsAIBrixGrant(r.cfg.Routes, g)) {
			keys[GrantsKey(g.Namespace)] = true
		}
	}
	return sortedKeys(keys), nil
}
