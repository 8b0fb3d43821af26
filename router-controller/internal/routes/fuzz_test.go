package routes

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	modelv1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// FuzzSourceToRoute: any model name, port label, service-name and custom-paths annotation on
// a Deployment → either not routable (a problem says why) or a route the Gateway API CRD
// admits: a valid name, every rule matching the header model: <model> on valid path
// prefixes, backends with valid Service names and ports. The seed corpus runs in every
// `go test`; `make fuzz` explores.
func FuzzSourceToRoute(f *testing.F) {
	for _, s := range [][5]string{
		{"llama-3-8b", "8000", "", "/v1/chat,/v1/completions", "d"},
		{"Llama/3.1:8B@org", "65536", "svc", "", "d"},
		{"", "8000", "", "", "d"},
		{strings.Repeat("m", 300), "0", "UPPER", "v1", "d"},
		{"a b", "-1", "svc-1", "/ok," + strings.Repeat("/x", 40), "d"},
		{"model\x00", "8o", "1svc", "/%zz,/%41,/a b", "d"},
		{"模型", " 8000", strings.Repeat("s", 70), strings.Repeat("/p,", 30), "d"},
		{"x", "8000", "", "/\"quoted\"", strings.Repeat("n", 300)},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4])
	}
	cfg := Config{GatewayNamespace: DefaultGatewayNamespace, GatewayName: DefaultGatewayName, Paths: DefaultPaths, Timeout: DefaultTimeout}
	f.Fuzz(func(t *testing.T, model, port, service, paths, name string) {
		if len(validation.IsDNS1123Subdomain(name)) > 0 {
			t.Skip("not an object name the API server admits")
		}
		obj := &metav1.ObjectMeta{
			Namespace: "ns", Name: name,
			Labels:      map[string]string{modelv1alpha1.ModelNameLabel: model, modelv1alpha1.ModelPortLabel: port},
			Annotations: map[string]string{modelv1alpha1.ServiceNameAnnotation: service, modelv1alpha1.CustomPathsAnnotation: paths},
		}
		src, ok, problems := SourceFromObject("Deployment", obj, 0)
		if !ok {
			if model != "" && len(problems) == 0 {
				t.Fatalf("model %q not routable and no problem says why", model)
			}
			return
		}
		route, err := BuildRoute(cfg, src.Model, []Source{src})
		if err != nil {
			t.Fatalf("routable source %+v, but BuildRoute: %v", src, err)
		}
		if msgs := validation.IsDNS1123Subdomain(route.Name); len(msgs) > 0 {
			t.Fatalf("route name %q: %v", route.Name, msgs)
		}
		for _, rule := range route.Spec.Rules {
			for _, m := range rule.Matches {
				if len(m.Headers) != 1 || m.Headers[0].Value != src.Model || len(m.Headers[0].Value) > 4096 {
					t.Fatalf("match %+v does not select model %q", m, src.Model)
				}
				if m.Path == nil || m.Path.Value == nil || ValidatePath(*m.Path.Value) != nil {
					t.Fatalf("match %+v has an invalid path", m)
				}
			}
			for _, b := range rule.BackendRefs {
				if msgs := validation.IsDNS1035Label(string(b.Name)); len(msgs) > 0 {
					t.Fatalf("backend Service %q: %v", b.Name, msgs)
				}
				if b.Port == nil || *b.Port < 1 || *b.Port > 65535 {
					t.Fatalf("backend port %v", b.Port)
				}
			}
		}
	})
}
