package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/loraplane/loraplane/router-controller/internal/controller"
	"github.com/loraplane/loraplane/router-controller/internal/routes"
)

// writeGatewayStatus writes, through the status subresource as a gateway implementation
// does, the status of the Gateway gw/aibrix-eg on route: Accepted=True and ResolvedRefs as
// given, for the route's current generation.
func writeGatewayStatus(t *testing.T, route *gatewayv1.HTTPRoute, resolved metav1.ConditionStatus, reason, msg string) {
	t.Helper()
	r := getRoute(t, route.Namespace, route.Name)
	if r == nil {
		t.Fatalf("route %s/%s is gone", route.Namespace, route.Name)
	}
	now := metav1.Now()
	r.Status.Parents = []gatewayv1.RouteParentStatus{{
		ParentRef: gatewayv1.ParentReference{Group: ptr.To(gatewayv1.Group(gatewayv1.GroupName)), Kind: ptr.To(gatewayv1.Kind("Gateway")),
			Namespace: ptr.To(gatewayv1.Namespace(route.Namespace)), Name: routes.DefaultGatewayName},
		ControllerName: "example.com/test-gateway",
		Conditions: []metav1.Condition{
			{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", Message: "Accepted", ObservedGeneration: r.Generation, LastTransitionTime: now},
			{Type: "ResolvedRefs", Status: resolved, Reason: reason, Message: msg, ObservedGeneration: r.Generation, LastTransitionTime: now},
		},
	}}
	if err := k8s.Status().Update(context.Background(), r); err != nil {
		t.Fatalf("writing the gateway's status on the route: %v", err)
	}
}

// TestRouteAcceptanceSurfaced: the gateway's status on a route reaches the workload and the
// metric with no other change: ResolvedRefs=False becomes a Warning event on the workload
// (reason and the gateway's message) and loraplane_routes{state="not-accepted"}; accepted
// again, a Normal event and the state back to managed.
func TestRouteAcceptanceSurfaced(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	startRouter(t, env.Config, gw, []string{ns})
	model := "accept-" + ns
	createDeployment(t, ns, "engine", modelLabels(model), nil)
	route := waitRoute(t, gw, model, wantBackends("0:"+ns+"/"+model+":8000"))
	waitEvent(t, ns, "engine", controller.ReasonRouteCreated)

	routesIn := func(state string, want float64) func() error {
		return func() error {
			if v, ok := gaugeValue(t, "loraplane_routes", map[string]string{"state": state}); !ok || v != want {
				return fmt.Errorf("loraplane_routes{state=%q} = %v (present %v), want %v", state, v, ok, want)
			}
			return nil
		}
	}
	msg := "Service " + ns + "/" + model + " is not admitted by any ReferenceGrant"
	writeGatewayStatus(t, route, metav1.ConditionFalse, "RefNotPermitted", msg)
	e := waitEvent(t, ns, "engine", controller.ReasonRouteNotAccepted)
	if e.Type != "Warning" || !strings.Contains(e.Note, "ResolvedRefs=False (RefNotPermitted)") || !strings.Contains(e.Note, msg) ||
		!strings.Contains(e.Note, gw+"/"+routes.DefaultGatewayName) {
		t.Errorf("RouteNotAccepted event: type %s, note %q; want a Warning with the condition, reason, gateway and message", e.Type, e.Note)
	}
	eventually(t, "the route counted not accepted", routesIn("not-accepted", 1))

	writeGatewayStatus(t, route, metav1.ConditionTrue, "ResolvedRefs", "Resolved all the Object references for the Route")
	if e := waitEvent(t, ns, "engine", controller.ReasonRouteAccepted); e.Type != "Normal" {
		t.Errorf("RouteAccepted event of type %s, want Normal", e.Type)
	}
	eventually(t, "the not-accepted count back to 0", routesIn("not-accepted", 0))
	eventually(t, "the route counted managed", routesIn("managed", 1))
}
