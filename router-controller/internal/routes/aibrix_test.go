package routes

import (
	"testing"
	"time"

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
	cfg.Timeout = DefaultTimeout // AIBrix's newest default, as the fixture's routes have it
	const model, name = "Qwen2.5-7B", "qwen2-5-7b-9d7101d42cd9-router"
	base := aibrixfixture.Route{Name: name, Model: model, Namespace: "team", Service: "qwen", Port: 8000}
	cases := map[string]struct {
		route      aibrixfixture.Route
		model      string
		cfgTimeout time.Duration // the router's --route-timeout; 0: DefaultTimeout (600s)
		mutate     func(*gatewayv1.HTTPRoute)
		want       bool
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

		// Defaults the API server writes, and what AIBrix copies from AIBrix Console.
		"backend as the API server defaults it": {route: base, want: true, mutate: func(r *gatewayv1.HTTPRoute) {
			ref := &r.Spec.Rules[0].BackendRefs[0]
			ref.Group, ref.Kind, ref.Weight = ptr.To(gatewayv1.Group("")), ptr.To(gatewayv1.Kind("Service")), ptr.To[int32](1)
		}},
		"path type left to its default": {route: base, want: true, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules[0].Matches[1].Path.Type = nil
		}},
		"with AIBrix Console's annotations": {route: withConsole(base), want: true, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Annotations = map[string]string{"console.aibrix.ai/deployment-id": "d-1", "console.aibrix.ai/deployment-name": "qwen"}
		}},
		"written by AIBrix's field manager, status by the gateway's": {route: base, want: true, mutate: func(r *gatewayv1.HTTPRoute) {
			r.ManagedFields = []metav1.ManagedFieldsEntry{
				{Manager: "manager", Operation: metav1.ManagedFieldsOperationUpdate},
				{Manager: "envoy-gateway", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status"},
			}
		}},
		"AIBrix v0.7.0's default timeout, the router's alike": {route: withTimeout(base, aibrixfixture.V070Timeout), cfgTimeout: 2 * time.Minute, want: true},
		"AIBrix v0.7.0's paths":                               {route: withPathList(base, aibrixfixture.V070Paths), want: true},

		// Anything AIBrix never writes.
		"hostnames": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Hostnames = []gatewayv1.Hostname{"llm.example.com"}
		}},
		"a parent section": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.ParentRefs[0].SectionName = ptr.To(gatewayv1.SectionName("https"))
		}},
		"a parent port": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.ParentRefs[0].Port = ptr.To[gatewayv1.PortNumber](443)
		}},
		"two rules": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules = append(r.Spec.Rules, *r.Spec.Rules[0].DeepCopy())
		}},
		"a named rule": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules[0].Name = ptr.To(gatewayv1.SectionName("main"))
		}},
		"a weighted backend": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules[0].BackendRefs[0].Weight = ptr.To[int32](80)
		}},
		"a second backend": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			extra := *r.Spec.Rules[0].BackendRefs[0].DeepCopy()
			extra.Name = "canary"
			r.Spec.Rules[0].BackendRefs = append(r.Spec.Rules[0].BackendRefs, extra)
		}},
		"a backend of another kind": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			ref := &r.Spec.Rules[0].BackendRefs[0]
			ref.Group, ref.Kind = ptr.To(gatewayv1.Group("gateway.envoyproxy.io")), ptr.To(gatewayv1.Kind("Backend"))
		}},
		"a backend without port": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules[0].BackendRefs[0].Port = nil
		}},
		"a rule filter": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules[0].Filters = []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestMirror,
				RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{BackendRef: gatewayv1.BackendObjectReference{Name: "spy", Port: ptr.To[gatewayv1.PortNumber](80)}}}}
		}},
		"a backend filter": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules[0].BackendRefs[0].Filters = []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier,
				RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{Set: []gatewayv1.HTTPHeader{{Name: "x-team", Value: "a"}}}}}
		}},
		"a method match": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules[0].Matches[0].Method = ptr.To(gatewayv1.HTTPMethodPost)
		}},
		"a query parameter match": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules[0].Matches[0].QueryParams = []gatewayv1.HTTPQueryParamMatch{{Name: "debug", Value: "1"}}
		}},
		"a second header": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules[0].Matches[0].Headers = append(r.Spec.Rules[0].Matches[0].Headers, gatewayv1.HTTPHeaderMatch{Name: "x-team", Value: "a"})
		}},
		"an exact path": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules[0].Matches[0].Path.Type = ptr.To(gatewayv1.PathMatchExact)
		}},
		"a path reaching an engine's admin endpoints": {route: withPaths(base, "/"), mutate: nil},
		"a request timeout other than the router's":   {route: withTimeout(base, aibrixfixture.V070Timeout)},
		"no request timeout while the router sets one": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules[0].Timeouts = nil
		}},
		"a backend request timeout": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.Spec.Rules[0].Timeouts.BackendRequest = ptr.To(gatewayv1.Duration("30s"))
		}},

		// Markers of another manager: GitOps tools, Helm, kubectl.
		"applied with kubectl":     {route: base, mutate: setAnnotation("kubectl.kubernetes.io/last-applied-configuration", "{}")},
		"a Helm release":           {route: base, mutate: setAnnotation("meta.helm.sh/release-name", "models")},
		"Argo CD tracking":         {route: base, mutate: setAnnotation("argocd.argoproj.io/tracking-id", "models:gateway.networking.k8s.io/HTTPRoute:aibrix-system/x")},
		"Argo CD label tracking":   {route: base, mutate: setLabel("app.kubernetes.io/instance", "models")},
		"Flux Kustomization":       {route: base, mutate: setLabel("kustomize.toolkit.fluxcd.io/name", "models")},
		"Flux HelmRelease":         {route: base, mutate: setLabel("helm.toolkit.fluxcd.io/name", "models")},
		"Argo CD label of its own": {route: base, mutate: setLabel("argocd.argoproj.io/instance", "models")},
		"edited with kubectl": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.ManagedFields = []metav1.ManagedFieldsEntry{
				{Manager: "manager", Operation: metav1.ManagedFieldsOperationUpdate},
				{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate},
			}
		}},
		"server-side applied": {route: base, mutate: func(r *gatewayv1.HTTPRoute) {
			r.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "manager", Operation: metav1.ManagedFieldsOperationApply}}
		}},
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
			cfg := cfg
			if tc.cfgTimeout != 0 {
				cfg.Timeout = tc.cfgTimeout
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
func withPathList(r aibrixfixture.Route, paths []string) aibrixfixture.Route {
	r.Paths = paths
	return r
}
func withGateway(r aibrixfixture.Route, ns, name string) aibrixfixture.Route {
	r.GatewayNamespace, r.Gateway = ns, name
	return r
}
func withTimeout(r aibrixfixture.Route, timeout string) aibrixfixture.Route {
	r.Timeout = timeout
	return r
}
func setLabel(k, v string) func(*gatewayv1.HTTPRoute) {
	return func(r *gatewayv1.HTTPRoute) { r.Labels = map[string]string{k: v} }
}
func setAnnotation(k, v string) func(*gatewayv1.HTTPRoute) {
	return func(r *gatewayv1.HTTPRoute) { r.Annotations = map[string]string{k: v} }
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
		"written by AIBrix's field manager": {want: true, grant: grant(func(g *gatewayv1beta1.ReferenceGrant) {
			g.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "manager", Operation: metav1.ManagedFieldsOperationUpdate}}
		})},
		"a Helm release": {grant: grant(func(g *gatewayv1beta1.ReferenceGrant) {
			g.Labels = map[string]string{ManagedByLabel: "Helm"}
			g.Annotations = map[string]string{"meta.helm.sh/release-name": "aibrix", "meta.helm.sh/release-namespace": "aibrix-system"}
		})},
		"Helm's annotations only": {grant: grant(func(g *gatewayv1beta1.ReferenceGrant) {
			g.Annotations = map[string]string{"meta.helm.sh/release-namespace": "aibrix-system"}
		})},
		"Argo CD tracking": {grant: grant(func(g *gatewayv1beta1.ReferenceGrant) {
			g.Annotations = map[string]string{"argocd.argoproj.io/tracking-id": "aibrix:gateway.networking.k8s.io/ReferenceGrant:team/x"}
		})},
		"applied with kubectl": {grant: grant(func(g *gatewayv1beta1.ReferenceGrant) {
			g.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}
		})},
		"written by Helm": {grant: grant(func(g *gatewayv1beta1.ReferenceGrant) {
			g.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "helm", Operation: metav1.ManagedFieldsOperationUpdate}}
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
