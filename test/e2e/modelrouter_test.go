//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// routeDefaultPaths are the router's default --route-paths: AIBrix's newest 16 path prefixes.
var routeDefaultPaths = []string{
	"/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings",
	"/v1/rerank", "/v1/classify", "/v1/decisions", "/generate", "/generatevideo", "/v1/video",
	"/v1/videos", "/v1/audio/transcriptions", "/v1/audio/translations", "/tokenize", "/pooling",
}

// routeDefaultTimeout is the router's default --route-timeout (AIBrix's newest, 600 s) as
// the route carries it.
const routeDefaultTimeout = "10m"

// getModelRoute reads the HTTPRoute of that name in the gateway namespace; nil when absent.
func getModelRoute(t *testing.T, name string) *gatewayv1.HTTPRoute {
	t.Helper()
	r := &gatewayv1.HTTPRoute{}
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: gatewayNamespace(), Name: name}, r)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitModelRoute waits until the route of that name exists and check (if any) accepts it.
func waitModelRoute(t *testing.T, name string, check func(*gatewayv1.HTTPRoute) error) *gatewayv1.HTTPRoute {
	t.Helper()
	var r *gatewayv1.HTTPRoute
	waitFor(t, 60*time.Second, "HTTPRoute "+gatewayNamespace()+"/"+name, func() (bool, string) {
		if r = getModelRoute(t, name); r == nil {
			return false, "not found"
		}
		if check == nil {
			return true, ""
		}
		err := check(r)
		return err == nil, fmt.Sprint(err)
	})
	return r
}

func waitModelRouteGone(t *testing.T, name string) {
	t.Helper()
	waitFor(t, 60*time.Second, "HTTPRoute "+gatewayNamespace()+"/"+name+" deleted", func() (bool, string) {
		r := getModelRoute(t, name)
		return r == nil, fmt.Sprintf("still there: %v", routeBackendList(r))
	})
}

// routeBackendList renders a route's backends as namespace/name:port, sorted.
func routeBackendList(r *gatewayv1.HTTPRoute) []string {
	var out []string
	if r == nil {
		return out
	}
	for _, rule := range r.Spec.Rules {
		for _, b := range rule.BackendRefs {
			out = append(out, fmt.Sprintf("%s/%s:%d", ptr.Deref(b.Namespace, gatewayv1.Namespace(r.Namespace)), b.Name, ptr.Deref(b.Port, 0)))
		}
	}
	slices.Sort(out)
	return out
}

// backendsAre accepts a route whose backends are exactly want (in any order).
func backendsAre(want ...string) func(*gatewayv1.HTTPRoute) error {
	want = slices.Sorted(slices.Values(want))
	return func(r *gatewayv1.HTTPRoute) error {
		if got := routeBackendList(r); !slices.Equal(got, want) {
			return fmt.Errorf("backends %v, want %v", got, want)
		}
		return nil
	}
}

// checkModelRoute checks what AIBrix's gateway plugin and the Gateway read of a model's route:
// attached to the Gateway only, one rule, PathPrefix matches on exactly wantPaths each
// requiring exactly the header model, and the default request timeout.
func checkModelRoute(r *gatewayv1.HTTPRoute, model string, wantPaths []string) error {
	if len(r.Spec.ParentRefs) != 1 || string(r.Spec.ParentRefs[0].Name) != gatewayName() ||
		string(ptr.Deref(r.Spec.ParentRefs[0].Namespace, gatewayv1.Namespace(r.Namespace))) != gatewayNamespace() {
		return fmt.Errorf("parentRefs %+v, want only %s/%s", r.Spec.ParentRefs, gatewayNamespace(), gatewayName())
	}
	if len(r.Spec.Rules) != 1 {
		return fmt.Errorf("%d rules, want 1", len(r.Spec.Rules))
	}
	rule := r.Spec.Rules[0]
	var got []string
	for _, m := range rule.Matches {
		if m.Path == nil || ptr.Deref(m.Path.Type, gatewayv1.PathMatchPathPrefix) != gatewayv1.PathMatchPathPrefix {
			return fmt.Errorf("match %+v is not a PathPrefix match", m)
		}
		if len(m.Headers) != 1 || m.Headers[0].Name != "model" || m.Headers[0].Value != model ||
			ptr.Deref(m.Headers[0].Type, gatewayv1.HeaderMatchExact) != gatewayv1.HeaderMatchExact {
			return fmt.Errorf("match on %s requires headers %+v, want exactly model=%q", ptr.Deref(m.Path.Value, ""), m.Headers, model)
		}
		got = append(got, ptr.Deref(m.Path.Value, ""))
	}
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(wantPaths)); !slices.Equal(got, want) {
		return fmt.Errorf("paths %v, want %v", got, want)
	}
	if rule.Timeouts == nil || ptr.Deref(rule.Timeouts.Request, "") != routeDefaultTimeout {
		return fmt.Errorf("request timeout %+v, want %s", rule.Timeouts, routeDefaultTimeout)
	}
	return nil
}

// servedThroughGateway sends a completion for model as AIBrix's gateway plugin does (route
// looked up by name, header model) until one is answered by one of pods for that model.
func servedThroughGateway(t *testing.T, route, model string, pods []corev1.Pod) {
	t.Helper()
	// Answers name the pod (kind: each pod's engine) or its address (kwok: the host engine,
	// answering on the loopback address the test's routing dialled).
	var names []string
	for _, p := range pods {
		names = append(names, p.Name, p.Status.PodIP+":8000")
		if ip, ok := loopbackOf(p.Status.PodIP); ok {
			names = append(names, ip.String()+":8000")
		}
	}
	waitFor(t, 60*time.Second, fmt.Sprintf("a completion for %s through route %s answered by %v", model, route, names), func() (bool, string) {
		a := viaAIBrixPlugin(t, route, model)
		return a.ok() && a.model == model && slices.Contains(names, a.servedBy), a.String()
	})
}

// claimant is a Deployment without replicas that claims model with the Service svc.
func claimant(ns, name, model, svc string) *appsv1.Deployment {
	d := modelDeployment(ns, model, 0)
	d.Name = name
	d.Spec.Selector.MatchLabels = map[string]string{"app": name}
	d.Spec.Template.Labels = map[string]string{"app": name}
	d.Annotations = map[string]string{v1alpha1.ServiceNameAnnotation: svc}
	return d
}

// TestModelRouterLifecycle: the user-visible checks of AIBrix's newest ModelRouter lifecycle
// e2e suite (test/e2e/controller/modelrouter, read at AIBrix 93a661b), made against
// loraplane's router with its default flags; docs/compatibility.md#modelrouter lists where
// ours deliberately differs (its ReferenceGrant is scoped, a ModelAdapter is routed under its
// own name to its own Service).
//
//   - A Deployment with custom paths (/score, /version) and a service-name annotation: its
//     route is named as AIBrix names it, attached to the Gateway, matches AIBrix's newest 16
//     path prefixes plus the custom ones each with exactly the header model, has the
//     Service as its one backend and AIBrix's newest request timeout; a grant admits the
//     Service; a completion through the route reaches the model's pod.
//   - A ModelAdapter gets a route of its own, serving the adapter; deleting it removes that
//     route only.
//   - After a router restart, a new workload gets its route, the existing route survives
//     as the same object, the only route of its model; deleting the new workload removes its
//     route only.
//   - A second workload of the namespace serves the model: the route stays while either
//     does, and goes with the last, and so does the grant's admission of the Service.
func TestModelRouterLifecycle(t *testing.T) {
	cmds := hooks(t, "E2E_STOP_ROUTER", "E2E_START_ROUTER")
	ctx := ctxFor(t, 6*time.Minute)
	ns := namespace(t)
	model := "e2e-mr-" + suffix()
	backend, routeName := model+"-backend", model+"-router"

	dep := modelDeployment(ns, model, 1)
	dep.Annotations = map[string]string{v1alpha1.ServiceNameAnnotation: backend, v1alpha1.CustomPathsAnnotation: "/score,/version"}
	if err := k8s.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: backend, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{v1alpha1.ModelNameLabel: model},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 8000, TargetPort: intstr.FromInt32(8000)}},
		},
	}
	if err := k8s.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	pods := waitModelPods(t, 90*time.Second, ns, model, 1)
	route := waitModelRoute(t, routeName, backendsAre(ns+"/"+backend+":8000"))
	if err := checkModelRoute(route, model, append(slices.Clone(routeDefaultPaths), "/score", "/version")); err != nil {
		t.Errorf("route %s: %v", routeName, err)
	}
	waitFor(t, 30*time.Second, "a ReferenceGrant admitting Service "+backend, func() (bool, string) {
		return granted(ctx, ns, gatewayNamespace(), backend), fmt.Sprint(grantedServices(t, ns))
	})
	servedThroughGateway(t, routeName, model, pods)

	// A ModelAdapter: its own route, removed alone.
	adapter := "lora-" + suffix()
	a := loraAdapter(ns, adapter, model)
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	adapterRoute := waitModelRoute(t, adapter+"-router", backendsAre(ns+"/"+adapter+":8000"))
	if err := checkModelRoute(adapterRoute, adapter, routeDefaultPaths); err != nil {
		t.Errorf("route %s: %v", adapterRoute.Name, err)
	}
	servedThroughGateway(t, adapterRoute.Name, adapter, pods)
	if err := k8s.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitModelRouteGone(t, adapterRoute.Name)
	if r := getModelRoute(t, routeName); r == nil || r.UID != route.UID {
		t.Fatalf("the model's route was removed or replaced with the adapter's: %+v", r)
	}

	// A router restart: a new workload is routed, the existing route survives.
	shell(t, cmds[0])
	shell(t, cmds[1])
	probe := model + "-probe"
	probeDep := claimant(ns, probe, probe, backend)
	if err := k8s.Create(ctx, probeDep); err != nil {
		t.Fatal(err)
	}
	waitModelRoute(t, probe+"-router", backendsAre(ns+"/"+backend+":8000"))
	if r := getModelRoute(t, routeName); r == nil || r.UID != route.UID {
		t.Fatalf("the route made before the restart was removed or replaced: %+v", r)
	}
	if rs := modelRoutesFor(t, model); len(rs) != 1 {
		t.Errorf("routes matching model %s after the restart: %s, want only %s", model, routeSummary(rs), routeName)
	}
	servedThroughGateway(t, routeName, model, pods)
	if err := k8s.Delete(ctx, probeDep); err != nil {
		t.Fatal(err)
	}
	waitModelRouteGone(t, probe+"-router")

	// A shared model: the route stays while any workload of the namespace serves it. The
	// second workload has a Service of its own, so that the route's backends show the
	// router took the first one's deletion into account.
	secondSvc := model + "-second"
	second := claimant(ns, model+"-second", model, secondSvc)
	if err := k8s.Create(ctx, second); err != nil {
		t.Fatal(err)
	}
	waitModelRoute(t, routeName, backendsAre(ns+"/"+backend+":8000", ns+"/"+secondSvc+":8000"))
	if err := k8s.Delete(ctx, dep); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the route kept, with the second Deployment's Service only", func() (bool, string) {
		r := getModelRoute(t, routeName)
		if r == nil {
			return false, "the route was deleted while the second Deployment serves the model"
		}
		return r.UID == route.UID && backendsAre(ns+"/"+secondSvc+":8000")(r) == nil, fmt.Sprintf("uid %s (was %s), backends %v", r.UID, route.UID, routeBackendList(r))
	})
	if err := k8s.Delete(ctx, second); err != nil {
		t.Fatal(err)
	}
	waitModelRouteGone(t, routeName)
	waitFor(t, 30*time.Second, "no ReferenceGrant admitting the model's Services", func() (bool, string) {
		got := grantedServices(t, ns)
		return !slices.Contains(got, backend) && !slices.Contains(got, secondSvc), strings.Join(got, ",")
	})
}
