package setup

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/loraplane/loraplane/router-controller/internal/controller"
	"github.com/loraplane/loraplane/router-controller/internal/routes"
)

func parse(t *testing.T, args ...string) *Options {
	t.Helper()
	o := NewOptions()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %q: %v", args, err)
	}
	return o
}

func TestDefaults(t *testing.T) {
	o := parse(t)
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	// The values README.md documents, written out: a changed constant must fail here.
	want := routes.Config{
		GatewayNamespace: "aibrix-system",
		GatewayName:      "aibrix-eg",
		InstallID:        "default",
		// AIBrix's newest path prefixes and request timeout (600 s), in its order.
		Paths: []string{"/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings",
			"/v1/rerank", "/v1/classify", "/v1/decisions", "/generate", "/generatevideo", "/v1/video", "/v1/videos",
			"/v1/audio/transcriptions", "/v1/audio/translations", "/tokenize", "/pooling"},
		Timeout: 600 * time.Second,
	}
	if diff := cmp.Diff(want, o.RoutesConfig()); diff != "" {
		t.Errorf("route configuration (-want +got):\n%s", diff)
	}
	if o.MaxConcurrentReconciles != 8 {
		t.Errorf("default --max-concurrent-reconciles = %d, want 8", o.MaxConcurrentReconciles)
	}
	if o.GrantBatchWindow != 500*time.Millisecond {
		t.Errorf("default --grant-batch-window = %s, want 500ms", o.GrantBatchWindow)
	}
	if controller.DefaultKindRecheckPeriod != 30*time.Second {
		t.Errorf("optional kinds are re-checked every %s, want 30s", controller.DefaultKindRecheckPeriod)
	}
}

func TestFlags(t *testing.T) {
	o := parse(t,
		"--gateway-namespace=gw", "--gateway-name=eg", "--route-paths= /a, /b/c ,,", "--install-id=team-a",
		"--allow-cross-namespace-claims",
		"--route-timeout=90s", "--max-concurrent-reconciles=4", "--grant-batch-window=2s",
		"--extra-workload-kinds=leaderworkerset.x-k8s.io/v1/LeaderWorkerSet, orchestration.aibrix.ai/v1alpha1/RayClusterFleet")
	if err := o.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	want := routes.Config{GatewayNamespace: "gw", GatewayName: "eg", InstallID: "team-a", Paths: []string{"/a", "/b/c"}, Timeout: 90 * time.Second}
	if diff := cmp.Diff(want, o.RoutesConfig()); diff != "" {
		t.Errorf("route configuration (-want +got):\n%s", diff)
	}
	if o.GrantBatchWindow != 2*time.Second {
		t.Errorf("--grant-batch-window = %s, want 2s", o.GrantBatchWindow)
	}
	if !o.CrossNamespaceClaims {
		t.Error("--allow-cross-namespace-claims not set")
	}
	kinds, err := o.SourceKinds()
	if err != nil {
		t.Fatal(err)
	}
	wantKinds := append(controller.DefaultSourceKinds(),
		controller.SourceKind{GVK: schema.GroupVersionKind{Group: "leaderworkerset.x-k8s.io", Version: "v1", Kind: "LeaderWorkerSet"}, Optional: true},
		controller.SourceKind{GVK: schema.GroupVersionKind{Group: "orchestration.aibrix.ai", Version: "v1alpha1", Kind: "RayClusterFleet"}, Optional: true},
	)
	if diff := cmp.Diff(wantKinds, kinds); diff != "" {
		t.Errorf("source kinds (-want +got):\n%s", diff)
	}
	if n := len(Resources(kinds)); n != len(kinds)+3 {
		t.Errorf("Resources declares %d resources, want %d (sources, HTTPRoute, ReferenceGrant, Service)", n, len(kinds)+3)
	}
	for _, r := range Resources(kinds)[3:5] {
		if !r.Optional {
			t.Errorf("extra kind %T declared required", r.Object)
		}
	}
}

func TestValidate(t *testing.T) {
	cases := map[string]struct {
		args    []string
		wantErr []string // substrings, all expected
	}{
		"bad gateway namespace": {args: []string{"--gateway-namespace=Not_Valid"}, wantErr: []string{"--gateway-namespace"}},
		"bad gateway name":      {args: []string{"--gateway-name=a..b"}, wantErr: []string{"--gateway-name"}},
		"empty paths":           {args: []string{"--route-paths= , "}, wantErr: []string{"--route-paths must name at least one"}},
		"relative path":         {args: []string{"--route-paths=/ok,v1/chat"}, wantErr: []string{`--route-paths "v1/chat"`}},
		"engine admin path":     {args: []string{"--route-paths=/ok,/V1/"}, wantErr: []string{`--route-paths "/V1/" would let gateway clients reach vLLM's endpoint /v1/load_lora_adapter`}},
		"negative timeout":      {args: []string{"--route-timeout=-1s"}, wantErr: []string{"--route-timeout"}},
		"sub-millisecond":       {args: []string{"--route-timeout=1500us"}, wantErr: []string{"--route-timeout"}},
		"too long timeout":      {args: []string{"--route-timeout=1000000h"}, wantErr: []string{"timeout"}},
		"zero concurrency":      {args: []string{"--max-concurrent-reconciles=0"}, wantErr: []string{"--max-concurrent-reconciles"}},
		"negative grant window": {args: []string{"--grant-batch-window=-1s"}, wantErr: []string{"--grant-batch-window"}},
		"bad install id":        {args: []string{"--install-id=team a/b"}, wantErr: []string{"--install-id"}},
		"kind without group":    {args: []string{"--extra-workload-kinds=v1/LeaderWorkerSet"}, wantErr: []string{"want group/version/Kind"}},
		"lower-case kind":       {args: []string{"--extra-workload-kinds=x.io/v1/leaderworkerset"}, wantErr: []string{"CamelCase"}},
		"bad version":           {args: []string{"--extra-workload-kinds=x.io/V1/Thing"}, wantErr: []string{"version"}},
		"core-looking group":    {args: []string{"--extra-workload-kinds=apps/v1/ReplicaSet"}, wantErr: []string{"at least one dot"}},
		"duplicate of built-in": {args: []string{"--extra-workload-kinds=example.io/v1/Deployment"}, wantErr: []string{"Kind Deployment is already a source"}},
		"duplicate extra":       {args: []string{"--extra-workload-kinds=a.io/v1/Thing,b.io/v1/Thing"}, wantErr: []string{"Kind Thing is already a source"}},
		"several at once": {args: []string{"--gateway-name=a..b", "--max-concurrent-reconciles=0"},
			wantErr: []string{"--gateway-name", "--max-concurrent-reconciles"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := parse(t, tc.args...).Validate()
			if err == nil {
				t.Fatalf("Validate accepted %q", tc.args)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

func TestParseWorkloadKind(t *testing.T) {
	gvk, err := ParseWorkloadKind("leaderworkerset.x-k8s.io/v1/LeaderWorkerSet")
	if err != nil {
		t.Fatal(err)
	}
	if want := (schema.GroupVersionKind{Group: "leaderworkerset.x-k8s.io", Version: "v1", Kind: "LeaderWorkerSet"}); gvk != want {
		t.Errorf("got %v, want %v", gvk, want)
	}
	for _, bad := range []string{"", "a/b", "a.io/v1/Kind/extra", "a.io//Kind", "/v1/Kind", "a.io/v1/"} {
		if _, err := ParseWorkloadKind(bad); err == nil {
			t.Errorf("ParseWorkloadKind(%q) accepted", bad)
		}
	}
}

// TestStripLastApplied: the workloads the router caches (metadata-only) lose kubectl's copy
// of the whole object; other annotations and other objects are left as they are.
func TestStripLastApplied(t *testing.T) {
	w := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		corev1.LastAppliedConfigAnnotation: `{"big":"copy"}`, "model.aibrix.ai/name": "llama",
	}}}
	out, err := stripLastApplied(w)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*metav1.PartialObjectMetadata).Annotations; len(got) != 1 || got["model.aibrix.ai/name"] != "llama" {
		t.Errorf("annotations after the transform: %v", got)
	}
	route := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: "x"}}}
	if _, err := stripLastApplied(route); err != nil || route.Annotations[corev1.LastAppliedConfigAnnotation] != "x" {
		t.Errorf("a route's annotations changed: %v (%v)", route.Annotations, err)
	}
}
