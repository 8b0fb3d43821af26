//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/aibrixfixture"
)

// aibrixModel is one model of the fleet the switch-over test builds in AIBrix's shape.
type aibrixModel struct {
	// model is the model name; route the name AIBrix's gateway plugin looks its route up
	// by, worked out by hand from AIBrix's rule (pkg/utils/model_router.go).
	model, route string
	// deployment and service are the workload's and its Service's names; adapter is the
	// LoRA adapter its engines hold from the start.
	deployment, service, adapter string
}

// The fleet: model names with a dot and with capitals (AIBrix's gateway answered 503 for
// both before routes were named by its rule). The names are fixed so that their route names
// can be worked out by hand; leftovers of an interrupted run are removed first.
var aibrixFleet = []aibrixModel{
	{model: "Qwen2.5-7B", route: "qwen2-5-7b-9d7101d42cd9-router", deployment: "qwen", service: "qwen", adapter: "qwen-lora-e2e"},
	{model: "llama-3.1-8b", route: "llama-3.1-8b-router", deployment: "llama", service: "llama", adapter: "llama-lora-e2e"},
}

// fixture converts a rendered AIBrix object into out and creates it.
func fixture(ctx context.Context, t *testing.T, u *unstructured.Unstructured, err error, out client.Object) client.Object {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if err := aibrixfixture.To(u, out); err != nil {
		t.Fatal(err)
	}
	// Written under the field manager of AIBrix's controller-manager, as AIBrix writes them:
	// the router adopts no route and retires no grant that another manager wrote.
	if err := k8s.Create(ctx, out, client.FieldOwner(aibrixfixture.FieldManager)); err != nil {
		t.Fatalf("creating %T %s: %v", out, out.GetName(), err)
	}
	return out
}

// createAIBrixAdapter creates the adapter, then writes its status as AIBrix does (a status
// update after the create).
func createAIBrixAdapter(ctx context.Context, t *testing.T, spec aibrixfixture.Adapter) *v1alpha1.ModelAdapter {
	t.Helper()
	u, err := aibrixfixture.ModelAdapter(spec)
	if err != nil {
		t.Fatal(err)
	}
	ad := &v1alpha1.ModelAdapter{}
	if err := aibrixfixture.To(u, ad); err != nil {
		t.Fatal(err)
	}
	status := *ad.Status.DeepCopy()
	if err := k8s.Create(ctx, ad); err != nil {
		t.Fatal(err)
	}
	ad.Status = status
	for i := range ad.Status.Conditions {
		ad.Status.Conditions[i].LastTransitionTime = metav1.Now()
	}
	if err := k8s.Status().Update(ctx, ad); err != nil {
		t.Fatalf("writing %s's status as AIBrix does: %v", spec.Name, err)
	}
	return ad
}

func reversed(s []string) []string {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

// fleetDeployment is a model Deployment whose engines hold adapter from their start.
func fleetDeployment(ns string, m aibrixModel, replicas int32) *appsv1.Deployment {
	d := modelDeployment(ns, m.model, replicas)
	d.Name = m.deployment
	d.Annotations = map[string]string{v1alpha1.ServiceNameAnnotation: m.service}
	d.Spec.Template.Annotations = map[string]string{preloadAnnotation: m.adapter + "=org/" + m.adapter}
	return d
}

// fleetService is the Service a user's manifest gives the model's pods.
func fleetService(ns string, m aibrixModel) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: m.service, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{v1alpha1.ModelNameLabel: m.model},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 8000, TargetPort: intstr.FromInt32(8000)}},
		},
	}
}

// removeFleetRoutes deletes the fleet's routes in the gateway namespace (left by an
// interrupted run) and waits until they are gone.
func removeFleetRoutes(ctx context.Context, t *testing.T) {
	t.Helper()
	var names []string
	for _, m := range aibrixFleet {
		names = append(names, m.route, m.adapter+"-router")
	}
	for _, name := range names {
		r := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: gatewayNamespace(), Name: name}}
		if err := k8s.Delete(ctx, r); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "the fleet's routes absent", func() (bool, string) {
		for _, name := range names {
			if routeErr(name) == nil {
				return false, name + " still there"
			}
		}
		return true, ""
	})
}

// engineCalls sums the load and unload calls the engines of ns received, by pod.
func engineCalls(t *testing.T, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for key, e := range engines(t) {
		if e.Namespace == ns {
			out[key] = fmt.Sprintf("%d loads, %d unloads", e.Counts.Loads, e.Counts.Unloads)
		}
	}
	return out
}

// requestLog is a client sending requests for models without pause, from before the
// controllers start until the take-over is done: every answer must be a success.
type requestLog struct {
	mu       sync.Mutex
	sent     int
	failures []string
	stop     chan struct{}
	done     chan struct{}
}

func keepRequesting(t *testing.T, models []aibrixModel, adapters bool) *requestLog {
	l := &requestLog{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			m := models[i%len(models)]
			name, route := m.model, m.route
			if adapters && i%2 == 1 {
				name, route = m.adapter, m.adapter+"-router"
			}
			a := viaAIBrixPlugin(t, route, name)
			l.mu.Lock()
			l.sent++
			if !a.ok() {
				l.failures = append(l.failures, fmt.Sprintf("%s at %s: %s", name, time.Now().Format("15:04:05.000"), a))
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { l.end() })
	return l
}

func (l *requestLog) end() (sent int, failures []string) {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent, l.failures
}

// TestSwitchFromAIBrix: a fleet built as AIBrix's controller-manager leaves it — model
// Deployments whose engines already hold their adapters, ModelAdapters with AIBrix's
// finalizer and status, their Services and EndpointSlices, AIBrix's HTTPRoutes and its broad
// ReferenceGrant — is taken over when both controllers start:
//   - no engine gets a load or unload call, every adapter is Running on the same pods;
//   - each model and adapter has exactly one route, named as AIBrix's gateway plugin looks it
//     up (the one AIBrix made, adopted), and AIBrix's grant is replaced by loraplane's;
//   - requests sent as through AIBrix's gateway plugin (route looked up by AIBrix's name,
//     its status checked, header model set) succeed from before the controllers start until
//     the take-over is done, with not one failure, and reach the model's pods, dotted names
//     included;
//   - an adapter created under AIBrix is deleted: unloaded from its pods, both finalizers
//     released, its route gone.
func TestSwitchFromAIBrix(t *testing.T) {
	h := hooks(t, "E2E_STOP_ADAPTER", "E2E_START_ADAPTER", "E2E_STOP_ROUTER", "E2E_START_ROUTER", "E2E_ENGINE_ADMIN")
	stopAdapter, startAdapter, stopRouter, startRouter := h[0], h[1], h[2], h[3]
	ctx := ctxFor(t, 10*time.Minute)
	ns := namespace(t)
	removeFleetRoutes(ctx, t)

	// The fleet as AIBrix leaves it, built while neither controller runs.
	shell(t, stopAdapter)
	shell(t, stopRouter)
	stopped := true
	t.Cleanup(func() {
		if stopped {
			shell(t, startAdapter)
			shell(t, startRouter)
		}
	})
	const replicas = 2
	pods := map[string][]corev1.Pod{}
	for _, m := range aibrixFleet {
		if err := k8s.Create(ctx, fleetService(ns, m)); err != nil {
			t.Fatal(err)
		}
		if err := k8s.Create(ctx, fleetDeployment(ns, m, replicas)); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range aibrixFleet {
		pods[m.model] = waitModelPods(t, 90*time.Second, ns, m.model, replicas)
	}
	for _, m := range aibrixFleet {
		var names, ips []string
		for _, p := range pods[m.model] {
			names = append(names, p.Name)
			ips = append(ips, p.Status.PodIP)
		}
		ad := createAIBrixAdapter(ctx, t, aibrixfixture.Adapter{Name: m.adapter, Namespace: ns, BaseModel: m.model,
			ArtifactURL: "huggingface://org/" + m.adapter, Instances: reversed(names), Candidates: len(names), RetryPods: names[:1]})
		objs := aibrixfixture.AdapterObjects{Name: m.adapter, Namespace: ns, BaseModel: m.model, UID: string(ad.UID), Addresses: ips}
		u, err := aibrixfixture.Service(objs)
		fixture(ctx, t, u, err, &corev1.Service{})
		u, err = aibrixfixture.EndpointSlice(objs)
		fixture(ctx, t, u, err, &discoveryv1.EndpointSlice{})
		for _, r := range []aibrixfixture.Route{
			{Name: m.route, Model: m.model, Namespace: ns, Service: m.service, GatewayNamespace: gatewayNamespace(), Gateway: gatewayName()},
			{Name: m.adapter + "-router", Model: m.adapter, Namespace: ns, Service: m.adapter, GatewayNamespace: gatewayNamespace(), Gateway: gatewayName()},
		} {
			u, err = aibrixfixture.HTTPRoute(r)
			fixture(ctx, t, u, err, &gatewayv1.HTTPRoute{})
		}
	}
	u, err := aibrixfixture.ReferenceGrant(aibrixfixture.Grant{Namespace: ns, GatewayNamespace: gatewayNamespace()})
	aibrixGrant := fixture(ctx, t, u, err, &gatewayv1beta1.ReferenceGrant{})

	// Served under AIBrix's objects first, then kept served throughout the take-over.
	// AIBrix's adapter EndpointSlices carry no endpoint conditions. Envoy Gateway (AIBrix's)
	// and the test's own routing read an unset ready as ready, as the EndpointSlice API says
	// consumers should; Traefik (make e2e) drops such endpoints and answers 503 until
	// loraplane's slice, with ready set, replaces AIBrix's. There the adapters are checked
	// once the take-over is done.
	adaptersBefore := !gatewayNeedsReadyCondition()
	for _, m := range aibrixFleet {
		names := []string{m.model}
		if adaptersBefore {
			names = append(names, m.adapter)
		} else {
			t.Logf("%s: not requested before the switch (the gateway skips endpoints without ready=true, which AIBrix's slices never set)", m.adapter)
		}
		for _, name := range names {
			route := m.route
			if name == m.adapter {
				route = m.adapter + "-router"
			}
			waitFor(t, maxRouteDelay, "a request for "+name+" through the gateway before the switch", func() (bool, string) {
				a := viaAIBrixPlugin(t, route, name)
				return a.ok(), a.String()
			})
		}
	}
	before := engineCalls(t, ns)
	requests := keepRequesting(t, aibrixFleet, adaptersBefore)

	started := time.Now()
	shell(t, startAdapter)
	shell(t, startRouter)
	stopped = false
	t.Logf("both controllers started in %.1f s", time.Since(started).Seconds())

	// Every adapter Running on the pods AIBrix loaded it on, with our finalizer beside AIBrix's.
	for _, m := range aibrixFleet {
		var want []string
		for _, p := range pods[m.model] {
			want = append(want, p.Name)
		}
		slices.Sort(want)
		waitFor(t, 90*time.Second, m.adapter+" Running on the pods AIBrix loaded it on", func() (bool, string) {
			a, err := adapterStatus(ns, m.adapter)
			if err != nil {
				return false, err.Error()
			}
			return a.Status.Phase == v1alpha1.ModelAdapterRunning && slices.Equal(a.Status.Instances, want) &&
					slices.Contains(a.Finalizers, v1alpha1.AIBrixFinalizer) && len(a.Finalizers) == 2,
				fmt.Sprintf("%s %v, finalizers %v", a.Status.Phase, a.Status.Instances, a.Finalizers)
		})
	}
	// One route per model and adapter, AIBrix's, now managed; AIBrix's grant replaced.
	waitFor(t, 90*time.Second, "every route adopted and AIBrix's grant replaced", func() (bool, string) {
		for _, m := range aibrixFleet {
			for _, name := range []string{m.model, m.adapter} {
				want := m.route
				if name == m.adapter {
					want = m.adapter + "-router"
				}
				got := modelRoutesFor(t, name)
				if len(got) != 1 || got[0].Name != want || got[0].Labels["app.kubernetes.io/managed-by"] != "loraplane-router-controller" {
					return false, fmt.Sprintf("routes of %q: %v", name, routeSummary(got))
				}
			}
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(aibrixGrant), &gatewayv1beta1.ReferenceGrant{}); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("AIBrix's grant: %v", err)
		}
		services := grantedServices(t, ns)
		return slices.Equal(services, []string{"llama", "llama-lora-e2e", "qwen", "qwen-lora-e2e"}), fmt.Sprintf("granted %v", services)
	})
	tookOver := time.Since(started)
	sent, failures := requests.end()
	t.Logf("take-over done %.1f s after the start: %d requests through the gateway meanwhile, %d failed", tookOver.Seconds(), sent, len(failures))
	if len(failures) > 0 || sent < 10 {
		t.Fatalf("requests during the take-over: %d sent, failures: %v", sent, head(failures))
	}
	if !adaptersBefore {
		for _, m := range aibrixFleet {
			waitFor(t, maxRouteDelay, "a request for "+m.adapter+" through the gateway after the take-over", func() (bool, string) {
				a := viaAIBrixPlugin(t, m.adapter+"-router", m.adapter)
				return a.ok(), a.String()
			})
		}
		t.Logf("adapters served through the gateway %.1f s after the start", time.Since(started).Seconds())
	}
	if after := engineCalls(t, ns); !maps.Equal(before, after) {
		t.Fatalf("engine load/unload calls during the take-over:\nbefore %v\nafter  %v", before, after)
	}
	// What AIBrix's gateway plugin reads of an adapter: status.instances, the names of the
	// pods that hold it (pods it knows by their model.aibrix.ai/name label).
	es := engines(t)
	for _, m := range aibrixFleet {
		a, err := adapterStatus(ns, m.adapter)
		if err != nil {
			t.Fatal(err)
		}
		var holding []string
		for _, p := range pods[m.model] {
			if slices.Contains(es[ns+"/"+p.Name].Loaded, m.adapter) && p.Labels[v1alpha1.ModelNameLabel] == m.model {
				holding = append(holding, p.Name)
			}
		}
		slices.Sort(holding)
		if !slices.Equal(a.Status.Instances, holding) {
			t.Errorf("%s: status.instances %v, but the pods holding it are %v", m.adapter, a.Status.Instances, holding)
		}
	}

	// The dotted model name, through the gateway, reaches its own pods.
	llama := aibrixFleet[1]
	// Answers name the pod (kind: each pod's engine) or its address (kwok: the host engine).
	var names []string
	for _, p := range pods[llama.model] {
		names = append(names, p.Name, p.Status.PodIP+":8000")
	}
	served := map[string]int{}
	for range 10 {
		a := viaAIBrixPlugin(t, llama.route, llama.model)
		if !a.ok() || a.model != llama.model || !slices.Contains(names, a.servedBy) {
			t.Fatalf("a request for %q: %s (model %q), its pods %v", llama.model, a, a.model, names)
		}
		served[a.servedBy]++
	}
	t.Logf("10 requests for %q through AIBrix's route lookup and the gateway, answered by %v", llama.model, served)

	// An adapter created under AIBrix is deleted: unloaded, both finalizers released.
	deleted := time.Now()
	if err := k8s.Delete(ctx, &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: llama.adapter}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the AIBrix-era adapter gone, unloaded from its pods, its route removed", func() (bool, string) {
		if _, err := adapterStatus(ns, llama.adapter); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("adapter: %v", err)
		}
		for key, e := range engines(t) {
			if e.Namespace == ns && slices.Contains(e.Loaded, llama.adapter) {
				return false, key + " still holds it"
			}
		}
		err := routeErr(llama.adapter + "-router")
		return apierrors.IsNotFound(err), fmt.Sprintf("route: %v", err)
	})
	t.Logf("AIBrix-era adapter %s deleted, unloaded and its route removed in %.1f s", llama.adapter, time.Since(deleted).Seconds())
}

// modelRoutesFor returns the routes of the gateway namespace that match requests for model.
func modelRoutesFor(t *testing.T, model string) []gatewayv1.HTTPRoute {
	t.Helper()
	var list gatewayv1.HTTPRouteList
	if err := k8s.List(context.Background(), &list, client.InNamespace(gatewayNamespace())); err != nil {
		t.Fatal(err)
	}
	var out []gatewayv1.HTTPRoute
	for _, r := range list.Items {
		if routeMatchesModel(&r, model) {
			out = append(out, r)
		}
	}
	return out
}

func routeMatchesModel(r *gatewayv1.HTTPRoute, model string) bool {
	for _, rule := range r.Spec.Rules {
		for _, m := range rule.Matches {
			for _, h := range m.Headers {
				if h.Name == "model" && h.Value == model {
					return true
				}
			}
		}
	}
	return false
}

func routeSummary(rs []gatewayv1.HTTPRoute) string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%s(managed-by=%q)", r.Name, r.Labels["app.kubernetes.io/managed-by"]))
	}
	return strings.Join(out, ", ")
}

// gatewayNeedsReadyCondition tells whether the gateway under test skips EndpointSlice
// endpoints whose conditions.ready is unset: Traefik, the gateway of make e2e (its Kubernetes
// Gateway provider keeps only ready == true), does; the test's own routing does not.
func gatewayNeedsReadyCondition() bool {
	return env("E2E_GATEWAY_URL", "") != "" && gatewayController() == "traefik.io/gateway-controller"
}

// viaAIBrixPlugin sends a completion for model as AIBrix's gateway plugin forwards it: the
// plugin looks the model's route up by name (route, AIBrix's name for the model) in the
// gateway namespace and answers 503 when it is missing or its status says it is not
// accepted (judged by condition reason: Accepted and ResolvedRefs, as the plugin does), then
// sets the header model and lets the gateway route. The gateway is E2E_GATEWAY_URL (make
// e2e: Traefik), else the test's own routing of Gateway API objects (make e2e-local, which
// runs no gateway).
func viaAIBrixPlugin(t *testing.T, route, model string) gwAnswer {
	r := &gatewayv1.HTTPRoute{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: gatewayNamespace(), Name: route}, r); err != nil {
		return gwAnswer{status: http.StatusServiceUnavailable, body: fmt.Sprintf("httproute %s/%s: %v", gatewayNamespace(), route, err)}
	}
	for _, p := range r.Status.Parents {
		if len(p.Conditions) == 0 {
			return gwAnswer{status: http.StatusServiceUnavailable, body: "httproute " + route + " does not have valid status"}
		}
		for _, c := range p.Conditions {
			if (c.Type == "Accepted" && c.Reason != "Accepted") || (c.Type == "ResolvedRefs" && c.Reason != "ResolvedRefs") {
				return gwAnswer{status: http.StatusServiceUnavailable, body: fmt.Sprintf("httproute %s: %s %s", route, c.Type, c.Reason)}
			}
		}
	}
	if gw := env("E2E_GATEWAY_URL", ""); gw != "" {
		return complete(strings.TrimSuffix(gw, "/"), "/v1/completions", model)
	}
	return localGateway(t, "/v1/completions", model)
}
