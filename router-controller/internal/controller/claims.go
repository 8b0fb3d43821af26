package controller

import (
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
)

// Claims across namespaces. A model name is served from one namespace, its owner (see
// routes.OwnerNamespace): the namespace its route already serves while a workload there
// still claims the model, else the namespace of its oldest live claimant. Claimants in other
// namespaces are refused: no backend, hence no ReferenceGrant, and a Warning event naming
// the owner. With Config.CrossNamespaceClaims every claimant is served (one route, the union
// of their backends): any namespace that can label a workload can then take a share of any
// model's traffic.

// liveClaimants returns the workloads claiming the model that are not being deleted.
func liveClaimants(objs []sourceObject) []sourceObject {
	out := make([]sourceObject, 0, len(objs))
	for _, o := range objs {
		if o.obj.DeletionTimestamp == nil {
			out = append(out, o)
		}
	}
	return out
}

// splitClaims returns the claimants served (those of the owner namespace, or all of them
// with cross-namespace claims allowed), the refused ones, and the owner namespace ("" when
// every claimant is served). prior are the namespaces the model's route serves now.
func (r *RouteReconciler) splitClaims(claimants []sourceObject, prior []string) (served, refused []sourceObject, owner string) {
	if r.cfg.CrossNamespaceClaims {
		return claimants, nil, ""
	}
	claims := make([]routes.Claim, 0, len(claimants))
	for _, o := range claimants {
		claims = append(claims, routes.Claim{Kind: o.kind.GVK.Kind, Namespace: o.obj.Namespace, Name: o.obj.Name, Created: o.obj.CreationTimestamp.Time})
	}
	owner = routes.OwnerNamespace(claims, prior)
	for _, o := range claimants {
		if o.obj.Namespace == owner {
			served = append(served, o)
		} else {
			refused = append(refused, o)
		}
	}
	return served, refused, owner
}

// reportRefused records the refused claimants of model (behind
// loraplane_route_refused_claims) and tells each, once per owner, with a Warning event.
func (r *RouteReconciler) reportRefused(ctx context.Context, model, owner string, refused []sourceObject) {
	news := r.states.refuse(model, owner, refused)
	if len(news) == 0 {
		return
	}
	names := make([]string, 0, len(news))
	for _, o := range news {
		names = append(names, o.kind.GVK.Kind+"/"+o.obj.Namespace+"/"+o.obj.Name)
	}
	ctrl.LoggerFrom(ctx).Info("Refusing claims of a model from outside its owner namespace", "model", model, "owner", owner, "refused", names)
	for _, o := range news {
		r.recorder.Eventf(o.obj, nil, corev1.EventTypeWarning, ReasonClaimRefused, ActionSkip,
			"Model %q is served from namespace %q, where it was claimed first; this %s in namespace %q gets none of its traffic and no ReferenceGrant. Use another model name, or ask the cluster's administrators to allow claims across namespaces (--allow-cross-namespace-claims)",
			model, owner, o.kind.GVK.Kind, o.obj.Namespace)
	}
}

// servingRoute returns the route whose backends the model is served by today, for its
// owner and its view: the route under RouteName(model) when it is ours or AIBrix's to adopt,
// else our route under its legacy name; nil when there is none.
func (r *RouteReconciler) servingRoute(model string, existing, legacy *gatewayv1.HTTPRoute) *gatewayv1.HTTPRoute {
	switch {
	case existing != nil && r.ownsRouteOf(existing, model):
		return existing
	case existing != nil && r.cfg.AdoptAIBrix && routes.IsAIBrixRoute(r.cfg.Routes, model, existing):
		return existing
	default:
		return legacy
	}
}

// outsideView returns the scopes of a route of ours that this router does not see: a
// namespace it does not watch, or a kind it does not watch. Such a route is never deleted
// or rewritten by this router: the workloads sustaining it may be alive where it cannot
// look.
func (r *RouteReconciler) outsideView(route *gatewayv1.HTTPRoute) []routes.Scope {
	if route == nil || routes.OwnershipOf(r.cfg.Routes, route) != routes.Mine {
		return nil
	}
	var out []routes.Scope
	for _, s := range routes.RouteScopes(route) {
		if !r.watchesNamespace(s.Namespace) || (s.Kind != "" && !r.watchesKind(s.Kind)) {
			out = append(out, s)
		}
	}
	return out
}

// watchesNamespace reports whether the router's caches cover namespace.
func (r *RouteReconciler) watchesNamespace(namespace string) bool {
	return len(r.cfg.WatchNamespaces) == 0 || slices.Contains(r.cfg.WatchNamespaces, namespace)
}

// keepOutsideView leaves a route of ours that this router cannot fully see as it is, and
// reports it once; claimants outside the route's namespaces are refused (its owner lies
// where the route points).
func (r *RouteReconciler) keepOutsideView(ctx context.Context, model string, route *gatewayv1.HTTPRoute, outside []routes.Scope, claimants []sourceObject) error {
	nss := routes.ScopeNamespaces(routes.RouteScopes(route))
	var refused []sourceObject
	for _, o := range claimants {
		if !r.cfg.CrossNamespaceClaims && !slices.Contains(nss, o.obj.Namespace) {
			refused = append(refused, o)
		}
	}
	r.reportRefused(ctx, model, strings.Join(nss, ","), refused)
	if !r.states.outsideView(model) {
		return nil
	}
	scopes := routes.FormatScopes(outside)
	ctrl.LoggerFrom(ctx).Info("Leaving route as it is: some of its sources are outside this router's view", "route", klog.KObj(route), "model", model, "outside", scopes)
	r.recorder.Eventf(route, nil, corev1.EventTypeWarning, ReasonRouteOutsideView, ActionSkip,
		"HTTPRoute %s/%s of model %q is sustained by workloads in %s, which this router does not watch (its --watch-namespace or source kinds); it is neither updated nor deleted by this router. %s",
		route.Namespace, route.Name, model, scopes, outsideViewHint)
	return nil
}

const outsideViewHint = "Delete it by hand once no workload there claims the model, or widen the router's view."

// ownsRouteOf reports whether route is ours (this install, this Gateway) and serves model
// (or lost its model annotation to a hand edit, which the next write restores).
func (r *RouteReconciler) ownsRouteOf(route *gatewayv1.HTTPRoute, model string) bool {
	m := routes.ModelOf(route)
	return routes.OwnershipOf(r.cfg.Routes, route) == routes.Mine && (m == "" || m == model)
}
