package aibrix

import (
	"sync"

	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	sharedmetrics "github.com/loraplane/loraplane/shared/metrics"
)

// TakeOverObject is the value of the object label of loraplane_aibrix_takeovers_total.
type TakeOverObject string

const (
	// ObjectHTTPRoute: an HTTPRoute made by AIBrix's model router was adopted.
	ObjectHTTPRoute TakeOverObject = "httproute"
	// ObjectReferenceGrant: AIBrix's reserved ReferenceGrant of a namespace was removed.
	ObjectReferenceGrant TakeOverObject = "referencegrant"
	// ObjectFinalizer: AIBrix's finalizer was released from a deleted ModelAdapter.
	ObjectFinalizer TakeOverObject = "finalizer"
)

var (
	running = sharedmetrics.NewGaugeVec("aibrix_controller_running",
		"1 while a Lease of AIBrix's controllers is held and renewed, or cannot be told (its read refused by RBAC, or failing for longer than 3 check periods): the take-over from AIBrix waits. 0 otherwise; absent when the check is off. Read once per check period on every replica.",
		"controller")
	takeOvers = sharedmetrics.NewCounterVec("aibrix_takeovers_total",
		"Take-over steps done on objects AIBrix's controller-manager made: httproute (adopted), referencegrant (AIBrix's reserved grant removed), finalizer (AIBrix's finalizer released).",
		"object")

	registerOnce sync.Once
)

// Register registers the take-over metrics on controller-runtime's registry, every object
// series at zero. It is safe to call more than once.
func Register() {
	registerOnce.Do(func() {
		crmetrics.Registry.MustRegister(running, takeOvers)
		for _, o := range []TakeOverObject{ObjectHTTPRoute, ObjectReferenceGrant, ObjectFinalizer} {
			takeOvers.WithLabelValues(string(o))
		}
	})
}

// RecordTakeOver counts one take-over step done on an object of AIBrix's.
func RecordTakeOver(o TakeOverObject) {
	Register()
	takeOvers.WithLabelValues(string(o)).Inc()
}
