package controller_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/testenv"
)

const (
	nameKey  = v1alpha1.ModelNameLabel
	portKey  = v1alpha1.ModelPortLabel
	svcKey   = v1alpha1.ServiceNameAnnotation
	pathsKey = v1alpha1.CustomPathsAnnotation
)

// TestRouteFollowsWorkload: a Deployment's route is created with the documented shape,
// follows port and custom path changes, is not rewritten without a change, and moves when
// the model label is renamed (old route deleted, new one created, grant follows).
func TestRouteFollowsWorkload(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	startRouter(t, env.Config, gw, []string{ns})
	model := "llama-" + ns

	d := createDeployment(t, ns, "llama", modelLabels(model, portKey, "8080"), nil)
	route := waitRoute(t, gw, model, wantBackends(fmt.Sprintf("0:%s/%s:8080", ns, model)))
	if err := checkShape(route, gw, model, routes.DefaultPaths); err != nil {
		t.Errorf("route shape: %v", err)
	}
	if got := route.Annotations[routes.ScopesAnnotation]; got != "Deployment/"+ns {
		t.Errorf("scopes annotation %q", got)
	}
	waitGrant(t, gw, ns, model)
	waitEvent(t, ns, "llama", controller.ReasonRouteCreated)

	patchMeta(t, d, map[string]*string{portKey: ptr.To("9000")}, nil)
	waitRoute(t, gw, model, wantBackends(fmt.Sprintf("0:%s/%s:9000", ns, model)))
	waitEvent(t, ns, "llama", controller.ReasonRouteUpdated)

	patchMeta(t, d, nil, map[string]*string{pathsKey: ptr.To(" /v1/custom ,/v1/custom,, /v2/extra ")})
	route = waitRoute(t, gw, model, func(r *gatewayv1.HTTPRoute) error {
		want := slices.Sorted(slices.Values(append(slices.Clone(routes.DefaultPaths), "/v1/custom", "/v2/extra")))
		if got := paths(r); !slices.Equal(got, want) {
			return fmt.Errorf("paths %v, want %v", got, want)
		}
		return nil
	})

	// A change that does not affect the route reconciles but writes nothing.
	touchAndWaitReconcile(t, d)
	if now := getRoute(t, gw, route.Name); now == nil || now.ResourceVersion != route.ResourceVersion {
		t.Errorf("route rewritten without a change: resourceVersion %s -> %v", route.ResourceVersion, now)
	}

	// A bad port label is reported and replaced by the default.
	patchMeta(t, d, map[string]*string{portKey: ptr.To("http")}, nil)
	waitRoute(t, gw, model, wantBackends(fmt.Sprintf("0:%s/%s:8000", ns, model)))
	if e := waitEvent(t, ns, "llama", controller.ReasonInvalidSource); e.Type != "Warning" || !strings.Contains(e.Note, portKey) {
		t.Errorf("InvalidSource event: type %s note %q, want a Warning naming %s", e.Type, e.Note, portKey)
	}

	// Renaming the model moves the route and the grant.
	renamed := model + "-v2"
	patchMeta(t, d, map[string]*string{nameKey: ptr.To(renamed)}, nil)
	waitRouteGone(t, gw, model)
	waitRoute(t, gw, renamed, wantBackends(fmt.Sprintf("0:%s/%s:8000", ns, renamed)))
	waitGrant(t, gw, ns, renamed)

	if v, ok := gaugeValue(t, "loraplane_routes", map[string]string{"state": "managed"}); !ok || v < 1 {
		t.Errorf("loraplane_routes{state=managed} = %v (present %v), want >= 1", v, ok)
	}
}

// checkShape checks parent, matches and timeout of a route built with the defaults.
func checkShape(r *gatewayv1.HTTPRoute, gw, model string, wantPaths []string) error {
	if len(r.Spec.ParentRefs) != 1 || r.Spec.ParentRefs[0].Name != routes.DefaultGatewayName ||
		ptr.Deref(r.Spec.ParentRefs[0].Namespace, "") != gatewayv1.Namespace(gw) {
		return fmt.Errorf("parentRefs %+v, want %s/%s", r.Spec.ParentRefs, gw, routes.DefaultGatewayName)
	}
	for _, rule := range r.Spec.Rules {
		// The default --route-timeout: AIBrix's newest default, 600 s.
		if rule.Timeouts == nil || ptr.Deref(rule.Timeouts.Request, "") != "10m" {
			var got gatewayv1.Duration
			if rule.Timeouts != nil {
				got = ptr.Deref(rule.Timeouts.Request, "")
			}
			return fmt.Errorf("rule request timeout %q, want 10m", got)
		}
		for _, m := range rule.Matches {
			if len(m.Headers) != 1 || m.Headers[0].Name != "model" || m.Headers[0].Value != model ||
				ptr.Deref(m.Headers[0].Type, "") != gatewayv1.HeaderMatchExact {
				return fmt.Errorf("match headers %+v, want model exact %q", m.Headers, model)
			}
			if ptr.Deref(m.Path.Type, "") != gatewayv1.PathMatchPathPrefix {
				return fmt.Errorf("path match type %v, want PathPrefix", m.Path.Type)
			}
		}
	}
	if got, want := paths(r), slices.Sorted(slices.Values(wantPaths)); !slices.Equal(got, want) {
		return fmt.Errorf("paths %v, want %v", got, want)
	}
	return nil
}

// TestModelAdapterSource: a ModelAdapter routes its own name to its own Service, once the
// adapter-controller published it; removing the adapter removes the route and the grant.
// This router watches every namespace (the production default), unlike the other tests.
func TestModelAdapterSource(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	startRouter(t, env.Config, gw, nil, func(o *setup.Options) { o.WatchNamespaces = nil })
	name := "lora-" + ns

	adapter := &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			// The service-name annotation cannot redirect an adapter.
			Annotations: map[string]string{svcKey: "elsewhere"}},
		Spec: v1alpha1.ModelAdapterSpec{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{nameKey: "base"}},
			ArtifactURL: "huggingface://org/lora",
		},
	}
	if err := k8s.Create(context.Background(), adapter); err != nil {
		t.Fatalf("creating ModelAdapter: %v", err)
	}
	if err := k8s.Create(context.Background(), adapterService(adapter, 8000)); err != nil {
		t.Fatalf("creating the adapter's Service: %v", err)
	}
	waitRoute(t, gw, name, wantBackends(fmt.Sprintf("0:%s/%s:8000", ns, name)))
	waitGrant(t, gw, ns, name)
	waitEvent(t, ns, name, controller.ReasonRouteCreated)

	deleteObject(t, adapter)
	waitRouteGone(t, gw, name)
	waitGrant(t, gw, ns)
}

// TestStatefulSetSource: a StatefulSet (model from the annotation, Service from its
// annotation) and a Deployment share a model and Service: one backend; the route stays
// while either is left.
func TestStatefulSetSource(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	startRouter(t, env.Config, gw, []string{ns})
	model := "sts-" + ns

	createStatefulSet(t, ns, "engine", nil, map[string]string{nameKey: model, svcKey: "engine-svc"})
	route := waitRoute(t, gw, model, wantBackends("0:"+ns+"/engine-svc:8000"))
	if got := route.Annotations[routes.ScopesAnnotation]; got != "StatefulSet/"+ns {
		t.Errorf("scopes annotation %q", got)
	}
	d := createDeployment(t, ns, "engine-b", modelLabels(model), map[string]string{svcKey: "engine-svc"})
	waitRoute(t, gw, model, func(r *gatewayv1.HTTPRoute) error {
		want := "Deployment/" + ns + ",StatefulSet/" + ns
		if got := r.Annotations[routes.ScopesAnnotation]; got != want {
			return fmt.Errorf("scopes %q, want %q", got, want)
		}
		return wantBackends("0:" + ns + "/engine-svc:8000")(r)
	})
	deleteObject(t, d)
	waitRoute(t, gw, model, func(r *gatewayv1.HTTPRoute) error {
		if got := r.Annotations[routes.ScopesAnnotation]; got != "StatefulSet/"+ns {
			return fmt.Errorf("scopes %q", got)
		}
		return nil
	})
	waitGrant(t, gw, ns, "engine-svc")
}

// TestOptionalKinds: an optional kind whose CRD is absent is skipped (the router starts and
// routes the other kinds); one whose CRD is installed is a source like the built-in kinds.
func TestOptionalKinds(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	widgets := installWidgetCRD(t)
	r := startRouter(t, env.Config, gw, []string{ns}, func(o *setup.Options) {
		o.ExtraWorkloadKinds = []string{"leaderworkerset.x-k8s.io/v1/LeaderWorkerSet", widgets}
	})
	r.waitOpen(t)
	if v, ok := gaugeValue(t, "loraplane_cache_resource_skipped",
		map[string]string{"controller": setup.ControllerName, "kind": "LeaderWorkerSet"}); !ok || v != 1 {
		t.Errorf("loraplane_cache_resource_skipped{kind=LeaderWorkerSet} = %v (present %v), want 1", v, ok)
	}

	model := "widget-" + ns
	w := &unstructured.Unstructured{}
	w.SetAPIVersion("example.loraplane.io/v1")
	w.SetKind("Widget")
	w.SetNamespace(ns)
	w.SetName("w1")
	w.SetLabels(modelLabels(model, portKey, "7000"))
	if err := k8s.Create(context.Background(), w); err != nil {
		t.Fatalf("creating Widget: %v", err)
	}
	route := waitRoute(t, gw, model, wantBackends(fmt.Sprintf("0:%s/%s:7000", ns, model)))
	if got := route.Annotations[routes.ScopesAnnotation]; got != "Widget/"+ns {
		t.Errorf("scopes annotation %q", got)
	}
	createDeployment(t, ns, "plain", modelLabels("plain-"+ns), nil)
	waitRoute(t, gw, "plain-"+ns, nil)

	deleteObject(t, w)
	waitRouteGone(t, gw, model)
}

// installWidgetCRD installs a namespaced test CRD once and returns its group/version/Kind.
func installWidgetCRD(t *testing.T) string {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.loraplane.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.loraplane.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
	c, err := client.New(env.Config, client.Options{Scheme: crdScheme()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating the Widget CRD: %v", err)
	}
	eventually(t, "the Widget API to be served", func() error {
		l := &unstructured.UnstructuredList{}
		l.SetAPIVersion("example.loraplane.io/v1")
		l.SetKind("WidgetList")
		return k8s.List(context.Background(), l)
	})
	return "example.loraplane.io/v1/Widget"
}

func crdScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// TestForeignRouteUntouched: a route with our name that we do not own is never modified;
// every source gets a RouteConflict event and the conflict metric counts it. Once the
// foreign route is removed, ours is created.
func TestForeignRouteUntouched(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	model := "foreign-" + ns
	foreign := &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: gw, Name: routes.RouteName(model), Labels: map[string]string{"team": "other"}},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{Name: "other-gateway"}}},
			Rules: []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
				BackendObjectReference: gatewayv1.BackendObjectReference{Name: "elsewhere", Port: ptr.To[gatewayv1.PortNumber](80)},
			}}}}},
		},
	}
	if err := k8s.Create(context.Background(), foreign); err != nil {
		t.Fatalf("creating the foreign route: %v", err)
	}
	startRouter(t, env.Config, gw, []string{ns})
	engineDeployment := createDeployment(t, ns, "engine", modelLabels(model), nil)
	createStatefulSet(t, ns, "engine-2", modelLabels(model), nil)

	for _, src := range []string{"engine", "engine-2"} {
		if e := waitEvent(t, ns, src, controller.ReasonRouteConflict); e.Type != "Warning" {
			t.Errorf("RouteConflict event on %s has type %s, want Warning", src, e.Type)
		}
	}
	eventually(t, "loraplane_routes{state=conflict} >= 1", func() error {
		if v, _ := gaugeValue(t, "loraplane_routes", map[string]string{"state": "conflict"}); v < 1 {
			return fmt.Errorf("it is %v", v)
		}
		return nil
	})
	// The conflict was reconciled (its events and metric say so); one more reconcile of the
	// model, forced by a change of a source, must not touch the foreign route either.
	touchAndWaitReconcile(t, engineDeployment)
	now := getRoute(t, gw, foreign.Name)
	if now == nil || now.ResourceVersion != foreign.ResourceVersion || routes.IsManaged(now) {
		t.Fatalf("the foreign route was modified or removed: %+v", now)
	}
	if got := grantServices(t, gw, ns); len(got) != 0 {
		t.Errorf("grants admit %v for a route that is not ours", got)
	}

	deleteObject(t, foreign)
	waitRoute(t, gw, model, func(r *gatewayv1.HTTPRoute) error {
		if !routes.IsManaged(r) {
			return fmt.Errorf("not managed (yet)")
		}
		return wantBackends("0:" + ns + "/" + model + ":8000")(r)
	})
	waitGrant(t, gw, ns, model)
}

// TestDriftRepaired: a route or grant deleted or edited by hand is restored.
func TestDriftRepaired(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	startRouter(t, env.Config, gw, []string{ns})
	model := "drift-" + ns
	createDeployment(t, ns, "engine", modelLabels(model), nil)
	want := wantBackends("0:" + ns + "/" + model + ":8000")
	route := waitRoute(t, gw, model, want)
	waitGrant(t, gw, ns, model)

	deleteObject(t, route)
	restored := waitRoute(t, gw, model, func(r *gatewayv1.HTTPRoute) error {
		if r.UID == route.UID {
			return fmt.Errorf("still the deleted route")
		}
		return want(r)
	})

	edited := restored.DeepCopy()
	edited.Spec.Rules[0].BackendRefs[0].Port = ptr.To[gatewayv1.PortNumber](1234)
	delete(edited.Annotations, routes.ScopesAnnotation)
	edited.Labels["team"] = "ops"
	if err := k8s.Update(context.Background(), edited); err != nil {
		t.Fatalf("editing the route: %v", err)
	}
	waitRoute(t, gw, model, func(r *gatewayv1.HTTPRoute) error {
		if r.Annotations[routes.ScopesAnnotation] == "" {
			return fmt.Errorf("scopes annotation not restored")
		}
		if r.Labels["team"] != "ops" {
			return fmt.Errorf("a label someone else added was dropped: %v", r.Labels)
		}
		return want(r)
	})

	var grants gatewayv1beta1.ReferenceGrantList
	if err := k8s.List(context.Background(), &grants, client.InNamespace(ns)); err != nil || len(grants.Items) != 1 {
		t.Fatalf("listing grants: %v (%d)", err, len(grants.Items))
	}
	g := grants.Items[0]
	g.Spec.To = append(g.Spec.To, gatewayv1beta1.ReferenceGrantTo{Kind: "Service"}) // every Service
	if err := k8s.Update(context.Background(), &g); err != nil {
		t.Fatalf("widening the grant: %v", err)
	}
	waitGrant(t, gw, ns, model)
	deleteObject(t, &g)
	eventually(t, "the deleted grant to be recreated", func() error {
		var l gatewayv1beta1.ReferenceGrantList
		if err := k8s.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
			return err
		}
		if len(l.Items) != 1 || l.Items[0].UID == g.UID {
			return fmt.Errorf("%d grants, first is the deleted one: %v", len(l.Items), len(l.Items) > 0 && l.Items[0].UID == g.UID)
		}
		return nil
	})
	waitGrant(t, gw, ns, model)
}

// deletionLog records when objects were deleted, from a watch independent of the router.
type deletionLog struct {
	mu      sync.Mutex
	deleted map[string]time.Time // kind/namespace/name -> when
}

func watchDeletions(t *testing.T, list client.ObjectList, opts ...client.ListOption) *deletionLog {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := wc.Watch(ctx, list, opts...)
	if err != nil {
		t.Fatalf("watching: %v", err)
	}
	log := &deletionLog{deleted: map[string]time.Time{}}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if ev.Type != watch.Deleted {
				continue
			}
			if obj, ok := ev.Object.(client.Object); ok {
				log.mu.Lock()
				log.deleted[fmt.Sprintf("%T/%s/%s", obj, obj.GetNamespace(), obj.GetName())] = time.Now()
				log.mu.Unlock()
			}
		}
	}()
	return log
}

func (l *deletionLog) when(obj client.Object) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.deleted[fmt.Sprintf("%T/%s/%s", obj, obj.GetNamespace(), obj.GetName())]
	return at, ok
}

// TestGarbageCollectionAfterRestart: a workload deleted while the router is down loses its
// route and grant after the restarted router's caches sync, and not before: the initial
// Deployment list is held back 5s by a proxy, and throughout the delay the gate stays closed,
// /readyz answers 5xx and neither the orphan nor the live route or grant is touched. A watch independent of the
// router proves the live route and grant are never deleted.
func TestGarbageCollectionAfterRestart(t *testing.T) {
	needEnv(t)
	const delay = 5 * time.Second
	gw, nsKeep, nsGone := newNamespace(t, "gw"), newNamespace(t, "keep"), newNamespace(t, "gone")
	watched := []string{nsKeep, nsGone}
	keepModel, goneModel := "keep-"+nsKeep, "gone-"+nsGone

	first := startRouter(t, env.Config, gw, watched)
	createDeployment(t, nsKeep, "engine", modelLabels(keepModel), nil)
	gone := createDeployment(t, nsGone, "engine", modelLabels(goneModel), nil)
	keepRoute := waitRoute(t, gw, keepModel, nil)
	goneRoute := waitRoute(t, gw, goneModel, nil)
	waitGrant(t, gw, nsKeep, keepModel)
	waitGrant(t, gw, nsGone, goneModel)
	var keepGrants gatewayv1beta1.ReferenceGrantList
	if err := k8s.List(context.Background(), &keepGrants, client.InNamespace(nsKeep)); err != nil || len(keepGrants.Items) != 1 {
		t.Fatalf("listing the grants in %s: %v (%d)", nsKeep, err, len(keepGrants.Items))
	}
	keepGrant := &keepGrants.Items[0]

	first.stop()
	deleteObject(t, gone)
	eventually(t, "the deleted Deployment to be gone", func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(gone), gone); !apierrors.IsNotFound(err) {
			return fmt.Errorf("get: %w", err)
		}
		return nil
	})

	routeDeletions := watchDeletions(t, &gatewayv1.HTTPRouteList{}, client.InNamespace(gw))
	grantDeletions := watchDeletions(t, &gatewayv1beta1.ReferenceGrantList{})

	proxy := newSlowProxy(t, env.Config)
	for _, ns := range append([]string{gw}, watched...) {
		proxy.Delay("/apis/apps/v1/namespaces/"+ns+"/deployments", delay)
	}
	start := time.Now()
	second := startRouter(t, proxy.Config(), gw, watched)
	var notReady time.Duration // when /readyz last answered 5xx

	// While the Deployment caches fill, nothing may be collected.
	for time.Since(start) < delay-300*time.Millisecond {
		select {
		case <-second.app.Gate.Opened():
			t.Fatalf("the gate opened %s after start, before the delayed Deployment list (%s)", time.Since(start), delay)
		default:
		}
		if code := second.readyzStatus(); code == http.StatusOK {
			t.Fatalf("/readyz 200 %s after start, before the delayed Deployment list (%s)", time.Since(start), delay)
		} else if code >= http.StatusInternalServerError { // 500 from controller-runtime; any 5xx is not ready
			notReady = time.Since(start)
		}
		if getRoute(t, gw, goneRoute.Name) == nil {
			t.Fatalf("the orphaned route was deleted %s after start, before the caches synced", time.Since(start))
		}
		if got := grantServices(t, gw, nsGone); len(got) == 0 {
			t.Fatalf("the orphaned grant was deleted %s after start, before the caches synced", time.Since(start))
		}
		if getRoute(t, gw, keepRoute.Name) == nil {
			t.Fatalf("the live route was deleted %s after start", time.Since(start))
		}
		time.Sleep(100 * time.Millisecond)
	}

	second.waitOpen(t)
	eventually(t, "/readyz 200 once the caches synced", func() error {
		if code := second.readyzStatus(); code != http.StatusOK {
			return fmt.Errorf("/readyz answered %d", code)
		}
		return nil
	})
	if notReady == 0 {
		t.Error("/readyz never answered 5xx while the Deployment list was delayed")
	}
	t.Logf("/readyz 5xx until %s after start (Deployment list delayed %s), then 200; nothing collected before", notReady, delay)
	waitRouteGone(t, gw, goneModel)
	waitGrant(t, gw, nsGone)

	if at, ok := routeDeletions.when(goneRoute); !ok || at.Before(start.Add(delay)) {
		t.Errorf("orphaned route deletion seen %v (at %s after start), want after the %s delay", ok, at.Sub(start), delay)
	}
	// The live route and grant stay, untouched.
	if r := getRoute(t, gw, keepRoute.Name); r == nil || r.UID != keepRoute.UID {
		t.Errorf("the live route was replaced or removed: %+v", r)
	}
	waitGrant(t, gw, nsKeep, keepModel)
	if at, ok := routeDeletions.when(keepRoute); ok {
		t.Errorf("the live route was deleted %s after start", at.Sub(start))
	}
	if at, ok := grantDeletions.when(keepGrant); ok {
		t.Errorf("the live grant was deleted %s after start", at.Sub(start))
	}
}

// TestGatewayNamespaceMissing: while the gateway namespace does not exist, the router says
// so on every source (a Warning event naming the namespace) instead of failing its writes
// silently, keeps trying at a steady pace, and creates the route once the namespace exists.
func TestGatewayNamespaceMissing(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t, "src")
	gw := "gw-missing-" + strings.TrimPrefix(ns, "src-")
	startRouter(t, env.Config, gw, []string{ns}, func(o *setup.Options) { o.GatewayNamespaceRetry = time.Second })
	model := "nogw-" + ns

	createDeployment(t, ns, "engine", modelLabels(model), nil)
	createStatefulSet(t, ns, "engine-2", modelLabels(model), nil)
	for _, src := range []string{"engine", "engine-2"} {
		e := waitEvent(t, ns, src, controller.ReasonGatewayNamespaceMissing)
		if e.Type != "Warning" || !strings.Contains(e.Note, fmt.Sprintf("namespace %q does not exist", gw)) {
			t.Errorf("event on %s: type %s, note %q; want a Warning naming namespace %s", src, e.Type, e.Note, gw)
		}
	}
	// The router keeps trying: more reconciles of the model are counted without any change.
	reconciles := testenv.ReconcileCount(controller.ControllerName)
	eventually(t, "two more reconciles while the namespace is missing", func() error {
		if n := testenv.ReconcileCount(controller.ControllerName) - reconciles; n < 2 {
			return fmt.Errorf("%v so far", n)
		}
		return nil
	})

	if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gw}}); err != nil {
		t.Fatalf("creating the gateway namespace: %v", err)
	}
	waitRoute(t, gw, model, wantBackends("0:"+ns+"/"+model+":8000"))
	waitGrant(t, gw, ns, model)
	waitEvent(t, ns, "engine", controller.ReasonRouteCreated)
}
