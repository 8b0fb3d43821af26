package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
)

// routeTo builds a managed route of model with one backend: Service svc in namespace ns.
func routeTo(t *testing.T, model, ns, svc string) *gatewayv1.HTTPRoute {
	t.Helper()
	r, err := routes.BuildRoute(routesConfig(), model, []routes.Source{
		{Kind: "Deployment", Namespace: ns, Name: model, Model: model, Service: svc, Port: 8000},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRouteMapping(t *testing.T) {
	r := &RouteReconciler{cfg: Config{Routes: routesConfig()}}
	route := routeTo(t, "llama", "team-a", "llama")
	if diff := cmp.Diff([]Key{ModelKey("llama")}, r.routeToModels(t.Context(), route)); diff != "" {
		t.Errorf("routeToModels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Key{GrantsKey("team-a")}, r.routeToGrants(t.Context(), route)); diff != "" {
		t.Errorf("routeToGrants (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Key{ModelKey("llama"), GrantsKey("team-a")}, r.routeToKeys(t.Context(), route)); diff != "" {
		t.Errorf("routeToKeys (-want +got):\n%s", diff)
	}
	// A route we do not manage concerns the grants of its backends' namespaces too (whether
	// AIBrix's grant there can go); one outside the gateway namespace concerns none.
	foreign := route.DeepCopy()
	foreign.Labels = nil
	if diff := cmp.Diff([]Key{GrantsKey("team-a")}, r.routeToGrants(t.Context(), foreign)); diff != "" {
		t.Errorf("routeToGrants of a foreign route (-want +got):\n%s", diff)
	}
	elsewhere := foreign.DeepCopy()
	elsewhere.Namespace = "team-b"
	if got := r.routeToGrants(t.Context(), elsewhere); len(got) != 0 {
		t.Errorf("routeToGrants of a route outside the gateway namespace = %v, want none", got)
	}
}

// TestEnqueueAfterCoalesces: a burst of route events within the window becomes one grant
// key per namespace, ready after the window and not before; an update enqueues the
// namespaces of both the old and the new route; initial-list and resync events get low
// priority, real updates do not.
func TestEnqueueAfterCoalesces(t *testing.T) {
	const window = 300 * time.Millisecond
	r := &RouteReconciler{cfg: Config{Routes: routesConfig()}}
	h := enqueueAfter(window, r.routeToGrants)
	q := priorityqueue.New[Key]("test-enqueue-after")
	defer q.ShutDown()

	start := time.Now()
	for i := range 50 {
		h.Create(t.Context(), event.TypedCreateEvent[*gatewayv1.HTTPRoute]{
			Object: routeTo(t, fmt.Sprintf("m%d", i), "team-a", fmt.Sprintf("svc-%d", i)),
		}, q)
	}
	oldRoute, newRoute := routeTo(t, "moved", "team-b", "moved"), routeTo(t, "moved", "team-a", "moved")
	oldRoute.ResourceVersion, newRoute.ResourceVersion = "1", "2"
	h.Update(t.Context(), event.TypedUpdateEvent[*gatewayv1.HTTPRoute]{ObjectOld: oldRoute, ObjectNew: newRoute}, q)
	h.Create(t.Context(), event.TypedCreateEvent[*gatewayv1.HTTPRoute]{
		Object: routeTo(t, "old", "team-c", "old"), IsInInitialList: true,
	}, q)
	if n := q.Len(); n != 0 && time.Since(start) < window {
		t.Fatalf("%d keys ready before the window passed", n)
	}

	type got struct {
		key      Key
		priority int
		after    time.Duration
	}
	out := make(chan got)
	go func() {
		for {
			k, p, shutdown := q.GetWithPriority()
			if shutdown {
				close(out)
				return
			}
			out <- got{k, p, time.Since(start)}
			q.Done(k)
		}
	}()
	seen := map[Key]int{}
	timeout := time.After(3 * window)
	for len(seen) < 3 {
		select {
		case g := <-out:
			if g.after < window {
				t.Errorf("%s ready after %s, before the window (%s)", g.key, g.after, window)
			}
			seen[g.key] = g.priority
		case <-timeout:
			t.Fatalf("timed out after %s waiting for three grant keys; got %v", 3*window, seen)
		}
	}
	want := map[Key]int{GrantsKey("team-a"): 0, GrantsKey("team-b"): 0, GrantsKey("team-c"): handler.LowPriority}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("keys and priorities (-want +got):\n%s", diff)
	}
	select {
	case g := <-out:
		t.Errorf("%s enqueued again: the burst was not coalesced", g.key)
	case <-time.After(2 * window):
	}
}

// routesConfig is the route configuration of the tests: the router's defaults.
func routesConfig() routes.Config {
	return routes.Config{
		GatewayNamespace: routes.DefaultGatewayNamespace,
		GatewayName:      routes.DefaultGatewayName,
		Paths:            routes.DefaultPaths,
		Timeout:          routes.DefaultTimeout,
	}
}
