package routes

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
)

// What AIBrix's model router (pkg/controller/modelrouter, createHTTPRoute and
// createReferenceGrant) writes, as far as a take-over needs to recognise it. Facts, from
// AIBrix's source:
//
//   - one HTTPRoute per model, named RouteName(model), in aibrix-system, without owner
//     references; labels and annotations only those it copies from a workload made by AIBrix
//     Console (app.kubernetes.io/managed-by=aibrix-console, console.aibrix.ai/deployment-id
//     and -name). Its spec: one parentRef (name aibrix-eg and namespace only), no hostnames,
//     one rule whose matches are PathPrefix matches on its paths (a fixed list that grows
//     with its releases, then the workload's custom paths), each requiring exactly the
//     header "model" to equal the model name (Exact), one backendRef (Service name,
//     namespace and port only), and, since its release v0.4.0 (#1212), the request
//     timeout "<AIBRIX_GATEWAY_TIMEOUT_SECONDS>s": 120 by default in its releases up to
//     v0.7.0 and its sources up to August 2026, 600 after (DefaultTimeout);
//   - one ReferenceGrant per source namespace, "aibrix-system-reserved-referencegrant-in-<ns>",
//     admitting every Service of the namespace (no name) to HTTPRoutes of aibrix-system;
//   - both created by its controller-manager, whose field manager is AIBrixFieldManager, and
//     never updated.
//
// AIBrix hard-codes aibrix-system and aibrix-eg; a router configured with another gateway
// namespace or Gateway recognises the routes and grants AIBrix would have made for it.

// AIBrixConsoleManagedBy is the ManagedByLabel value AIBrix's model router copies onto the
// routes of workloads made by AIBrix Console.
const AIBrixConsoleManagedBy = "aibrix-console"

// AIBrixFieldManager is the field manager of AIBrix's controller-manager in managedFields:
// the API server names the manager of a write after the client's user agent, whose program
// name is that of AIBrix's binary, /manager (its build/container/Dockerfile; cmd/controllers
// sets no user agent of its own).
const AIBrixFieldManager = "manager"

// IsAIBrixRoute reports whether route may be adopted as the route AIBrix's model router made
// for model; see AIBrixRouteShape.
func IsAIBrixRoute(cfg Config, model string, route *gatewayv1.HTTPRoute) bool {
	ok, _ := AIBrixRouteShape(cfg, model, route)
	return ok
}

// AIBrixRouteShape reports whether route is exactly what AIBrix's model router would have
// written for model, so that it may be adopted: in the gateway namespace under
// RouteName(model), no owner, no mark of another manager (ForeignManager), attached only to
// the configured Gateway with neither section nor port, no hostnames, one rule without name,
// filters, retry or session persistence, PathPrefix matches on valid paths that reach no
// engine admin endpoint (ReachesEngineAdmin) each requiring exactly the header "model" to
// equal model, one Service backend with a port and weight absent or 1, and the router's
// request timeout (cfg.Timeout; a route whose timeout differs would change behaviour on
// adoption, so it is refused with a reason that names the --route-timeout to set). When ok
// is false, reason says why, as a clause: "it has hostnames".
func AIBrixRouteShape(cfg Config, model string, route *gatewayv1.HTTPRoute) (ok bool, reason string) {
	switch {
	case route.Namespace != cfg.GatewayNamespace || route.Name != RouteName(model):
		return false, fmt.Sprintf("it is not the route %s/%s that AIBrix names for model %q", cfg.GatewayNamespace, RouteName(model), model)
	case len(route.OwnerReferences) > 0:
		return false, "it has owner references, which AIBrix never writes"
	}
	if why := ForeignManager(route); why != "" {
		return false, why
	}
	if why := aibrixSpecProblem(cfg, model, &route.Spec); why != "" {
		return false, why
	}
	return true, ""
}

// aibrixSpecProblem says how spec differs from what AIBrix writes, or returns "".
func aibrixSpecProblem(cfg Config, model string, spec *gatewayv1.HTTPRouteSpec) string {
	switch {
	case len(spec.Hostnames) > 0:
		return "it has hostnames, which AIBrix never writes"
	case spec.UseDefaultGateways != "":
		return "it attaches to default Gateways, which AIBrix never asks for"
	case len(spec.ParentRefs) != 1:
		return fmt.Sprintf("it has %d parentRefs, AIBrix writes one", len(spec.ParentRefs))
	case !IsGatewayParent(cfg, cfg.GatewayNamespace, spec.ParentRefs[0]):
		return fmt.Sprintf("its parent is not the Gateway %s/%s", cfg.GatewayNamespace, cfg.GatewayName)
	case spec.ParentRefs[0].SectionName != nil || spec.ParentRefs[0].Port != nil:
		return "its parentRef names a listener section or port, which AIBrix never writes"
	case len(spec.Rules) != 1:
		return fmt.Sprintf("it has %d rules, AIBrix writes one", len(spec.Rules))
	}
	rule := &spec.Rules[0]
	switch {
	case rule.Name != nil:
		return "its rule has a name, which AIBrix never writes"
	case len(rule.Filters) > 0:
		return "its rule has filters, which AIBrix never writes"
	case rule.Retry != nil || rule.SessionPersistence != nil:
		return "its rule has retries or session persistence, which AIBrix never writes"
	case len(rule.Matches) == 0:
		return "its rule has no matches (it matches every request)"
	}
	for i := range rule.Matches {
		if why := aibrixMatchProblem(model, &rule.Matches[i]); why != "" {
			return why
		}
	}
	if why := aibrixBackendProblem(rule.BackendRefs); why != "" {
		return why
	}
	return aibrixTimeoutProblem(cfg, rule.Timeouts)
}

// aibrixMatchProblem says how m differs from AIBrix's matches, or returns "".
func aibrixMatchProblem(model string, m *gatewayv1.HTTPRouteMatch) string {
	switch {
	case m.Method != nil || len(m.QueryParams) > 0:
		return "a match requires a method or query parameters, which AIBrix never writes"
	case len(m.Headers) != 1 || !requiresModelHeader(m.Headers[0], model):
		return fmt.Sprintf("a match does not require exactly the header %q to equal %q", ModelHeader, model)
	case m.Path == nil || m.Path.Value == nil || ptr.Deref(m.Path.Type, gatewayv1.PathMatchPathPrefix) != gatewayv1.PathMatchPathPrefix:
		return "a match's path is not a PathPrefix match"
	}
	p := *m.Path.Value
	if err := ValidatePath(p); err != nil {
		return fmt.Sprintf("its path %q is invalid: %v", p, err)
	}
	if engine, endpoint, reaches := ReachesEngineAdmin(p); reaches {
		return fmt.Sprintf("its path %q lets gateway clients reach %s's endpoint %s", p, engine, endpoint)
	}
	return ""
}

// requiresModelHeader reports whether h requires the header "model" to equal model exactly.
func requiresModelHeader(h gatewayv1.HTTPHeaderMatch, model string) bool {
	exact := ptr.Deref(h.Type, gatewayv1.HeaderMatchExact) == gatewayv1.HeaderMatchExact
	return exact && h.Name == ModelHeader && h.Value == model
}

// aibrixBackendProblem says how refs differ from AIBrix's one Service backend, or returns "".
func aibrixBackendProblem(refs []gatewayv1.HTTPBackendRef) string {
	if len(refs) != 1 {
		return fmt.Sprintf("its rule has %d backendRefs, AIBrix writes one", len(refs))
	}
	ref := refs[0]
	switch {
	case ptr.Deref(ref.Group, "") != "" || ptr.Deref(ref.Kind, "Service") != "Service":
		return "its backend is not a Service"
	case ref.Namespace == nil || ref.Port == nil:
		return "its backend names no namespace or no port, which AIBrix always writes"
	case ptr.Deref(ref.Weight, 1) != 1:
		return fmt.Sprintf("its backend has weight %d, which AIBrix never writes", *ref.Weight)
	case len(ref.Filters) > 0:
		return "its backend has filters, which AIBrix never writes"
	}
	return ""
}

// aibrixTimeoutProblem says how t differs from the request timeout the router writes, or
// returns "". AIBrix writes no backend request timeout.
func aibrixTimeoutProblem(cfg Config, t *gatewayv1.HTTPRouteTimeouts) string {
	if t != nil && t.BackendRequest != nil {
		return "its rule has a backend request timeout, which AIBrix never writes"
	}
	var got time.Duration
	if t != nil && t.Request != nil {
		var err error
		if got, err = parseDuration(string(*t.Request)); err != nil {
			return fmt.Sprintf("its request timeout %q cannot be read: %v", *t.Request, err)
		}
	}
	if got == cfg.Timeout {
		return ""
	}
	flag, _ := formatDuration(got)
	return fmt.Sprintf("its request timeout is %s and the router's --route-timeout is %s, so adopting it would change how long requests may take: start the router with --route-timeout=%s to adopt it",
		describeTimeout(got), describeTimeout(cfg.Timeout), cmpOr(flag, "0"))
}

// describeTimeout renders a request timeout for a message.
func describeTimeout(d time.Duration) string {
	s, err := formatDuration(d)
	if err != nil {
		return d.String()
	}
	return cmpOr(s, "none")
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Marks of another manager on an object (see ForeignManager).
var (
	// foreignAnnotations are annotations only kubectl or Helm write.
	foreignAnnotations = map[string]string{
		"kubectl.kubernetes.io/last-applied-configuration": "kubectl apply",
		"meta.helm.sh/release-name":                        "a Helm release",
		"meta.helm.sh/release-namespace":                   "a Helm release",
	}
	// foreignPrefixes are prefixes of the labels and annotations of GitOps tools.
	foreignPrefixes = map[string]string{
		"argocd.argoproj.io/":          "Argo CD",
		"kustomize.toolkit.fluxcd.io/": "Flux",
		"helm.toolkit.fluxcd.io/":      "Flux",
	}
)

// instanceLabel is the label Argo CD tracks applications by (its label tracking method) and
// that Helm charts set on what they render; AIBrix never writes it.
const instanceLabel = "app.kubernetes.io/instance"

// ForeignManager says which other manager than AIBrix's controller-manager marked obj, as a
// clause ("it belongs to a Helm release (annotation meta.helm.sh/release-name)"), or returns
// "" when none did. The marks: ManagedByLabel other than absent or AIBrix Console's; the
// annotations of kubectl apply and Helm; labels or annotations of Argo CD and Flux (prefixes
// argocd.argoproj.io/, kustomize.toolkit.fluxcd.io/, helm.toolkit.fluxcd.io/); the label
// app.kubernetes.io/instance; and a managedFields entry of the object itself (not of a
// subresource such as status) written by another field manager than AIBrixFieldManager, or
// applied server-side. Such an object is someone else's to keep: adopting or deleting it
// would fight that manager, which would write it back.
func ForeignManager(obj metav1.Object) string {
	if by, ok := obj.GetLabels()[ManagedByLabel]; ok && by != AIBrixConsoleManagedBy {
		return fmt.Sprintf("its label %s is %q", ManagedByLabel, by)
	}
	if _, ok := obj.GetLabels()[instanceLabel]; ok {
		return fmt.Sprintf("it has the label %s, which Argo CD tracks and Helm charts set", instanceLabel)
	}
	for _, kind := range []struct {
		what string
		m    map[string]string
	}{{"annotation", obj.GetAnnotations()}, {"label", obj.GetLabels()}} {
		for _, k := range slices.Sorted(maps.Keys(kind.m)) {
			if tool, ok := foreignAnnotations[k]; ok && kind.what == "annotation" {
				return fmt.Sprintf("it was written by %s (%s %s)", tool, kind.what, k)
			}
			for prefix, tool := range foreignPrefixes {
				if strings.HasPrefix(k, prefix) {
					return fmt.Sprintf("it is managed by %s (%s %s)", tool, kind.what, k)
				}
			}
		}
	}
	for _, f := range obj.GetManagedFields() {
		switch {
		case f.Subresource != "":
		case f.Operation == metav1.ManagedFieldsOperationApply:
			return fmt.Sprintf("field manager %q applied it server-side, which AIBrix never does", f.Manager)
		case f.Manager != AIBrixFieldManager:
			return fmt.Sprintf("field manager %q wrote it, not AIBrix's controller-manager (%q)", f.Manager, AIBrixFieldManager)
		}
	}
	return ""
}

// AIBrixGrantName is the name of the ReferenceGrant AIBrix's model router makes in
// namespace for the routes of gatewayNamespace.
func AIBrixGrantName(gatewayNamespace, namespace string) string {
	return gatewayNamespace + "-reserved-referencegrant-in-" + namespace
}

// IsAIBrixGrant reports whether g is the ReferenceGrant AIBrix's model router made; see
// AIBrixGrantShape.
func IsAIBrixGrant(cfg Config, g *gatewayv1beta1.ReferenceGrant) bool {
	ok, _ := AIBrixGrantShape(cfg, g)
	return ok
}

// AIBrixGrantShape reports whether g is the ReferenceGrant AIBrix's model router made for the
// routes of the gateway namespace, in the shape it writes: named AIBrixGrantName, no owner,
// no mark of another manager (ForeignManager; this also excludes loraplane's grants),
// admitting every Service of its namespace (one "to" entry without a name) to HTTPRoutes of
// the gateway namespace (one "from" entry), nothing else. Only such a grant may be deleted
// once loraplane's grants replace it; a grant of that name that Helm or a GitOps tool keeps
// would come back after every deletion. When ok is false, reason says why, as a clause.
func AIBrixGrantShape(cfg Config, g *gatewayv1beta1.ReferenceGrant) (ok bool, reason string) {
	switch {
	case g.Name != AIBrixGrantName(cfg.GatewayNamespace, g.Namespace):
		return false, "it is not named as AIBrix names its grants"
	case len(g.OwnerReferences) > 0:
		return false, "it has owner references, which AIBrix never writes"
	}
	if why := ForeignManager(g); why != "" {
		return false, why
	}
	if len(g.Spec.From) != 1 || len(g.Spec.To) != 1 {
		return false, "it does not have exactly one from and one to entry"
	}
	from, to := g.Spec.From[0], g.Spec.To[0]
	if from.Group != gatewayv1.GroupName || from.Kind != "HTTPRoute" || string(from.Namespace) != cfg.GatewayNamespace ||
		to.Group != "" || to.Kind != "Service" || to.Name != nil {
		return false, fmt.Sprintf("it does not admit every Service to the HTTPRoutes of %s", cfg.GatewayNamespace)
	}
	return true, ""
}
