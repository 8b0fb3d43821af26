package controller

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
)

// Map functions turn an event on a watched object into keys; they never do work. On
// updates the handler maps both the old and the new object, so a workload whose model label
// changes enqueues the old model (route to shrink or delete) and the new one.

// workloadToModel maps a workload of kind to the model it claims.
func (r *RouteReconciler) workloadToModel(kind SourceKind) handler.TypedMapFunc[*metav1.PartialObjectMetadata, Key] {
	return func(_ context.Context, obj *metav1.PartialObjectMetadata) []Key {
		if m := routes.ClaimedModel(kind.GVK.Kind, obj); m != "" {
			return []Key{ModelKey(m)}
		}
		return nil
	}
}

// routeToKeys maps an HTTPRoute to every key it concerns: routeToModels and routeToGrants
// together.
func (r *RouteReconciler) routeToKeys(ctx context.Context, route *gatewayv1.HTTPRoute) []Key {
	keys := map[Key]bool{}
	for _, k := range r.routeToModels(ctx, route) {
		keys[k] = true
	}
	for _, k := range r.routeToGrants(ctx, route) {
		keys[k] = true
	}
	return sortedKeys(keys)
}

// routeToModels maps an HTTPRoute in the gateway namespace to the model it serves and every
// model whose route name it has: that last part is how a foreign route being removed frees
// the name, and how a managed route whose annotations were edited by hand is still restored.
func (r *RouteReconciler) routeToModels(ctx context.Context, route *gatewayv1.HTTPRoute) []Key {
	if route.Namespace != r.cfg.Routes.GatewayNamespace {
		return nil
	}
	keys := map[Key]bool{}
	if routes.IsManaged(route) {
		if m := routes.ModelOf(route); m != "" {
			keys[ModelKey(m)] = true
		}
	}
	objs, err := r.listSources(ctx, routeIndexValue(route.Name))
	if err != nil {
		// Only a cache without the index fails here; the route's own model is still mapped.
		ctrl.LoggerFrom(ctx).Error(err, "Looking up the sources of a route", "route", klog.KObj(route))
	}
	for _, o := range objs {
		if m := routes.ClaimedModel(o.kind.GVK.Kind, o.obj); m != "" {
			keys[ModelKey(m)] = true
		}
	}
	return sortedKeys(keys)
}

// routeToGrants maps an HTTPRoute in the gateway namespace to the namespaces whose grants
// follow its backends: ours follow our routes, and whether AIBrix's grant there can go
// depends on every route.
func (r *RouteReconciler) routeToGrants(_ context.Context, route *gatewayv1.HTTPRoute) []Key {
	if route.Namespace != r.cfg.Routes.GatewayNamespace {
		return nil
	}
	keys := map[Key]bool{}
	for _, ns := range routeBackendNamespaces(route) {
		if ns != r.cfg.Routes.GatewayNamespace {
			keys[GrantsKey(ns)] = true
		}
	}
	return sortedKeys(keys)
}

// grantToNamespace maps a ReferenceGrant that is ours, has the name ours would have, or is
// named as AIBrix names its grants, to the grants of its namespace.
func (r *RouteReconciler) grantToNamespace(_ context.Context, g *gatewayv1beta1.ReferenceGrant) []Key {
	gw := r.cfg.Routes.GatewayNamespace
	if r.ownsGrant(g) || strings.HasPrefix(g.Name, routes.ReferenceGrantName(gw, 0)) || g.Name == routes.AIBrixGrantName(gw, g.Namespace) {
		return []Key{GrantsKey(g.Namespace)}
	}
	return nil
}

// enqueueAfter is handler.TypedEnqueueRequestsFromMapFunc with a delay: every key fn maps an
// event to (the old and the new object on updates) is added to the queue window later. The
// queue keeps the earliest ready time of a key that is already waiting, so all the events
// of a burst collapse into one reconcile at most window after the first of them; an event
// while the key is being reconciled schedules one more. handler.TypedFuncs gives
// initial-list and resync events low priority on a priority queue, as the standard
// handler does. A zero window enqueues at once.
func enqueueAfter[T any](window time.Duration, fn handler.TypedMapFunc[T, Key]) handler.TypedEventHandler[T, Key] {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[Key], objs ...T) {
		seen := map[Key]bool{}
		for _, o := range objs {
			for _, k := range fn(ctx, o) {
				if !seen[k] {
					seen[k] = true
					q.AddAfter(k, window)
				}
			}
		}
	}
	return handler.TypedFuncs[T, Key]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[T], q workqueue.TypedRateLimitingInterface[Key]) {
			enqueue(ctx, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[T], q workqueue.TypedRateLimitingInterface[Key]) {
			enqueue(ctx, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[T], q workqueue.TypedRateLimitingInterface[Key]) {
			enqueue(ctx, q, e.Object)
		},
		GenericFunc: func(ctx context.Context, e event.TypedGenericEvent[T], q workqueue.TypedRateLimitingInterface[Key]) {
			enqueue(ctx, q, e.Object)
		},
	}
}

func sortedKeys(set map[Key]bool) []Key {
	return slices.SortedFunc(maps.Keys(set), func(a, b Key) int {
		if a.Kind != b.Kind {
			return int(a.Kind) - int(b.Kind)
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// routingChanged lets through creations, deletions and the updates that can change routing:
// labels, annotations, or the start of deletion. Status and spec churn of workloads is
// filtered out.
func routingChanged() predicate.TypedPredicate[*metav1.PartialObjectMetadata] {
	return predicate.TypedFuncs[*metav1.PartialObjectMetadata]{
		UpdateFunc: func(e event.TypedUpdateEvent[*metav1.PartialObjectMetadata]) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return !maps.Equal(o.GetLabels(), n.GetLabels()) ||
				!maps.Equal(o.GetAnnotations(), n.GetAnnotations()) ||
				(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil)
		},
	}
}

// specOrMetadataChanged lets through creations, deletions and updates of the spec (the
// generation), labels or annotations of our outputs - the drift to repair - but not the
// status writes of gateway implementations.
func specOrMetadataChanged[T metav1.Object]() predicate.TypedPredicate[T] {
	return predicate.Or[T](
		predicate.TypedGenerationChangedPredicate[T]{},
		predicate.TypedLabelChangedPredicate[T]{},
		predicate.TypedAnnotationChangedPredicate[T]{},
	)
}

// acceptanceChanged lets through the updates of a route that change what the configured
// Gateway says of it (the status an implementation writes in status.parents), so that the
// route's model is reconciled and the judgement reported. It passes nothing else; it is
// combined with specOrMetadataChanged.
func acceptanceChanged(cfg routes.Config) predicate.TypedPredicate[*gatewayv1.HTTPRoute] {
	return predicate.TypedFuncs[*gatewayv1.HTTPRoute]{
		CreateFunc:  func(event.TypedCreateEvent[*gatewayv1.HTTPRoute]) bool { return false },
		DeleteFunc:  func(event.TypedDeleteEvent[*gatewayv1.HTTPRoute]) bool { return false },
		GenericFunc: func(event.TypedGenericEvent[*gatewayv1.HTTPRoute]) bool { return false },
		UpdateFunc: func(e event.TypedUpdateEvent[*gatewayv1.HTTPRoute]) bool {
			return routes.RouteAcceptance(cfg, e.ObjectOld) != routes.RouteAcceptance(cfg, e.ObjectNew)
		},
	}
}
