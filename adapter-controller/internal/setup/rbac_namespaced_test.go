package setup_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/setup"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/fakeengine"
	"github.com/loraplane/loraplane/test/testenv"
)

// cleanupAccount is the ServiceAccount of the chart's uninstall hook.
const cleanupAccount = "loraplane-adapter-cleanup"

// TestChartNamespacedRBAC: the Helm chart's namespaced install (watchNamespaces) gives the
// adapter-controller Roles in the watched namespace only; running as its ServiceAccount with
// --watch-namespace it loads an adapter without a refused request, and the uninstall hook,
// as its own ServiceAccount, deletes the adapter (which the controller unloads) with its
// namespaced Role. The environment is this test's own: the shared one has the cluster-wide
// roles of deploy/ applied.
func TestChartNamespacedRBAC(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm := filepath.Join(root, "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("%s is not built: run make tools (%v)", helm, err)
	}
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := env.EnsureNamespace(ctx, systemNamespace); err != nil {
		t.Fatal(err)
	}
	k8s, err := client.New(env.Config, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	newNS := func(prefix string) string {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
		if err := k8s.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		return ns.Name
	}
	src, other := newNS("src"), newNS("other")
	out, err := exec.CommandContext(ctx, helm, "template", "loraplane", filepath.Join(root, "deploy", "chart", "loraplane"),
		"--namespace", systemNamespace, "--show-only", "templates/controllers.yaml", "--show-only", "templates/cleanup-hook.yaml",
		"--set", "routerController.enabled=false", "--set", "adapterController.cleanupOnUninstall.enabled=true", "--set", "watchNamespaces={"+src+"}").Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	rendered := filepath.Join(t.TempDir(), "rendered.yaml")
	if err := os.WriteFile(rendered, out, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := env.Apply(rendered); err != nil {
		t.Fatal(err)
	}

	check := func(account string, accesses []testenv.Access, want bool) {
		t.Helper()
		for _, a := range accesses {
			got, err := env.Allowed(ctx, systemNamespace, account, a)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s: %s: allowed = %v, want %v", account, a, got, want)
			}
		}
	}
	mg := "model.aibrix.ai"
	check(setup.ControllerName, []testenv.Access{
		{Verb: "list", Resource: "pods"},
		{Verb: "list", Resource: "pods", Namespace: other},
		{Verb: "watch", Group: mg, Resource: "modeladapters"},
		{Verb: "update", Group: mg, Resource: "modeladapters", Subresource: "status", Namespace: other},
		{Verb: "get", Resource: "secrets", Namespace: other},
		{Verb: "create", Resource: "services", Namespace: other},
		{Verb: "delete", Group: mg, Resource: "modeladapters", Namespace: src},
	}, false)
	check(setup.ControllerName, []testenv.Access{
		{Verb: "watch", Resource: "pods", Namespace: src},
		{Verb: "update", Group: mg, Resource: "modeladapters", Subresource: "status", Namespace: src},
		{Verb: "get", Resource: "secrets", Namespace: src},
		{Verb: "create", Group: "discovery.k8s.io", Resource: "endpointslices", Namespace: src},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: systemNamespace},
		{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"},
	}, true)
	check(cleanupAccount, []testenv.Access{
		{Verb: "list", Group: mg, Resource: "modeladapters"},
		{Verb: "delete", Group: mg, Resource: "modeladapters", Namespace: other},
		{Verb: "update", Group: mg, Resource: "modeladapters", Namespace: src},
	}, false)
	check(cleanupAccount, []testenv.Access{
		{Verb: "list", Group: mg, Resource: "modeladapters", Namespace: src},
		{Verb: "delete", Group: mg, Resource: "modeladapters", Namespace: src},
	}, true)

	ip := "127.0.31.2"
	e, err := fakeengine.Start(ip, 8000, fakeengine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	labels := map[string]string{v1alpha1.ModelNameLabel: "namespaced", v1alpha1.AdapterEnabledLabel: "true"}
	if _, err := testenv.CreateReadyPod(ctx, k8s, src, "engine-0", ip, labels); err != nil {
		t.Fatal(err)
	}
	a := &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Name: "lora", Namespace: src},
		Spec: v1alpha1.ModelAdapterSpec{PodSelector: &metav1.LabelSelector{MatchLabels: labels}, ArtifactURL: "/models/lora"}}
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}

	o := options()
	o.WatchNamespaces = []string{src}
	o.LeaderElect = true
	o.LeaderElectionNamespace = systemNamespace
	o.LeaderElectionID = "adapter-controller-namespaced-test"
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 3*time.Second, 2*time.Second, 500*time.Millisecond
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	forbidden := &testenv.Forbidden{}
	go func() {
		done <- setup.Run(runCtx, o, forbidden.Watch(env.ImpersonateServiceAccount(systemNamespace, setup.ControllerName)))
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("controller running as its ServiceAccount: %v", err)
		}
		checkForbidden(t, forbidden.Requests())
	}()
	testenv.Eventually(t, 60*time.Second, 100*time.Millisecond, "the namespaced adapter-controller to be ready and lora Running on the engine", func() (bool, string) {
		resp, err := http.Get("http://" + o.HealthProbeBindAddress + "/readyz") //nolint:gosec,noctx // a loopback probe address chosen by the test
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(a), a); err != nil {
			return false, err.Error()
		}
		return resp.StatusCode == http.StatusOK && a.Status.Phase == v1alpha1.ModelAdapterRunning && len(e.Loaded()) == 1,
			"readyz " + resp.Status + ", phase " + string(a.Status.Phase)
	})

	// The uninstall hook, as its ServiceAccount with the chart's Role.
	c := setup.NewOptions()
	c.DeleteAllAdapters = true
	c.WatchNamespaces = []string{src}
	c.CleanupTimeout = 30 * time.Second
	hookForbidden := &testenv.Forbidden{}
	if err := setup.Run(ctx, c, hookForbidden.Watch(env.ImpersonateServiceAccount(systemNamespace, cleanupAccount))); err != nil {
		t.Fatalf("adapter-controller --delete-all-adapters as %s: %v", cleanupAccount, err)
	}
	for _, r := range hookForbidden.Requests() {
		t.Errorf("the API server refused %s to %s", r, cleanupAccount)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(a), a); !apierrors.IsNotFound(err) {
		t.Errorf("after the hook: adapter %s: %v, want it gone", client.ObjectKeyFromObject(a), err)
	}
	if got := e.Loaded(); len(got) != 0 {
		t.Errorf("after the hook the engine holds %v, want nothing", got)
	}
}
