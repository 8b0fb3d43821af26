package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
)

const (
	nameKey  = "model.aibrix.ai/name"
	portKey  = "model.aibrix.ai/port"
	svcKey   = "model.aibrix.ai/service-name"
	pathsKey = "model.aibrix.ai/model-router-custom-paths"
)

func meta(name string, labels, annotations map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
		Namespace: "team-a", Name: name, Labels: labels, Annotations: annotations,
	}}
}

func TestClaimedModel(t *testing.T) {
	cases := map[string]struct {
		kind string
		obj  *metav1.PartialObjectMetadata
		want string
	}{
		"no model":                     {kind: "Deployment", obj: meta("d", map[string]string{"app": "x"}, nil)},
		"label":                        {kind: "Deployment", obj: meta("d", map[string]string{nameKey: "llama"}, nil), want: "llama"},
		"annotation":                   {kind: "StatefulSet", obj: meta("d", nil, map[string]string{nameKey: "llama"}), want: "llama"},
		"label wins":                   {kind: "Deployment", obj: meta("d", map[string]string{nameKey: "a"}, map[string]string{nameKey: "b"}), want: "a"},
		"empty label, annotation":      {kind: "Deployment", obj: meta("d", map[string]string{nameKey: ""}, map[string]string{nameKey: "b"}), want: "b"},
		"adapter defaults to name":     {kind: routes.KindModelAdapter, obj: meta("lora-1", nil, nil), want: "lora-1"},
		"adapter label ignored":        {kind: routes.KindModelAdapter, obj: meta("lora-1", map[string]string{nameKey: "base"}, nil), want: "lora-1"},
		"adapter annotation ignored":   {kind: routes.KindModelAdapter, obj: meta("lora-1", nil, map[string]string{nameKey: "base"}), want: "lora-1"},
		"model with slash":             {kind: "Deployment", obj: meta("d", nil, map[string]string{nameKey: "Qwen/Qwen2.5-7B"}), want: "Qwen/Qwen2.5-7B"},
		"unroutable model still named": {kind: "Deployment", obj: meta("d", nil, map[string]string{nameKey: "bad\x00name"}), want: "bad\x00name"},
		"bad port keeps model":         {kind: "Deployment", obj: meta("d", map[string]string{nameKey: "m", portKey: "http"}, nil), want: "m"},
		"bad service still claims":     {kind: "Deployment", obj: meta("d", map[string]string{nameKey: "m"}, map[string]string{svcKey: "Not_A_Service"}), want: "m"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := routes.ClaimedModel(tc.kind, tc.obj)
			if got != tc.want {
				t.Errorf("claimedModel = %q, want %q", got, tc.want)
			}
			// Agreement with the route builder's reading on every routable workload (an
			// adapter whose Service is published).
			if src, ok, _ := routes.SourceFromObject(tc.kind, tc.obj, 8000); ok && src.Model != got {
				t.Errorf("claimedModel = %q but SourceFromObject says %q", got, src.Model)
			}
		})
	}
}

func TestSourceIndexValues(t *testing.T) {
	index := sourceIndexValues("Deployment")
	if got := index(meta("d", nil, nil)); got != nil {
		t.Errorf("index of a non-model workload = %q, want none", got)
	}
	got := index(meta("d", map[string]string{nameKey: "Qwen/Qwen2.5-7B"}, nil))
	// The route name AIBrix's gateway looks up, and the name of earlier releases (whose
	// routes are replaced, and must map to their model until they are).
	want := []string{"model:Qwen/Qwen2.5-7B", "route:qwen-qwen2-5-7b-401a4b448e74-router", "route:qwen-qwen2-5-7b-router-401a4b44"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("index values (-want +got):\n%s", diff)
	}
}

func backendRef(ns *string, name string, kind *string) gatewayv1.HTTPBackendRef {
	ref := gatewayv1.HTTPBackendRef{}
	ref.Name = gatewayv1.ObjectName(name)
	if ns != nil {
		ref.Namespace = ptr.To(gatewayv1.Namespace(*ns))
	}
	if kind != nil {
		ref.Kind = ptr.To(gatewayv1.Kind(*kind))
	}
	return ref
}

func TestRouteBackends(t *testing.T) {
	managed := map[string]string{routes.ManagedByLabel: routes.ManagedByValue}
	route := &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gw", Name: "m-router", Labels: managed},
		Spec: gatewayv1.HTTPRouteSpec{Rules: []gatewayv1.HTTPRouteRule{
			{BackendRefs: []gatewayv1.HTTPBackendRef{
				backendRef(ptr.To("b"), "svc-2", nil),
				backendRef(ptr.To("a"), "svc-1", ptr.To("Service")),
				backendRef(nil, "local", nil),
				backendRef(ptr.To("c"), "not-a-service", ptr.To("Other")),
			}},
			{BackendRefs: []gatewayv1.HTTPBackendRef{
				backendRef(ptr.To("b"), "svc-2", nil),
				backendRef(ptr.To("b"), "svc-0", nil),
			}},
		}},
	}
	if diff := cmp.Diff([]string{"a", "b", "gw"}, routeBackendNamespaces(route)); diff != "" {
		t.Errorf("backend namespaces (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"svc-0", "svc-2"}, routedServices(route, "b")); diff != "" {
		t.Errorf("services in b (-want +got):\n%s", diff)
	}
	if got := routedServices(route, "c"); len(got) != 0 {
		t.Errorf("services in c = %q, want none (not a Service backend)", got)
	}
	// Routes we do not manage are indexed too: whether AIBrix's grant of a namespace can go
	// depends on them.
	foreign := route.DeepCopy()
	foreign.Labels = nil
	if diff := cmp.Diff([]string{"a", "b", "gw"}, routeBackendNamespaces(foreign)); diff != "" {
		t.Errorf("foreign route backend namespaces (-want +got):\n%s", diff)
	}
}

func TestKeyString(t *testing.T) {
	cases := map[Key]string{
		ModelKey("Qwen/Qwen2.5-7B"): "model:Qwen/Qwen2.5-7B",
		GrantsKey("team-a"):         "grants:team-a",
		{Name: "x"}:                 "unknown:x",
	}
	for k, want := range cases {
		if got := k.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", k, got, want)
		}
	}
	if ModelKey("a/b") == GrantsKey("a/b") {
		t.Error("a model key equals a grants key of the same name")
	}
}

// mirrorTo is a RequestMirror filter to the Service name, in ns when ns is not nil.
func mirrorTo(ns *string, name string) gatewayv1.HTTPRouteFilter {
	ref := gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(name), Port: ptr.To[gatewayv1.PortNumber](8000)}
	if ns != nil {
		ref.Namespace = ptr.To(gatewayv1.Namespace(*ns))
	}
	return gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterRequestMirror, RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{BackendRef: ref}}
}

// TestRouteBackendsIncludeMirrors: a Service that a route mirrors requests to (a RequestMirror
// filter of a rule or of a backendRef) needs a ReferenceGrant as much as a backend does, so
// it counts for the index and for routedServices, the route's namespace being the default.
func TestRouteBackendsIncludeMirrors(t *testing.T) {
	backend := backendRef(ptr.To("a"), "svc", nil)
	backend.Filters = []gatewayv1.HTTPRouteFilter{mirrorTo(ptr.To("c"), "shadow-c")}
	route := &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gw", Name: "foreign"},
		Spec: gatewayv1.HTTPRouteSpec{Rules: []gatewayv1.HTTPRouteRule{{
			Filters: []gatewayv1.HTTPRouteFilter{
				mirrorTo(ptr.To("b"), "shadow-b"),
				mirrorTo(nil, "shadow-gw"),
				{Type: gatewayv1.HTTPRouteFilterRequestHeaderModifier, RequestHeaderModifier: &gatewayv1.HTTPHeaderFilter{}},
			},
			BackendRefs: []gatewayv1.HTTPBackendRef{backend},
		}}},
	}
	if diff := cmp.Diff([]string{"a", "b", "c", "gw"}, routeBackendNamespaces(route)); diff != "" {
		t.Errorf("backend namespaces (-want +got):\n%s", diff)
	}
	for ns, want := range map[string][]string{"a": {"svc"}, "b": {"shadow-b"}, "c": {"shadow-c"}, "gw": {"shadow-gw"}} {
		if diff := cmp.Diff(want, routedServices(route, ns)); diff != "" {
			t.Errorf("services in %s (-want +got):\n%s", ns, diff)
		}
	}
}
