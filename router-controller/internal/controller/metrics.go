package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	sharedmetrics "github.com/loraplane/loraplane/shared/metrics"
)

// RouteState is the value of the state label of loraplane_routes.
type RouteState string

const (
	// RouteStateManaged counts models whose route the controller owns and keeps current.
	RouteStateManaged RouteState = "managed"
	// RouteStateConflict counts models whose route name is taken by a route we do not own.
	RouteStateConflict RouteState = "conflict"
	// RouteStateNotAccepted counts models whose route we own but the Gateway reports not
	// Accepted, or with ResolvedRefs not True, for its current generation.
	RouteStateNotAccepted RouteState = "not-accepted"
	// RouteStateInvalid counts models claimed by live workloads none of which can make a
	// valid route; a route they had is kept as it is.
	RouteStateInvalid RouteState = "invalid"
	// RouteStateWaitingForAIBrix counts models whose route AIBrix's model router made and
	// whose adoption waits for AIBrix's controllers to stop.
	RouteStateWaitingForAIBrix RouteState = "waiting-for-aibrix"
	// RouteStateOutsideView counts models whose route of ours is sustained by workloads in
	// namespaces or of kinds this router does not watch: left as it is.
	RouteStateOutsideView RouteState = "outside-view"
)

// routeStatesAll lists every RouteState, in the order they are documented.
var routeStatesAll = []RouteState{RouteStateManaged, RouteStateNotAccepted, RouteStateConflict,
	RouteStateInvalid, RouteStateWaitingForAIBrix, RouteStateOutsideView}

// ReconcileObject is the value of the object label of loraplane_route_reconcile_errors_total.
type ReconcileObject string

const (
	// ObjectRoute labels errors reconciling the HTTPRoute of a model.
	ObjectRoute ReconcileObject = "httproute"
	// ObjectReferenceGrant labels errors reconciling the ReferenceGrants of a namespace.
	ObjectReferenceGrant ReconcileObject = "referencegrant"
)

var (
	// Routes is the number of model names per route state.
	Routes = sharedmetrics.NewGaugeVec("routes",
		"Model names claimed by live workloads, by route state: managed (route owned and current, accepted by the Gateway or not judged yet), not-accepted (route owned, but the Gateway reports Accepted or ResolvedRefs not True), conflict (route name taken by an HTTPRoute this install does not manage), invalid (no claimant can make a valid route; any route kept as it is), waiting-for-aibrix (AIBrix's route to adopt while AIBrix's controllers run) or outside-view (route sustained by workloads this router does not watch; left as it is). The states are exclusive.",
		"state")

	// RefusedClaims is the number of workloads refused for claiming a model served from
	// another namespace.
	RefusedClaims = sharedmetrics.NewGaugeVec("route_refused_claims",
		"Workloads that claim a model served from another namespace and are refused (no backend, no ReferenceGrant); 0 with --allow-cross-namespace-claims.")

	// AIBrixGrantsKept is the number of namespaces whose AIBrix reserved ReferenceGrant is
	// kept because routes loraplane does not manage still need it.
	AIBrixGrantsKept = sharedmetrics.NewGaugeVec("aibrix_grants_kept",
		"Namespaces whose ReferenceGrant made by AIBrix's model router (admitting every Service) is kept, because HTTPRoutes of the gateway namespace that loraplane does not manage send to Services loraplane's grants do not admit.")

	// SourceKindServed says, per source kind, whether its API is served.
	SourceKindServed = sharedmetrics.NewGaugeVec("source_kind_served",
		"1 when the API of a source kind is served, 0 when it is not: an optional kind (--extra-workload-kinds) whose CRD is not installed, or does not serve that version. Optional kinds are re-checked periodically and watched while served; the built-in kinds are always 1.",
		sharedmetrics.LabelGroup, sharedmetrics.LabelVersion, sharedmetrics.LabelKind)

	// RouteReconcileErrors counts failed reconciles by the object being reconciled.
	RouteReconcileErrors = sharedmetrics.NewCounterVec("route_reconcile_errors_total",
		"Reconciles of model routes (object=httproute) or of a namespace's ReferenceGrants (object=referencegrant) that ended in an error.",
		"object")
)

var registerOnce sync.Once

// Register registers the router metrics on controller-runtime's registry. It is safe to call
// more than once.
func Register() {
	registerOnce.Do(func() {
		crmetrics.Registry.MustRegister(Routes, RouteReconcileErrors, AIBrixGrantsKept, RefusedClaims, SourceKindServed)
		AIBrixGrantsKept.WithLabelValues().Set(0)
		RefusedClaims.WithLabelValues().Set(0)
		for _, s := range routeStatesAll {
			Routes.WithLabelValues(string(s)).Set(0)
		}
		for _, o := range []ReconcileObject{ObjectRoute, ObjectReferenceGrant} {
			RouteReconcileErrors.WithLabelValues(string(o))
		}
	})
}

func setSourceKindServed(gvk schema.GroupVersionKind, served bool) {
	group := gvk.Group
	if group == "" {
		group = "core"
	}
	v := 0.0
	if served {
		v = 1
	}
	SourceKindServed.WithLabelValues(group, gvk.Version, gvk.Kind).Set(v)
}

func recordReconcileError(o ReconcileObject) {
	RouteReconcileErrors.WithLabelValues(string(o)).Inc()
}

// keptGrants remembers, per namespace, why AIBrix's reserved grant there is kept, behind
// loraplane_aibrix_grants_kept and so that the reason is reported once, not per reconcile.
type keptGrants struct {
	mu          sync.Mutex
	byNamespace map[string]string
}

func newKeptGrants() *keptGrants { return &keptGrants{byNamespace: map[string]string{}} }

// set records why the grant of namespace is kept ("": it is not) and reports whether that
// is a new, non-empty reason.
func (k *keptGrants) set(namespace, why string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	prev := k.byNamespace[namespace]
	if why == "" {
		delete(k.byNamespace, namespace)
	} else {
		k.byNamespace[namespace] = why
	}
	AIBrixGrantsKept.WithLabelValues().Set(float64(len(k.byNamespace)))
	return why != "" && why != prev
}
