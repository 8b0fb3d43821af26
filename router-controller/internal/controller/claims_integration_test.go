package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
	"github.com/loraplane/loraplane/router-controller/internal/setup"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// consistently checks cond every 100ms for d and fails at the first error.
func consistently(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if err := cond(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

func createNamedAdapter(t *testing.T, ns, name string) *v1alpha1.ModelAdapter {
	t.Helper()
	a := &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ModelAdapterSpec{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{nameKey: "base"}},
			ArtifactURL: "huggingface://org/lora",
		},
	}
	if err := k8s.Create(context.Background(), a); err != nil {
		t.Fatalf("creating ModelAdapter %s/%s: %v", ns, name, err)
	}
	return a
}

// TestClaimsStayInTheFirstNamespace: a model is served from the namespace that claimed it
// first. A Deployment of another namespace labelled with the same model, and a ModelAdapter
// named like it elsewhere, get no backend, no ReferenceGrant, and a ClaimRefused event; when
// the first namespace stops claiming the model, the next oldest claimant's namespace gets it.
func TestClaimsStayInTheFirstNamespace(t *testing.T) {
	needEnv(t)
	gw, ns1, ns2, ns3 := newNamespace(t, "gw"), newNamespace(t, "team-a"), newNamespace(t, "team-b"), newNamespace(t, "team-c")
	startRouter(t, env.Config, gw, []string{ns1, ns2, ns3})
	model := "llama-" + ns1

	d1 := createDeployment(t, ns1, "engine", modelLabels(model), nil)
	waitRoute(t, gw, model, wantBackends(fmt.Sprintf("0:%s/%s:8000", ns1, model)))
	waitGrant(t, gw, ns1, model)

	createDeployment(t, ns2, "intruder", modelLabels(model), nil)
	time.Sleep(time.Second) // ns2's claim is older than ns3's, by more than the timestamps' second
	createNamedAdapter(t, ns3, model)
	waitEvent(t, ns2, "intruder", "ClaimRefused")
	waitEvent(t, ns3, model, "ClaimRefused")
	consistently(t, 2*time.Second, "the route of the first namespace", func() error {
		if err := wantBackends(fmt.Sprintf("0:%s/%s:8000", ns1, model))(getRoute(t, gw, routes.RouteName(model))); err != nil {
			return err
		}
		if got := grantServices(t, gw, ns2); len(got) > 0 {
			return fmt.Errorf("a ReferenceGrant in %s admits %v", ns2, got)
		}
		if got := grantServices(t, gw, ns3); len(got) > 0 {
			return fmt.Errorf("a ReferenceGrant in %s admits %v", ns3, got)
		}
		return nil
	})
	if v, _ := gaugeValue(t, "loraplane_route_refused_claims", nil); v < 2 {
		t.Errorf("loraplane_route_refused_claims = %v, want at least 2", v)
	}

	deleteObject(t, d1)
	waitRoute(t, gw, model, wantBackends(fmt.Sprintf("0:%s/%s:8000", ns2, model)))
	waitGrant(t, gw, ns2, model)
	waitGrant(t, gw, ns1)
	if got := grantServices(t, gw, ns3); len(got) > 0 {
		t.Errorf("a ReferenceGrant in %s admits %v", ns3, got)
	}
}

// TestCrossNamespaceClaimsOptIn: with --allow-cross-namespace-claims every namespace that
// claims a model is served, and custom paths beyond one rule split across rules with the
// same backends.
func TestCrossNamespaceClaimsOptIn(t *testing.T) {
	needEnv(t)
	gw, ns1, ns2 := newNamespace(t, "gw"), newNamespace(t, "src"), newNamespace(t, "src")
	startRouter(t, env.Config, gw, []string{ns1, ns2}, func(o *setup.Options) { o.CrossNamespaceClaims = true })
	model := "Org/Shared-" + ns1

	d1 := createDeployment(t, ns1, "engine", nil, map[string]string{nameKey: model, svcKey: "shared-svc"})
	d2 := createDeployment(t, ns2, "engine", map[string]string{portKey: "8001"}, map[string]string{nameKey: model, svcKey: "shared-svc"})
	both := []string{"0:" + ns1 + "/shared-svc:8000", "0:" + ns2 + "/shared-svc:8001"}
	slices.Sort(both)
	route := waitRoute(t, gw, model, wantBackends(both...))
	if !strings.HasPrefix(route.Name, "org-shared-") || routes.ModelOf(route) != model {
		t.Errorf("route %q of model %q: not the normalised, hashed name or not this model", route.Name, routes.ModelOf(route))
	}
	waitGrant(t, gw, ns1, "shared-svc")
	waitGrant(t, gw, ns2, "shared-svc")

	var custom []string
	for i := range 60 {
		custom = append(custom, fmt.Sprintf("/v1/custom-%02d", i))
	}
	patchMeta(t, d1, nil, map[string]*string{pathsKey: ptr.To(strings.Join(custom, ","))})
	waitRoute(t, gw, model, func(r *gatewayv1.HTTPRoute) error {
		if len(r.Spec.Rules) != 2 {
			return fmt.Errorf("%d rules, want 2", len(r.Spec.Rules))
		}
		return wantBackends(both[0], both[1], "1"+both[0][1:], "1"+both[1][1:])(r)
	})
	deleteObject(t, d2)
	waitRoute(t, gw, model, wantBackends("0:"+ns1+"/shared-svc:8000", "1:"+ns1+"/shared-svc:8000"))
	waitGrant(t, gw, ns2)
}

// TestRoutersWithSeparateViews: two routers share a gateway namespace, each watching its
// own source namespace (two namespaced installs); a third is for another Gateway. None
// writes the others' routes or grants; a claim of a model another router serves is refused
// or reported, never taken; and a router whose view no longer covers a route's sources
// (narrowed --watch-namespace) keeps the route.
func TestRoutersWithSeparateViews(t *testing.T) {
	needEnv(t)
	gw, nsA, nsB, nsC := newNamespace(t, "gw"), newNamespace(t, "team-a"), newNamespace(t, "team-b"), newNamespace(t, "team-c")
	routerA := startRouter(t, env.Config, gw, []string{nsA})
	startRouter(t, env.Config, gw, []string{nsB})
	startRouter(t, env.Config, gw, []string{nsC}, func(o *setup.Options) { o.GatewayName = "other-gateway" })
	modelA, modelB, modelC := "a-"+nsA, "b-"+nsB, "c-"+nsC

	createDeployment(t, nsA, "engine", modelLabels(modelA), nil)
	createDeployment(t, nsB, "engine", modelLabels(modelB), nil)
	createDeployment(t, nsC, "engine", modelLabels(modelC), nil)
	routeA := waitRoute(t, gw, modelA, wantBackends(fmt.Sprintf("0:%s/%s:8000", nsA, modelA)))
	routeB := waitRoute(t, gw, modelB, wantBackends(fmt.Sprintf("0:%s/%s:8000", nsB, modelB)))
	waitRoute(t, gw, modelC, func(r *gatewayv1.HTTPRoute) error {
		if got := r.Spec.ParentRefs[0].Name; got != "other-gateway" {
			return fmt.Errorf("parent %s, want other-gateway", got)
		}
		return nil
	})
	waitGrant(t, gw, nsA, modelA)
	waitGrant(t, gw, nsB, modelB)

	// The same model claimed from team-b after team-a: team-b's router does not take it.
	shared := "shared-" + nsA
	createDeployment(t, nsA, "shared", modelLabels(shared), nil)
	sharedRoute := waitRoute(t, gw, shared, wantBackends(fmt.Sprintf("0:%s/%s:8000", nsA, shared)))
	createDeployment(t, nsB, "shared", modelLabels(shared), nil)
	waitEvent(t, nsB, "shared", "ClaimRefused")

	unchanged := func(want *gatewayv1.HTTPRoute) func() error {
		return func() error {
			got := getRoute(t, gw, want.Name)
			switch {
			case got == nil:
				return fmt.Errorf("HTTPRoute %s was deleted", want.Name)
			case got.Generation != want.Generation || got.Spec.ParentRefs[0].Name != want.Spec.ParentRefs[0].Name:
				return fmt.Errorf("HTTPRoute %s was rewritten: generation %d → %d, parent %s", want.Name, want.Generation, got.Generation, got.Spec.ParentRefs[0].Name)
			}
			return nil
		}
	}
	consistently(t, 3*time.Second, "each router keeps to its own routes", func() error {
		for _, r := range []*gatewayv1.HTTPRoute{routeA, routeB, sharedRoute} {
			if err := unchanged(r)(); err != nil {
				return err
			}
		}
		return nil
	})
	waitGrant(t, gw, nsA, modelA, shared)
	waitGrant(t, gw, nsB, modelB)

	// Narrow team-a's router to the gateway namespace alone: its routes stay.
	routerA.stop()
	startRouter(t, env.Config, gw, nil, func(o *setup.Options) { o.WatchNamespaces = []string{gw} })
	waitEvent(t, gw, routeA.Name, "RouteOutsideView")
	consistently(t, 2*time.Second, "routes outside the narrowed view", unchanged(routeA))
	waitGrant(t, gw, nsA, modelA, shared)
}

// TestLiveRouteKeptWhileClaimed: a typo that makes the only claimant unroutable (a Service
// name that cannot be one) keeps the live route as it is, reported, until it is fixed.
func TestLiveRouteKeptWhileClaimed(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	startRouter(t, env.Config, gw, []string{ns})
	model := "kept-" + ns
	d := createDeployment(t, ns, "engine", modelLabels(model), nil)
	route := waitRoute(t, gw, model, wantBackends(fmt.Sprintf("0:%s/%s:8000", ns, model)))

	patchMeta(t, d, nil, map[string]*string{svcKey: ptr.To("Not_A_Service")})
	waitEvent(t, ns, "engine", "RouteInvalid")
	consistently(t, 2*time.Second, "the live route", func() error {
		got := getRoute(t, gw, route.Name)
		if got == nil {
			return fmt.Errorf("deleted")
		}
		return wantBackends(fmt.Sprintf("0:%s/%s:8000", ns, model))(got)
	})
	if v, _ := gaugeValue(t, "loraplane_routes", map[string]string{"state": "invalid"}); v < 1 {
		t.Errorf(`loraplane_routes{state="invalid"} = %v, want at least 1`, v)
	}
	patchMeta(t, d, nil, map[string]*string{svcKey: ptr.To("engine-svc")})
	waitRoute(t, gw, model, wantBackends(fmt.Sprintf("0:%s/engine-svc:8000", ns)))
}

// TestGrantBeforeRoute watches HTTPRoutes and ReferenceGrants while routes gain Services in
// namespaces: at no resourceVersion does a route send to a Service of another namespace
// that no ReferenceGrant admits.
func TestGrantBeforeRoute(t *testing.T) {
	needEnv(t)
	gw, ns1, ns2 := newNamespace(t, "gw"), newNamespace(t, "src"), newNamespace(t, "src")
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var streams []watch.Interface
	for _, l := range []client.ObjectList{&gatewayv1.HTTPRouteList{}, &gatewayv1beta1.ReferenceGrantList{}} {
		w, err := wc.Watch(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		streams = append(streams, w)
	}
	startRouter(t, env.Config, gw, []string{ns1, ns2}, func(o *setup.Options) { o.CrossNamespaceClaims = true })

	model := "grown-" + ns1
	createDeployment(t, ns1, "a", modelLabels(model), nil)
	waitRoute(t, gw, model, wantBackends(fmt.Sprintf("0:%s/%s:8000", ns1, model)))
	createDeployment(t, ns1, "b", modelLabels(model), map[string]string{svcKey: "second-svc"})
	createDeployment(t, ns2, "c", modelLabels(model), nil)
	grown := []string{fmt.Sprintf("0:%s/%s:8000", ns1, model), fmt.Sprintf("0:%s/second-svc:8000", ns1), fmt.Sprintf("0:%s/%s:8000", ns2, model)}
	slices.Sort(grown)
	waitRoute(t, gw, model, wantBackends(grown...))
	time.Sleep(time.Second)
	cancel()

	checkAdmittedAtEveryVersion(t, gw, []string{ns1, ns2}, streams)
}

// checkAdmittedAtEveryVersion replays the watch events of routes and grants in
// resourceVersion order (one etcd: one revision counter for both) and fails at the first
// version where a route of gw sends to a Service in one of nss that no grant admits.
func checkAdmittedAtEveryVersion(t *testing.T, gw string, nss []string, streams []watch.Interface) {
	t.Helper()
	type change struct {
		rv  int64
		obj client.Object
		del bool
	}
	var changes []change
	for _, w := range streams {
		for e := range w.ResultChan() {
			obj, ok := e.Object.(client.Object)
			if !ok {
				continue
			}
			rv, _ := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
			changes = append(changes, change{rv: rv, obj: obj, del: e.Type == watch.Deleted})
		}
	}
	sortByRV := func(a, b change) int { return int(a.rv - b.rv) }
	slices.SortFunc(changes, sortByRV)
	routesNow := map[string]*gatewayv1.HTTPRoute{}
	grantsNow := map[string]*gatewayv1beta1.ReferenceGrant{}
	checked := 0
	for _, c := range changes {
		key := c.obj.GetNamespace() + "/" + c.obj.GetName()
		switch o := c.obj.(type) {
		case *gatewayv1.HTTPRoute:
			if c.del {
				delete(routesNow, key)
			} else if o.Namespace == gw {
				routesNow[key] = o
			}
		case *gatewayv1beta1.ReferenceGrant:
			if c.del {
				delete(grantsNow, key)
			} else {
				grantsNow[key] = o
			}
		}
		for _, r := range routesNow {
			for _, ns := range nss {
				for _, svc := range routeServicesIn(r, ns) {
					checked++
					if !admittedBy(grantsNow, gw, ns, svc) {
						t.Fatalf("at resourceVersion %d HTTPRoute %s sends to Service %s/%s, which no ReferenceGrant admits", c.rv, r.Name, ns, svc)
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no route backend seen in the watch streams")
	}
	t.Logf("%d watch events, %d route backends checked against the grants of their moment", len(changes), checked)
}

func routeServicesIn(r *gatewayv1.HTTPRoute, ns string) []string {
	var out []string
	for _, rule := range r.Spec.Rules {
		for _, b := range rule.BackendRefs {
			if ptr.Deref(b.Namespace, gatewayv1.Namespace(r.Namespace)) == gatewayv1.Namespace(ns) {
				out = append(out, string(b.Name))
			}
		}
	}
	return out
}

func admittedBy(grants map[string]*gatewayv1beta1.ReferenceGrant, gw, ns, svc string) bool {
	for _, g := range grants {
		if g.Namespace != ns {
			continue
		}
		from := false
		for _, f := range g.Spec.From {
			from = from || (f.Kind == "HTTPRoute" && string(f.Namespace) == gw)
		}
		for _, to := range g.Spec.To {
			if from && to.Kind == "Service" && (to.Name == nil || string(*to.Name) == svc) {
				return true
			}
		}
	}
	return false
}

// TestUnwatchedKindKeepsItsRoute: a replica that does not watch a kind (its
// --extra-workload-kinds left it out) never deletes a route sustained by workloads of that
// kind: it reports the route as outside its view.
func TestUnwatchedKindKeepsItsRoute(t *testing.T) {
	needEnv(t)
	installLWS(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	withLWS := startRouter(t, env.Config, gw, []string{ns}, func(o *setup.Options) {
		o.ExtraWorkloadKinds = []string{"leaderworkerset.x-k8s.io/v1/LeaderWorkerSet"}
	})
	model := "lws-" + ns
	createCustom(t, lwsGVK, ns, "lws-1", modelLabels(model))
	route := waitRoute(t, gw, model, wantBackends(fmt.Sprintf("0:%s/%s:8000", ns, model)))
	withLWS.stop()

	startRouter(t, env.Config, gw, []string{ns})
	waitEvent(t, gw, route.Name, "RouteOutsideView")
	consistently(t, 2*time.Second, "the LeaderWorkerSet's route", func() error {
		got := getRoute(t, gw, route.Name)
		if got == nil || got.UID != route.UID {
			return fmt.Errorf("deleted by a router that does not watch LeaderWorkerSets")
		}
		return nil
	})
}

// TestAdapterRoutedUnderItsName: a ModelAdapter whose model.aibrix.ai/name label names
// another model is routed under its own name — the name engines load it under and AIBrix's
// gateway plugin looks it up by — and the differing label is reported, not followed.
func TestAdapterRoutedUnderItsName(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	startRouter(t, env.Config, gw, []string{ns})
	name, label := "lora-"+ns, "base-"+ns
	a := &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: modelLabels(label)},
		Spec: v1alpha1.ModelAdapterSpec{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{nameKey: label}},
			ArtifactURL: "huggingface://org/lora",
		},
	}
	if err := k8s.Create(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(context.Background(), adapterService(a, 8000)); err != nil {
		t.Fatal(err)
	}
	waitRoute(t, gw, name, wantBackends(fmt.Sprintf("0:%s/%s:8000", ns, name)))
	waitEvent(t, ns, name, "InvalidSource")
	if r := getRoute(t, gw, routes.RouteName(label)); r != nil {
		t.Errorf("HTTPRoute %s routes the adapter under its label %q: backends %v", r.Name, label, backends(r))
	}
}
