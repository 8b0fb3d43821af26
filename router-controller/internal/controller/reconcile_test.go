package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// writes records the writes a reconcile made, as "verb kind/namespace/name".
type writes struct{ log []string }

func (w *writes) record(verb string, obj client.Object) {
	w.log = append(w.log, fmt.Sprintf("%s %T/%s/%s", verb, obj, obj.GetNamespace(), obj.GetName()))
}

func testScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme, gatewayv1.Install, gatewayv1beta1.Install} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// fakeReconciler returns a reconciler on a fake client holding objs, with the same indexes
// as the real caches. fail, when set, makes every write of that verb fail with err.
func fakeReconciler(t *testing.T, objs []client.Object, failVerb string, failErr error) (*RouteReconciler, *writes, *events.FakeRecorder) {
	t.Helper()
	w := &writes{}
	fail := func(verb string, obj client.Object) error {
		w.record(verb, obj)
		if verb == failVerb {
			return failErr
		}
		return nil
	}
	deploy := DefaultSourceKinds()[0]
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).
		WithIndex(deploy.Object(), sourceIndex, sourceIndexValues(deploy.GVK.Kind)).
		WithIndex(&gatewayv1.HTTPRoute{}, routeBackendIndex, routeBackendNamespaces).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				if err := fail("create", obj); err != nil {
					return err
				}
				return c.Create(ctx, obj, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				if err := fail("update", obj); err != nil {
					return err
				}
				return c.Update(ctx, obj, opts...)
			},
			Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
				if err := fail("delete", obj); err != nil {
					return err
				}
				return c.Delete(ctx, obj, opts...)
			},
		}).Build()
	rec := events.NewFakeRecorder(100)
	Register()
	r := &RouteReconciler{
		cfg:        Config{Routes: routesConfig()},
		cache:      c,
		client:     c,
		recorder:   rec,
		kinds:      []sourceKind{{SourceKind: deploy, indexed: true}},
		states:     newRouteStates(),
		keptGrants: newKeptGrants(),
		ahead:      newGrantsAhead(),
	}
	return r, w, rec
}

// srcNS is the source namespace of the fake-client tests.
const srcNS = "a"

func deploymentObj(name string, labels, annotations map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: srcNS, Name: name, Labels: labels, Annotations: annotations}}
}

func builtRoute(t *testing.T, model string, srcs ...routes.Source) *gatewayv1.HTTPRoute {
	t.Helper()
	r, err := routes.BuildRoute(routesConfig(), model, srcs)
	if err != nil {
		t.Fatal(err)
	}
	r.ResourceVersion = "1"
	return r
}

func src(name, model string, port int32) routes.Source {
	return routes.Source{Kind: "Deployment", Namespace: srcNS, Name: name, Model: model, Service: model, Port: port}
}

func drain(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestReconcileModel(t *testing.T) {
	gw := routes.DefaultGatewayNamespace
	llama := map[string]string{nameKey: "llama"}
	foreign := builtRoute(t, "llama", src("d", "llama", 8000))
	foreign.Labels = map[string]string{"team": "x"}
	conflictErr := apierrors.NewConflict(schema.GroupResource{Group: gatewayv1.GroupName, Resource: "httproutes"}, "llama-router", errors.New("stale"))

	cases := map[string]struct {
		objs           []client.Object
		failVerb       string
		failErr        error
		wantWrites     []string
		wantErr        bool
		wantTerminal   bool
		wantEvents     []string // reason substrings, in order
		wantState      RouteState
		wantRouteGauge bool
		wantRequeue    time.Duration
	}{
		"create": {
			objs:       []client.Object{deploymentObj("d", llama, nil), grantObj(t, "llama")},
			wantWrites: []string{"create *v1.HTTPRoute/" + gw + "/llama-router"},
			wantEvents: []string{"Normal RouteCreated"},
			wantState:  RouteStateManaged,
		},
		"up to date: no write": {
			objs: []client.Object{
				deploymentObj("d", map[string]string{nameKey: "llama", portKey: "9000"}, nil),
				builtRoute(t, "llama", src("d", "llama", 9000)),
			},
			wantState: RouteStateManaged,
		},
		"a workload joins that adds nothing to the route: no write, no event": {
			objs: []client.Object{
				deploymentObj("d", map[string]string{nameKey: "llama", portKey: "9000"}, nil),
				deploymentObj("d2", map[string]string{nameKey: "llama", portKey: "9000"}, nil),
				builtRoute(t, "llama", src("d", "llama", 9000)),
			},
			wantState: RouteStateManaged,
		},
		"model and service from annotations": {
			objs:       []client.Object{deploymentObj("d", nil, map[string]string{nameKey: "llama", svcKey: "llama-svc"}), grantObj(t, "llama-svc")},
			wantWrites: []string{"create *v1.HTTPRoute/" + gw + "/llama-router"},
			wantEvents: []string{"Normal RouteCreated"},
			wantState:  RouteStateManaged,
		},
		"port changed: update": {
			objs: []client.Object{
				deploymentObj("d", map[string]string{nameKey: "llama", portKey: "9000"}, nil),
				builtRoute(t, "llama", src("d", "llama", 8000)),
			},
			wantWrites: []string{"update *v1.HTTPRoute/" + gw + "/llama-router"},
			wantEvents: []string{"Normal RouteUpdated"},
			wantState:  RouteStateManaged,
		},
		"update conflict: the cache is behind, retried without an error": {
			objs: []client.Object{
				deploymentObj("d", map[string]string{nameKey: "llama", portKey: "9000"}, nil),
				builtRoute(t, "llama", src("d", "llama", 8000)),
			},
			failVerb: "update", failErr: conflictErr,
			wantWrites:  []string{"update *v1.HTTPRoute/" + gw + "/llama-router"},
			wantRequeue: cacheBehindRetry,
		},
		"no sources left: delete": {
			objs:       []client.Object{builtRoute(t, "llama", src("d", "llama", 8000))},
			wantWrites: []string{"delete *v1.HTTPRoute/" + gw + "/llama-router"},
		},
		"being deleted is not live": {
			objs: []client.Object{
				func() client.Object {
					d := deploymentObj("d", llama, nil)
					d.Finalizers = []string{"example.com/hold"}
					d.DeletionTimestamp = ptr.To(metav1.Now())
					return d
				}(),
				builtRoute(t, "llama", src("d", "llama", 8000)),
			},
			wantWrites: []string{"delete *v1.HTTPRoute/" + gw + "/llama-router"},
		},
		"foreign route: no write, conflict": {
			objs:       []client.Object{deploymentObj("d", llama, nil), foreign},
			wantEvents: []string{"Warning RouteConflict"},
			wantState:  RouteStateConflict,
		},
		"foreign route without sources: never deleted": {
			objs: []client.Object{foreign},
		},
		"bad port: warning, default port": {
			objs:       []client.Object{deploymentObj("d", map[string]string{nameKey: "llama", portKey: "http"}, nil), grantObj(t, "llama")},
			wantWrites: []string{"create *v1.HTTPRoute/" + gw + "/llama-router"},
			wantEvents: []string{"Warning InvalidSource", "Normal RouteCreated"},
			wantState:  RouteStateManaged,
		},
		"no grant admits the Service yet: the route waits for it": {
			objs:        []client.Object{deploymentObj("d", llama, nil)},
			wantRequeue: grantsWaitRecheck,
		},
		"create failure is retried": {
			objs:     []client.Object{deploymentObj("d", llama, nil), grantObj(t, "llama")},
			failVerb: "create", failErr: apierrors.NewServiceUnavailable("etcd"),
			wantWrites: []string{"create *v1.HTTPRoute/" + gw + "/llama-router"},
			wantErr:    true,
		},
		"too many backends: terminal, existing route kept": {
			objs: func() []client.Object {
				objs := []client.Object{builtRoute(t, "llama", src("d", "llama", 8000))}
				for i := range routes.MaxBackendRefsPerRule + 1 {
					objs = append(objs, deploymentObj(fmt.Sprintf("d%02d", i),
						map[string]string{nameKey: "llama", portKey: fmt.Sprint(8000 + i)}, nil))
				}
				return objs
			}(),
			wantErr: true, wantTerminal: true,
			wantEvents: slices.Repeat([]string{"Warning RouteInvalid"}, routes.MaxBackendRefsPerRule+1),
			wantState:  RouteStateInvalid,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, w, rec := fakeReconciler(t, tc.objs, tc.failVerb, tc.failErr)
			before := testutil.ToFloat64(RouteReconcileErrors.WithLabelValues(string(ObjectRoute)))

			res, err := r.Reconcile(t.Context(), ModelKey("llama"))

			if (err != nil) != tc.wantErr {
				t.Fatalf("Reconcile error = %v, want error %v", err, tc.wantErr)
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
			if got := errors.Is(err, reconcile.TerminalError(nil)); got != tc.wantTerminal {
				t.Errorf("terminal = %v, want %v (err %v)", got, tc.wantTerminal, err)
			}
			after := testutil.ToFloat64(RouteReconcileErrors.WithLabelValues(string(ObjectRoute)))
			if wantInc := map[bool]float64{true: 1, false: 0}[tc.wantErr]; after-before != wantInc {
				t.Errorf("loraplane_route_reconcile_errors_total{object=httproute} grew by %v, want %v", after-before, wantInc)
			}
			if diff := cmp.Diff(tc.wantWrites, w.log); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			checkEventsAndState(t, rec, r, "llama", tc.wantEvents, tc.wantState)
		})
	}
}

func grantObj(t *testing.T, services ...string) *gatewayv1beta1.ReferenceGrant {
	t.Helper()
	gs, err := routes.AssignReferenceGrants(routesConfig(), srcNS, services, nil, nil)
	if err != nil || len(gs) != 1 {
		t.Fatalf("building grant: %v (%d)", err, len(gs))
	}
	gs[0].ResourceVersion = "1"
	return gs[0]
}

// namedGrant is a grant of ours called name admitting services.
func namedGrant(t *testing.T, name string, services ...string) *gatewayv1beta1.ReferenceGrant {
	t.Helper()
	g := grantObj(t, services...)
	g.Name = name
	return g
}

func TestReconcileGrants(t *testing.T) {
	grantName := routes.ReferenceGrantName(routes.DefaultGatewayNamespace, 0)
	secondName := routes.ReferenceGrantName(routes.DefaultGatewayNamespace, 1)
	toA := func(model, svc string) *gatewayv1.HTTPRoute {
		s := src("d-"+model, model, 8000)
		s.Service = svc
		return builtRoute(t, model, s)
	}
	manyRoutes := func() []client.Object {
		var objs []client.Object
		for i := range routes.MaxReferenceGrantTo + 1 {
			objs = append(objs, toA(fmt.Sprintf("m%02d", i), fmt.Sprintf("svc-%02d", i)))
		}
		return objs
	}
	foreignRoute := toA("x", "svc-x")
	foreignRoute.Labels = nil
	foreignGrant := grantObj(t, "svc-1")
	foreignGrant.Labels = nil

	cases := map[string]struct {
		objs       []client.Object
		failVerb   string
		wantWrites []string
		wantErr    bool
		wantTo     []string
	}{
		"first route: create": {
			objs:       []client.Object{toA("m1", "svc-1")},
			wantWrites: []string{"create *v1beta1.ReferenceGrant/a/" + grantName},
			wantTo:     []string{"svc-1"},
		},
		"up to date": {
			objs:   []client.Object{toA("m1", "svc-1"), toA("m2", "svc-1"), grantObj(t, "svc-1")},
			wantTo: []string{"svc-1"},
		},
		"route gone: shrink": {
			objs:       []client.Object{toA("m1", "svc-1"), grantObj(t, "svc-1", "svc-2")},
			wantWrites: []string{"update *v1beta1.ReferenceGrant/a/" + grantName},
			wantTo:     []string{"svc-1"},
		},
		"foreign routes do not count": {
			objs:       []client.Object{foreignRoute, grantObj(t, "svc-x")},
			wantWrites: []string{"delete *v1beta1.ReferenceGrant/a/" + grantName},
		},
		"no route left: delete": {
			objs:       []client.Object{grantObj(t, "svc-1")},
			wantWrites: []string{"delete *v1beta1.ReferenceGrant/a/" + grantName},
		},
		"foreign grant with our name: untouched, next name used": {
			objs:       []client.Object{toA("m1", "svc-1"), foreignGrant},
			wantWrites: []string{"create *v1beta1.ReferenceGrant/a/" + secondName},
			wantTo:     []string{"svc-1"},
		},
		"service added while the first grant is full: only the grant with room written": {
			objs: func() []client.Object {
				var objs []client.Object
				var full []string
				for i := range routes.MaxReferenceGrantTo {
					svc := fmt.Sprintf("svc-%02d", 2*i)
					full = append(full, svc)
					objs = append(objs, toA("m"+svc, svc))
				}
				// svc-01 sorts into the middle of the first grant's Services.
				return append(objs, toA("mz", "svc-zz"), toA("m01", "svc-01"),
					namedGrant(t, grantName, full...), namedGrant(t, secondName, "svc-zz"))
			}(),
			wantWrites: []string{"update *v1beta1.ReferenceGrant/a/" + secondName},
			wantTo: func() []string {
				out := []string{"svc-01", "svc-zz"}
				for i := range routes.MaxReferenceGrantTo {
					out = append(out, fmt.Sprintf("svc-%02d", 2*i))
				}
				slices.Sort(out)
				return out
			}(),
		},
		"service admitted twice: dropped from the later grant": {
			objs: []client.Object{toA("m1", "svc-1"), toA("m2", "svc-2"),
				namedGrant(t, grantName, "svc-1"), namedGrant(t, secondName, "svc-1", "svc-2")},
			wantWrites: []string{"update *v1beta1.ReferenceGrant/a/" + secondName},
			wantTo:     []string{"svc-1", "svc-2"},
		},
		"grant emptied: deleted, the other untouched": {
			objs: []client.Object{toA("m1", "svc-1"),
				namedGrant(t, grantName, "svc-1"), namedGrant(t, secondName, "svc-2")},
			wantWrites: []string{"delete *v1beta1.ReferenceGrant/a/" + secondName},
			wantTo:     []string{"svc-1"},
		},
		"grant being deleted: its name is not reused": {
			objs: func() []client.Object {
				g := namedGrant(t, grantName, "svc-1")
				g.Finalizers = []string{"example.com/hold"}
				g.DeletionTimestamp = ptr.To(metav1.Now())
				return []client.Object{toA("m1", "svc-1"), g}
			}(),
			wantWrites: []string{"create *v1beta1.ReferenceGrant/a/" + secondName},
			wantTo:     []string{"svc-1", "svc-1"},
		},
		"more than 16 services: two grants": {
			objs: manyRoutes(),
			wantWrites: []string{
				"create *v1beta1.ReferenceGrant/a/" + grantName,
				"create *v1beta1.ReferenceGrant/a/" + secondName,
			},
			wantTo: func() []string {
				var out []string
				for i := range routes.MaxReferenceGrantTo + 1 {
					out = append(out, fmt.Sprintf("svc-%02d", i))
				}
				return out
			}(),
		},
		"failed apply: surplus kept": {
			objs: func() []client.Object {
				surplus := grantObj(t, "svc-old")
				surplus.Name = secondName
				return []client.Object{toA("m1", "svc-1"), grantObj(t, "svc-0"), surplus}
			}(),
			failVerb:   "update",
			wantWrites: []string{"update *v1beta1.ReferenceGrant/a/" + grantName},
			wantErr:    true,
			wantTo:     []string{"svc-0", "svc-old"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r, w, _ := fakeReconciler(t, tc.objs, tc.failVerb, errors.New("injected"))
			_, err := r.Reconcile(t.Context(), GrantsKey("a"))
			if (err != nil) != tc.wantErr {
				t.Fatalf("Reconcile error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantWrites, w.log); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			var list gatewayv1beta1.ReferenceGrantList
			if err := r.cache.List(t.Context(), &list, client.InNamespace("a"),
				client.MatchingLabels{routes.ManagedByLabel: routes.ManagedByValue}); err != nil {
				t.Fatal(err)
			}
			var to []string
			for _, g := range list.Items {
				to = append(to, routes.AdmittedServices(&g)...)
			}
			slices.Sort(to)
			if diff := cmp.Diff(tc.wantTo, to); diff != "" {
				t.Errorf("services admitted by our grants (-want +got):\n%s", diff)
			}
		})
	}
}

// checkEventsAndState fails unless the events recorded since the last drain start with the
// wanted reasons, in order, and the model's route state is wantState.
func checkEventsAndState(t *testing.T, rec *events.FakeRecorder, r *RouteReconciler, model string, wantEvents []string, wantState RouteState) {
	t.Helper()
	got := drain(rec)
	if len(got) != len(wantEvents) {
		t.Fatalf("events %q, want %d matching %q", got, len(wantEvents), wantEvents)
	}
	for i := range got {
		if !strings.HasPrefix(got[i], wantEvents[i]) {
			t.Errorf("event %d = %q, want prefix %q", i, got[i], wantEvents[i])
		}
	}
	var st RouteState
	if m := r.states.byModel[model]; m != nil {
		st = m.state
	}
	if st != wantState {
		t.Errorf("route state %q, want %q", st, wantState)
	}
}
