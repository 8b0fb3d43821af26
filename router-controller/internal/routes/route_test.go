package routes

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/loraplane/loraplane/shared/text"
)

func testConfig() Config {
	return Config{
		GatewayNamespace: "aibrix-system",
		GatewayName:      "aibrix-eg",
		Paths:            []string{"/v1/completions", "/v1/chat/completions"},
		Timeout:          120 * time.Second,
	}
}

func src(kind, ns, name, model, svc string, port int32, paths ...string) Source {
	return Source{Kind: kind, Namespace: ns, Name: name, Model: model, Service: svc, Port: port, Paths: paths}
}

func wantMatch(model, path string) gatewayv1.HTTPRouteMatch {
	return gatewayv1.HTTPRouteMatch{
		Path:    &gatewayv1.HTTPPathMatch{Type: ptr.To(gatewayv1.PathMatchPathPrefix), Value: ptr.To(path)},
		Headers: []gatewayv1.HTTPHeaderMatch{{Type: ptr.To(gatewayv1.HeaderMatchExact), Name: "model", Value: model}},
	}
}

func wantBackend(ns, svc string, port int32) gatewayv1.HTTPBackendRef {
	return gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{
		BackendObjectReference: gatewayv1.BackendObjectReference{
			Group:     ptr.To(gatewayv1.Group("")),
			Kind:      ptr.To(gatewayv1.Kind("Service")),
			Name:      gatewayv1.ObjectName(svc),
			Namespace: ptr.To(gatewayv1.Namespace(ns)),
			Port:      ptr.To(port),
		},
		Weight: ptr.To[int32](1),
	}}
}

func TestBuildRoute(t *testing.T) {
	sources := []Source{
		src("StatefulSet", "team-b", "llama-sts", "Llama-3", "llama", 8000, "/v2/extra"),
		src("Deployment", "team-a", "llama", "Llama-3", "llama", 8080, "/v1/completions", "/custom"),
		src(KindModelAdapter, "aibrix-system", "llama-lora", "Llama-3", "llama-lora", 8000),
	}
	got, err := BuildRoute(testConfig(), "Llama-3", sources)
	if err != nil {
		t.Fatalf("BuildRoute: %v", err)
	}
	backends := []gatewayv1.HTTPBackendRef{
		wantBackend("aibrix-system", "llama-lora", 8000),
		wantBackend("team-a", "llama", 8080),
		wantBackend("team-b", "llama", 8000),
	}
	var matches []gatewayv1.HTTPRouteMatch
	for _, p := range []string{"/custom", "/v1/chat/completions", "/v1/completions", "/v2/extra"} {
		matches = append(matches, wantMatch("Llama-3", p))
	}
	want := &gatewayv1.HTTPRoute{
		TypeMeta: metav1.TypeMeta{APIVersion: "gateway.networking.k8s.io/v1", Kind: "HTTPRoute"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      "llama-3-ba8433563e17-router",
			Namespace: "aibrix-system",
			Labels: map[string]string{
				"app.kubernetes.io/managed-by": "loraplane-router-controller",
				"loraplane.io/model-hash":      ModelHash("Llama-3"),
				"loraplane.io/install":         "default",
				"loraplane.io/gateway":         "aibrix-eg",
			},
			Annotations: map[string]string{
				"loraplane.io/model":         "Llama-3",
				"loraplane.io/source-scopes": "Deployment/team-a,ModelAdapter/aibrix-system,StatefulSet/team-b",
			},
		},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{
				Group:     ptr.To(gatewayv1.Group("gateway.networking.k8s.io")),
				Kind:      ptr.To(gatewayv1.Kind("Gateway")),
				Namespace: ptr.To(gatewayv1.Namespace("aibrix-system")),
				Name:      "aibrix-eg",
			}}},
			Rules: []gatewayv1.HTTPRouteRule{{
				Matches:     matches,
				BackendRefs: backends,
				Timeouts:    &gatewayv1.HTTPRouteTimeouts{Request: ptr.To(gatewayv1.Duration("2m"))},
			}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("BuildRoute mismatch (-want +got):\n%s", diff)
	}
	if got := ModelOf(got); got != "Llama-3" {
		t.Errorf("ModelOf = %q, want %q", got, "Llama-3")
	}
	if !IsManaged(got) {
		t.Error("IsManaged = false for a built route")
	}
	checkRouteLimits(t, got)
}

func TestBuildRouteDefaultConfig(t *testing.T) {
	cfg := Config{GatewayNamespace: DefaultGatewayNamespace, GatewayName: DefaultGatewayName, Paths: DefaultPaths, Timeout: DefaultTimeout}
	got, err := BuildRoute(cfg, "llama", []Source{src("Deployment", "aibrix-system", "llama", "llama", "llama", 8000)})
	if err != nil {
		t.Fatalf("BuildRoute: %v", err)
	}
	var gotPaths []string
	for _, m := range got.Spec.Rules[0].Matches {
		gotPaths = append(gotPaths, *m.Path.Value)
	}
	// AIBrix's newest 16 path prefixes, sorted.
	wantPaths := []string{
		"/generate", "/generatevideo", "/pooling", "/tokenize", "/v1/audio/transcriptions", "/v1/audio/translations",
		"/v1/chat/completions", "/v1/classify", "/v1/completions", "/v1/decisions", "/v1/embeddings",
		"/v1/messages", "/v1/rerank", "/v1/responses", "/v1/video", "/v1/videos",
	}
	if diff := cmp.Diff(wantPaths, gotPaths); diff != "" {
		t.Errorf("paths mismatch (-want +got):\n%s", diff)
	}
	if got.Name != "llama-router" {
		t.Errorf("name = %q, want llama-router", got.Name)
	}
	// AIBrix's newest default, 600 s, as the Gateway API duration the router writes.
	if diff := cmp.Diff(&gatewayv1.HTTPRouteTimeouts{Request: ptr.To(gatewayv1.Duration("10m"))}, got.Spec.Rules[0].Timeouts); diff != "" {
		t.Errorf("timeouts mismatch (-want +got):\n%s", diff)
	}
}

// TestBuildRouteOrderIndependent builds the same route from every permutation of the
// sources (and of their paths) and expects identical objects.
func TestBuildRouteOrderIndependent(t *testing.T) {
	sources := []Source{
		src("Deployment", "team-a", "a", "m", "svc-a", 8000, "/z", "/a"),
		src("Deployment", "team-b", "b", "m", "svc-b", 8000),
		src("StatefulSet", "team-a", "a", "m", "svc-a", 9000, "/a", "/y"),
		src(KindModelAdapter, "team-a", "lora", "m", "lora", 8000),
	}
	cfg := testConfig()
	cfg.Paths = []string{"/v1/completions", "/a", "/v1/chat/completions"}
	want, err := BuildRoute(cfg, "m", sources)
	if err != nil {
		t.Fatalf("BuildRoute: %v", err)
	}
	permutations := 0
	var permute func(k int)
	permute = func(k int) {
		if k == len(sources) {
			permutations++
			in := slices.Clone(sources)
			for i := range in {
				in[i].Paths = slices.Clone(in[i].Paths)
				slices.Reverse(in[i].Paths)
			}
			got, err := BuildRoute(cfg, "m", in)
			if err != nil {
				t.Fatalf("BuildRoute: %v", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("order %v changed the route (-first +this):\n%s", keysOf(in), diff)
			}
			return
		}
		for i := k; i < len(sources); i++ {
			sources[k], sources[i] = sources[i], sources[k]
			permute(k + 1)
			sources[k], sources[i] = sources[i], sources[k]
		}
	}
	permute(0)
	if permutations != 24 {
		t.Fatalf("tested %d permutations, want 24", permutations)
	}
	// Exact duplicates are merged.
	got, err := BuildRoute(cfg, "m", append(slices.Clone(sources), sources[0]))
	if err != nil {
		t.Fatalf("BuildRoute with a duplicate: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("duplicate source changed the route (-want +got):\n%s", diff)
	}
}

func keysOf(sources []Source) []string {
	var keys []string
	for _, s := range sources {
		keys = append(keys, s.Key())
	}
	return keys
}

func TestBuildRouteSplitsMatches(t *testing.T) {
	cases := map[string]struct {
		paths     int
		wantRules []int // matches per rule
	}{
		"one rule":        {paths: 11, wantRules: []int{11}},
		"full rule":       {paths: 64, wantRules: []int{64}},
		"70 paths":        {paths: 70, wantRules: []int{64, 6}},
		"route limit":     {paths: 128, wantRules: []int{64, 64}},
		"beyond the rule": {paths: 65, wantRules: []int{64, 1}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Paths = numberedPaths(tc.paths)
			sources := []Source{
				src("Deployment", "team-a", "a", "m", "svc-a", 8000),
				src("Deployment", "team-b", "b", "m", "svc-b", 8000),
			}
			route, err := BuildRoute(cfg, "m", sources)
			if err != nil {
				t.Fatalf("BuildRoute: %v", err)
			}
			var gotRules []int
			var gotPaths []string
			for _, r := range route.Spec.Rules {
				gotRules = append(gotRules, len(r.Matches))
				for _, m := range r.Matches {
					gotPaths = append(gotPaths, *m.Path.Value)
				}
				if diff := cmp.Diff(route.Spec.Rules[0].BackendRefs, r.BackendRefs); diff != "" {
					t.Errorf("rules have different backends (-first +this):\n%s", diff)
				}
				if diff := cmp.Diff(route.Spec.Rules[0].Timeouts, r.Timeouts); diff != "" {
					t.Errorf("rules have different timeouts (-first +this):\n%s", diff)
				}
			}
			if diff := cmp.Diff(tc.wantRules, gotRules); diff != "" {
				t.Errorf("matches per rule mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(dedupSorted(cfg.Paths), gotPaths); diff != "" {
				t.Errorf("paths mismatch (-want +got):\n%s", diff)
			}
			if len(route.Spec.Rules) > 1 && &route.Spec.Rules[0].BackendRefs[0] == &route.Spec.Rules[1].BackendRefs[0] {
				t.Error("rules share backendRefs storage")
			}
			checkRouteLimits(t, route)
		})
	}
}

func numberedPaths(n int) []string {
	paths := make([]string, n)
	for i := range paths {
		paths[i] = fmt.Sprintf("/p/%03d", i)
	}
	return paths
}

func TestBuildRouteErrors(t *testing.T) {
	ok := src("Deployment", "team-a", "a", "m", "svc", 8000)
	tooManyBackends := make([]Source, 17)
	for i := range tooManyBackends {
		tooManyBackends[i] = src("Deployment", "team-a", fmt.Sprintf("d%d", i), "m", fmt.Sprintf("svc-%d", i), 8000)
	}
	maxBackends := tooManyBackends[:16]
	// Two sources at the per-source cap of custom paths, plus the two configured paths.
	customA := src("Deployment", "team-a", "a", "m", "svc", 8000, numberedPaths(64)...)
	customB := src("Deployment", "team-b", "b", "m", "svc", 8000, numberedPaths(128)[64:]...)

	cases := map[string]struct {
		cfg     func(*Config)
		model   string
		sources []Source
		wantErr string // substring; "" means success
	}{
		"valid":                {model: "m", sources: []Source{ok}},
		"16 backends":          {model: "m", sources: maxBackends},
		"no sources":           {model: "m", wantErr: `model "m" has no sources`},
		"17 backends":          {model: "m", sources: tooManyBackends, wantErr: "17 distinct backends"},
		"129 paths":            {model: "m", cfg: func(c *Config) { c.Paths = numberedPaths(129) }, sources: []Source{ok}, wantErr: "129 paths exceed"},
		"custom paths overrun": {model: "m", sources: []Source{customA, customB}, wantErr: "needs 130 path matches"},
		"no paths":             {model: "m", cfg: func(c *Config) { c.Paths = nil }, sources: []Source{ok}, wantErr: "no paths to route"},
		"custom paths only": {model: "m", cfg: func(c *Config) { c.Paths = nil },
			sources: []Source{src("Deployment", "team-a", "a", "m", "svc", 8000, "/only")}},
		"invalid config path":   {model: "m", cfg: func(c *Config) { c.Paths = []string{"v1"} }, sources: []Source{ok}, wantErr: `path "v1" is invalid`},
		"bad gateway namespace": {model: "m", cfg: func(c *Config) { c.GatewayNamespace = "Gw" }, sources: []Source{ok}, wantErr: `gateway namespace "Gw" is invalid`},
		"empty gateway name":    {model: "m", cfg: func(c *Config) { c.GatewayName = "" }, sources: []Source{ok}, wantErr: `gateway name "" is invalid`},
		"negative timeout":      {model: "m", cfg: func(c *Config) { c.Timeout = -time.Second }, sources: []Source{ok}, wantErr: "must not be negative"},
		"sub-ms timeout":        {model: "m", cfg: func(c *Config) { c.Timeout = time.Microsecond }, sources: []Source{ok}, wantErr: "whole number of milliseconds"},
		"unicode model":         {model: "模型", sources: []Source{src("Deployment", "team-a", "a", "模型", "svc", 8000)}},
		"invalid UTF-8 model":   {model: "m\xff", sources: []Source{src("Deployment", "team-a", "a", "m\xff", "svc", 8000)}, wantErr: "cannot be routed"},
		"model mismatch":        {model: "m", sources: []Source{src("Deployment", "team-a", "a", "other", "svc", 8000)}, wantErr: `claims model "other"`},
		"invalid service":       {model: "m", sources: []Source{src("Deployment", "team-a", "a", "m", "Svc", 8000)}, wantErr: `service "Svc" is invalid`},
		"invalid port":          {model: "m", sources: []Source{src("Deployment", "team-a", "a", "m", "svc", 0)}, wantErr: "port 0 is out of range"},
		"invalid namespace":     {model: "m", sources: []Source{src("Deployment", "", "a", "m", "svc", 8000)}, wantErr: `namespace "" is invalid`},
		"invalid kind":          {model: "m", sources: []Source{src("apps/Deployment", "team-a", "a", "m", "svc", 8000)}, wantErr: `kind "apps/Deployment" is invalid`},
		"invalid source path":   {model: "m", sources: []Source{src("Deployment", "team-a", "a", "m", "svc", 8000, "/a b")}, wantErr: `path "/a b" is invalid`},
		"conflicting duplicates": {model: "m", sources: []Source{ok, src("Deployment", "team-a", "a", "m", "svc", 9000)},
			wantErr: "conflicting duplicate source Deployment/team-a/a"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			route, err := BuildRoute(cfg, tc.model, tc.sources)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("BuildRoute: unexpected error %v", err)
			case tc.wantErr == "":
				checkRouteLimits(t, route)
			case err == nil:
				t.Fatalf("BuildRoute succeeded, want error containing %q", tc.wantErr)
			case !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("BuildRoute error %q, want it to contain %q", err, tc.wantErr)
			case route != nil:
				t.Fatalf("BuildRoute returned a route with an error")
			}
		})
	}
}

func TestBuildRouteModelNames(t *testing.T) {
	models := []string{
		"llama", "Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", strings.Repeat("m", 300),
		"my model", "a:b@c", strings.Repeat("x", 4096),
	}
	for _, m := range models {
		t.Run(text.Truncate(m, 40), func(t *testing.T) {
			route, err := BuildRoute(testConfig(), m, []Source{src("Deployment", "team-a", "a", m, "svc", 8000)})
			if err != nil {
				t.Fatalf("BuildRoute: %v", err)
			}
			if route.Name != RouteName(m) {
				t.Errorf("name = %q, want %q", route.Name, RouteName(m))
			}
			if got := ModelOf(route); got != m {
				t.Errorf("ModelOf = %q, want %q", got, m)
			}
			checkRouteLimits(t, route)
		})
	}
}

func TestFormatDuration(t *testing.T) {
	cases := map[string]struct {
		in      time.Duration
		want    string
		wantErr bool
	}{
		"zero":         {in: 0, want: ""},
		"120s":         {in: 120 * time.Second, want: "2m"},
		"mixed":        {in: time.Hour + 30*time.Minute + 5*time.Second + 250*time.Millisecond, want: "1h30m5s250ms"},
		"millis":       {in: 1500 * time.Millisecond, want: "1s500ms"},
		"max":          {in: 99999*time.Hour + 59*time.Minute, want: "99999h59m"},
		"too large":    {in: 100000 * time.Hour, wantErr: true},
		"negative":     {in: -time.Second, wantErr: true},
		"nanoseconds":  {in: time.Second + 1, wantErr: true},
		"whole hours":  {in: 48 * time.Hour, want: "48h"},
		"milliseconds": {in: time.Millisecond, want: "1ms"},
	}
	durationPattern := `^([0-9]{1,5}(h|m|s|ms)){1,4}$`
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := formatDuration(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("formatDuration(%v) error = %v, wantErr %v", tc.in, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("formatDuration(%v) mismatch (-want +got):\n%s", tc.in, diff)
			}
			if got != "" && !mustMatch(durationPattern, got) {
				t.Errorf("%q does not match the CRD pattern %s", got, durationPattern)
			}
			if got != "" {
				if back, err := time.ParseDuration(got); err != nil || back != tc.in {
					t.Errorf("%q parses back to %v (%v), want %v", got, back, err, tc.in)
				}
			}
		})
	}
}

func TestIsManagedAndModelOf(t *testing.T) {
	cases := map[string]struct {
		obj         metav1.Object
		wantManaged bool
		wantModel   string
	}{
		"managed": {obj: &metav1.ObjectMeta{
			Labels:      map[string]string{ManagedByLabel: ManagedByValue},
			Annotations: map[string]string{ModelAnnotation: "Qwen/Qwen2.5"},
		}, wantManaged: true, wantModel: "Qwen/Qwen2.5"},
		"other manager": {obj: &metav1.ObjectMeta{Labels: map[string]string{ManagedByLabel: "helm"}}},
		"no labels":     {obj: &metav1.ObjectMeta{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := IsManaged(tc.obj); got != tc.wantManaged {
				t.Errorf("IsManaged = %v, want %v", got, tc.wantManaged)
			}
			if got := ModelOf(tc.obj); got != tc.wantModel {
				t.Errorf("ModelOf = %q, want %q", got, tc.wantModel)
			}
		})
	}
}

// checkRouteLimits checks a built route against the v1.6.3 HTTPRoute CRD constraints this
// package is responsible for.
func checkRouteLimits(t *testing.T, r *gatewayv1.HTTPRoute) {
	t.Helper()
	if msgs := validation.IsDNS1123Subdomain(r.Name); len(msgs) > 0 {
		t.Errorf("route name %q invalid: %v", r.Name, msgs)
	}
	for k, v := range r.Labels {
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			t.Errorf("label %s=%q invalid: %v", k, v, msgs)
		}
	}
	if n := len(r.Spec.Rules); n == 0 || n > 16 {
		t.Errorf("%d rules, want 1-16", n)
	}
	total := 0
	for i, rule := range r.Spec.Rules {
		total += len(rule.Matches)
		if n := len(rule.Matches); n == 0 || n > 64 {
			t.Errorf("rule %d has %d matches, want 1-64", i, n)
		}
		if n := len(rule.BackendRefs); n == 0 || n > 16 {
			t.Errorf("rule %d has %d backendRefs, want 1-16", i, n)
		}
		for _, m := range rule.Matches {
			if err := ValidatePath(*m.Path.Value); err != nil {
				t.Errorf("rule %d path %q: %v", i, *m.Path.Value, err)
			}
			for _, h := range m.Headers {
				if err := ValidateModelName(h.Value); err != nil {
					t.Errorf("rule %d header value %q: %v", i, h.Value, err)
				}
			}
		}
		for _, b := range rule.BackendRefs {
			if msgs := validation.IsDNS1035Label(string(b.Name)); len(msgs) > 0 {
				t.Errorf("backend %q: %v", b.Name, msgs)
			}
		}
	}
	if total > 128 {
		t.Errorf("%d matches in total, want at most 128", total)
	}
}
