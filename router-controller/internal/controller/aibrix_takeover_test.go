package controller_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/loraplane/loraplane/router-controller/internal/controller"
	"github.com/loraplane/loraplane/router-controller/internal/routes"
	"github.com/loraplane/loraplane/router-controller/internal/setup"
	"github.com/loraplane/loraplane/test/aibrixfixture"
	"github.com/loraplane/loraplane/test/testenv"
)

// The tests of the switch-over from AIBrix: AIBrix's objects are written as its
// controller-manager writes them (package aibrixfixture), then the router starts.

// Model names and the route names AIBrix's gateway plugin looks up for them, worked out by
// hand from AIBrix's rule (see routes.TestRouteName).
const (
	qwenModel = "Qwen2.5-7B"
	qwenRoute = "qwen2-5-7b-9d7101d42cd9-router"
)

// createFixture creates a rendered AIBrix object as out (a typed object) and returns it,
// written under the field manager of AIBrix's controller-manager.
func createFixture[T client.Object](t *testing.T, u *unstructured.Unstructured, err error, out T) T {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if err := aibrixfixture.To(u, out); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(context.Background(), out, client.FieldOwner(aibrixfixture.FieldManager)); err != nil {
		t.Fatalf("creating %T %s/%s: %v", out, out.GetNamespace(), out.GetName(), err)
	}
	return out
}

// noAIBrixCheck runs the router without reading any AIBrix Lease.
func noAIBrixCheck(o *setup.Options) { o.AIBrixControllerLeases = nil }

// streamLog keeps, in order, what a watch independent of the router saw of one kind, after
// the objects listed when it started.
type streamLog struct {
	mu      sync.Mutex
	initial []client.Object
	events  []watch.Event
}

func watchStream(t *testing.T, list client.ObjectList, opts ...client.ListOption) *streamLog {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := wc.List(ctx, list, opts...); err != nil {
		t.Fatalf("listing: %v", err)
	}
	l := &streamLog{}
	if err := meta.EachListItem(list, func(o runtime.Object) error {
		l.initial = append(l.initial, o.(client.Object))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	opts = append(opts, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.GetResourceVersion()}})
	w, err := wc.Watch(ctx, list, opts...)
	if err != nil {
		t.Fatalf("watching: %v", err)
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			l.mu.Lock()
			l.events = append(l.events, ev)
			l.mu.Unlock()
		}
	}()
	return l
}

// holds replays the events in order and checks, after each, that the objects existing then
// satisfy ok; it returns how many events were replayed, or the first violation.
func (l *streamLog) holds(ok func(objs map[string]client.Object) error) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	state := map[string]client.Object{}
	for _, o := range l.initial {
		state[o.GetName()] = o
	}
	if err := ok(state); err != nil {
		return 0, fmt.Errorf("before any event: %w", err)
	}
	for i, ev := range l.events {
		obj, isObj := ev.Object.(client.Object)
		if !isObj {
			continue
		}
		switch ev.Type {
		case watch.Added, watch.Modified:
			state[obj.GetName()] = obj
		case watch.Deleted:
			delete(state, obj.GetName())
		default:
			continue
		}
		if err := ok(state); err != nil {
			names := slices.Sorted(func(yield func(string) bool) {
				for n := range state {
					if !yield(n) {
						return
					}
				}
			})
			return i, fmt.Errorf("after event %d (%s %s): %w; objects then: %v", i+1, ev.Type, obj.GetName(), err, names)
		}
	}
	return len(l.events), nil
}

// serviceAdmitted is a streamLog check: some grant admits svc (by name, or every Service).
func serviceAdmitted(svc string) func(map[string]client.Object) error {
	return func(objs map[string]client.Object) error {
		for _, o := range objs {
			g := o.(*gatewayv1beta1.ReferenceGrant)
			for _, to := range g.Spec.To {
				if to.Kind == "Service" && (to.Name == nil || string(*to.Name) == svc) {
					return nil
				}
			}
		}
		return fmt.Errorf("no ReferenceGrant admits Service %s", svc)
	}
}

// modelRouted is a streamLog check: some route matches requests for model.
func modelRouted(model string) func(map[string]client.Object) error {
	return func(objs map[string]client.Object) error {
		if len(routesFor(objs, model)) == 0 {
			return fmt.Errorf("no HTTPRoute matches model %q", model)
		}
		return nil
	}
}

// routesFor returns the names of the routes that match some request for model.
func routesFor(objs map[string]client.Object, model string) []string {
	var out []string
	for name, o := range objs {
		r := o.(*gatewayv1.HTTPRoute)
		for _, rule := range r.Spec.Rules {
			for _, m := range rule.Matches {
				for _, h := range m.Headers {
					if h.Name == routes.ModelHeader && h.Value == model {
						out = append(out, name)
					}
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// routesMatching lists the routes of gw and returns those matching requests for model.
func routesMatching(t *testing.T, gw, model string) []string {
	t.Helper()
	var list gatewayv1.HTTPRouteList
	if err := k8s.List(context.Background(), &list, client.InNamespace(gw)); err != nil {
		t.Fatal(err)
	}
	objs := map[string]client.Object{}
	for i := range list.Items {
		objs[list.Items[i].Name] = &list.Items[i]
	}
	return routesFor(objs, model)
}

func takeOvers(t *testing.T, object string) float64 {
	t.Helper()
	n, err := testenv.MetricSum("loraplane_aibrix_takeovers_total", map[string]string{"object": object})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func getGrant(t *testing.T, ns, name string) *gatewayv1beta1.ReferenceGrant {
	t.Helper()
	g := &gatewayv1beta1.ReferenceGrant{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, g); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil
		}
		t.Fatal(err)
	}
	return g
}

// TestAIBrixRouteAndGrantTakenOver: a model served under AIBrix (its Deployment, the route
// and the broad ReferenceGrant AIBrix's model router made) is taken over when the router
// starts: the route is adopted in place (same object, our labels and spec, a RouteAdopted
// event), a port change reaches it, no second route matches the model, and AIBrix's grant is
// deleted once ours admits the Service, with the Service admitted at every moment (a watch
// independent of the router replays every grant write).
func TestAIBrixRouteAndGrantTakenOver(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	if got := routes.RouteName(qwenModel); got != qwenRoute {
		t.Fatalf("RouteName(%q) = %q, AIBrix's gateway looks up %q", qwenModel, got, qwenRoute)
	}
	d := createDeployment(t, ns, "qwen", modelLabels(qwenModel, portKey, "8000"), map[string]string{svcKey: "qwen"})
	u, err := aibrixfixture.HTTPRoute(aibrixfixture.Route{Name: qwenRoute, Model: qwenModel, Namespace: ns, Service: "qwen", Port: 8000, GatewayNamespace: gw})
	made := createFixture(t, u, err, &gatewayv1.HTTPRoute{})
	u, err = aibrixfixture.ReferenceGrant(aibrixfixture.Grant{Namespace: ns, GatewayNamespace: gw})
	aibrixGrant := createFixture(t, u, err, &gatewayv1beta1.ReferenceGrant{})
	grants := watchStream(t, &gatewayv1beta1.ReferenceGrantList{}, client.InNamespace(ns))
	routeLog := watchStream(t, &gatewayv1.HTTPRouteList{}, client.InNamespace(gw))
	routesBefore, grantsBefore := takeOvers(t, "httproute"), takeOvers(t, "referencegrant")

	startRouter(t, env.Config, gw, []string{ns}, noAIBrixCheck)
	route := waitRoute(t, gw, qwenModel, func(r *gatewayv1.HTTPRoute) error {
		if !routes.IsManaged(r) {
			return errors.New("not adopted yet")
		}
		return wantBackends("0:" + ns + "/qwen:8000")(r)
	})
	if route.UID != made.UID {
		t.Fatalf("route %s was re-created (uid %s), not adopted (uid %s)", route.Name, route.UID, made.UID)
	}
	if err := checkShape(route, gw, qwenModel, routes.DefaultPaths); err != nil {
		t.Errorf("adopted route: %v", err)
	}
	// The event says what adoption changed: here only loraplane's labels and annotations,
	// AIBrix's paths, backend and timeout being the router's.
	if e := waitEvent(t, ns, "qwen", controller.ReasonRouteAdopted); e.Type != "Normal" || !strings.Contains(e.Note, qwenRoute) ||
		!strings.Contains(e.Note, "labels added: app.kubernetes.io/managed-by=loraplane-router-controller") ||
		strings.Contains(e.Note, "paths") || strings.Contains(e.Note, "backends") || strings.Contains(e.Note, "timeout") {
		t.Errorf("RouteAdopted event: %s %q, want a Normal event naming the route and the labels added, nothing else of its routing", e.Type, e.Note)
	}
	if n := takeOvers(t, "httproute") - routesBefore; n != 1 {
		t.Errorf("loraplane_aibrix_takeovers_total{object=httproute} grew by %v, want 1", n)
	}

	// From now on it is ours: a port change reaches it, and it stays the only route.
	patchMeta(t, d, map[string]*string{portKey: ptr.To("8002")}, nil)
	waitRoute(t, gw, qwenModel, wantBackends("0:"+ns+"/qwen:8002"))
	if got := routesMatching(t, gw, qwenModel); !slices.Equal(got, []string{qwenRoute}) {
		t.Errorf("routes matching model %q: %v, want only %s", qwenModel, got, qwenRoute)
	}

	// AIBrix's grant goes once ours admits the Service; never a moment without.
	waitGrant(t, gw, ns, "qwen")
	eventually(t, "AIBrix's ReferenceGrant deleted", func() error {
		if g := getGrant(t, ns, aibrixGrant.Name); g != nil {
			return fmt.Errorf("still there (uid %s)", g.UID)
		}
		return nil
	})
	waitEvent(t, ns, aibrixGrant.Name, controller.ReasonAIBrixGrantRemoved)
	if n := takeOvers(t, "referencegrant") - grantsBefore; n != 1 {
		t.Errorf("loraplane_aibrix_takeovers_total{object=referencegrant} grew by %v, want 1", n)
	}
	n, err := grants.holds(serviceAdmitted("qwen"))
	if err != nil {
		t.Fatalf("Service qwen not admitted at some moment of the take-over: %v", err)
	}
	if n < 2 {
		t.Fatalf("the grant watch saw %d events, want at least the creation of ours and the deletion of AIBrix's", n)
	}
	if _, err := routeLog.holds(func(objs map[string]client.Object) error {
		if got := routesFor(objs, qwenModel); len(got) != 1 {
			return fmt.Errorf("routes matching the model: %v, want exactly one", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestAIBrixGrantKeptForForeignRoutes: AIBrix's grant stays while a route loraplane does
// not manage (here one of another Gateway) sends to a Service of the namespace that
// loraplane's grants do not admit, as a backend or as the target of a RequestMirror filter:
// a Warning event on the grant and loraplane_aibrix_grants_kept say so. Once those routes
// are gone, the grant is deleted.
func TestAIBrixGrantKeptForForeignRoutes(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	createDeployment(t, ns, "qwen", modelLabels(qwenModel), map[string]string{svcKey: "qwen"})
	u, err := aibrixfixture.HTTPRoute(aibrixfixture.Route{Name: qwenRoute, Model: qwenModel, Namespace: ns, Service: "qwen", GatewayNamespace: gw})
	createFixture(t, u, err, &gatewayv1.HTTPRoute{})
	u, err = aibrixfixture.HTTPRoute(aibrixfixture.Route{Name: "legacy-app", Model: "legacy-app", Namespace: ns, Service: "legacy-app",
		GatewayNamespace: gw, Gateway: "internal"})
	foreign := createFixture(t, u, err, &gatewayv1.HTTPRoute{})
	// A route whose backend is in the gateway namespace, mirroring its requests to ns.
	u, err = aibrixfixture.HTTPRoute(aibrixfixture.Route{Name: "mirror-app", Model: "mirror-app", Namespace: gw, Service: "mirror-app",
		GatewayNamespace: gw, Gateway: "internal"})
	mirror := &gatewayv1.HTTPRoute{}
	if err == nil {
		err = aibrixfixture.To(u, mirror)
	}
	if err != nil {
		t.Fatal(err)
	}
	mirror.Spec.Rules[0].Filters = []gatewayv1.HTTPRouteFilter{{Type: gatewayv1.HTTPRouteFilterRequestMirror,
		RequestMirror: &gatewayv1.HTTPRequestMirrorFilter{BackendRef: gatewayv1.BackendObjectReference{
			Name: "shadow", Namespace: ptr.To(gatewayv1.Namespace(ns)), Port: ptr.To[gatewayv1.PortNumber](8000)}}}}
	if err := k8s.Create(context.Background(), mirror); err != nil {
		t.Fatal(err)
	}
	u, err = aibrixfixture.ReferenceGrant(aibrixfixture.Grant{Namespace: ns, GatewayNamespace: gw})
	aibrixGrant := createFixture(t, u, err, &gatewayv1beta1.ReferenceGrant{})

	startRouter(t, env.Config, gw, []string{ns}, noAIBrixCheck)
	waitRoute(t, gw, qwenModel, func(r *gatewayv1.HTTPRoute) error {
		if !routes.IsManaged(r) {
			return errors.New("not adopted yet")
		}
		return nil
	})
	waitGrant(t, gw, ns, "qwen")
	e := waitEvent(t, ns, aibrixGrant.Name, controller.ReasonAIBrixGrantKept)
	if e.Type != "Warning" || !strings.Contains(e.Note, "legacy-app (HTTPRoute legacy-app)") || !strings.Contains(e.Note, "shadow (HTTPRoute mirror-app)") {
		t.Errorf("AIBrixGrantKept event: %s %q, want a Warning naming the Services and the routes, the mirrored one too", e.Type, e.Note)
	}
	eventually(t, "loraplane_aibrix_grants_kept = 1", func() error {
		if v, _ := gaugeValue(t, "loraplane_aibrix_grants_kept", nil); v != 1 {
			return fmt.Errorf("it is %v", v)
		}
		return nil
	})
	if getGrant(t, ns, aibrixGrant.Name) == nil {
		t.Fatal("AIBrix's grant was deleted while a route it admits is not admitted by ours")
	}

	deleteObject(t, foreign)
	deleteObject(t, mirror)
	eventually(t, "AIBrix's ReferenceGrant deleted once no foreign route needs it", func() error {
		if g := getGrant(t, ns, aibrixGrant.Name); g != nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
	eventually(t, "loraplane_aibrix_grants_kept back to 0", func() error {
		if v, _ := gaugeValue(t, "loraplane_aibrix_grants_kept", nil); v != 0 {
			return fmt.Errorf("it is %v", v)
		}
		return nil
	})
}

// legacyRoute creates the route of model as earlier releases wrote it (under
// routes.LegacyRouteName) for the Deployment ns/name.
func legacyRoute(t *testing.T, gw, ns, name, model string) *gatewayv1.HTTPRoute {
	t.Helper()
	o := setup.NewOptions()
	o.GatewayNamespace = gw
	r, err := routes.BuildRoute(o.RoutesConfig(), model, []routes.Source{{Kind: "Deployment", Namespace: ns, Name: name, Model: model, Service: name, Port: 8000}})
	if err != nil {
		t.Fatal(err)
	}
	r.Name = routes.LegacyRouteName(model)
	if err := k8s.Create(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestLegacyRouteReplacedWithoutGap: routes created under the earlier naming rule are
// replaced by routes named as AIBrix's gateway looks them up, the new one created first:
//   - where the Gateway judged the old route Accepted, the old one stays until the Gateway
//     accepts the new one (proved after a reconcile of the model), then goes;
//   - where the Gateway judges neither, the old one goes once the new one exists.
//
// A watch independent of the router proves that each model matched a route at every moment.
func TestLegacyRouteReplacedWithoutGap(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	const (
		judged, judgedRoute     = "Llama-3.1-8B-Instruct", "llama-3-1-8b-instruct-f9b45bd93750-router"
		unjudged, unjudgedRoute = "llama-3.1-8b", "llama-3.1-8b-router"
	)
	oldJudged := legacyRoute(t, gw, ns, "llama-instruct", judged)
	writeGatewayStatus(t, oldJudged, metav1.ConditionTrue, "ResolvedRefs", "Resolved")
	oldUnjudged := legacyRoute(t, gw, ns, "llama", unjudged)
	if oldJudged.Name == judgedRoute || oldUnjudged.Name == unjudgedRoute {
		t.Fatalf("legacy names %s, %s are the new ones", oldJudged.Name, oldUnjudged.Name)
	}
	instruct := createDeployment(t, ns, "llama-instruct", modelLabels(judged), map[string]string{svcKey: "llama-instruct"})
	createDeployment(t, ns, "llama", modelLabels(unjudged), map[string]string{svcKey: "llama"})
	routeLog := watchStream(t, &gatewayv1.HTTPRouteList{}, client.InNamespace(gw))

	startRouter(t, env.Config, gw, []string{ns}, noAIBrixCheck)
	for model, name := range map[string]string{judged: judgedRoute, unjudged: unjudgedRoute} {
		if r := waitRoute(t, gw, model, nil); r.Name != name {
			t.Fatalf("route of %q is %s, want %s", model, r.Name, name)
		}
	}
	eventually(t, "the unjudged legacy route deleted", func() error {
		if getRoute(t, gw, oldUnjudged.Name) != nil {
			return errors.New("still there")
		}
		return nil
	})
	waitEvent(t, ns, "llama", controller.ReasonRouteRenamed)

	// The judged model is reconciled again after its new route exists; the old route stays,
	// since the Gateway accepts it and has not judged the new one.
	touchAndWaitReconcile(t, instruct)
	if getRoute(t, gw, oldJudged.Name) == nil {
		t.Fatal("the accepted legacy route was deleted before the Gateway judged its replacement")
	}
	writeGatewayStatus(t, getRoute(t, gw, judgedRoute), metav1.ConditionTrue, "ResolvedRefs", "Resolved")
	eventually(t, "the judged legacy route deleted once its replacement is accepted", func() error {
		if getRoute(t, gw, oldJudged.Name) != nil {
			return errors.New("still there")
		}
		return nil
	})
	waitEvent(t, ns, "llama-instruct", controller.ReasonRouteRenamed)

	for _, model := range []string{judged, unjudged} {
		if _, err := routeLog.holds(modelRouted(model)); err != nil {
			t.Errorf("model %q: %v", model, err)
		}
		if got := routesMatching(t, gw, model); len(got) != 1 {
			t.Errorf("routes matching %q: %v, want one", model, got)
		}
	}
}

// TestRouteNameCollision: "Qwen2.5-7B" and "qwen2-5-7b-9d7101d42cd9" have the same route name
// under AIBrix's rule. The route stays with the model that has it, the other model's
// workload gets a RouteConflict event; once the first model's workload is gone, the route
// serves the second.
func TestRouteNameCollision(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	const verbatim = "qwen2-5-7b-9d7101d42cd9"
	if routes.RouteName(verbatim) != routes.RouteName(qwenModel) {
		t.Fatalf("no collision: %s, %s", routes.RouteName(verbatim), routes.RouteName(qwenModel))
	}
	startRouter(t, env.Config, gw, []string{ns}, noAIBrixCheck)
	first := createDeployment(t, ns, "qwen", modelLabels(qwenModel), map[string]string{svcKey: "qwen"})
	waitRoute(t, gw, qwenModel, wantBackends("0:"+ns+"/qwen:8000"))
	createDeployment(t, ns, "verbatim", modelLabels(verbatim), map[string]string{svcKey: "verbatim"})
	if e := waitEvent(t, ns, "verbatim", controller.ReasonRouteConflict); !strings.Contains(e.Note, `it routes model "Qwen2.5-7B"`) {
		t.Errorf("RouteConflict note %q", e.Note)
	}
	if r := getRoute(t, gw, qwenRoute); routes.ModelOf(r) != qwenModel {
		t.Fatalf("the route was taken from %q: it serves %q", qwenModel, routes.ModelOf(r))
	}
	deleteObject(t, first)
	waitRoute(t, gw, verbatim, func(r *gatewayv1.HTTPRoute) error {
		if routes.ModelOf(r) != verbatim {
			return fmt.Errorf("serves %q", routes.ModelOf(r))
		}
		return wantBackends("0:" + ns + "/verbatim:8000")(r)
	})
}

// aibrixLease plays AIBrix's controller-manager: it holds the Lease and renews it every
// 300 ms until released, when it clears the holder as a released lease does.
type aibrixLease struct {
	key     client.ObjectKey
	stop    chan struct{}
	stopped chan struct{}
}

func holdAIBrixLease(t *testing.T) *aibrixLease {
	t.Helper()
	ns := newNamespace(t, "aibrix")
	u, err := aibrixfixture.ControllerManagerLease(aibrixfixture.Lease{Namespace: ns, Holder: "aibrix-controller-manager-7d9f8-qx2lp_1b2c", Renewed: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	lease := createFixture(t, u, nil, &coordinationv1.Lease{})
	l := &aibrixLease{key: client.ObjectKeyFromObject(lease), stop: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(l.stopped)
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-tick.C:
				_ = l.update(func(cur *coordinationv1.Lease) { cur.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()} })
			}
		}
	}()
	t.Cleanup(func() { l.release(t) })
	return l
}

func (l *aibrixLease) update(f func(*coordinationv1.Lease)) error {
	cur := &coordinationv1.Lease{}
	if err := k8s.Get(context.Background(), l.key, cur); err != nil {
		return err
	}
	f(cur)
	return k8s.Update(context.Background(), cur)
}

// release stops renewing and clears the holder (idempotent).
func (l *aibrixLease) release(t *testing.T) {
	t.Helper()
	select {
	case <-l.stop:
		return
	default:
	}
	close(l.stop)
	<-l.stopped
	if err := l.update(func(cur *coordinationv1.Lease) { cur.Spec.HolderIdentity = ptr.To("") }); err != nil {
		t.Errorf("releasing the AIBrix lease: %v", err)
	}
}

// TestTakeOverWaitsForAIBrix: while AIBrix's controller-manager renews its Lease, the route
// AIBrix made is not adopted and its grant not removed: a Warning event AIBrixRunning on the
// workload and loraplane_aibrix_controller_running=1 say why. Once the Lease is released,
// the take-over happens.
func TestTakeOverWaitsForAIBrix(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	lease := holdAIBrixLease(t)
	createDeployment(t, ns, "qwen", modelLabels(qwenModel), map[string]string{svcKey: "qwen"})
	u, err := aibrixfixture.HTTPRoute(aibrixfixture.Route{Name: qwenRoute, Model: qwenModel, Namespace: ns, Service: "qwen", GatewayNamespace: gw})
	made := createFixture(t, u, err, &gatewayv1.HTTPRoute{})
	u, err = aibrixfixture.ReferenceGrant(aibrixfixture.Grant{Namespace: ns, GatewayNamespace: gw})
	aibrixGrant := createFixture(t, u, err, &gatewayv1beta1.ReferenceGrant{})

	startRouter(t, env.Config, gw, []string{ns}, func(o *setup.Options) {
		o.AIBrixControllerLeases = []string{lease.key.String()}
		o.AIBrixCheckPeriod = 200 * time.Millisecond
	})
	e := waitEvent(t, ns, "qwen", controller.ReasonAIBrixRunning)
	if e.Type != "Warning" || !strings.Contains(e.Note, lease.key.String()+" is held by aibrix-controller-manager-7d9f8-qx2lp_1b2c") {
		t.Errorf("AIBrixRunning event: %s %q, want a Warning naming the Lease and its holder", e.Type, e.Note)
	}
	if v, _ := gaugeValue(t, "loraplane_aibrix_controller_running", map[string]string{"controller": setup.ControllerName}); v != 1 {
		t.Errorf("loraplane_aibrix_controller_running = %v, want 1", v)
	}
	// The event proves the model was reconciled with AIBrix running: nothing was taken.
	if r := getRoute(t, gw, qwenRoute); r.ResourceVersion != made.ResourceVersion || routes.IsManaged(r) {
		t.Fatalf("the route AIBrix made was changed while AIBrix runs: %+v", r.ObjectMeta)
	}
	if getGrant(t, ns, aibrixGrant.Name) == nil {
		t.Fatal("AIBrix's grant was deleted while AIBrix runs")
	}

	lease.release(t)
	waitRoute(t, gw, qwenModel, func(r *gatewayv1.HTTPRoute) error {
		if !routes.IsManaged(r) {
			return errors.New("not adopted yet")
		}
		return nil
	})
	eventually(t, "AIBrix's grant deleted after AIBrix stopped", func() error {
		if getGrant(t, ns, aibrixGrant.Name) != nil {
			return errors.New("still there")
		}
		return nil
	})
	if v, _ := gaugeValue(t, "loraplane_aibrix_controller_running", map[string]string{"controller": setup.ControllerName}); v != 0 {
		t.Errorf("loraplane_aibrix_controller_running = %v after the release, want 0", v)
	}
}
