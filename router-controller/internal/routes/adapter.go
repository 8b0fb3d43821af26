package routes

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	modelv1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/shared/objmeta"
)

// AdapterServicePortName is the name of the port the adapter-controller gives an adapter's
// Service.
const AdapterServicePortName = "http"

// IsAdapterService reports whether svc is the Service the adapter-controller published for
// the ModelAdapter adapter, as the adapter-controller itself tells its own: named after the
// adapter in its namespace, labelled as it labels its Services (objmeta.ManagedByLabel
// objmeta.AdapterControllerManagedBy, model.aibrix.ai/name the adapter's name), and
// controlled by the adapter (its UID: not a Service left by an earlier adapter of that name).
func IsAdapterService(adapter metav1.Object, svc *corev1.Service) bool {
	if svc == nil || svc.Namespace != adapter.GetNamespace() || svc.Name != adapter.GetName() {
		return false
	}
	l := svc.Labels
	if l[objmeta.ManagedByLabel] != objmeta.AdapterControllerManagedBy || l[modelv1alpha1.ModelNameLabel] != adapter.GetName() {
		return false
	}
	ref := metav1.GetControllerOf(svc)
	return ref != nil && ref.UID == adapter.GetUID() && ref.Kind == KindModelAdapter
}

// ServicePort is the port a route sends to on svc: the TCP port named "http" (the name the
// adapter-controller gives it), else the first TCP port; ok is false when svc has no TCP
// port. A port without a protocol is TCP, as the API server defaults it.
func ServicePort(svc *corev1.Service) (port int32, ok bool) {
	for _, p := range svc.Spec.Ports {
		if isTCP(p) && p.Name == AdapterServicePortName {
			return p.Port, true
		}
	}
	for _, p := range svc.Spec.Ports {
		if isTCP(p) {
			return p.Port, true
		}
	}
	return 0, false
}

func isTCP(p corev1.ServicePort) bool {
	return p.Protocol == "" || p.Protocol == corev1.ProtocolTCP
}

// AdapterPort is the port of the route of the ModelAdapter adapter: the port of svc (see
// ServicePort) when svc is the Service the adapter-controller published for it (see
// IsAdapterService); 0 otherwise, and for a nil svc. This port, not a port label, is where
// the adapter is served: the adapter-controller publishes the Service on its engines' port.
func AdapterPort(adapter metav1.Object, svc *corev1.Service) int32 {
	if !IsAdapterService(adapter, svc) {
		return 0
	}
	port, _ := ServicePort(svc)
	return port
}
