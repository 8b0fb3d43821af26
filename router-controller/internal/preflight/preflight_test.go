package preflight_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/router-controller/internal/preflight"
	"github.com/loraplane/loraplane/router-controller/internal/routes"
	"github.com/loraplane/loraplane/router-controller/internal/setup"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/aibrixfixture"
	"github.com/loraplane/loraplane/test/testenv"
)

var gatewayCRDs string

func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() {
		gw, err := testenv.ModuleDir("sigs.k8s.io/gateway-api")
		if err != nil {
			fmt.Fprintln(os.Stderr, "finding the Gateway API CRDs:", err)
			os.Exit(1)
		}
		gatewayCRDs = filepath.Join(gw, "config", "crd", "standard")
	}
	os.Exit(m.Run())
}

// recorder counts the requests made through a config, by method.
type recorder struct {
	mu      sync.Mutex
	methods map[string]int
}

func (r *recorder) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	r.methods = map[string]int{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			r.mu.Lock()
			r.methods[req.Method]++
			r.mu.Unlock()
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func startEnv(t *testing.T, crdDirs ...string) (*testenv.Env, client.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
	env, err := testenv.StartWithCRDs(crdDirs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	k8s, err := client.New(env.Config, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return env, k8s
}

// create makes each rendered object (as AIBrix's controller-manager writes it).
func create(t *testing.T, k8s client.Client, objs ...*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if err := k8s.Create(context.Background(), o, client.FieldOwner(aibrixfixture.FieldManager)); err != nil {
			t.Fatalf("creating %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// runPreflight runs the command with args against cfg through a plain (writable) client
// config whose requests are recorded, and fails the test on any request but GET.
func runPreflight(t *testing.T, cfg *rest.Config, args ...string) (code int, out string) {
	t.Helper()
	rec := &recorder{}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code = preflight.Command(ctx, args, rec.wrap(cfg), &stdout, &stderr)
	t.Logf("exit %d\n%s%s", code, stdout.String(), stderr.String())
	// The read-only transport sits outside the recorder: a write the preflight tried would be
	// refused there and end the command with ExitError; one that got past it would be
	// recorded here.
	if code == preflight.ExitError {
		t.Errorf("preflight failed: %s", stderr.String())
	}
	for m, n := range rec.methods {
		if m != http.MethodGet {
			t.Errorf("preflight made %d %s request(s): it must only read", n, m)
		}
	}
	if rec.methods[http.MethodGet] == 0 {
		t.Error("preflight made no GET request: it read nothing")
	}
	return code, stdout.String()
}

func wantLines(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("the report lacks %q", w)
		}
	}
}

// TestPreflightAIBrixFleet: a cluster as AIBrix leaves it (its CRD, its controller-manager
// running, a second one installed by Helm into another namespace, its Lease, routes, grant
// and a ModelAdapter whose tos:// artifact needs a sidecar its pod lacks).
func TestPreflightAIBrixFleet(t *testing.T) {
	aibrixCRD, err := testenv.AIBrixCRDDir()
	if err != nil {
		t.Fatal(err)
	}
	env, k8s := startEnv(t, aibrixCRD, gatewayCRDs)
	ctx := context.Background()
	for _, ns := range []string{"aibrix-system", "ml-serving", "team-a"} {
		if err := env.EnsureNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	create(t, k8s,
		must(aibrixfixture.ControllerManagerDeployment(aibrixfixture.ControllerManager{Replicas: 1})),
		must(aibrixfixture.ControllerManagerDeployment(aibrixfixture.ControllerManager{Namespace: "ml-serving", Name: "prod-aibrix-controller-manager",
			Replicas: 1, Args: []string{"--leader-elect", "--leader-election-namespace=ml-serving"}})),
		must(aibrixfixture.ControllerManagerLease(aibrixfixture.Lease{Holder: "aibrix-controller-manager-7d9f_0b1c", Renewed: time.Now()})),
		must(aibrixfixture.HTTPRoute(aibrixfixture.Route{Name: routes.RouteName("llama-3.1-8b"), Model: "llama-3.1-8b", Namespace: "team-a", Service: "llama-3.1-8b"})),
		must(aibrixfixture.HTTPRoute(aibrixfixture.Route{Name: routes.RouteName("qwen"), Model: "qwen", Namespace: "team-a", Service: "qwen",
			Paths: aibrixfixture.V070Paths, Timeout: aibrixfixture.V070Timeout})),
		must(aibrixfixture.ReferenceGrant(aibrixfixture.Grant{Namespace: "team-a"})),
		must(aibrixfixture.ModelAdapter(aibrixfixture.Adapter{Name: "sql-lora", Namespace: "team-a", BaseModel: "llama-3.1-8b",
			ArtifactURL: "tos://bucket/sql-lora", Instances: []string{"llama-0"}, Candidates: 1})),
	)
	// AIBrix writes the adapter's status with a status update.
	adapter := &unstructured.Unstructured{}
	adapter.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ModelAdapter"))
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "sql-lora"}, adapter); err != nil {
		t.Fatal(err)
	}
	rendered := must(aibrixfixture.ModelAdapter(aibrixfixture.Adapter{Name: "sql-lora", Namespace: "team-a", BaseModel: "llama-3.1-8b",
		ArtifactURL: "tos://bucket/sql-lora", Instances: []string{"llama-0"}, Candidates: 1}))
	adapter.Object["status"] = rendered.Object["status"]
	if err := k8s.Status().Update(ctx, adapter, client.FieldOwner(aibrixfixture.FieldManager)); err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"llama-3.1-8b", "qwen", "mistral"} {
		d := must(aibrixfixture.ControllerManagerDeployment(aibrixfixture.ControllerManager{Namespace: "team-a", Name: strings.ReplaceAll(model, ".", "-"),
			Image: "vllm/vllm-openai:v0.11.0", Replicas: 1}))
		d.SetLabels(map[string]string{v1alpha1.ModelNameLabel: model})
		create(t, k8s, d)
	}
	if _, err := testenv.CreateReadyPod(ctx, k8s, "team-a", "llama-0", "127.0.40.1", map[string]string{v1alpha1.ModelNameLabel: "llama-3.1-8b"}); err != nil {
		t.Fatal(err)
	}

	code, out := runPreflight(t, env.Config)
	if code != preflight.ExitBlocked {
		t.Errorf("exit code %d, want %d (blocked)", code, preflight.ExitBlocked)
	}
	wantLines(t, out,
		"Deployment aibrix-system/aibrix-controller-manager: 1 replica(s), runs model-adapter-controller and model-route-controller, leader election true (Lease aibrix-system/aibrix-controller-manager)",
		"-> stop them: run it with --controllers=*,-model-adapter-controller,-model-route-controller (its webhooks keep running)",
		"BLOCKS: Deployment ml-serving/prod-aibrix-controller-manager runs AIBrix's model-adapter-controller holding the Lease ml-serving/aibrix-controller-manager, which --aibrix-controller-leases does not list",
		"BLOCKS: Deployment ml-serving/prod-aibrix-controller-manager runs AIBrix's model-route-controller",
		"Lease aibrix-system/aibrix-controller-manager (watched): held by aibrix-controller-manager-7d9f_0b1c",
		"Lease aibrix-system/aibrix-model-adapter-controller (watched): absent",
		"installed: AIBrix's (or an older loraplane's)",
		"WARNING: with this CRD the API server prunes status.instanceArtifacts",
		"spec.replicas: only 1 is accepted (maximum 1, as AIBrix's CRD)",
		"team-a/sql-lora: taken over from AIBrix in place (phase Running, on llama-0): no unload, no reload",
		"WARNING: team-a/sql-lora: its artifact needs the aibrix-runtime sidecar, which pods llama-0 lack",
		"1 to take over from AIBrix, 0 new, 0 already loraplane's",
		`"llama-3.1-8b": llama-3.1-8b-router adopted in place`,
		`WARNING: "qwen": qwen-router stays foreign and the model unrouted by loraplane: its request timeout is 2m and the router's --route-timeout is 10m`,
		`"mistral": no route mistral-router yet: created`,
		`"sql-lora": no route sql-lora-router yet: created`,
		"4 model(s): 1 route(s) to adopt, 2 to create, 1 left foreign, 0 already loraplane's",
		"team-a/aibrix-system-reserved-referencegrant-in-team-a (every Service of team-a): replaced by loraplane's grants",
		"2 thing(s) block the switch",
	)

	// With the Helm install's Lease listed, and the route timeout of AIBrix v0.7.0, nothing
	// blocks and the v0.7.0 route is adopted too.
	code, out = runPreflight(t, env.Config, "--aibrix-controller-leases=aibrix-system/aibrix-controller-manager,ml-serving/aibrix-controller-manager",
		"--route-timeout=2m")
	if code != preflight.ExitOK {
		t.Errorf("exit code %d, want %d", code, preflight.ExitOK)
	}
	wantLines(t, out, `"qwen": qwen-router adopted in place`, "nothing blocks the switch")
}

// TestPreflightWithoutAIBrix: a cluster that never ran AIBrix, with loraplane's CRD and a
// model: nothing to take over, nothing blocks.
func TestPreflightWithoutAIBrix(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	env, k8s := startEnv(t, filepath.Join(root, "deploy", "crds"), gatewayCRDs)
	ctx := context.Background()
	if err := env.EnsureNamespace(ctx, "team-b"); err != nil {
		t.Fatal(err)
	}
	a := &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Name: "new-lora", Namespace: "team-b"},
		Spec: v1alpha1.ModelAdapterSpec{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.ModelNameLabel: "m"}}, ArtifactURL: "hf://org/repo"}}
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	code, out := runPreflight(t, env.Config)
	if code != preflight.ExitOK {
		t.Errorf("exit code %d, want %d", code, preflight.ExitOK)
	}
	wantLines(t, out,
		"no Deployment runs AIBrix's controller-manager",
		"Lease aibrix-system/aibrix-controller-manager (watched): absent",
		"installed: loraplane's (status.instanceArtifacts present)",
		"team-b/new-lora: not loaded by AIBrix: loraplane places and loads it",
		"0 to take over from AIBrix, 1 new, 0 already loraplane's",
		"0 AIBrix-named grant(s)",
		"nothing blocks the switch; 0 warning(s)",
	)
	if strings.Contains(out, "BLOCKS") || strings.Contains(out, "WARNING") {
		t.Error("a cluster without AIBrix got a blocker or a warning")
	}

	// The client's transport refuses writes: a create through it fails and changes nothing.
	ro, err := client.New(preflight.ReadOnly(env.Config), client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "written-by-preflight"}}
	if err := ro.Create(ctx, ns); err == nil || !strings.Contains(err.Error(), "preflight is read-only: refusing POST") {
		t.Errorf("create through the read-only config: %v, want refused", err)
	}
	var list corev1.NamespaceList
	if err := k8s.List(ctx, &list); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(list.Items, func(n corev1.Namespace) bool { return n.Name == ns.Name }) {
		t.Error("the namespace was created")
	}
}
