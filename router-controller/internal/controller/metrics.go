package controller

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// RouteState is the value of the state label of modelplane_routes.
type RouteState string

const (
	// RouteStateManaged counts models whose route the controller owns and keeps current.
	RouteStateManaged RouteState = "managed"
	// RouteStateConflict counts models whose route name is taken by a route we do not own.
	RouteStateConflict RouteState = "conflict"
)

// ReconcileObject is the value of the object label of modelplane_route_reconcile_errors_total.
type ReconcileObject string

const (
	// ObjectRoute labels errors reconciling the HTTPRoute of a model.
	ObjectRoute ReconcileObject = "httproute"
	// ObjectReferenceGrant labels errors reconciling the ReferenceGrants of a namespace.
	ObjectReferenceGrant ReconcileObject = "referencegrant"
)

var (
	// Routes is the number of model names per route state.
	Routes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "modelplane",
		Name:      "routes",
		Help:      "Model names with live sources, by route state: managed (route owned and current) or conflict (route name taken by an HTTPRoute not managed by modelplane).",
	}, []string{"state"})

	// RouteReconcileErrors counts failed reconciles by the object being reconciled.
	RouteReconcileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "modelplane",
		Name:      "route_reconcile_errors_total",
		Help:      "Reconciles of model routes (object=httproute) or of a namespace's ReferenceGrants (object=referencegrant) that ended in an error.",
	}, []string{"object"})
)

var registerOnce sync.Once

// Register registers the router metrics on controller-runtime's registry. It is safe to call
// more than once.
func Register() {
	registerOnce.Do(func() {
		crmetrics.Registry.MustRegister(Routes, RouteReconcileErrors)
		for _, s := range []RouteState{RouteStateManaged, RouteStateConflict} {
			Routes.WithLabelValues(string(s)).Set(0)
		}
		for _, o := range []ReconcileObject{ObjectRoute, ObjectReferenceGrant} {
			RouteReconcileErrors.WithLabelValues(string(o))
		}
	})
}

func recordReconcileError(o ReconcileObject) {
	RouteReconcileErrors.WithLabelValues(string(o)).Inc()
}
