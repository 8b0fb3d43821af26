package routes

import (
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
)

// What AIBrix's model router (pkg/controller/modelrouter) writes, as far as a take-over needs
// to recognise it. Facts, from AIBrix's source:
//
//   - one HTTPRoute per model, named RouteName(model), in aibrix-system, without owner
//     references, labels or annotations of its own (it copies AIBrix Console's
//     app.kubernetes.io/managed-by=aibrix-console from a Console-made workload), with one
//     parentRef to the Gateway aibrix-eg and one rule whose every match requires the header
//     "model" to equal the model name exactly;
//   - one ReferenceGrant per source namespace, "aibrix-system-reserved-referencegrant-in-<ns>",
//     admitting every Service of the namespace (no name) to HTTPRoutes of aibrix-system.
//
// AIBrix hard-codes aibrix-system and aibrix-eg; a router configured with another gateway
// namespace or Gateway recognises the routes and grants AIBrix would have made for it.

// AIBrixConsoleManagedBy is the ManagedByLabel value AIBrix's model router copies onto the
// routes of workloads made by AIBrix Console.
const AIBrixConsoleManagedBy = "aibrix-console"

// IsAIBrixRoute reports whether route is the route AIBrix's model router made for model, in
// the shape it writes: in the gateway namespace under RouteName(model), not managed by
// loraplane nor by anything but AIBrix (no owner, managed-by absent or AIBrix Console's),
// attached only to the configured Gateway, with at least one match, every match requiring
// the header "model" to equal model exactly. Such a route may be adopted; any other route
// of that name stays foreign.
func IsAIBrixRoute(cfg Config, model string, route *gatewayv1.HTTPRoute) bool {
	if route.Namespace != cfg.GatewayNamespace || route.Name != RouteName(model) || len(route.OwnerReferences) > 0 {
		return false
	}
	if by, ok := route.Labels[ManagedByLabel]; ok && by != AIBrixConsoleManagedBy {
		return false
	}
	if len(route.Spec.ParentRefs) == 0 || len(route.Spec.Rules) == 0 {
		return false
	}
	for _, ref := range route.Spec.ParentRefs {
		if !IsGatewayParent(cfg, route.Namespace, ref) {
			return false
		}
	}
	for _, rule := range route.Spec.Rules {
		if len(rule.Matches) == 0 {
			return false
		}
		for _, m := range rule.Matches {
			if !requiresModelHeader(m, model) {
				return false
			}
		}
	}
	return true
}

// requiresModelHeader reports whether m requires the header "model" to equal model exactly.
func requiresModelHeader(m gatewayv1.HTTPRouteMatch, model string) bool {
	for _, h := range m.Headers {
		exact := ptr.Deref(h.Type, gatewayv1.HeaderMatchExact) == gatewayv1.HeaderMatchExact
		if exact && h.Name == ModelHeader && h.Value == model {
			return true
		}
	}
	return false
}

// AIBrixGrantName is the name of the ReferenceGrant AIBrix's model router makes in
// namespace for the routes of gatewayNamespace.
func AIBrixGrantName(gatewayNamespace, namespace string) string {
	return gatewayNamespace + "-reserved-referencegrant-in-" + namespace
}

// IsAIBrixGrant reports whether g is the ReferenceGrant AIBrix's model router made for the
// routes of the gateway namespace, in the shape it writes: named AIBrixGrantName, not managed
// by loraplane, no owner, admitting every Service of its namespace (one "to" entry without
// a name) to HTTPRoutes of the gateway namespace (one "from" entry), nothing else.
func IsAIBrixGrant(cfg Config, g *gatewayv1beta1.ReferenceGrant) bool {
	if g.Name != AIBrixGrantName(cfg.GatewayNamespace, g.Namespace) || IsManaged(g) || len(g.OwnerReferences) > 0 {
		return false
	}
	if len(g.Spec.From) != 1 || len(g.Spec.To) != 1 {
		return false
	}
	from, to := g.Spec.From[0], g.Spec.To[0]
	return from.Group == gatewayv1.GroupName && from.Kind == "HTTPRoute" && string(from.Namespace) == cfg.GatewayNamespace &&
		to.Group == "" && to.Kind == "Service" && to.Name == nil
}
