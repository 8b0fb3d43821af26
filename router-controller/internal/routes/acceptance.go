package routes

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/loraplane/loraplane/shared/text"
)

// Verdict is what the Gateway's status on a route says about it.
type Verdict uint8

const (
	// NotJudged: no status of the Gateway's for the route (no implementation has looked,
	// or it dropped its entry).
	NotJudged Verdict = iota
	// Pending: the Gateway's status is for an earlier generation of the route, or lacks
	// one of the Accepted and ResolvedRefs conditions.
	Pending
	// Accepted: Accepted=True and ResolvedRefs=True for the current generation.
	Accepted
	// NotAccepted: Accepted or ResolvedRefs is not True for the current generation.
	NotAccepted
)

func (v Verdict) String() string {
	switch v {
	case NotJudged:
		return "NotJudged"
	case Pending:
		return "Pending"
	case Accepted:
		return "Accepted"
	case NotAccepted:
		return "NotAccepted"
	default:
		return fmt.Sprintf("Verdict(%d)", v)
	}
}

// Acceptance is the Gateway's judgement of a route, read from its status.parents. It is
// comparable: two equal values describe the same judgement.
type Acceptance struct {
	Verdict Verdict
	// For NotAccepted: the controllerName of the parent status, and the first condition
	// that is not True (Accepted before ResolvedRefs) with its status, reason and message.
	Controller string
	Condition  string
	Status     metav1.ConditionStatus
	Reason     string
	Message    string
}

// maxMessage bounds the gateway message carried into events (events.k8s.io notes are at
// most 1 kB).
const maxMessage = 512

// RouteAcceptance reads the status that implementations of the configured Gateway wrote on
// route. A condition is current when its observedGeneration is the route's generation (or
// unset: an implementation that does not say is taken at its word). When several
// implementations report on the Gateway, one that does not accept the route wins.
func RouteAcceptance(cfg Config, route *gatewayv1.HTTPRoute) Acceptance {
	out := Acceptance{Verdict: NotJudged}
	for _, ps := range route.Status.Parents {
		if !IsGatewayParent(cfg, route.Namespace, ps.ParentRef) {
			continue
		}
		current := 0
		for _, t := range []gatewayv1.RouteConditionType{gatewayv1.RouteConditionAccepted, gatewayv1.RouteConditionResolvedRefs} {
			c := meta.FindStatusCondition(ps.Conditions, string(t))
			if c == nil || (c.ObservedGeneration != 0 && c.ObservedGeneration < route.Generation) {
				continue
			}
			if c.Status != metav1.ConditionTrue {
				msg := text.Truncate(c.Message, maxMessage)
				return Acceptance{Verdict: NotAccepted, Controller: string(ps.ControllerName),
					Condition: c.Type, Status: c.Status, Reason: c.Reason, Message: msg}
			}
			current++
		}
		switch {
		case current == 2:
			out.Verdict = Accepted
		case out.Verdict == NotJudged:
			out.Verdict = Pending
		}
	}
	return out
}

// IsGatewayParent reports whether ref, in a route of routeNamespace, names the configured
// Gateway (any section or port of it).
func IsGatewayParent(cfg Config, routeNamespace string, ref gatewayv1.ParentReference) bool {
	if ref.Group != nil && *ref.Group != gatewayv1.GroupName {
		return false
	}
	if ref.Kind != nil && *ref.Kind != "Gateway" {
		return false
	}
	ns := routeNamespace
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	return ns == cfg.GatewayNamespace && string(ref.Name) == cfg.GatewayName
}
