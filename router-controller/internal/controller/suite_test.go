package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/loraplane/loraplane/router-controller/internal/controller"
	"github.com/loraplane/loraplane/router-controller/internal/routes"
	"github.com/loraplane/loraplane/router-controller/internal/setup"
	"github.com/loraplane/loraplane/shared/app"
	"github.com/loraplane/loraplane/test/testenv"
)

var (
	env *testenv.Env
	k8s client.Client
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	gw, err := testenv.GatewayAPICRDDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, "finding the Gateway API CRDs:", err)
		return 1
	}
	if env, err = testenv.Start(gw); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()
	if k8s, err = client.New(env.Config, client.Options{Scheme: setup.Scheme()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if n := reconcilePanics(); n > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: controller_runtime_reconcile_panics_total = %v, want 0\n", n)
		code = 1
	}
	return code
}

// reconcilePanics sums controller_runtime_reconcile_panics_total over all controllers.
func reconcilePanics() float64 {
	n, err := testenv.MetricSum("controller_runtime_reconcile_panics_total", nil)
	if err != nil {
		return -1
	}
	return n
}

// gaugeValue returns the value of the first gauge series of the family matching labels.
func gaugeValue(t *testing.T, family string, labels map[string]string) (float64, bool) {
	t.Helper()
	ms, err := testenv.Metrics(family, labels)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		return 0, false
	}
	return ms[0].GetGauge().GetValue(), true
}

func needEnv(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
}

// newNamespace creates a namespace with a generated name for the test.
func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return ns.Name
}

// router is one running router-controller process.
type router struct {
	t      *testing.T
	app    *app.App
	cancel context.CancelFunc
	done   chan error
	readyz string // URL of the health probe's /readyz
}

// startRouter builds the router through setup.Build and runs it until stop or the end of
// the test. It watches only the given namespaces, so tests do not see each other.
func startRouter(t *testing.T, cfg *rest.Config, gatewayNamespace string, namespaces []string, mutate ...func(*setup.Options)) *router {
	t.Helper()
	o := setup.NewOptions()
	o.MetricsBindAddress = "0"
	o.HealthProbeBindAddress = testenv.FreeAddr()
	o.GracefulShutdownTimeout = 5 * time.Second
	o.CacheSyncTimeout = 30 * time.Second
	o.GatewayNamespace = gatewayNamespace
	o.WatchNamespaces = append([]string{gatewayNamespace}, namespaces...)
	o.SkipControllerNameValidation = true
	for _, m := range mutate {
		m(o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := setup.Build(ctx, o, cfg)
	if err != nil {
		cancel()
		t.Fatalf("building the router: %v", err)
	}
	r := &router{t: t, app: a, cancel: cancel, done: make(chan error, 1), readyz: "http://" + o.HealthProbeBindAddress + "/readyz"}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

// stop stops the router and waits for it to return (at most 30s).
func (r *router) stop() {
	r.cancel()
	select {
	case err := <-r.done:
		if err != nil {
			r.t.Errorf("router stopped with an error: %v", err)
		}
	case <-time.After(30 * time.Second):
		r.t.Fatal("router did not stop within 30s")
	}
	r.done <- nil // later stops return at once
}

// readyzStatus returns the status code of /readyz, or 0 when the probe cannot be reached.
func (r *router) readyzStatus() int {
	resp, err := http.Get(r.readyz) //nolint:gosec,noctx // a loopback probe address chosen by the test
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (r *router) waitOpen(t *testing.T) {
	t.Helper()
	select {
	case <-r.app.Gate.Opened():
	case err := <-r.done:
		r.done <- err
		t.Fatalf("router stopped before its gate opened: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("timed out after 30s waiting for the router's sync gate to open")
	}
}

// eventually polls cond every 100ms until it returns nil or waitTimeout passes, then fails
// saying what it waited for and the last reason.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, 100*time.Millisecond, what, func() (bool, string) {
		err := cond()
		return err == nil, fmt.Sprint(err)
	})
}

const waitTimeout = 20 * time.Second

func modelLabels(model string, extra ...string) map[string]string {
	l := map[string]string{"model.aibrix.ai/name": model}
	for i := 0; i+1 < len(extra); i += 2 {
		l[extra[i]] = extra[i+1]
	}
	return l
}

func podTemplate() (*metav1.LabelSelector, corev1.PodTemplateSpec) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "engine"}}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "engine"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "engine:latest"}}},
	}
	return sel, tmpl
}

func createDeployment(t *testing.T, ns, name string, labels, annotations map[string]string) *appsv1.Deployment {
	t.Helper()
	sel, tmpl := podTemplate()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: annotations},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: sel, Template: tmpl},
	}
	if err := k8s.Create(context.Background(), d); err != nil {
		t.Fatalf("creating Deployment %s/%s: %v", ns, name, err)
	}
	return d
}

func createStatefulSet(t *testing.T, ns, name string, labels, annotations map[string]string) {
	t.Helper()
	sel, tmpl := podTemplate()
	s := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: annotations},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To[int32](0), Selector: sel, Template: tmpl},
	}
	if err := k8s.Create(context.Background(), s); err != nil {
		t.Fatalf("creating StatefulSet %s/%s: %v", ns, name, err)
	}
}

// patchMeta changes labels and annotations of obj with a merge patch (nil value: remove).
func patchMeta(t *testing.T, obj client.Object, labels, annotations map[string]*string) {
	t.Helper()
	m := map[string]any{}
	if labels != nil {
		m["labels"] = labels
	}
	if annotations != nil {
		m["annotations"] = annotations
	}
	patch := map[string]any{"metadata": m}
	if err := k8s.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, mustJSON(t, patch))); err != nil {
		t.Fatalf("patching %s: %v", client.ObjectKeyFromObject(obj), err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func deleteObject(t *testing.T, obj client.Object) {
	t.Helper()
	if err := k8s.Delete(context.Background(), obj); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting %s: %v", client.ObjectKeyFromObject(obj), err)
	}
}

// getRoute reads a route directly from the API server; nil when it does not exist.
func getRoute(t *testing.T, ns, name string) *gatewayv1.HTTPRoute {
	t.Helper()
	r := &gatewayv1.HTTPRoute{}
	err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, r)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("reading HTTPRoute %s/%s: %v", ns, name, err)
	}
	return r
}

// backends renders the backends of every rule as "ns/service:port", rule by rule.
func backends(r *gatewayv1.HTTPRoute) []string {
	var out []string
	for i, rule := range r.Spec.Rules {
		for _, b := range rule.BackendRefs {
			out = append(out, fmt.Sprintf("%d:%s/%s:%d", i, ptr.Deref(b.Namespace, ""), b.Name, ptr.Deref(b.Port, 0)))
		}
	}
	return out
}

// paths lists the path prefixes of all matches, sorted.
func paths(r *gatewayv1.HTTPRoute) []string {
	var out []string
	for _, rule := range r.Spec.Rules {
		for _, m := range rule.Matches {
			out = append(out, ptr.Deref(m.Path.Value, ""))
		}
	}
	sort.Strings(out)
	return out
}

// waitRoute waits until the route of model exists and check accepts it.
func waitRoute(t *testing.T, gwns, model string, check func(*gatewayv1.HTTPRoute) error) *gatewayv1.HTTPRoute {
	t.Helper()
	var route *gatewayv1.HTTPRoute
	eventually(t, fmt.Sprintf("HTTPRoute %s/%s of model %q", gwns, routes.RouteName(model), model), func() error {
		route = getRoute(t, gwns, routes.RouteName(model))
		if route == nil {
			return fmt.Errorf("not found")
		}
		if check != nil {
			return check(route)
		}
		return nil
	})
	return route
}

func waitRouteGone(t *testing.T, gwns, model string) {
	t.Helper()
	eventually(t, fmt.Sprintf("HTTPRoute %s/%s of model %q to be deleted", gwns, routes.RouteName(model), model), func() error {
		if r := getRoute(t, gwns, routes.RouteName(model)); r != nil {
			return fmt.Errorf("still there with backends %v", backends(r))
		}
		return nil
	})
}

func wantBackends(want ...string) func(*gatewayv1.HTTPRoute) error {
	return func(r *gatewayv1.HTTPRoute) error {
		if got := backends(r); strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("backends %v, want %v", got, want)
		}
		return nil
	}
}

// grantServices returns the Services the ReferenceGrants of ours in ns admit, sorted; nil
// when there are none.
func grantServices(t *testing.T, gwns, ns string) []string {
	t.Helper()
	var list gatewayv1beta1.ReferenceGrantList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns),
		client.MatchingLabels{routes.ManagedByLabel: routes.ManagedByValue, routes.GatewayNamespaceLabel: gwns}); err != nil {
		t.Fatalf("listing ReferenceGrants in %s: %v", ns, err)
	}
	var out []string
	for _, g := range list.Items {
		for _, from := range g.Spec.From {
			if string(from.Namespace) != gwns || from.Kind != "HTTPRoute" {
				t.Errorf("grant %s/%s admits %s from %s", ns, g.Name, from.Kind, from.Namespace)
			}
		}
		for _, to := range g.Spec.To {
			out = append(out, ptr.Deref((*string)(to.Name), "*"))
		}
	}
	sort.Strings(out)
	return out
}

func waitGrant(t *testing.T, gwns, ns string, want ...string) {
	t.Helper()
	eventually(t, fmt.Sprintf("ReferenceGrants in %s to admit exactly %v", ns, want), func() error {
		if got := grantServices(t, gwns, ns); strings.Join(got, ",") != strings.Join(want, ",") {
			return fmt.Errorf("they admit %v", got)
		}
		return nil
	})
}

// waitEvent waits for an event with reason on the object named name in ns and returns it.
func waitEvent(t *testing.T, ns, name, reason string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	eventually(t, fmt.Sprintf("event %s on %s/%s", reason, ns, name), func() error {
		var list eventsv1.EventList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Name == name && e.Reason == reason {
				found = e
				return nil
			}
			seen = append(seen, e.Reason+"@"+e.Regarding.Name)
		}
		return fmt.Errorf("events seen: %v", seen)
	})
	return found
}

func newSlowProxy(t *testing.T, cfg *rest.Config) *testenv.SlowProxy {
	t.Helper()
	p, err := testenv.NewSlowProxy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// touchAndWaitReconcile changes an annotation of obj that routing ignores and waits until the
// router has counted one more reconcile: the reconcile a change of obj causes has run.
func touchAndWaitReconcile(t *testing.T, obj client.Object) {
	t.Helper()
	reconciles := testenv.ReconcileCount(controller.ControllerName)
	patchMeta(t, obj, nil, map[string]*string{"example.com/unrelated": ptr.To("x")})
	eventually(t, "a reconcile after the change", func() error {
		if testenv.ReconcileCount(controller.ControllerName) <= reconciles {
			return errors.New("no reconcile counted yet")
		}
		return nil
	})
}
