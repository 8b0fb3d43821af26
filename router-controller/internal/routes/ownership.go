package routes

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Scope is where some sources of a route live: a workload kind in a namespace. Kind is ""
// when it is not known (a route AIBrix's model router made names only its backends).
type Scope struct {
	Kind      string
	Namespace string
}

// String renders the scope as in ScopesAnnotation: "Kind/namespace".
func (s Scope) String() string { return s.Kind + "/" + s.Namespace }

func compareScopes(a, b Scope) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace))
}

// SourceScopes returns the sorted distinct scopes of sources.
func SourceScopes(sources []Source) []Scope {
	out := make([]Scope, 0, len(sources))
	for _, s := range sources {
		out = append(out, Scope{Kind: s.Kind, Namespace: s.Namespace})
	}
	slices.SortFunc(out, compareScopes)
	return slices.Compact(out)
}

// FormatScopes renders scopes for ScopesAnnotation.
func FormatScopes(scopes []Scope) string {
	parts := make([]string, 0, len(scopes))
	for _, s := range scopes {
		parts = append(parts, s.String())
	}
	return strings.Join(parts, ",")
}

// RouteScopes returns where the sources of a route live, as the route records them:
// ScopesAnnotation, else LegacySourcesAnnotation (kind/namespace/name entries), else, for a
// route without either (made by AIBrix's model router, or by hand), the namespaces of its
// Service backends with an unknown kind. Malformed entries are skipped. The result is sorted
// and distinct.
func RouteScopes(route *gatewayv1.HTTPRoute) []Scope {
	var out []Scope
	switch a := route.GetAnnotations(); {
	case a[ScopesAnnotation] != "":
		for _, e := range strings.Split(a[ScopesAnnotation], ",") {
			if kind, ns, ok := strings.Cut(strings.TrimSpace(e), "/"); ok && ns != "" && !strings.Contains(ns, "/") {
				out = append(out, Scope{Kind: kind, Namespace: ns})
			}
		}
	case a[LegacySourcesAnnotation] != "":
		for _, e := range strings.Split(a[LegacySourcesAnnotation], ",") {
			if parts := strings.Split(strings.TrimSpace(e), "/"); len(parts) == 3 && parts[1] != "" {
				out = append(out, Scope{Kind: parts[0], Namespace: parts[1]})
			}
		}
	default:
		for _, ns := range BackendNamespaces(route) {
			out = append(out, Scope{Namespace: ns})
		}
	}
	slices.SortFunc(out, compareScopes)
	return slices.Compact(out)
}

// ScopeNamespaces returns the sorted distinct namespaces of scopes.
func ScopeNamespaces(scopes []Scope) []string {
	out := make([]string, 0, len(scopes))
	for _, s := range scopes {
		out = append(out, s.Namespace)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// BackendNamespaces returns the sorted distinct namespaces of the Service backends of a
// route (a backend without a namespace is in the route's).
func BackendNamespaces(route *gatewayv1.HTTPRoute) []string {
	var out []string
	for _, rule := range route.Spec.Rules {
		for _, ref := range rule.BackendRefs {
			if g := ref.Group; g != nil && *g != "" {
				continue
			}
			if k := ref.Kind; k != nil && *k != "Service" {
				continue
			}
			ns := route.Namespace
			if ref.Namespace != nil {
				ns = string(*ref.Namespace)
			}
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Ownership says whose a managed object is.
type Ownership int

const (
	// Foreign: not managed by loraplane (or by anything but loraplane).
	Foreign Ownership = iota
	// OtherInstall: managed by loraplane, by another install or for another Gateway.
	OtherInstall
	// Mine: managed by this install for this Gateway (or by a build that did not label its
	// objects with an install, which this install takes on).
	Mine
)

// OwnershipOf tells whose a route or grant is. Grants carry no GatewayLabel: a grant
// admits routes of a namespace, whatever their Gateway.
func OwnershipOf(cfg Config, obj metav1.Object) Ownership {
	if !IsManaged(obj) {
		return Foreign
	}
	l := obj.GetLabels()
	if in, ok := l[InstallLabel]; ok && in != cfg.Install() {
		return OtherInstall
	}
	if gw, ok := l[GatewayLabel]; ok && gw != cfg.GatewayName {
		return OtherInstall
	}
	return Mine
}

// DescribeOwner names the install and Gateway a managed object belongs to, for messages.
func DescribeOwner(obj metav1.Object) string {
	l := obj.GetLabels()
	return fmt.Sprintf("loraplane install %q for Gateway %q", cmp.Or(l[InstallLabel], DefaultInstallID), cmp.Or(l[GatewayLabel], "?"))
}

// Claim is one live workload claiming a model, routable or not.
type Claim struct {
	Kind, Namespace, Name string
	Created               time.Time
}

// compareClaims orders claims oldest first; ties by namespace, kind and name, so the order
// is total and the same on every replica.
func compareClaims(a, b Claim) int {
	return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.Namespace, b.Namespace),
		cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
}

// OwnerNamespace returns the namespace a model is served from, given its live claims and the
// namespaces its existing route serves (prior; nil when there is no route). The route's
// namespace stays the owner while it has a live claim, so that the first claimant keeps the
// model as AIBrix's router keeps the first claimant's route, and a workload of another
// namespace relabelled to claim the model cannot take it over, however old it is. Without
// such a claim the namespace of the oldest claim owns the model (creation time, then
// namespace, kind and name). Among several prior namespaces (a route written with
// cross-namespace claims allowed, or AIBrix's route with backends in several namespaces) the
// one with the oldest claim wins. "" when there are no claims.
func OwnerNamespace(claims []Claim, prior []string) string {
	sorted := slices.SortedFunc(slices.Values(claims), compareClaims)
	for _, c := range sorted {
		if slices.Contains(prior, c.Namespace) {
			return c.Namespace
		}
	}
	if len(sorted) == 0 {
		return ""
	}
	return sorted[0].Namespace
}
