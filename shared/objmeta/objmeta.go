// Package objmeta holds what both controllers check on object metadata.
package objmeta

const (
	// ManagedByLabel marks the objects a controller owns.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// AdapterControllerManagedBy is the ManagedByLabel value on the Services and
	// EndpointSlices the adapter-controller publishes for ModelAdapters. The router-controller
	// reads those Services for the port of an adapter's route.
	AdapterControllerManagedBy = "loraplane-adapter-controller"
)

// HasAll reports whether have holds every key of want with the same value (labels or
// annotations a controller sets on an object it owns; other keys may be there too).
func HasAll(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}
