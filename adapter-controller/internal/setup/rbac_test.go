package setup_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/adapter"
	"github.com/loraplane/loraplane/adapter-controller/internal/setup"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/fakeengine"
	"github.com/loraplane/loraplane/test/testenv"
)

const systemNamespace = "loraplane-system"

// applyRBAC installs the generated roles and the bindings of the adapter-controller.
func applyRBAC(ctx context.Context, t *testing.T) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := env.EnsureNamespace(ctx, systemNamespace); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"rbac/role.yaml", "rbac.yaml"} {
		if err := env.ApplyInNamespace(ctx, filepath.Join(root, "deploy", setup.ControllerName, f), systemNamespace); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRBACMinimal: the adapter-controller's ServiceAccount may not write pods, routes or
// grants, and may only get (not list or watch) secrets.
func TestRBACMinimal(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	applyRBAC(ctx, t)
	gw := "gateway.networking.k8s.io"
	denied := []testenv.Access{
		{Verb: "list", Resource: "secrets"},
		{Verb: "list", Resource: "secrets", Namespace: "default"},
		{Verb: "watch", Resource: "secrets", Namespace: "default"},
		{Verb: "create", Resource: "secrets", Namespace: "default"},
		{Verb: "create", Resource: "pods", Namespace: "default"},
		{Verb: "update", Resource: "pods", Namespace: "default"},
		{Verb: "patch", Resource: "pods", Namespace: "default"},
		{Verb: "delete", Resource: "pods", Namespace: "default"},
		{Verb: "update", Resource: "pods", Subresource: "status", Namespace: "default"},
		{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: "default"},
		{Verb: "create", Group: gw, Resource: "httproutes", Namespace: "default"},
		{Verb: "update", Group: gw, Resource: "httproutes", Namespace: "default"},
		{Verb: "patch", Group: gw, Resource: "httproutes", Namespace: "default"},
		{Verb: "create", Group: gw, Resource: "referencegrants", Namespace: "default"},
		{Verb: "update", Group: gw, Resource: "referencegrants", Namespace: "default"},
		{Verb: "patch", Group: gw, Resource: "referencegrants", Namespace: "default"},
		{Verb: "create", Group: "model.aibrix.ai", Resource: "modeladapters", Namespace: "default"},
		{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: "default"},
		// AIBrix's Leases are read by name only.
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: "aibrix-system", Name: "other"},
		{Verb: "list", Group: "coordination.k8s.io", Resource: "leases", Namespace: "aibrix-system"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "aibrix-system", Name: "aibrix-controller-manager"},
		{Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "rolebindings", Namespace: systemNamespace},
		// The stray loads' ConfigMap: its own namespace, its own name; no Secret of its own.
		{Verb: "create", Resource: "configmaps", Namespace: "default"},
		{Verb: "get", Resource: "configmaps", Namespace: systemNamespace, Name: "other"},
		{Verb: "update", Resource: "configmaps", Namespace: systemNamespace, Name: "other"},
		{Verb: "list", Resource: "configmaps", Namespace: systemNamespace},
		{Verb: "create", Resource: "secrets", Namespace: systemNamespace},
	}
	allowed := []testenv.Access{
		{Verb: "get", Resource: "secrets", Namespace: "default"},
		{Verb: "list", Resource: "pods"},
		{Verb: "watch", Resource: "pods"},
		{Verb: "create", Resource: "services", Namespace: "default"},
		{Verb: "create", Group: "discovery.k8s.io", Resource: "endpointslices", Namespace: "default"},
		{Verb: "update", Group: "model.aibrix.ai", Resource: "modeladapters", Subresource: "status", Namespace: "default"},
		{Verb: "update", Group: "model.aibrix.ai", Resource: "modeladapters", Subresource: "finalizers", Namespace: "default"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: systemNamespace},
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: "aibrix-system", Name: "aibrix-controller-manager"},
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: "aibrix-system", Name: "aibrix-model-adapter-controller"},
		{Verb: "create", Group: "events.k8s.io", Resource: "events", Namespace: "default"},
		{Verb: "create", Resource: "configmaps", Namespace: systemNamespace},
		{Verb: "get", Resource: "configmaps", Namespace: systemNamespace, Name: adapter.StrayConfigMapName},
		{Verb: "update", Resource: "configmaps", Namespace: systemNamespace, Name: adapter.StrayConfigMapName},
	}
	check := func(a testenv.Access, want bool) {
		got, err := env.Allowed(ctx, systemNamespace, setup.ControllerName, a)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s: allowed = %v, want %v", a, got, want)
		}
	}
	for _, a := range denied {
		check(a, false)
	}
	for _, a := range allowed {
		check(a, true)
	}
	t.Logf("checked %d denied and %d allowed requests for %s", len(denied), len(allowed), testenv.ServiceAccountUser(systemNamespace, setup.ControllerName))
}

// TestRBACSufficient: the adapter-controller running as its ServiceAccount (impersonated)
// with leader election in loraplane-system becomes ready, wins the lease and loads an
// adapter onto a fake engine.
func TestRBACSufficient(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	applyRBAC(ctx, t)
	k8s, err := client.New(env.Config, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rbac-"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	ip := "127.0.31.1"
	e, err := fakeengine.Start(ip, 8000, fakeengine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	labels := map[string]string{v1alpha1.ModelNameLabel: "rbac", v1alpha1.AdapterEnabledLabel: "true"}
	if _, err := testenv.CreateReadyPod(ctx, k8s, ns.Name, "rbac-0", ip, labels); err != nil {
		t.Fatal(err)
	}
	a := &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Name: "lora", Namespace: ns.Name},
		Spec: v1alpha1.ModelAdapterSpec{PodSelector: &metav1.LabelSelector{MatchLabels: labels}, ArtifactURL: "/models/lora"}}
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}

	o := options()
	o.WatchNamespaces = []string{ns.Name}
	o.LeaderElect = true
	o.LeaderElectionNamespace = systemNamespace
	o.LeaderElectionID = "adapter-controller-rbac-test"
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 3*time.Second, 2*time.Second, 500*time.Millisecond
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	started := time.Now()
	forbidden := &testenv.Forbidden{}
	cfg := forbidden.Watch(env.ImpersonateServiceAccount(systemNamespace, setup.ControllerName))
	go func() { done <- setup.Run(runCtx, o, cfg) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("controller running as its ServiceAccount: %v", err)
		}
		checkForbidden(t, forbidden.Requests())
	}()

	var ready, running time.Duration
	for ready == 0 || running == 0 {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("controller running as its ServiceAccount stopped: %v", err)
		default:
		}
		if time.Since(started) > 60*time.Second {
			t.Fatalf("after 60s: ready %v, adapter status %+v", ready > 0, a.Status)
		}
		if ready == 0 {
			if resp, err := http.Get("http://" + o.HealthProbeBindAddress + "/readyz"); err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ready = time.Since(started)
				}
			}
		}
		if running == 0 {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(a), a); err == nil && a.Status.Phase == v1alpha1.ModelAdapterRunning {
				running = time.Since(started)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := e.Loaded(); len(got) != 1 || got[0] != "lora" {
		t.Errorf("engine holds %v, want [lora]", got)
	}
	t.Logf("as %s: ready after %s, adapter Running after %s", testenv.ServiceAccountUser(systemNamespace, setup.ControllerName), ready.Round(time.Millisecond), running.Round(time.Millisecond))
}

// checkForbidden fails on every request the API server refused to the ServiceAccount.
func checkForbidden(t *testing.T, refused []string) {
	t.Helper()
	for _, r := range refused {
		t.Errorf("the API server refused %s to the ServiceAccount", r)
	}
	t.Logf("refused requests: %d", len(refused))
}
