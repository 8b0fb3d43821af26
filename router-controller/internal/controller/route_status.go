package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
)

// Event reasons, on the source workloads.
const (
	// ReasonRouteCreated: the controller created the model's HTTPRoute.
	ReasonRouteCreated = "RouteCreated"
	// ReasonRouteUpdated: the controller brought the model's HTTPRoute up to date.
	ReasonRouteUpdated = "RouteUpdated"
	// ReasonRouteConflict: an HTTPRoute of the model's route name exists and is not ours.
	ReasonRouteConflict = "RouteConflict"
	// ReasonRouteInvalid: the sources of the model cannot make a valid HTTPRoute.
	ReasonRouteInvalid = "RouteInvalid"
	// ReasonInvalidSource: the workload's routing labels or annotations have problems.
	ReasonInvalidSource = "InvalidSource"
	// ReasonGatewayNamespaceMissing: the gateway namespace, where the model's HTTPRoute
	// belongs, does not exist.
	ReasonGatewayNamespaceMissing = "GatewayNamespaceMissing"
)

// Event actions (events.k8s.io/v1 requires one).
const (
	ActionCreate     = "CreateRoute"
	ActionUpdate     = "UpdateRoute"
	ActionSkip       = "SkipRoute"
	ActionReadLabels = "ReadRoutingLabels"
)

// eventOnSources records one event on each source; related is the route, when known.
func (r *RouteReconciler) eventOnSources(sources []sourceObject, related runtime.Object, eventType, reason, action, note string, args ...any) {
	for _, s := range sources {
		r.recorder.Eventf(s.obj, related, eventType, reason, action, note, args...)
	}
}

// routeStates is the state of every model with live sources, behind modelplane_routes.
type routeStates struct {
	mu      sync.Mutex
	byModel map[string]RouteState
}

func newRouteStates() *routeStates {
	return &routeStates{byModel: map[string]RouteState{}}
}

// set records the state of model and publishes the counts.
func (s *routeStates) set(model string, st RouteState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byModel[model] == st {
		return
	}
	s.byModel[model] = st
	s.publishLocked()
}

// clear forgets model (no live sources, or no valid route) and publishes the counts.
func (s *routeStates) clear(model string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byModel[model]; !ok {
		return
	}
	delete(s.byModel, model)
	s.publishLocked()
}

func (s *routeStates) countsLocked() map[RouteState]int {
	out := map[RouteState]int{RouteStateManaged: 0, RouteStateConflict: 0}
	for _, st := range s.byModel {
		out[st]++
	}
	return out
}

func (s *routeStates) publishLocked() {
	for st, n := range s.countsLocked() {
		Routes.WithLabelValues(string(st)).Set(float64(n))
	}
}
