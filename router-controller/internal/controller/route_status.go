package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
)

// Event reasons, on the source workloads.
const (
	// ReasonRouteCreated: the controller created the model's HTTPRoute.
	ReasonRouteCreated = "RouteCreated"
	// ReasonRouteUpdated: the controller brought the model's HTTPRoute up to date.
	ReasonRouteUpdated = "RouteUpdated"
	// ReasonRouteConflict: an HTTPRoute of the model's route name exists and is not ours.
	ReasonRouteConflict = "RouteConflict"
	// ReasonRouteInvalid: the workloads claiming the model cannot make a valid HTTPRoute; its
	// route, if any, is kept as it is.
	ReasonRouteInvalid = "RouteInvalid"
	// ReasonInvalidSource: the workload's routing labels or annotations have problems.
	ReasonInvalidSource = "InvalidSource"
	// ReasonGatewayNamespaceMissing: the gateway namespace, where the model's HTTPRoute
	// belongs, does not exist.
	ReasonGatewayNamespaceMissing = "GatewayNamespaceMissing"
	// ReasonRouteNotAccepted: the Gateway reports the model's HTTPRoute not Accepted or its
	// references not resolved (Warning).
	ReasonRouteNotAccepted = "RouteNotAccepted"
	// ReasonRouteAccepted: the Gateway accepts the model's HTTPRoute again after reporting
	// it not accepted (Normal; not sent for routes that were accepted from the start).
	ReasonRouteAccepted = "RouteAccepted"
	// ReasonRouteAdopted: the controller took over the HTTPRoute AIBrix's model router made
	// for the model (Normal).
	ReasonRouteAdopted = "RouteAdopted"
	// ReasonRouteRenamed: the model's HTTPRoute under the name of earlier releases was
	// deleted, replaced by the route named as AIBrix's gateway looks it up (Normal).
	ReasonRouteRenamed = "RouteRenamed"
	// ReasonAIBrixRunning: a take-over step (adopting AIBrix's route, removing AIBrix's
	// ReferenceGrant) waits because AIBrix's controllers are running (Warning).
	ReasonAIBrixRunning = "AIBrixRunning"
	// ReasonAIBrixGrantRemoved: AIBrix's reserved ReferenceGrant of a namespace was deleted,
	// loraplane's grants admitting every Service routed to there (Normal, on that grant).
	ReasonAIBrixGrantRemoved = "AIBrixGrantRemoved"
	// ReasonClaimRefused: the workload claims a model served from another namespace, and
	// gets none of its traffic (Warning).
	ReasonClaimRefused = "ClaimRefused"
	// ReasonRouteOutsideView: the route's sources lie partly outside the router's view, so
	// it neither updates nor deletes the route (Warning, on the route).
	ReasonRouteOutsideView = "RouteOutsideView"
	// ReasonAIBrixGrantKept: AIBrix's reserved ReferenceGrant stays because HTTPRoutes that
	// loraplane does not manage send to Services its grants do not admit (Warning, on
	// that grant).
	ReasonAIBrixGrantKept = "AIBrixGrantKept"
	// ReasonNotAIBrixGrant: a ReferenceGrant named as AIBrix's model router names its grants
	// is not one AIBrix made (another manager keeps it, or its shape differs), so it is never
	// deleted (Warning, on that grant).
	ReasonNotAIBrixGrant = "NotAIBrixGrant"
)

// Event actions (events.k8s.io/v1 requires one).
const (
	ActionCreate      = "CreateRoute"
	ActionUpdate      = "UpdateRoute"
	ActionSkip        = "SkipRoute"
	ActionReadLabels  = "ReadRoutingLabels"
	ActionReadStatus  = "ReadRouteStatus"
	ActionDeleteGrant = "DeleteReferenceGrant"
)

// eventOnSources records one event on each source; related is the route, when known.
func (r *RouteReconciler) eventOnSources(sources []sourceObject, related runtime.Object, eventType, reason, action, note string, args ...any) {
	for _, s := range sources {
		r.recorder.Eventf(s.obj, related, eventType, reason, action, note, args...)
	}
}

// observeAcceptance reads the Gateway's judgement of the model's route, which is ours and
// up to date, and reports it: a route not accepted counts as state not-accepted and gets one
// Warning event per source and problem (a source joining later gets it too; a new problem
// is reported again); a route accepted again counts as managed and gets one Normal event.
// While the Gateway has not judged the current generation the last judgement stands.
func (r *RouteReconciler) observeAcceptance(ctx context.Context, model string, route *gatewayv1.HTTPRoute, live []sourceObject) {
	acc := routes.RouteAcceptance(r.cfg.Routes, route)
	gw := r.cfg.Routes.GatewayNamespace + "/" + r.cfg.Routes.GatewayName
	switch acc.Verdict {
	case routes.NotAccepted:
		uids := make([]types.UID, 0, len(live))
		for _, s := range live {
			uids = append(uids, s.obj.GetUID())
		}
		warn := r.states.notAccepted(model, acc, uids)
		if len(warn) == 0 {
			return
		}
		ctrl.LoggerFrom(ctx).Info("Route not accepted by the gateway", "route", klog.KObj(route), "gateway", gw,
			"condition", acc.Condition, "status", acc.Status, "reason", acc.Reason, "message", acc.Message)
		var targets []sourceObject
		for _, s := range live {
			if warn[s.obj.GetUID()] {
				targets = append(targets, s)
			}
		}
		r.eventOnSources(targets, route, corev1.EventTypeWarning, ReasonRouteNotAccepted, ActionReadStatus,
			"HTTPRoute %s/%s of model %q is not accepted by Gateway %s: %s=%s (%s): %s",
			route.Namespace, route.Name, model, gw, acc.Condition, acc.Status, acc.Reason, acc.Message)
	case routes.Accepted:
		if r.states.accepted(model) {
			ctrl.LoggerFrom(ctx).Info("Route accepted by the gateway again", "route", klog.KObj(route), "gateway", gw)
			r.eventOnSources(live, route, corev1.EventTypeNormal, ReasonRouteAccepted, ActionReadStatus,
				"HTTPRoute %s/%s of model %q is accepted by Gateway %s", route.Namespace, route.Name, model, gw)
		}
	case routes.NotJudged:
		r.states.set(model, RouteStateManaged)
	case routes.Pending:
		r.states.owned(model)
	}
}

// routeStates is the state of every model with live sources, behind loraplane_routes, and
// what was reported about their acceptance.
type routeStates struct {
	mu      sync.Mutex
	byModel map[string]*modelState
}

type modelState struct {
	state RouteState
	// While state is not-accepted: the problem reported and the sources told about it.
	problem routes.Acceptance
	warned  map[types.UID]bool
	// While state is waiting-for-aibrix: a take-over waiting for AIBrix's controllers was
	// reported, in this episode of them running (aibrix.Status.Episode).
	aibrixReported bool
	aibrixEpisode  uint64
	// While state is invalid: why, and the claimants told about it.
	invalidWhy  string
	invalidTold map[string]bool
	// While state is outside-view: whether it was reported.
	outsideReported bool
	// The claimants refused, each with the owner namespace it was told about.
	refused map[string]string
	// What the route was reported to route to for each source (RouteCreated, RouteUpdated).
	routed map[string]string
	// The problems last reported on each source (InvalidSource).
	problems map[string]string
}

func newRouteStates() *routeStates {
	return &routeStates{byModel: map[string]*modelState{}}
}

// set records the state of model and publishes the counts. Any acceptance problem
// recorded is forgotten.
func (s *routeStates) set(model string, st RouteState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLocked(model, st)
}

func (s *routeStates) setLocked(model string, st RouteState) {
	m := s.entryLocked(model)
	if st != RouteStateNotAccepted {
		m.problem, m.warned = routes.Acceptance{}, nil
	}
	if st != RouteStateWaitingForAIBrix {
		m.aibrixReported = false
	}
	if st != RouteStateInvalid {
		m.invalidWhy, m.invalidTold = "", nil
	}
	if st != RouteStateOutsideView {
		m.outsideReported = false
	}
	if m.state == st {
		return
	}
	m.state = st
	s.publishLocked()
}

// owned records that the model's route is ours and written, its acceptance of the current
// generation not known yet: a model not accepted stays so until the Gateway judges again.
func (s *routeStates) owned(model string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.byModel[model]; m != nil && m.state == RouteStateNotAccepted {
		return
	}
	s.setLocked(model, RouteStateManaged)
}

// notAccepted records that the Gateway does not accept the model's route for problem, and
// returns the sources (of uids) not yet told about that problem, marking them told.
func (s *routeStates) notAccepted(model string, problem routes.Acceptance, uids []types.UID) map[types.UID]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLocked(model, RouteStateNotAccepted)
	m := s.byModel[model]
	if m.problem != problem {
		m.problem, m.warned = problem, map[types.UID]bool{}
	}
	out := map[types.UID]bool{}
	for _, u := range uids {
		if !m.warned[u] {
			m.warned[u], out[u] = true, true
		}
	}
	return out
}

// waitingForAIBrix records that the adoption of the model's route waits for AIBrix's
// controllers to stop, in their running episode (aibrix.Status.Episode), and reports whether
// that is news (to be reported once per episode). The model must be in state
// waiting-for-aibrix.
func (s *routeStates) waitingForAIBrix(model string, episode uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.byModel[model]
	if m == nil || (m.aibrixReported && m.aibrixEpisode == episode) {
		return false
	}
	m.aibrixReported, m.aibrixEpisode = true, episode
	return true
}

// accepted records that the Gateway accepts the model's route and reports whether it did
// not before.
func (s *routeStates) accepted(model string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	was := s.byModel[model] != nil && s.byModel[model].state == RouteStateNotAccepted
	s.setLocked(model, RouteStateManaged)
	return was
}

// clear forgets model (no live claimant, or its route cannot be written) and publishes the
// counts.
func (s *routeStates) clear(model string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byModel[model]; !ok {
		return
	}
	delete(s.byModel, model)
	s.publishLocked()
}

// entryLocked returns the state of model, creating it (with no state yet) when missing.
func (s *routeStates) entryLocked(model string) *modelState {
	m := s.byModel[model]
	if m == nil {
		m = &modelState{}
		s.byModel[model] = m
	}
	return m
}

// invalid records that model cannot be routed, for why, and returns the claimants not yet
// told about that reason, marking them told.
func (s *routeStates) invalid(model, why string, claimants []sourceObject) []sourceObject {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLocked(model, RouteStateInvalid)
	m := s.byModel[model]
	if m.invalidWhy != why {
		m.invalidWhy, m.invalidTold = why, map[string]bool{}
	}
	var out []sourceObject
	for _, c := range claimants {
		if id := c.id(); !m.invalidTold[id] {
			m.invalidTold[id] = true
			out = append(out, c)
		}
	}
	return out
}

// outsideView records that the model's route lies partly outside the router's view and
// reports whether that is news.
func (s *routeStates) outsideView(model string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLocked(model, RouteStateOutsideView)
	m := s.byModel[model]
	news := !m.outsideReported
	m.outsideReported = true
	return news
}

// refuse records the refused claimants of model (replacing the earlier set) and returns
// those not yet told that owner serves the model. It publishes the refused count.
func (s *routeStates) refuse(model, owner string, refused []sourceObject) []sourceObject {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(refused) == 0 && s.byModel[model] == nil {
		return nil
	}
	m := s.entryLocked(model)
	prev := m.refused
	m.refused = make(map[string]string, len(refused))
	var news []sourceObject
	for _, o := range refused {
		m.refused[o.id()] = owner
		if prev[o.id()] != owner {
			news = append(news, o)
		}
	}
	if len(prev) != len(m.refused) {
		s.publishLocked() // the count is all the gauge shows
	}
	return news
}

// newlyRouted records what each source contributes to the model's route (sources[i] for
// live[i]) and returns the sources that are new to it or contribute something else than
// before, to be told once.
func (s *routeStates) newlyRouted(model string, live []sourceObject, sources []routes.Source) []sourceObject {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.entryLocked(model)
	prev := m.routed
	m.routed = make(map[string]string, len(live))
	var news []sourceObject
	for i, o := range live {
		var sig string
		if i < len(sources) {
			src := sources[i]
			sig = fmt.Sprintf("%s/%s:%d %s", src.Namespace, src.Service, src.Port, strings.Join(src.Paths, ","))
		}
		m.routed[o.id()] = sig
		if was, ok := prev[o.id()]; !ok || was != sig {
			news = append(news, o)
		}
	}
	return news
}

// problems records the problems of a source of model and reports whether they are to be
// reported: not empty, and not the ones reported last for it.
func (s *routeStates) problems(model string, o sourceObject, problems []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	text := strings.Join(problems, "\n")
	m := s.entryLocked(model)
	if m.problems == nil {
		m.problems = map[string]string{}
	}
	id := o.id()
	prev, seen := m.problems[id]
	if text == "" {
		delete(m.problems, id)
		return false
	}
	m.problems[id] = text
	return !seen || prev != text
}

func (s *routeStates) countsLocked() (map[RouteState]int, int) {
	out := map[RouteState]int{}
	for _, st := range routeStatesAll {
		out[st] = 0
	}
	refused := 0
	for _, m := range s.byModel {
		if m.state != "" {
			out[m.state]++
		}
		refused += len(m.refused)
	}
	return out, refused
}

func (s *routeStates) publishLocked() {
	counts, refused := s.countsLocked()
	for st, n := range counts {
		Routes.WithLabelValues(string(st)).Set(float64(n))
	}
	RefusedClaims.WithLabelValues().Set(float64(refused))
}
