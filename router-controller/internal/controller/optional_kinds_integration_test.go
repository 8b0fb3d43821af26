package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/loraplane/loraplane/router-controller/internal/controller"
	"github.com/loraplane/loraplane/router-controller/internal/routes"
	"github.com/loraplane/loraplane/router-controller/internal/setup"
	"github.com/loraplane/loraplane/test/testenv"
)

// recheckPeriod is the re-check period of optional kinds in these tests (30s in production).
const recheckPeriod = time.Second

var lwsGVK = schema.GroupVersionKind{Group: "leaderworkerset.x-k8s.io", Version: "v1", Kind: "LeaderWorkerSet"}

// withLWS makes the router read LeaderWorkerSets and re-check optional kinds every second.
func withLWS(o *setup.Options) {
	o.ExtraWorkloadKinds = []string{setupKind(lwsGVK)}
	o.KindRecheckPeriod = recheckPeriod
}

// setupKind renders gvk as --extra-workload-kinds names it, and as the logs do.
func setupKind(gvk schema.GroupVersionKind) string {
	return gvk.Group + "/" + gvk.Version + "/" + gvk.Kind
}

// installLWS installs the LeaderWorkerSet CRD; it is removed again (and no longer served)
// when the test ends, so that the other tests find it missing.
func installLWS(t *testing.T) {
	t.Helper()
	crd := testenv.LeaderWorkerSetCRD()
	t.Cleanup(func() {
		if err := env.UninstallCRD(context.Background(), crd.Name, time.Minute); err != nil {
			t.Error(err)
		}
	})
	if err := env.InstallCRD(crd); err != nil {
		t.Fatal(err)
	}
}

func createCustom(t *testing.T, gvk schema.GroupVersionKind, ns, name string, labels map[string]string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetLabels(labels)
	if err := k8s.Create(context.Background(), u); err != nil {
		t.Fatalf("creating %s %s/%s: %v", gvk.Kind, ns, name, err)
	}
	return u
}

func kindLabels(gvk schema.GroupVersionKind) map[string]string {
	return map[string]string{"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind}
}

func wantGauge(t *testing.T, family string, labels map[string]string, want float64) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s%v = %v", family, labels, want), func() error {
		if v, ok := gaugeValue(t, family, labels); !ok || v != want {
			return fmt.Errorf("it is %v (present %v)", v, ok)
		}
		return nil
	})
}

// TestOptionalKindInstalledAfterStart: a router started before the LeaderWorkerSet CRD
// existed routes a model claimed by a LeaderWorkerSet within the re-check period after the
// CRD is installed, without a restart, and follows the LeaderWorkerSet's changes. When the
// CRD is deleted (the API server deletes the LeaderWorkerSets first, so their routes go) the
// kind is no longer watched and everything else keeps being routed.
func TestOptionalKindInstalledAfterStart(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "lws")
	r := startRouter(t, env.Config, gw, []string{ns}, withLWS)
	r.waitOpen(t)
	if r.app.Gate.Synced(lwsGVK) {
		t.Fatal("the LeaderWorkerSet CRD is installed already: another test left it behind")
	}
	wantGauge(t, "loraplane_source_kind_served", kindLabels(lwsGVK), 0)

	installLWS(t)
	model := "lws-" + ns
	lws := createCustom(t, lwsGVK, ns, "lws-1", modelLabels(model, portKey, "7000"))
	route := waitRoute(t, gw, model, wantBackends(fmt.Sprintf("0:%s/%s:7000", ns, model)))
	if got, want := route.Annotations[routes.ScopesAnnotation], "LeaderWorkerSet/"+ns; got != want {
		t.Errorf("scopes annotation %q, want %q", got, want)
	}
	wantGauge(t, "loraplane_source_kind_served", kindLabels(lwsGVK), 1)
	synced := map[string]string{"controller": setup.ControllerName, "kind": lwsGVK.Kind}
	wantGauge(t, "loraplane_cache_synced", synced, 1)
	wantGauge(t, "loraplane_cache_resource_skipped", synced, 0)

	// The watch runs: a change of the LeaderWorkerSet reaches the route.
	patchMeta(t, lws, map[string]*string{portKey: ptr.To("7001")}, nil)
	waitRoute(t, gw, model, wantBackends(fmt.Sprintf("0:%s/%s:7001", ns, model)))

	plain := "plain-" + ns
	createDeployment(t, ns, "plain", modelLabels(plain), nil)
	plainRoute := waitRoute(t, gw, plain, nil)

	if err := env.UninstallCRD(context.Background(), testenv.LeaderWorkerSetCRD().Name, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitRouteGone(t, gw, model)
	wantGauge(t, "loraplane_source_kind_served", kindLabels(lwsGVK), 0)
	wantGauge(t, "loraplane_cache_resource_skipped", synced, 1)
	wantGauge(t, "loraplane_cache_synced", synced, 0)
	if r.app.Gate.Synced(lwsGVK) {
		t.Error("the gate still reports LeaderWorkerSets synced after the CRD went")
	}
	later := "later-" + ns
	createDeployment(t, ns, "later", modelLabels(later), nil)
	waitRoute(t, gw, later, nil)
	if got := getRoute(t, gw, routes.RouteName(plain)); got == nil || got.UID != plainRoute.UID {
		t.Errorf("the route of the Deployment's model was replaced or deleted when the CRD went")
	}
}

// TestOptionalKindFailover: two replicas started before the CRD existed, one leading. Once
// the CRD is installed and a LeaderWorkerSet claims a model, the leader routes it and the
// standby watches the kind too; when leadership changes, the new leader keeps that route
// (same object) and follows the LeaderWorkerSet.
func TestOptionalKindFailover(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "failover")
	elect := func(o *setup.Options) {
		withLWS(o)
		o.LeaderElect = true
		o.LeaderElectionID = "router-failover-" + ns
		o.LeaderElectionNamespace = gw
	}
	a := startRouter(t, env.Config, gw, []string{ns}, elect)
	a.waitOpen(t)
	createDeployment(t, ns, "probe-a", modelLabels("probe-a-"+ns), nil)
	waitRoute(t, gw, "probe-a-"+ns, nil) // a leads
	b := startRouter(t, env.Config, gw, []string{ns}, elect)
	b.waitOpen(t)

	installLWS(t)
	model := "lws-" + ns
	lws := createCustom(t, lwsGVK, ns, "lws-1", modelLabels(model))
	route := waitRoute(t, gw, model, wantBackends(fmt.Sprintf("0:%s/%s:8000", ns, model)))
	eventually(t, "both replicas to watch LeaderWorkerSets", func() error {
		if !a.app.Gate.Synced(lwsGVK) || !b.app.Gate.Synced(lwsGVK) {
			return fmt.Errorf("leader %v, standby %v", a.app.Gate.Synced(lwsGVK), b.app.Gate.Synced(lwsGVK))
		}
		return nil
	})

	a.stop() // releases the lease
	createDeployment(t, ns, "probe-b", modelLabels("probe-b-"+ns), nil)
	waitRoute(t, gw, "probe-b-"+ns, nil) // b leads
	// b reconciles the model from its own cache of LeaderWorkerSets.
	patchMeta(t, lws, map[string]*string{portKey: ptr.To("7002")}, nil)
	after := waitRoute(t, gw, model, wantBackends(fmt.Sprintf("0:%s/%s:7002", ns, model)))
	if after.UID != route.UID {
		t.Errorf("the route of the LeaderWorkerSet's model was deleted and created again across the failover (uid %s, then %s)", route.UID, after.UID)
	}
}

// TestOptionalKindUnservedVersion: --extra-workload-kinds names a version its CRD does not
// serve. The router says so once, with the versions served, sets the served gauge to 0,
// and routes the other kinds as ever; when the CRD starts serving that version, the kind is
// watched within the re-check period.
func TestOptionalKindUnservedVersion(t *testing.T) {
	needEnv(t)
	logs := testenv.CaptureKlog(t)
	gadgets := schema.GroupVersionKind{Group: "versioned.loraplane.io", Version: "v1", Kind: "Gadget"}
	crd := testenv.CRD(gadgets.Group, gadgets.Kind, "v1beta1")
	t.Cleanup(func() {
		if err := env.UninstallCRD(context.Background(), crd.Name, time.Minute); err != nil {
			t.Error(err)
		}
	})
	if err := env.InstallCRD(crd); err != nil {
		t.Fatal(err)
	}
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "gadget")
	gadgetModel, plain := "gadget-"+ns, "plain-"+ns
	createCustom(t, schema.GroupVersionKind{Group: gadgets.Group, Version: "v1beta1", Kind: gadgets.Kind}, ns, "g1", modelLabels(gadgetModel))
	d := createDeployment(t, ns, "plain", modelLabels(plain), nil)
	r := startRouter(t, env.Config, gw, []string{ns}, func(o *setup.Options) {
		o.ExtraWorkloadKinds = []string{setupKind(gadgets)}
		o.KindRecheckPeriod = recheckPeriod
	})
	r.waitOpen(t)
	plainRoute := waitRoute(t, gw, plain, nil)
	eventually(t, "the unserved version to be reported", func() error {
		if l := logs.Lines("not served in this version", setupKind(gadgets), `servedVersions=["v1beta1"]`); len(l) != 1 {
			return fmt.Errorf("%d lines say so", len(l))
		}
		return nil
	})
	wantGauge(t, "loraplane_source_kind_served", kindLabels(gadgets), 0)

	// The router keeps reconciling: a change of the Deployment is reconciled, its route is
	// the same object, and the Gadget's model has no route.
	reconciles := testenv.ReconcileCount(controller.ControllerName)
	patchMeta(t, d, nil, map[string]*string{"note": ptr.To("touched")})
	eventually(t, "a reconcile after the Deployment changed", func() error {
		if n := testenv.ReconcileCount(controller.ControllerName); n <= reconciles {
			return fmt.Errorf("reconciles %v, before %v", n, reconciles)
		}
		return nil
	})
	if got := getRoute(t, gw, routes.RouteName(plain)); got == nil || got.UID != plainRoute.UID {
		t.Error("the Deployment's route was replaced or deleted")
	}
	if got := getRoute(t, gw, routes.RouteName(gadgetModel)); got != nil {
		t.Errorf("the Gadget's model has a route from an unserved version: %v", backends(got))
	}
	if n := len(logs.Lines("not served in this version", setupKind(gadgets))); n != 1 {
		t.Errorf("the unserved version was reported %d times, want once", n)
	}

	// The CRD serves v1 too: the Gadget is read in v1 and routed.
	if err := env.InstallCRD(testenv.CRD(gadgets.Group, gadgets.Kind, "v1beta1", "v1")); err != nil {
		t.Fatal(err)
	}
	waitRoute(t, gw, gadgetModel, func(route *gatewayv1.HTTPRoute) error {
		if got := route.Annotations[routes.ScopesAnnotation]; got != "Gadget/"+ns {
			return fmt.Errorf("scopes %q", got)
		}
		return nil
	})
	wantGauge(t, "loraplane_source_kind_served", kindLabels(gadgets), 1)
	if l := logs.Lines("Watching optional source kind", setupKind(gadgets)); len(l) != 1 {
		t.Errorf("%d lines report the watch of %s, want 1", len(l), setupKind(gadgets))
	}
}
