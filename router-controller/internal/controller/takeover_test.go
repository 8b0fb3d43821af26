package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
	"github.com/loraplane/loraplane/shared/aibrix"
	"github.com/loraplane/loraplane/test/aibrixfixture"
)

// The unit tests of the switch-over from AIBrix, on a fake client: one reconcile each, its
// writes and events. The envtest counterparts are in aibrix_takeover_test.go.

const (
	qwen       = "Qwen2.5-7B"
	qwenRoute  = "qwen2-5-7b-9d7101d42cd9-router" // AIBrix's name, worked out by hand
	qwenLegacy = "qwen2-5-7b-router-9d7101d4"     // the name of earlier releases
)

func qwenDeployment(port string) client.Object {
	return deploymentObj("d", map[string]string{nameKey: qwen, portKey: port}, map[string]string{svcKey: "qwen"})
}

// qwenBuilt is our route of the model for qwenDeployment("8000"), named name.
func qwenBuilt(t *testing.T, name string, verdict routes.Verdict) *gatewayv1.HTTPRoute {
	t.Helper()
	s := src("d", qwen, 8000)
	s.Service = "qwen"
	r := builtRoute(t, qwen, s)
	r.Name = name
	r.Generation = 2
	setVerdict(r, verdict)
	return r
}

// setVerdict writes the status a Gateway implementation writes for the verdict.
func setVerdict(r *gatewayv1.HTTPRoute, v routes.Verdict) {
	if v == routes.NotJudged {
		return
	}
	status, gen := metav1.ConditionTrue, r.Generation
	switch v {
	case routes.Pending:
		gen--
	case routes.NotAccepted:
		status = metav1.ConditionFalse
	}
	r.Status.Parents = []gatewayv1.RouteParentStatus{{
		ParentRef:      gatewayv1.ParentReference{Namespace: ptr.To(gatewayv1.Namespace(r.Namespace)), Name: routes.DefaultGatewayName},
		ControllerName: "example.com/gateway",
		Conditions: []metav1.Condition{
			{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: gen},
			{Type: "ResolvedRefs", Status: status, Reason: "ResolvedRefs", ObservedGeneration: gen},
		},
	}}
}

// aibrixMadeRoute is the route AIBrix's model router made for the model.
func aibrixMadeRoute(t *testing.T) *gatewayv1.HTTPRoute {
	t.Helper()
	u, err := aibrixfixture.HTTPRoute(aibrixfixture.Route{Name: qwenRoute, Model: qwen, Namespace: srcNS, Service: "qwen"})
	if err != nil {
		t.Fatal(err)
	}
	r := &gatewayv1.HTTPRoute{}
	if err := aibrixfixture.To(u, r); err != nil {
		t.Fatal(err)
	}
	r.ResourceVersion = "1"
	return r
}

// runningAIBrix is a detector whose Lease was renewed just now.
func runningAIBrix(t *testing.T) *aibrix.Detector {
	t.Helper()
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "aibrix-system", Name: "aibrix-controller-manager"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("cm-0_1"), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: &metav1.MicroTime{Time: now.Add(-2 * time.Second)}},
	}
	c := fake.NewClientBuilder().WithObjects(lease).Build()
	return aibrix.NewDetector(c, []types.NamespacedName{{Namespace: "aibrix-system", Name: "aibrix-controller-manager"}}, "test-router",
		clocktesting.NewFakeClock(now), 7*time.Second)
}

// forbiddenAIBrix is a detector whose reads of the Lease are refused by RBAC.
func forbiddenAIBrix(t *testing.T) *aibrix.Detector {
	t.Helper()
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
		return apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "aibrix-controller-manager", errors.New("no RBAC"))
	}}).Build()
	return aibrix.NewDetector(c, []types.NamespacedName{{Namespace: "aibrix-system", Name: "aibrix-controller-manager"}}, "test-router-forbidden",
		clocktesting.NewFakeClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)), 7*time.Second)
}

func TestReconcileModelTakeOver(t *testing.T) {
	gw := routes.DefaultGatewayNamespace
	write := func(verb, name string) string { return verb + " *v1.HTTPRoute/" + gw + "/" + name }
	collided := qwenBuilt(t, qwenRoute, routes.NotJudged)
	collided.Annotations[routes.ModelAnnotation] = "qwen2-5-7b-9d7101d42cd9"
	cases := map[string]struct {
		objs            []client.Object
		adoptOff        bool
		aibrixRunning   bool
		aibrixForbidden bool // the Lease cannot be read: whether AIBrix runs is unknown
		wantWrites      []string
		wantEvents      []string
		wantState       RouteState
		wantRequeue     time.Duration
	}{
		"AIBrix's route: adopted in place": {
			objs:       []client.Object{qwenDeployment("8000"), aibrixMadeRoute(t)},
			wantWrites: []string{write("update", qwenRoute)},
			wantEvents: []string{"Normal RouteAdopted"},
			wantState:  RouteStateManaged,
		},
		"AIBrix's route, adoption off: a conflict": {
			objs: []client.Object{qwenDeployment("8000"), aibrixMadeRoute(t)}, adoptOff: true,
			wantEvents: []string{"Warning RouteConflict"},
			wantState:  RouteStateConflict,
		},
		"AIBrix's route while AIBrix runs: waits": {
			objs: []client.Object{qwenDeployment("8000"), aibrixMadeRoute(t)}, aibrixRunning: true,
			wantEvents:  []string{"Warning AIBrixRunning"},
			wantState:   RouteStateWaitingForAIBrix,
			wantRequeue: 7 * time.Second,
		},
		"AIBrix's route, its Lease forbidden: waits": {
			objs: []client.Object{qwenDeployment("8000"), aibrixMadeRoute(t)}, aibrixForbidden: true,
			wantEvents:  []string{"Warning AIBrixRunning"},
			wantState:   RouteStateWaitingForAIBrix,
			wantRequeue: 7 * time.Second,
		},
		"AIBrix's route while AIBrix runs: the legacy route kept current": {
			objs:          []client.Object{qwenDeployment("8002"), aibrixMadeRoute(t), qwenBuilt(t, qwenLegacy, routes.Accepted)},
			aibrixRunning: true,
			wantWrites:    []string{write("update", qwenLegacy)},
			wantEvents:    []string{"Warning AIBrixRunning"},
			wantState:     RouteStateWaitingForAIBrix,
			wantRequeue:   7 * time.Second,
		},
		"foreign route under the name: the legacy route kept current": {
			objs: func() []client.Object {
				foreign := aibrixMadeRoute(t)
				foreign.Spec.ParentRefs[0].Name = "internal"
				return []client.Object{qwenDeployment("8002"), foreign, qwenBuilt(t, qwenLegacy, routes.Accepted)}
			}(),
			wantWrites: []string{write("update", qwenLegacy)},
			wantEvents: []string{"Warning RouteConflict"},
			wantState:  RouteStateConflict,
		},
		"legacy route only: the new one created first": {
			objs:       []client.Object{qwenDeployment("8000"), qwenBuilt(t, qwenLegacy, routes.Accepted), grantObj(t, "qwen")},
			wantWrites: []string{write("create", qwenRoute)},
			wantEvents: []string{"Normal RouteCreated"},
			wantState:  RouteStateManaged,
		},
		"neither judged: legacy deleted": {
			objs:       []client.Object{qwenDeployment("8000"), qwenBuilt(t, qwenRoute, routes.NotJudged), qwenBuilt(t, qwenLegacy, routes.NotJudged)},
			wantWrites: []string{write("delete", qwenLegacy)},
			wantEvents: []string{"Normal RouteRenamed"},
			wantState:  RouteStateManaged,
		},
		"new not judged, legacy accepted: kept": {
			objs:      []client.Object{qwenDeployment("8000"), qwenBuilt(t, qwenRoute, routes.NotJudged), qwenBuilt(t, qwenLegacy, routes.Accepted)},
			wantState: RouteStateManaged,
		},
		"new pending: kept": {
			objs:      []client.Object{qwenDeployment("8000"), qwenBuilt(t, qwenRoute, routes.Pending), qwenBuilt(t, qwenLegacy, routes.NotJudged)},
			wantState: RouteStateManaged,
		},
		"new accepted: legacy deleted": {
			objs:       []client.Object{qwenDeployment("8000"), qwenBuilt(t, qwenRoute, routes.Accepted), qwenBuilt(t, qwenLegacy, routes.Accepted)},
			wantWrites: []string{write("delete", qwenLegacy)},
			wantEvents: []string{"Normal RouteRenamed"},
			wantState:  RouteStateManaged,
		},
		"new not accepted, legacy accepted: kept": {
			objs:       []client.Object{qwenDeployment("8000"), qwenBuilt(t, qwenRoute, routes.NotAccepted), qwenBuilt(t, qwenLegacy, routes.Accepted)},
			wantEvents: []string{"Warning RouteNotAccepted"},
			wantState:  RouteStateNotAccepted,
		},
		"neither accepted: legacy deleted": {
			objs:       []client.Object{qwenDeployment("8000"), qwenBuilt(t, qwenRoute, routes.NotAccepted), qwenBuilt(t, qwenLegacy, routes.NotAccepted)},
			wantWrites: []string{write("delete", qwenLegacy)},
			wantEvents: []string{"Warning RouteNotAccepted", "Normal RouteRenamed"},
			wantState:  RouteStateNotAccepted,
		},
		"new route outdated: updated first, legacy kept and kept current": {
			objs:       []client.Object{qwenDeployment("8002"), qwenBuilt(t, qwenRoute, routes.Accepted), qwenBuilt(t, qwenLegacy, routes.Accepted)},
			wantWrites: []string{write("update", qwenRoute), write("update", qwenLegacy)},
			wantEvents: []string{"Normal RouteUpdated"},
			wantState:  RouteStateManaged,
		},
		"no sources: both deleted": {
			objs:       []client.Object{qwenBuilt(t, qwenRoute, routes.Accepted), qwenBuilt(t, qwenLegacy, routes.Accepted)},
			wantWrites: []string{write("delete", qwenRoute), write("delete", qwenLegacy)},
		},
		"colliding name held by another claimed model: a conflict": {
			objs: []client.Object{qwenDeployment("8000"), collided,
				deploymentObj("v", map[string]string{nameKey: "qwen2-5-7b-9d7101d42cd9"}, nil)},
			wantEvents: []string{"Warning RouteConflict"},
			wantState:  RouteStateConflict,
		},
		"colliding name held by a model no longer claimed: taken": {
			objs:       []client.Object{qwenDeployment("8000"), collided},
			wantWrites: []string{write("update", qwenRoute)},
			wantEvents: []string{"Normal RouteUpdated"},
			wantState:  RouteStateManaged,
		},
		"no sources, colliding name held by another model: not deleted": {
			objs: []client.Object{collided},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, w, rec := fakeReconciler(t, tc.objs, "", nil)
			r.cfg.AdoptAIBrix = !tc.adoptOff
			if tc.aibrixRunning {
				r.cfg.AIBrix = runningAIBrix(t)
			}
			if tc.aibrixForbidden {
				r.cfg.AIBrix = forbiddenAIBrix(t)
			}
			res, err := r.Reconcile(t.Context(), ModelKey(qwen))
			if err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
			if diff := cmp.Diff(tc.wantWrites, w.log); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			checkEventsAndState(t, rec, r, qwen, tc.wantEvents, tc.wantState)
		})
	}
}

// TestAIBrixRunningReportedOnce: while AIBrix runs, reconciling the model again does not
// repeat the Warning event.
func TestAIBrixRunningReportedOnce(t *testing.T) {
	r, _, rec := fakeReconciler(t, []client.Object{qwenDeployment("8000"), aibrixMadeRoute(t)}, "", nil)
	r.cfg.AdoptAIBrix, r.cfg.AIBrix = true, runningAIBrix(t)
	for range 3 {
		if _, err := r.Reconcile(t.Context(), ModelKey(qwen)); err != nil {
			t.Fatal(err)
		}
	}
	if got := drain(rec); len(got) != 1 {
		t.Fatalf("events %q, want one AIBrixRunning", got)
	}
}

// TestAIBrixRunningReportedOncePerEpisode: while AIBrix runs, the model's waiting adoption
// is reported once however often it is reconciled; once the detector has seen AIBrix stop
// and start again (a new episode), it is reported again, even if no reconcile of the model
// saw AIBrix stopped in between. Readings every 7 s.
func TestAIBrixRunningReportedOncePerEpisode(t *testing.T) {
	const period = 7 * time.Second
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	key := types.NamespacedName{Namespace: "aibrix-system", Name: "aibrix-controller-manager"}
	leases := fake.NewClientBuilder().WithObjects(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("cm-0_1"), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: &metav1.MicroTime{Time: clk.Now()}},
	}).Build()
	setHolder := func(holder string) {
		l := &coordinationv1.Lease{}
		if err := leases.Get(t.Context(), key, l); err != nil {
			t.Fatal(err)
		}
		l.Spec.HolderIdentity = ptr.To(holder)
		if err := leases.Update(t.Context(), l); err != nil {
			t.Fatal(err)
		}
	}
	det := aibrix.NewDetector(leases, []types.NamespacedName{key}, "test-router-episodes", clk, period)
	r, _, rec := fakeReconciler(t, []client.Object{qwenDeployment("8000"), aibrixMadeRoute(t)}, "", nil)
	r.cfg.AdoptAIBrix, r.cfg.AIBrix = true, det
	reconcile := func(n int) int {
		for range n {
			if _, err := r.Reconcile(t.Context(), ModelKey(qwen)); err != nil {
				t.Fatal(err)
			}
		}
		return len(drain(rec))
	}
	var got []int
	got = append(got, reconcile(3))
	clk.Step(period)
	setHolder("")
	det.Check(t.Context()) // the detector's own reading: AIBrix stopped
	clk.Step(period)
	setHolder("cm-1_2")
	got = append(got, reconcile(3))
	if diff := cmp.Diff([]int{1, 1}, got); diff != "" {
		t.Errorf("AIBrixRunning events in the first and the second episode (-want +got):\n%s", diff)
	}
}

func TestRetireAIBrixGrant(t *testing.T) {
	aibrixGrantName := routes.AIBrixGrantName(routes.DefaultGatewayNamespace, srcNS)
	aibrixGrant := func() *gatewayv1beta1.ReferenceGrant {
		u, err := aibrixfixture.ReferenceGrant(aibrixfixture.Grant{Namespace: srcNS})
		if err != nil {
			t.Fatal(err)
		}
		g := &gatewayv1beta1.ReferenceGrant{}
		if err := aibrixfixture.To(u, g); err != nil {
			t.Fatal(err)
		}
		g.ResourceVersion = "1"
		return g
	}
	ours := qwenBuilt(t, qwenRoute, routes.NotJudged)
	foreign := aibrixMadeRoute(t)
	foreign.Name, foreign.Spec.ParentRefs[0].Name = "legacy-app", "internal"
	foreign.Spec.Rules[0].BackendRefs[0].Name = "legacy-app"
	grantWrite := func(verb, name string) string { return verb + " *v1beta1.ReferenceGrant/" + srcNS + "/" + name }
	cases := map[string]struct {
		objs            []client.Object
		adoptOff        bool
		aibrixRunning   bool
		aibrixForbidden bool // the Lease cannot be read: whether AIBrix runs is unknown
		wantWrites      []string
		wantEvents      []string
		wantKept        float64
		wantRequeue     time.Duration
	}{
		"ours admits every Service: AIBrix's deleted": {
			objs:       []client.Object{ours, grantObj(t, "qwen"), aibrixGrant()},
			wantWrites: []string{grantWrite("delete", aibrixGrantName)},
			wantEvents: []string{"Normal AIBrixGrantRemoved"},
		},
		"no route sends there: AIBrix's deleted": {
			objs:       []client.Object{aibrixGrant()},
			wantWrites: []string{grantWrite("delete", aibrixGrantName)},
			wantEvents: []string{"Normal AIBrixGrantRemoved"},
		},
		"ours being written: AIBrix's kept until the cache has it": {
			objs:       []client.Object{ours, aibrixGrant()},
			wantWrites: []string{grantWrite("create", routes.ReferenceGrantName(routes.DefaultGatewayNamespace, 0))},
		},
		"a foreign route needs it: kept, reported": {
			objs:       []client.Object{ours, foreign, grantObj(t, "qwen"), aibrixGrant()},
			wantEvents: []string{"Warning AIBrixGrantKept"},
			wantKept:   1,
		},
		"adoption off: kept": {
			objs:     []client.Object{ours, grantObj(t, "qwen"), aibrixGrant()},
			adoptOff: true,
		},
		"AIBrix running: kept": {
			objs:          []client.Object{ours, grantObj(t, "qwen"), aibrixGrant()},
			aibrixRunning: true,
			wantRequeue:   7 * time.Second,
		},
		"AIBrix's Lease forbidden: kept": {
			objs:            []client.Object{ours, grantObj(t, "qwen"), aibrixGrant()},
			aibrixForbidden: true,
			wantRequeue:     7 * time.Second,
		},
		"not in AIBrix's shape: never deleted": {
			objs: func() []client.Object {
				g := aibrixGrant()
				g.Spec.To[0].Name = ptr.To(gatewayv1.ObjectName("qwen"))
				return []client.Object{ours, grantObj(t, "qwen"), g}
			}(),
			wantEvents: []string{"Warning NotAIBrixGrant"},
		},
		"kept by Helm: never deleted, reported": {
			objs: func() []client.Object {
				g := aibrixGrant()
				g.Annotations = map[string]string{"meta.helm.sh/release-name": "aibrix"}
				return []client.Object{ours, grantObj(t, "qwen"), g}
			}(),
			wantEvents: []string{"Warning NotAIBrixGrant Not deleting this ReferenceGrant, although AIBrix's model router names its grants so: it was written by a Helm release"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, w, rec := fakeReconciler(t, tc.objs, "", nil)
			r.cfg.AdoptAIBrix = !tc.adoptOff
			if tc.aibrixRunning {
				r.cfg.AIBrix = runningAIBrix(t)
			}
			if tc.aibrixForbidden {
				r.cfg.AIBrix = forbiddenAIBrix(t)
			}
			res, err := r.Reconcile(t.Context(), GrantsKey(srcNS))
			if err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
			if diff := cmp.Diff(tc.wantWrites, w.log); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			got := drain(rec)
			if len(got) != len(tc.wantEvents) {
				t.Fatalf("events %q, want %d matching %q", got, len(tc.wantEvents), tc.wantEvents)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.wantEvents[i]) {
					t.Errorf("event %d = %q, want prefix %q", i, got[i], tc.wantEvents[i])
				}
			}
			if n := float64(len(r.keptGrants.byNamespace)); n != tc.wantKept {
				t.Errorf("namespaces with AIBrix's grant kept: %v, want %v", n, tc.wantKept)
			}
		})
	}
}
