package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
)

// claimant is the Deployment d claiming llama in ns, created at that minute of the test's
// clock.
func claimant(ns string, minute int) *appsv1.Deployment {
	d := deploymentObj("d", map[string]string{nameKey: "llama"}, nil)
	d.Namespace = ns
	d.UID = types.UID(ns + "-d")
	d.CreationTimestamp = metav1.NewTime(time.Date(2026, 12, 6, 12, minute, 0, 0, time.UTC))
	return d
}

// llamaRouteTo is our route of llama with one Deployment source per namespace given.
func llamaRouteTo(t *testing.T, nss ...string) *gatewayv1.HTTPRoute {
	t.Helper()
	var srcs []routes.Source
	for _, ns := range nss {
		s := src("d", "llama", 8000)
		s.Namespace = ns
		srcs = append(srcs, s)
	}
	return builtRoute(t, "llama", srcs...)
}

func TestClaimsAcrossNamespaces(t *testing.T) {
	gw := routes.DefaultGatewayNamespace
	cases := map[string]struct {
		objs         []client.Object
		cross        bool
		watch        []string
		wantBackends []string // namespaces the route sends to after the reconcile; nil: no route
		wantWrites   []string
		wantEvents   []string
		wantState    RouteState
		wantRefused  float64
	}{
		"the oldest claimant's namespace owns the model; the other is refused": {
			objs:         []client.Object{claimant("b", 2), claimant("a", 1), grantIn("a", "llama")},
			wantBackends: []string{"a"},
			wantWrites:   []string{"create *v1.HTTPRoute/" + gw + "/llama-router"},
			wantEvents:   []string{"Warning ClaimRefused", "Normal RouteCreated"},
			wantState:    RouteStateManaged, wantRefused: 1,
		},
		"the route's namespace keeps the model against an older claimant elsewhere": {
			objs:         []client.Object{claimant("a", 1), claimant("b", 2), llamaRouteTo(t, "b")},
			wantBackends: []string{"b"},
			wantEvents:   []string{"Warning ClaimRefused"},
			wantState:    RouteStateManaged, wantRefused: 1,
		},
		"a union route left from before shrinks to its oldest namespace": {
			objs:         []client.Object{claimant("a", 1), claimant("b", 2), llamaRouteTo(t, "a", "b")},
			wantBackends: []string{"a"},
			wantWrites:   []string{"update *v1.HTTPRoute/" + gw + "/llama-router"},
			wantEvents:   []string{"Warning ClaimRefused", "Normal RouteUpdated"},
			wantState:    RouteStateManaged, wantRefused: 1,
		},
		"cross-namespace claims allowed: the union": {
			objs:         []client.Object{claimant("a", 1), claimant("b", 2), llamaRouteTo(t, "a"), grantIn("b", "llama")},
			cross:        true,
			wantBackends: []string{"a", "b"},
			wantWrites:   []string{"update *v1.HTTPRoute/" + gw + "/llama-router"},
			wantEvents:   []string{"Normal RouteUpdated", "Normal RouteUpdated"},
			wantState:    RouteStateManaged,
		},
		"owner gone: the next oldest namespace takes the model": {
			objs:         []client.Object{claimant("c", 3), claimant("b", 2), llamaRouteTo(t, "a"), grantIn("b", "llama")},
			wantBackends: []string{"b"},
			wantWrites:   []string{"update *v1.HTTPRoute/" + gw + "/llama-router"},
			wantEvents:   []string{"Warning ClaimRefused", "Normal RouteUpdated"},
			wantState:    RouteStateManaged, wantRefused: 1,
		},
		"a route with a source outside the router's view is neither updated nor deleted": {
			objs:         []client.Object{claimant("b", 2), llamaRouteTo(t, "z")},
			watch:        []string{gw, "a", "b"},
			wantBackends: []string{"z"},
			wantEvents:   []string{"Warning ClaimRefused", "Warning RouteOutsideView"},
			wantState:    RouteStateOutsideView, wantRefused: 1,
		},
		"no claimant in view, route outside the view: kept": {
			objs:         []client.Object{llamaRouteTo(t, "z")},
			watch:        []string{gw, "a"},
			wantBackends: []string{"z"},
			wantEvents:   []string{"Warning RouteOutsideView"},
			wantState:    RouteStateOutsideView,
		},
		"the route of another install is not touched": {
			objs: []client.Object{claimant("a", 1), func() client.Object {
				r := llamaRouteTo(t, "a")
				r.Labels[routes.InstallLabel] = "team-x"
				return r
			}()},
			wantBackends: []string{"a"},
			wantEvents:   []string{"Warning RouteConflict"},
			wantState:    RouteStateConflict,
		},
		"another install's route without claimants is not deleted": {
			objs: []client.Object{func() client.Object {
				r := llamaRouteTo(t, "a")
				r.Labels[routes.GatewayLabel] = "other-gateway"
				return r
			}()},
			wantBackends: []string{"a"},
		},
		"no claimant can be routed: the live route is kept, state invalid": {
			objs: []client.Object{func() client.Object {
				d := claimant("a", 1)
				d.Annotations = map[string]string{svcKey: "Not_A_Service"}
				return d
			}(), llamaRouteTo(t, "a")},
			wantBackends: []string{"a"},
			wantEvents:   []string{"Warning InvalidSource", "Warning RouteInvalid"},
			wantState:    RouteStateInvalid,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, w, rec := fakeReconciler(t, tc.objs, "", nil)
			r.cfg.CrossNamespaceClaims = tc.cross
			r.cfg.WatchNamespaces = tc.watch
			if _, err := r.Reconcile(t.Context(), ModelKey("llama")); err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			if diff := cmp.Diff(tc.wantWrites, w.log); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			route := &gatewayv1.HTTPRoute{}
			var got []string
			if err := r.cache.Get(t.Context(), types.NamespacedName{Namespace: gw, Name: "llama-router"}, route); err == nil {
				got = routes.BackendNamespaces(route)
			}
			if diff := cmp.Diff(tc.wantBackends, got); diff != "" {
				t.Errorf("route backend namespaces (-want +got):\n%s", diff)
			}
			checkEventsAndState(t, rec, r, "llama", tc.wantEvents, tc.wantState)
			if got := testutil.ToFloat64(RefusedClaims.WithLabelValues()); got != tc.wantRefused {
				t.Errorf("loraplane_route_refused_claims = %v, want %v", got, tc.wantRefused)
			}
			r.states.clear("llama")
		})
	}
}

// grantIn is a grant of ours in ns admitting services.
func grantIn(ns string, services ...string) client.Object {
	gs, err := routes.AssignReferenceGrants(routesConfig(), ns, services, nil, nil)
	if err != nil || len(gs) != 1 {
		panic(err)
	}
	gs[0].ResourceVersion = "1"
	return gs[0]
}

// TestRefusedClaimToldOnce: reconciling again tells a refused claimant nothing new.
func TestRefusedClaimToldOnce(t *testing.T) {
	r, _, rec := fakeReconciler(t, []client.Object{claimant("a", 1), claimant("b", 2), llamaRouteTo(t, "a")}, "", nil)
	for range 3 {
		if _, err := r.Reconcile(t.Context(), ModelKey("llama")); err != nil {
			t.Fatal(err)
		}
	}
	if got := drain(rec); len(got) != 1 || !strings.HasPrefix(got[0], "Warning ClaimRefused") ||
		!strings.Contains(got[0], `served from namespace "a"`) {
		t.Errorf("events %q, want one ClaimRefused naming namespace a", got)
	}
	r.states.clear("llama")
}

// TestGrantBeforeRoute: a route whose Service no grant admits waits; the grants of its
// namespace, reconciled next, admit the Service; then the route is written.
func TestGrantBeforeRoute(t *testing.T) {
	r, w, _ := fakeReconciler(t, []client.Object{claimant("a", 1)}, "", nil)
	res, err := r.Reconcile(t.Context(), ModelKey("llama"))
	if err != nil || res.RequeueAfter != grantsWaitRecheck {
		t.Fatalf("first model reconcile: %v, requeue %s; want a wait of %s", err, res.RequeueAfter, grantsWaitRecheck)
	}
	if got := r.ahead.waiting("a"); !cmp.Equal(got, []string{"llama"}) {
		t.Errorf("models waiting for grants in a: %v", got)
	}
	res, err = r.Reconcile(t.Context(), GrantsKey("a"))
	if err != nil || res.RequeueAfter <= 0 {
		t.Fatalf("grants reconcile: %v, requeue %s; want a recheck while the Service is kept ahead", err, res.RequeueAfter)
	}
	if _, err := r.Reconcile(t.Context(), ModelKey("llama")); err != nil {
		t.Fatal(err)
	}
	want := []string{"create *v1beta1.ReferenceGrant/a/loraplane-router-aibrix-system", "create *v1.HTTPRoute/aibrix-system/llama-router"}
	if diff := cmp.Diff(want, w.log); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	// With the route in the cache as desired the Service is no longer kept ahead.
	if _, err := r.Reconcile(t.Context(), ModelKey("llama")); err != nil {
		t.Fatal(err)
	}
	if res, err := r.Reconcile(t.Context(), GrantsKey("a")); err != nil || res.RequeueAfter != 0 {
		t.Errorf("grants reconcile after the route: %v, requeue %s", err, res.RequeueAfter)
	}
	if got := r.ahead.waiting("a"); len(got) != 0 {
		t.Errorf("models still waiting: %v", got)
	}
	r.states.clear("llama")
}
