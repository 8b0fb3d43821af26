// Package v1alpha1 holds the ModelAdapter API, wire-compatible with AIBrix's
// model.aibrix.ai/v1alpha1 so manifests written for AIBrix apply unchanged.
//
// +kubebuilder:object:generate=true
// +groupName=model.aibrix.ai
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of ModelAdapter.
	GroupVersion = schema.GroupVersion{Group: "model.aibrix.ai", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &ModelAdapter{}, &ModelAdapterList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
