package routes

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func cond(t gatewayv1.RouteConditionType, status metav1.ConditionStatus, gen int64, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: string(t), Status: status, ObservedGeneration: gen, Reason: reason, Message: msg}
}

func parentStatus(ref gatewayv1.ParentReference, controller string, conds ...metav1.Condition) gatewayv1.RouteParentStatus {
	return gatewayv1.RouteParentStatus{ParentRef: ref, ControllerName: gatewayv1.GatewayController(controller), Conditions: conds}
}

func TestRouteAcceptance(t *testing.T) {
	cfg := testConfig()
	ours := gatewayv1.ParentReference{Group: ptr.To(gatewayv1.Group(gatewayv1.GroupName)), Kind: ptr.To(gatewayv1.Kind("Gateway")),
		Namespace: ptr.To(gatewayv1.Namespace(cfg.GatewayNamespace)), Name: gatewayv1.ObjectName(cfg.GatewayName)}
	bare := gatewayv1.ParentReference{Name: gatewayv1.ObjectName(cfg.GatewayName)} // namespace: the route's
	other := gatewayv1.ParentReference{Namespace: ptr.To(gatewayv1.Namespace(cfg.GatewayNamespace)), Name: "other-gw"}
	const ctl = "example.com/gateway"
	acceptedT := cond(gatewayv1.RouteConditionAccepted, metav1.ConditionTrue, 3, "Accepted", "")
	resolvedT := cond(gatewayv1.RouteConditionResolvedRefs, metav1.ConditionTrue, 3, "ResolvedRefs", "")
	refused := cond(gatewayv1.RouteConditionResolvedRefs, metav1.ConditionFalse, 3, "RefNotPermitted", "no ReferenceGrant admits Service a/llama")
	long := strings.Repeat("é", 400)

	cases := map[string]struct {
		parents []gatewayv1.RouteParentStatus
		want    Acceptance
	}{
		"no status":              {want: Acceptance{Verdict: NotJudged}},
		"another gateway's only": {parents: []gatewayv1.RouteParentStatus{parentStatus(other, ctl, refused)}, want: Acceptance{Verdict: NotJudged}},
		"accepted":               {parents: []gatewayv1.RouteParentStatus{parentStatus(ours, ctl, acceptedT, resolvedT)}, want: Acceptance{Verdict: Accepted}},
		"accepted, parentRef without namespace": {
			parents: []gatewayv1.RouteParentStatus{parentStatus(bare, ctl, acceptedT, resolvedT)}, want: Acceptance{Verdict: Accepted}},
		"observedGeneration unset counts as current": {
			parents: []gatewayv1.RouteParentStatus{parentStatus(ours, ctl,
				cond(gatewayv1.RouteConditionAccepted, metav1.ConditionTrue, 0, "Accepted", ""),
				cond(gatewayv1.RouteConditionResolvedRefs, metav1.ConditionTrue, 0, "ResolvedRefs", ""))},
			want: Acceptance{Verdict: Accepted}},
		"refs not resolved": {
			parents: []gatewayv1.RouteParentStatus{parentStatus(ours, ctl, acceptedT, refused)},
			want: Acceptance{Verdict: NotAccepted, Controller: ctl, Condition: "ResolvedRefs", Status: metav1.ConditionFalse,
				Reason: "RefNotPermitted", Message: "no ReferenceGrant admits Service a/llama"}},
		"not accepted is reported before refs": {
			parents: []gatewayv1.RouteParentStatus{parentStatus(ours, ctl,
				cond(gatewayv1.RouteConditionAccepted, metav1.ConditionFalse, 3, "NotAllowedByListeners", "no listener admits routes from here"), refused)},
			want: Acceptance{Verdict: NotAccepted, Controller: ctl, Condition: "Accepted", Status: metav1.ConditionFalse,
				Reason: "NotAllowedByListeners", Message: "no listener admits routes from here"}},
		"unknown status is not accepted": {
			parents: []gatewayv1.RouteParentStatus{parentStatus(ours, ctl,
				cond(gatewayv1.RouteConditionAccepted, metav1.ConditionUnknown, 3, "Pending", "waiting"), resolvedT)},
			want: Acceptance{Verdict: NotAccepted, Controller: ctl, Condition: "Accepted", Status: metav1.ConditionUnknown, Reason: "Pending", Message: "waiting"}},
		"stale refusal is pending": {
			parents: []gatewayv1.RouteParentStatus{parentStatus(ours, ctl, acceptedT,
				cond(gatewayv1.RouteConditionResolvedRefs, metav1.ConditionFalse, 2, "RefNotPermitted", "old"))},
			want: Acceptance{Verdict: Pending}},
		"one condition missing is pending": {
			parents: []gatewayv1.RouteParentStatus{parentStatus(ours, ctl, acceptedT)}, want: Acceptance{Verdict: Pending}},
		"a refusing implementation wins over an accepting one": {
			parents: []gatewayv1.RouteParentStatus{parentStatus(ours, "a.example/gw", acceptedT, resolvedT), parentStatus(ours, ctl, acceptedT, refused)},
			want: Acceptance{Verdict: NotAccepted, Controller: ctl, Condition: "ResolvedRefs", Status: metav1.ConditionFalse,
				Reason: "RefNotPermitted", Message: "no ReferenceGrant admits Service a/llama"}},
		"another gateway's refusal is ignored": {
			parents: []gatewayv1.RouteParentStatus{parentStatus(other, ctl, refused), parentStatus(ours, ctl, acceptedT, resolvedT)},
			want:    Acceptance{Verdict: Accepted}},
		"long messages are bounded on a rune boundary": {
			parents: []gatewayv1.RouteParentStatus{parentStatus(ours, ctl, acceptedT,
				cond(gatewayv1.RouteConditionResolvedRefs, metav1.ConditionFalse, 3, "BackendNotFound", long))},
			want: Acceptance{Verdict: NotAccepted, Controller: ctl, Condition: "ResolvedRefs", Status: metav1.ConditionFalse,
				Reason: "BackendNotFound", Message: strings.Repeat("é", maxMessage/2) + "…"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			route := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.GatewayNamespace, Name: "m-router", Generation: 3}}
			route.Status.Parents = tc.parents
			if diff := cmp.Diff(tc.want, RouteAcceptance(cfg, route)); diff != "" {
				t.Errorf("RouteAcceptance (-want +got):\n%s", diff)
			}
		})
	}
}

func TestIsGatewayParent(t *testing.T) {
	cfg := testConfig()
	cases := map[string]struct {
		ref     gatewayv1.ParentReference
		routeNS string
		want    bool
	}{
		"full":              {gatewayv1.ParentReference{Group: ptr.To(gatewayv1.Group(gatewayv1.GroupName)), Kind: ptr.To(gatewayv1.Kind("Gateway")), Namespace: ptr.To(gatewayv1.Namespace("aibrix-system")), Name: "aibrix-eg"}, "x", true},
		"defaults":          {gatewayv1.ParentReference{Name: "aibrix-eg"}, "aibrix-system", true},
		"section name":      {gatewayv1.ParentReference{Name: "aibrix-eg", SectionName: ptr.To(gatewayv1.SectionName("http"))}, "aibrix-system", true},
		"other namespace":   {gatewayv1.ParentReference{Name: "aibrix-eg"}, "elsewhere", false},
		"other name":        {gatewayv1.ParentReference{Name: "eg"}, "aibrix-system", false},
		"a Service parent":  {gatewayv1.ParentReference{Group: ptr.To(gatewayv1.Group("")), Kind: ptr.To(gatewayv1.Kind("Service")), Name: "aibrix-eg"}, "aibrix-system", false},
		"another API group": {gatewayv1.ParentReference{Group: ptr.To(gatewayv1.Group("example.com")), Name: "aibrix-eg"}, "aibrix-system", false},
	}
	for name, tc := range cases {
		if got := IsGatewayParent(cfg, tc.routeNS, tc.ref); got != tc.want {
			t.Errorf("%s: IsGatewayParent = %v, want %v", name, got, tc.want)
		}
	}
}
