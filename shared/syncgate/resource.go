package syncgate

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Resource declares one kind a controller reads through its cache.
type Resource struct {
	// Object selects the kind and the form of the cache: a typed object, an
	// *unstructured.Unstructured or a *metav1.PartialObjectMetadata (metadata-only) with its
	// GroupVersionKind set.
	Object client.Object
	// Optional resources whose API is not served are skipped instead of failing startup.
	Optional bool
}

// Typed declares a required resource read as a typed object.
func Typed(obj client.Object) Resource { return Resource{Object: obj} }

// Metadata declares a required resource read metadata-only (labels, annotations, owners).
func Metadata(gvk schema.GroupVersionKind) Resource {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	return Resource{Object: obj}
}

// Unstructured declares a required resource read as unstructured objects.
func Unstructured(gvk schema.GroupVersionKind) Resource {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	return Resource{Object: obj}
}

// AsOptional marks the resource optional: skipped when its API is not served.
func (r Resource) AsOptional() Resource {
	r.Optional = true
	return r
}

// checkName is the readiness check name of a resource: /readyz/<name>, e.g. "pod",
// "deployment.apps", "modeladapter.model.aibrix.ai".
func checkName(gvk schema.GroupVersionKind) string {
	name := strings.ToLower(gvk.Kind)
	if gvk.Group != "" {
		name += "." + gvk.Group
	}
	return name
}
