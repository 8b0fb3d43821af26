package routes

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/loraplane/loraplane/test/aibrixfixture"
)

// TestAIBrixRouteShapeReasons: a refused route says why, and a timeout that differs from the
// router's names the --route-timeout that would adopt it.
func TestAIBrixRouteShapeReasons(t *testing.T) {
	const model, name = "Qwen2.5-7B", "qwen2-5-7b-9d7101d42cd9-router"
	base := aibrixfixture.Route{Name: name, Model: model, Namespace: "team", Service: "qwen", Port: 8000}
	cases := map[string]struct {
		route   aibrixfixture.Route
		timeout time.Duration
		mutate  func(*gatewayv1.HTTPRoute)
		want    string
	}{
		// A route of AIBrix v0.7.0 (120 s) and the router's default (600 s, AIBrix's newest).
		"AIBrix v0.7.0's default": {route: withTimeout(base, aibrixfixture.V070Timeout), timeout: DefaultTimeout,
			want: "its request timeout is 2m and the router's --route-timeout is 10m, so adopting it would change how long requests may take: start the router with --route-timeout=2m to adopt it"},
		"AIBrix's newest default, the router's earlier": {route: base, timeout: 2 * time.Minute,
			want: "its request timeout is 10m and the router's --route-timeout is 2m, so adopting it would change how long requests may take: start the router with --route-timeout=10m to adopt it"},
		"the router sets none": {route: base,
			want: "its request timeout is 10m and the router's --route-timeout is none, so adopting it would change how long requests may take: start the router with --route-timeout=10m to adopt it"},
		"AIBrix wrote none": {route: base, timeout: 90 * time.Second, mutate: func(r *gatewayv1.HTTPRoute) { r.Spec.Rules[0].Timeouts = nil },
			want: "its request timeout is none and the router's --route-timeout is 1m30s, so adopting it would change how long requests may take: start the router with --route-timeout=0 to adopt it"},
		"hostnames": {route: base, timeout: DefaultTimeout, mutate: func(r *gatewayv1.HTTPRoute) { r.Spec.Hostnames = []gatewayv1.Hostname{"a.example.com"} },
			want: "it has hostnames, which AIBrix never writes"},
		"Helm": {route: base, timeout: DefaultTimeout, mutate: setAnnotation("meta.helm.sh/release-name", "models"),
			want: "it was written by a Helm release (annotation meta.helm.sh/release-name)"},
		"admin path": {route: withPaths(base, "/V1"), timeout: DefaultTimeout,
			want: `its path "/V1" lets gateway clients reach vLLM's endpoint /v1/load_lora_adapter`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := aibrixRoute(t, tc.route)
			if tc.mutate != nil {
				tc.mutate(r)
			}
			cfg := testConfig()
			cfg.Timeout = tc.timeout
			ok, reason := AIBrixRouteShape(cfg, model, r)
			if ok || reason != tc.want {
				t.Errorf("AIBrixRouteShape = %v, %q; want false, %q", ok, reason, tc.want)
			}
		})
	}
}

// TestAIBrixShapeFieldsKnown fails when a Gateway API upgrade adds fields to the parts of an
// HTTPRoute that AIBrixRouteShape reads field by field: each new field must be judged there
// (AIBrix does not write it, so a route that sets it is not AIBrix's), then counted here.
func TestAIBrixShapeFieldsKnown(t *testing.T) {
	for typ, want := range map[reflect.Type]int{
		reflect.TypeFor[gatewayv1.HTTPRouteSpec]():     3, // CommonRouteSpec, Hostnames, Rules
		reflect.TypeFor[gatewayv1.CommonRouteSpec]():   2, // ParentRefs, UseDefaultGateways
		reflect.TypeFor[gatewayv1.ParentReference]():   6,
		reflect.TypeFor[gatewayv1.HTTPRouteRule]():     7,
		reflect.TypeFor[gatewayv1.HTTPRouteMatch]():    4,
		reflect.TypeFor[gatewayv1.HTTPBackendRef]():    2, // BackendRef, Filters
		reflect.TypeFor[gatewayv1.BackendRef]():        2, // BackendObjectReference, Weight
		reflect.TypeFor[gatewayv1.HTTPRouteTimeouts](): 2,
	} {
		if got := typ.NumField(); got != want {
			t.Errorf("%s has %d fields, AIBrixRouteShape judges %d: judge the new ones", typ, got, want)
		}
	}
}

// TestAdoptionChanges: the phrases of a RouteAdopted event say what adoption changed.
func TestAdoptionChanges(t *testing.T) {
	cfg := testConfig()
	cfg.Paths = aibrixfixture.DefaultPaths
	const model, name = "Qwen2.5-7B", "qwen2-5-7b-9d7101d42cd9-router"
	// A route of AIBrix v0.7.0 (whose paths lack AIBrix's newest five), hand-edited.
	existing := aibrixRoute(t, aibrixfixture.Route{Name: name, Model: model, Namespace: "team-a", Service: "qwen", Port: 8000,
		Paths: append(append([]string{}, aibrixfixture.V070Paths[:10]...), "/v1/legacy"), ConsoleManaged: true})
	existing.Spec.Rules[0].Timeouts.Request = ptr.To(gatewayv1.Duration(aibrixfixture.V070Timeout))
	cfg.Timeout = DefaultTimeout
	desired, err := BuildRoute(cfg, model, []Source{
		src("Deployment", "team-a", "qwen", model, "qwen", 8000),
		src("Deployment", "team-b", "qwen", model, "qwen-b", 8001, "/v1/extra"),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"paths added: /pooling, /tokenize, /v1/audio/translations, /v1/decisions, /v1/extra, /v1/video (+1 more)",
		"paths removed: /v1/legacy",
		"backends: +team-b/qwen-b:8001",
		"timeout 2m → 10m",
		"labels added: loraplane.io/gateway=aibrix-eg, loraplane.io/install=default, loraplane.io/model-hash=" + ModelHash(model),
		"labels changed: app.kubernetes.io/managed-by aibrix-console → loraplane-router-controller",
		"annotations set: loraplane.io/model, loraplane.io/source-scopes",
	}
	if diff := cmp.Diff(want, AdoptionChanges(existing, desired)); diff != "" {
		t.Errorf("AdoptionChanges (-want +got):\n%s", diff)
	}
	if got := AdoptionChanges(desired, desired.DeepCopy()); len(got) != 0 {
		t.Errorf("AdoptionChanges of a route onto itself = %q, want none", got)
	}

	many := desired.DeepCopy()
	many.Spec.Rules[0].Matches = nil
	if got := AdoptionChanges(many, desired); len(got) != 1 || !strings.HasSuffix(got[0], "(+11 more)") {
		t.Errorf("AdoptionChanges with 17 paths added = %q, want one phrase listing 6 and counting the rest", got)
	}
}
