package controller

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
)

// gatewayStatus is the status an implementation of the default Gateway writes on a route of
// generation gen: Accepted=True and ResolvedRefs as given.
func gatewayStatus(gen int64, resolved metav1.ConditionStatus, reason, msg string) gatewayv1.HTTPRouteStatus {
	ref := gatewayv1.ParentReference{Group: ptr.To(gatewayv1.Group(gatewayv1.GroupName)), Kind: ptr.To(gatewayv1.Kind("Gateway")),
		Namespace: ptr.To(gatewayv1.Namespace(routes.DefaultGatewayNamespace)), Name: routes.DefaultGatewayName}
	return gatewayv1.HTTPRouteStatus{RouteStatus: gatewayv1.RouteStatus{Parents: []gatewayv1.RouteParentStatus{{
		ParentRef: ref, ControllerName: "example.com/gateway",
		Conditions: []metav1.Condition{
			{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: gen},
			{Type: "ResolvedRefs", Status: resolved, Reason: reason, Message: msg, ObservedGeneration: gen},
		},
	}}}}
}

// TestAcceptanceReported walks a route through the Gateway's judgements: each source is
// warned once per problem, a source joining later is warned too, a new problem is reported
// again, acceptance clears the state with one Normal event, and a judgement of an earlier
// generation changes nothing.
func TestAcceptanceReported(t *testing.T) {
	llama := map[string]string{nameKey: "llama"}
	d1 := deploymentObj("d1", llama, nil)
	d1.UID = "uid-d1"
	route := builtRoute(t, "llama", src("d1", "llama", 8000))
	route.Generation = 1
	r, _, rec := fakeReconciler(t, []client.Object{d1, route}, "", nil)
	c := r.client

	setRoute := func(srcs []routes.Source, gen int64, st gatewayv1.HTTPRouteStatus) {
		t.Helper()
		cur := &gatewayv1.HTTPRoute{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(route), cur); err != nil {
			t.Fatal(err)
		}
		want := builtRoute(t, "llama", srcs...)
		cur.Spec, cur.Annotations, cur.Generation, cur.Status = want.Spec, want.Annotations, gen, st
		if err := c.Update(t.Context(), cur); err != nil {
			t.Fatal(err)
		}
	}
	notAccepted := func() float64 { return testutil.ToFloat64(Routes.WithLabelValues(string(RouteStateNotAccepted))) }
	steps := []struct {
		name       string
		do         func()
		wantEvents []string // "<type> <reason> <object>" prefixes, any order within a step
		wantState  RouteState
	}{
		{name: "not judged yet", do: func() {}, wantState: RouteStateManaged},
		{
			name: "refs not resolved: one warning",
			do: func() {
				setRoute([]routes.Source{src("d1", "llama", 8000)}, 1, gatewayStatus(1, metav1.ConditionFalse, "RefNotPermitted", "no grant for a/llama"))
			},
			wantEvents: []string{"Warning RouteNotAccepted HTTPRoute aibrix-system/llama-router of model \"llama\" is not accepted by Gateway aibrix-system/aibrix-eg: ResolvedRefs=False (RefNotPermitted): no grant for a/llama"},
			wantState:  RouteStateNotAccepted,
		},
		{name: "same problem: no event", do: func() {}, wantState: RouteStateNotAccepted},
		{
			name: "a second source joins: only it is warned",
			do: func() {
				d2 := deploymentObj("d2", llama, nil)
				d2.UID = "uid-d2"
				if err := c.Create(t.Context(), d2); err != nil {
					t.Fatal(err)
				}
				setRoute([]routes.Source{src("d1", "llama", 8000), src("d2", "llama", 8000)}, 2,
					gatewayStatus(2, metav1.ConditionFalse, "RefNotPermitted", "no grant for a/llama"))
			},
			wantEvents: []string{"Warning RouteNotAccepted"},
			wantState:  RouteStateNotAccepted,
		},
		{
			name: "another problem: both warned again",
			do: func() {
				setRoute([]routes.Source{src("d1", "llama", 8000), src("d2", "llama", 8000)}, 2,
					gatewayStatus(2, metav1.ConditionFalse, "BackendNotFound", "service a/llama not found"))
			},
			wantEvents: []string{"Warning RouteNotAccepted", "Warning RouteNotAccepted"},
			wantState:  RouteStateNotAccepted,
		},
		{
			name: "a judgement of an earlier generation: the last one stands",
			do: func() {
				setRoute([]routes.Source{src("d1", "llama", 8000), src("d2", "llama", 8000)}, 3,
					gatewayStatus(2, metav1.ConditionTrue, "ResolvedRefs", ""))
			},
			wantState: RouteStateNotAccepted,
		},
		{
			name: "accepted again: one Normal event per source",
			do: func() {
				setRoute([]routes.Source{src("d1", "llama", 8000), src("d2", "llama", 8000)}, 3,
					gatewayStatus(3, metav1.ConditionTrue, "ResolvedRefs", ""))
			},
			wantEvents: []string{"Normal RouteAccepted", "Normal RouteAccepted"},
			wantState:  RouteStateManaged,
		},
		{name: "still accepted: no event", do: func() {}, wantState: RouteStateManaged},
		{
			name: "a stale refusal after acceptance changes nothing",
			do: func() {
				setRoute([]routes.Source{src("d1", "llama", 8000), src("d2", "llama", 8000)}, 4,
					gatewayStatus(3, metav1.ConditionFalse, "RefNotPermitted", "old"))
			},
			wantState: RouteStateManaged,
		},
	}
	for _, st := range steps {
		st.do()
		if _, err := r.Reconcile(t.Context(), ModelKey("llama")); err != nil {
			t.Fatalf("%s: reconcile: %v", st.name, err)
		}
		got := drain(rec)
		if len(got) != len(st.wantEvents) {
			t.Errorf("%s: events %q, want %d like %q", st.name, got, len(st.wantEvents), st.wantEvents)
		} else {
			for i := range got {
				if !strings.HasPrefix(got[i], st.wantEvents[i]) {
					t.Errorf("%s: event %q, want prefix %q", st.name, got[i], st.wantEvents[i])
				}
			}
		}
		if m := r.states.byModel["llama"]; m == nil || m.state != st.wantState {
			t.Errorf("%s: state %v, want %s", st.name, m, st.wantState)
		}
		want := map[bool]float64{true: 1}[st.wantState == RouteStateNotAccepted]
		if got := notAccepted(); got != want {
			t.Errorf("%s: loraplane_routes{state=not-accepted} = %v, want %v", st.name, got, want)
		}
	}
	// The model loses its sources: its state goes, not-accepted included.
	r.states.clear("llama")
	if got := notAccepted(); got != 0 {
		t.Errorf("after clear: not-accepted = %v, want 0", got)
	}
}

func TestAcceptanceChanged(t *testing.T) {
	cfg := routesConfig()
	p := acceptanceChanged(cfg)
	base := func(mutate func(*gatewayv1.HTTPRoute)) *gatewayv1.HTTPRoute {
		r := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.GatewayNamespace, Name: "m-router", Generation: 2}}
		r.Status = gatewayStatus(2, metav1.ConditionTrue, "ResolvedRefs", "")
		if mutate != nil {
			mutate(r)
		}
		return r
	}
	cases := map[string]struct {
		mutate func(*gatewayv1.HTTPRoute)
		want   bool
	}{
		"nothing": {want: false},
		"refs no longer resolved": {mutate: func(r *gatewayv1.HTTPRoute) {
			r.Status = gatewayStatus(2, metav1.ConditionFalse, "RefNotPermitted", "x")
		}, want: true},
		"status dropped":       {mutate: func(r *gatewayv1.HTTPRoute) { r.Status = gatewayv1.HTTPRouteStatus{} }, want: true},
		"transition time only": {mutate: func(r *gatewayv1.HTTPRoute) { r.Status.Parents[0].Conditions[0].LastTransitionTime = metav1.Now() }, want: false},
		"another gateway's status": {mutate: func(r *gatewayv1.HTTPRoute) {
			other := gatewayStatus(2, metav1.ConditionFalse, "RefNotPermitted", "x").Parents[0]
			other.ParentRef.Name = "other"
			r.Status.Parents = append(r.Status.Parents, other)
		}, want: false},
		"labels only (another predicate's business)": {mutate: func(r *gatewayv1.HTTPRoute) { r.Labels = map[string]string{"a": "b"} }, want: false},
	}
	for name, tc := range cases {
		if got := p.Update(event.TypedUpdateEvent[*gatewayv1.HTTPRoute]{ObjectOld: base(nil), ObjectNew: base(tc.mutate)}); got != tc.want {
			t.Errorf("%s: acceptanceChanged = %v, want %v", name, got, tc.want)
		}
	}
	if p.Create(event.TypedCreateEvent[*gatewayv1.HTTPRoute]{Object: base(nil)}) {
		t.Error("acceptanceChanged passes creations; specOrMetadataChanged handles them")
	}
}
