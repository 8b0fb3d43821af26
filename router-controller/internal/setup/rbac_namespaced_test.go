package setup_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
	"github.com/loraplane/loraplane/router-controller/internal/setup"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/testenv"
)

// TestChartNamespacedRBAC: the Helm chart's namespaced install (watchNamespaces) gives the
// router-controller Roles in the watched namespace and in its gateway namespace and nothing
// cluster-wide but the metrics reviews; running as its ServiceAccount with --watch-namespace
// it becomes ready and routes a workload without a single refused request.
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
	gwDir, err := testenv.GatewayAPICRDDir()
	if err != nil {
		t.Fatal(err)
	}
	env, err := testenv.Start(gwDir)
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
	gw, src, other := newNS("gw"), newNS("src"), newNS("other")

	rendered := filepath.Join(t.TempDir(), "controllers.yaml")
	out, err := exec.CommandContext(ctx, helm, "template", "loraplane", filepath.Join(root, "deploy", "chart", "loraplane"),
		"--namespace", systemNamespace, "--show-only", "templates/controllers.yaml",
		"--set", "adapterController.enabled=false", "--set", "watchNamespaces={"+src+"}",
		"--set", "routerController.flags.gateway-namespace="+gw).Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	if err := os.WriteFile(rendered, out, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := env.Apply(rendered); err != nil {
		t.Fatal(err)
	}

	t.Run("Scoped", func(t *testing.T) {
		denied := []testenv.Access{
			{Verb: "list", Group: "apps", Resource: "deployments"},
			{Verb: "list", Group: "apps", Resource: "deployments", Namespace: other},
			{Verb: "watch", Group: "model.aibrix.ai", Resource: "modeladapters"},
			{Verb: "list", Resource: "services"},
			{Verb: "watch", Resource: "services", Namespace: other},
			{Verb: "create", Group: "gateway.networking.k8s.io", Resource: "httproutes", Namespace: other},
			{Verb: "create", Group: "gateway.networking.k8s.io", Resource: "referencegrants", Namespace: other},
			{Verb: "create", Resource: "events", Namespace: other},
			{Verb: "get", Resource: "secrets", Namespace: src},
		}
		allowed := []testenv.Access{
			{Verb: "list", Group: "apps", Resource: "deployments", Namespace: src},
			{Verb: "watch", Group: "model.aibrix.ai", Resource: "modeladapters", Namespace: src},
			{Verb: "watch", Resource: "services", Namespace: src},
			{Verb: "create", Group: "gateway.networking.k8s.io", Resource: "httproutes", Namespace: gw},
			{Verb: "create", Group: "gateway.networking.k8s.io", Resource: "referencegrants", Namespace: src},
			{Verb: "create", Resource: "events", Namespace: src},
			{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: systemNamespace},
			{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"},
		}
		for _, tc := range []struct {
			accesses []testenv.Access
			want     bool
		}{{denied, false}, {allowed, true}} {
			for _, a := range tc.accesses {
				got, err := env.Allowed(ctx, systemNamespace, setup.ControllerName, a)
				if err != nil {
					t.Fatal(err)
				}
				if got != tc.want {
					t.Errorf("%s: allowed = %v, want %v", a, got, tc.want)
				}
			}
		}
	})

	t.Run("Sufficient", func(t *testing.T) {
		model := "namespaced-model"
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: src, Name: "engine", Labels: map[string]string{v1alpha1.ModelNameLabel: model}},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "engine"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "engine"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "engine:latest"}}}}},
		}
		if err := k8s.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
		o := setup.NewOptions()
		o.MetricsBindAddress = "0"
		o.HealthProbeBindAddress = testenv.FreeAddr()
		o.GracefulShutdownTimeout = 5 * time.Second
		o.GatewayNamespace = gw
		o.WatchNamespaces = []string{src}
		o.SkipControllerNameValidation = true
		o.LeaderElect = true
		o.LeaderElectionNamespace = systemNamespace
		o.LeaderElectionID = "router-controller-namespaced-test"
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 3*time.Second, 2*time.Second, 500*time.Millisecond
		forbidden := &testenv.Forbidden{}
		cfg := forbidden.Watch(env.ImpersonateServiceAccount(systemNamespace, setup.ControllerName))
		runCtx, stop := context.WithCancel(ctx)
		a, err := setup.Build(runCtx, o, cfg)
		if err != nil {
			stop()
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- a.Run(runCtx) }()
		defer func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("router running as its ServiceAccount: %v", err)
			}
			for _, r := range forbidden.Requests() {
				t.Errorf("the API server refused %s to the ServiceAccount", r)
			}
		}()
		key := types.NamespacedName{Namespace: gw, Name: routes.RouteName(model)}
		testenv.Eventually(t, 60*time.Second, 100*time.Millisecond, "the router, namespaced, to be ready and to route "+model, func() (bool, string) {
			resp, err := http.Get("http://" + o.HealthProbeBindAddress + "/readyz") //nolint:gosec,noctx // a loopback probe address chosen by the test
			if err != nil {
				return false, err.Error()
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false, "readyz " + resp.Status
			}
			if err := k8s.Get(ctx, key, &gatewayv1.HTTPRoute{}); err != nil {
				return false, "route " + key.String() + ": " + err.Error()
			}
			return true, ""
		})
	})
}
