package controller_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/loraplane/loraplane/router-controller/internal/controller"
	"github.com/loraplane/loraplane/router-controller/internal/routes"
	"github.com/loraplane/loraplane/test/aibrixfixture"
)

// createAIBrixRoute creates the route AIBrix's model router makes for r, changed by edit
// (a hand edit, say) before it is written.
func createAIBrixRoute(t *testing.T, r aibrixfixture.Route, edit func(*gatewayv1.HTTPRoute)) *gatewayv1.HTTPRoute {
	t.Helper()
	u, err := aibrixfixture.HTTPRoute(r)
	if err != nil {
		t.Fatal(err)
	}
	route := &gatewayv1.HTTPRoute{}
	if err := aibrixfixture.To(u, route); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(route)
	}
	if err := k8s.Create(context.Background(), route, client.FieldOwner(aibrixfixture.FieldManager)); err != nil {
		t.Fatalf("creating HTTPRoute %s: %v", route.Name, err)
	}
	return route
}

// TestAIBrixRouteNotInAIBrixShapeNotAdopted: routes of AIBrix's names that are not exactly
// what AIBrix writes stay as they are, each with a RouteConflict event saying why: one
// edited to have hostnames, one of AIBrix v0.7.0 whose request timeout (120s, that release's
// default) differs from the router's default --route-timeout (10m, AIBrix's newest), which
// the event says to set.
func TestAIBrixRouteNotInAIBrixShapeNotAdopted(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	const llamaModel, llamaRoute = "llama-3.1-8b", "llama-3.1-8b-router"
	createDeployment(t, ns, "qwen", modelLabels(qwenModel), map[string]string{svcKey: "qwen"})
	createDeployment(t, ns, "llama", modelLabels(llamaModel), map[string]string{svcKey: "llama"})
	withHostnames := createAIBrixRoute(t, aibrixfixture.Route{Name: qwenRoute, Model: qwenModel, Namespace: ns, Service: "qwen", GatewayNamespace: gw},
		func(r *gatewayv1.HTTPRoute) { r.Spec.Hostnames = []gatewayv1.Hostname{"llm.example.com"} })
	v070 := createAIBrixRoute(t, aibrixfixture.Route{Name: llamaRoute, Model: llamaModel, Namespace: ns, Service: "llama", GatewayNamespace: gw,
		Paths: aibrixfixture.V070Paths, Timeout: aibrixfixture.V070Timeout}, nil)

	startRouter(t, env.Config, gw, []string{ns}, noAIBrixCheck)
	for _, c := range []struct {
		workload, want string
		route          *gatewayv1.HTTPRoute
		model          string
	}{
		{workload: "llama", route: v070, model: llamaModel,
			want: "its request timeout is 2m and the router's --route-timeout is 10m, so adopting it would change how long requests may take: start the router with --route-timeout=2m to adopt it"},
		{workload: "qwen", route: withHostnames, model: qwenModel, want: "not adopted as the route AIBrix's model router made: it has hostnames"},
	} {
		e := waitEvent(t, ns, c.workload, controller.ReasonRouteConflict)
		if e.Type != "Warning" || !strings.Contains(e.Note, c.want) {
			t.Errorf("RouteConflict event on %s: %s %q, want a Warning containing %q", c.workload, e.Type, e.Note, c.want)
		}
		// The event proves the model was reconciled: the route was left as it was.
		if now := getRoute(t, gw, c.route.Name); now == nil || now.ResourceVersion != c.route.ResourceVersion || routes.IsManaged(now) {
			t.Errorf("route %s was changed or removed: %+v", c.route.Name, now)
		}
		if got := routesMatching(t, gw, c.model); !slices.Equal(got, []string{c.route.Name}) {
			t.Errorf("routes matching %q: %v, want only %s", c.model, got, c.route.Name)
		}
	}
}

// TestHelmManagedAIBrixGrantKept: a grant named as AIBrix names its grants but kept by Helm
// is not AIBrix's: the router never deletes it (Helm would write it back on its next
// upgrade, the router delete it again), and says so once with a NotAIBrixGrant event.
func TestHelmManagedAIBrixGrantKept(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	createDeployment(t, ns, "qwen", modelLabels(qwenModel), map[string]string{svcKey: "qwen"})
	u, err := aibrixfixture.ReferenceGrant(aibrixfixture.Grant{Namespace: ns, GatewayNamespace: gw})
	if err != nil {
		t.Fatal(err)
	}
	helmGrant := &gatewayv1beta1.ReferenceGrant{}
	if err := aibrixfixture.To(u, helmGrant); err != nil {
		t.Fatal(err)
	}
	helmGrant.Labels = map[string]string{routes.ManagedByLabel: "Helm"}
	helmGrant.Annotations = map[string]string{"meta.helm.sh/release-name": "aibrix", "meta.helm.sh/release-namespace": gw}
	if err := k8s.Create(context.Background(), helmGrant, client.FieldOwner("helm")); err != nil {
		t.Fatal(err)
	}

	startRouter(t, env.Config, gw, []string{ns}, noAIBrixCheck)
	waitGrant(t, gw, ns, "qwen")
	eventually(t, "the Helm-managed grant kept and reported", func() error {
		if getGrant(t, ns, helmGrant.Name) == nil {
			return errors.New("the grant in AIBrix's name that Helm manages was deleted")
		}
		return eventFound(ns, helmGrant.Name, controller.ReasonNotAIBrixGrant, `its label app.kubernetes.io/managed-by is "Helm"`)
	})

	// Once more, with loraplane's grant in the cache: a change of the grant reconciles the
	// namespace's grants again, and the grant stays.
	touchAndWaitReconcile(t, helmGrant)
	if getGrant(t, ns, helmGrant.Name) == nil {
		t.Fatal("the grant in AIBrix's name that Helm manages was deleted")
	}
}

// eventFound returns nil when an event with reason on the object name in ns has a note
// containing note.
func eventFound(ns, name, reason, note string) error {
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		return err
	}
	var seen []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason && strings.Contains(e.Note, note) {
			return nil
		}
		seen = append(seen, fmt.Sprintf("%s@%s: %q", e.Reason, e.Regarding.Name, e.Note))
	}
	return fmt.Errorf("no %s event on %s/%s containing %q; events seen: %v", reason, ns, name, note, seen)
}
