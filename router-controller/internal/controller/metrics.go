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
)

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
		"Model names with live sources, by route state: managed (route owned and current, accepted by the Gateway or not judged yet), not-accepted (route owned, but the Gateway reports Accepted or ResolvedRefs not True) or conflict (route name taken by an HTTPRoute not managed by loraplane). The states are exclusive.",
		"state")

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
		crmetrics.Registry.MustRegister(Routes, RouteReconcileErrors, AIBrixGrantsKept, SourceKindServed)
		AIBrixGrantsKept.WithLabelValues().Set(0)
		for _, s := range []RouteState{RouteStateManaged, RouteStateConflict, RouteStateNotAccepted} {
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
