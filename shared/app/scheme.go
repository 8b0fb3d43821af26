package app

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// NewScheme returns a controller's scheme: the built-in kinds, loraplane's API
// (ModelAdapter) and the kinds install adds (each binary names the ones it needs beyond).
func NewScheme(install ...func(*runtime.Scheme) error) *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	for _, add := range install {
		utilruntime.Must(add(s))
	}
	return s
}
