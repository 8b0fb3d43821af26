package routes

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/loraplane/loraplane/test/aibrixfixture"
)

// aibrixRoute is the route AIBrix's model router makes for model Qwen2.5-7B (its name worked
// out by hand in TestRouteName), as it writes it.
func aibrixRoute(t *testing.T, r aibrixfixture.Route) *gatewayv1.HTTPRoute {
	t.Helper()
	u, err := aibrixfixture.HTTPRoute(r)
	if err != nil {
		t.Fatal(err)
	}
	out := &gatewayv1.HTTPRoute{}
	if err := aibrixfixture.To(u, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestIsAIBrixRoute(t *testing.T) {
	cfg := testConfig()
	const model, name = "Qwen2.5-7B", "qwen2-5-7b-9d7101d42cd9-router"
	base := aibrixfixture.Route{Name: name, Model: model, Namespace: "team", Service: "qwen", Port: 8000}
	cases := map[string]struct {
		route  aibrixfixture.Route
		model  string
		mutate func(*gatewayv1.HTTPRoute)
		want   bool
	}{
		"as AIBrix writes it":         {route: base, want: true},
		"made through AIBrix Console": {route: withConsole(base), want: true},
		"with custom paths":           {route: withPaths(base, "/v1/custom"), want: true},
		"as the API server defaults it": {route: base, want: true, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.ParentRefs[0].Group = ptr.To(gatewayv1.Group(gatewayv1.GroupName))
			r.Spec.ParentRefs[0].Kind = ptr.To(gatewayv1.Kind("Gateway"))
		}},
		"header type left to its default": {route: base, want: true, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules[0].Matches[0].Headers[0].Type = nil
		}},
		"another model's route":         {route: base, model: "Qwen2.5-7b"},
		"named by loraplane's old rule": {route: withName(base, "qwen2-5-7b-router-9d7101d4")},
		"another gateway namespace":     {route: withGateway(base, "gateways", "aibrix-eg")},
		"another Gateway":               {route: withGateway(base, "aibrix-system", "internal")},
		"ours":                          {route: base, mutate: setLabel(ManagedByLabel, ManagedByValue)},
		"managed by a GitOps tool":      {route: base, mutate: setLabel(ManagedByLabel, "argocd")},
		"owned by another object": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.OwnerReferences = []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "Thing", Name: "x", UID: "u"}}
		}},
		"one match without the header": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules[0].Matches[3].Headers = nil
		}},
		"a header matched by regular expression": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules[0].Matches[0].Headers[0].Type = ptr.To(gatewayv1.HeaderMatchRegularExpression)
		}},
		"a rule without matches (every request)": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules = append(r.Spec.Rules, gatewayv1.HTTPRouteRule{})
		}},
		"a second parent": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.ParentRefs = append(r.Spec.ParentRefs, gatewayv1.ParentReference{Name: "other"})
		}},
		"no parent": {route: base, mutate: func(r *gatewayv1.HTTPRoute) { r.Spec.ParentRefs = nil }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := aibrixRoute(t, tc.route)
			if tc.mutate != nil {
				tc.mutate(r)
			}
			m := model
			if tc.model != "" {
				m = tc.model
			}
			if got := IsAIBrixRoute(cfg, m, r); got != tc.want {
				t.Fatalf("IsAIBrixRoute = %v, want %v", got, tc.want)
			}
		})
	}
}

func withConsole(r aibrixfixture.Route) aibrixfixture.Route { r.ConsoleManaged = true; return r }
func withName(r aibrixfixture.Route, name string) aibrixfixture.Route {
	r.Name = name
	return r
}
func withPaths(r aibrixfixture.Route, extra ...string) aibrixfixture.Route {
	r.Paths = append(append([]string{}, aibrixfixture.DefaultPaths...), extra...)
	return r
}
func withGateway(r aibrixfixture.Route, ns, name string) aibrixfixture.Route {
	r.GatewayNamespace, r.Gateway = ns, name
	return r
}
func setLabel(k, v string) func(*gatewayv1.HTTPRoute) {
	return func(r *gatewayv1.HTTPRoute) { r.Labels = map[string]string{k: v} }
}

func TestIsAIBrixGrant(t *testing.T) {
	cfg := testConfig()
	grant := func(mutate func(*gatewayv1beta1.ReferenceGrant)) *gatewayv1beta1.ReferenceGrant {
		u, err := aibrixfixture.ReferenceGrant(aibrixfixture.Grant{Namespace: "team"})
		if err != nil {
			t.Fatal(err)
		}
		g := &gatewayv1beta1.ReferenceGrant{}
		if err := aibrixfixture.To(u, g); err != nil {
			t.Fatal(err)
		}
		if mutate != nil {
			mutate(g)
		}
		return g
	}
	cases := map[string]struct {
		grant *gatewayv1beta1.ReferenceGrant
		want  bool
	}{
		"as AIBrix writes it": {grant: grant(nil), want: true},
		"ours":                {grant: grant(func(g *gatewayv1beta1.ReferenceGrant) { g.Labels = map[string]string{ManagedByLabel: ManagedByValue} })},
		"another name":        {grant: grant(func(g *gatewayv1beta1.ReferenceGrant) { g.Name = "team-grant" })},
		"named Services only": {grant: grant(func(g *gatewayv1beta1.ReferenceGrant) {
			g.Spec.To[0].Name = ptr.To(gatewayv1.ObjectName("qwen"))
		})},
		"routes of another namespace": {grant: grant(func(g *gatewayv1beta1.ReferenceGrant) { g.Spec.From[0].Namespace = "gateways" })},
		"more than routes": {grant: grant(func(g *gatewayv1beta1.ReferenceGrant) {
			g.Spec.From = append(g.Spec.From, gatewayv1beta1.ReferenceGrantFrom{Group: gatewayv1.GroupName, Kind: "GRPCRoute", Namespace: "aibrix-system"})
		})},
		"more than Services": {grant: grant(func(g *gatewayv1beta1.ReferenceGrant) {
			g.Spec.To = append(g.Spec.To, gatewayv1beta1.ReferenceGrantTo{Group: "", Kind: "Secret"})
		})},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := IsAIBrixGrant(cfg, tc.grant); got != tc.want {
				t.Fatalf("IsAIBrixGrant = %v, want %v", got, tc.want)
			}
		})
	}
}
