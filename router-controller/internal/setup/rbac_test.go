package setup_test

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

const systemNamespace = "loraplane-system"

// gatewayNamespace is the default --gateway-namespace, the namespace of the generated
// HTTPRoute Role and of its binding (deploy/router-controller/gateway-rbac.yaml).
const gatewayNamespace = "aibrix-system"

// TestRBAC applies the generated roles and bindings of the router-controller to envtest and
// checks that they are minimal (secrets and pod writes refused, HTTPRoutes writable only in
// the gateway namespace) and sufficient (the router, running as its ServiceAccount with
// leader election, becomes ready and creates a route with only the namespaced HTTPRoute Role).
func TestRBAC(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs envtest")
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
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{systemNamespace, gatewayNamespace} {
		if err := env.EnsureNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"rbac/role.yaml", "rbac.yaml", "gateway-rbac.yaml"} {
		if err := env.ApplyInNamespace(ctx, filepath.Join(root, "deploy", setup.ControllerName, f), systemNamespace); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("Minimal", func(t *testing.T) { testRBACMinimal(ctx, t, env) })
	t.Run("Sufficient", func(t *testing.T) { testRBACSufficient(ctx, t, env) })
}

func testRBACMinimal(ctx context.Context, t *testing.T, env *testenv.Env) {
	denied := []testenv.Access{
		{Verb: "get", Resource: "secrets", Namespace: "default"},
		{Verb: "get", Resource: "secrets", Namespace: systemNamespace},
		{Verb: "list", Resource: "secrets"},
		{Verb: "list", Resource: "secrets", Namespace: "default"},
		{Verb: "watch", Resource: "secrets", Namespace: "default"},
		{Verb: "get", Resource: "pods", Namespace: "default"},
		{Verb: "create", Resource: "pods", Namespace: "default"},
		{Verb: "update", Resource: "pods", Namespace: "default"},
		{Verb: "patch", Resource: "pods", Namespace: "default"},
		{Verb: "delete", Resource: "pods", Namespace: "default"},
		{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: "default"},
		{Verb: "create", Resource: "services", Namespace: "default"},
		{Verb: "update", Resource: "services", Namespace: "default"},
		{Verb: "delete", Resource: "services", Namespace: "default"},
		{Verb: "update", Group: "apps", Resource: "deployments", Namespace: "default"},
		{Verb: "patch", Group: "apps", Resource: "deployments", Namespace: "default"},
		{Verb: "update", Group: "model.aibrix.ai", Resource: "modeladapters", Namespace: "default"},
		{Verb: "update", Group: "model.aibrix.ai", Resource: "modeladapters", Subresource: "status", Namespace: "default"},
		{Verb: "create", Group: "gateway.networking.k8s.io", Resource: "gateways", Namespace: "default"},
		{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: "default"},
		// HTTPRoutes only in the gateway namespace.
		{Verb: "create", Group: "gateway.networking.k8s.io", Resource: "httproutes", Namespace: "default"},
		{Verb: "delete", Group: "gateway.networking.k8s.io", Resource: "httproutes", Namespace: systemNamespace},
		{Verb: "list", Group: "gateway.networking.k8s.io", Resource: "httproutes"},
		{Verb: "watch", Group: "gateway.networking.k8s.io", Resource: "httproutes"},
		// AIBrix's Leases are read by name only.
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: "aibrix-system", Name: "other"},
		{Verb: "list", Group: "coordination.k8s.io", Resource: "leases", Namespace: "aibrix-system"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "aibrix-system", Name: "aibrix-controller-manager"},
		{Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "rolebindings", Namespace: systemNamespace},
	}
	allowed := []testenv.Access{
		{Verb: "list", Group: "apps", Resource: "deployments"},
		{Verb: "watch", Group: "apps", Resource: "statefulsets"},
		// The Services the adapter-controller publishes: the ports of adapters' routes.
		{Verb: "list", Resource: "services"},
		{Verb: "watch", Resource: "services"},
		{Verb: "create", Group: "gateway.networking.k8s.io", Resource: "httproutes", Namespace: gatewayNamespace},
		{Verb: "watch", Group: "gateway.networking.k8s.io", Resource: "httproutes", Namespace: gatewayNamespace},
		{Verb: "delete", Group: "gateway.networking.k8s.io", Resource: "httproutes", Namespace: gatewayNamespace},
		// Grants live in the model namespaces.
		{Verb: "patch", Group: "gateway.networking.k8s.io", Resource: "referencegrants", Namespace: "default"},
		{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: systemNamespace},
		{Verb: "get", Group: "coordination.k8s.io", Resource: "leases", Namespace: "aibrix-system", Name: "aibrix-controller-manager"},
		{Verb: "create", Resource: "events", Namespace: systemNamespace},
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

func testRBACSufficient(ctx context.Context, t *testing.T, env *testenv.Env) {
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
	gw, src := gatewayNamespace, newNS("src")
	model := "rbac-model"
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: src, Name: "engine",
			Labels: map[string]string{v1alpha1.ModelNameLabel: model, v1alpha1.ModelPortLabel: "8080"}},
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
	o.WatchNamespaces = []string{gw, src}
	o.SkipControllerNameValidation = true
	o.LeaderElect = true
	o.LeaderElectionNamespace = systemNamespace
	o.LeaderElectionID = "router-controller-rbac-test"
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 3*time.Second, 2*time.Second, 500*time.Millisecond
	forbidden := &testenv.Forbidden{}
	cfg := forbidden.Watch(env.ImpersonateServiceAccount(systemNamespace, setup.ControllerName))
	runCtx, stop := context.WithCancel(ctx)
	started := time.Now()
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
		refused := forbidden.Requests()
		for _, r := range refused {
			t.Errorf("the API server refused %s to the ServiceAccount", r)
		}
		t.Logf("refused requests: %d", len(refused))
	}()

	var ready, routed time.Duration
	key := types.NamespacedName{Namespace: gw, Name: routes.RouteName(model)}
	for ready == 0 || routed == 0 {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("router running as its ServiceAccount stopped: %v", err)
		default:
		}
		if time.Since(started) > 60*time.Second {
			t.Fatalf("after 60s: ready %v, route %v", ready > 0, routed > 0)
		}
		if ready == 0 {
			if resp, err := http.Get("http://" + o.HealthProbeBindAddress + "/readyz"); err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ready = time.Since(started)
				}
			}
		}
		if routed == 0 {
			r := &gatewayv1.HTTPRoute{}
			if err := k8s.Get(ctx, key, r); err == nil {
				routed = time.Since(started)
				if n := len(r.Spec.Rules); n == 0 || len(r.Spec.Rules[0].BackendRefs) != 1 || ptr.Deref(r.Spec.Rules[0].BackendRefs[0].Port, 0) != 8080 {
					t.Errorf("route %s rules %+v, want one backend on port 8080", key, r.Spec.Rules)
				}
			} else if !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("as %s: ready after %s, HTTPRoute %s created after %s", testenv.ServiceAccountUser(systemNamespace, setup.ControllerName),
		ready.Round(time.Millisecond), key, routed.Round(time.Millisecond))
}
