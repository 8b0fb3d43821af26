// Package setup wires the adapter-controller binary: flags, scheme, declared caches and
// controllers on the shared, sync-gated manager.
package setup

import (
	"context"
	"flag"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/modelplane/modelplane/shared/api/model/v1alpha1"
	"github.com/modelplane/modelplane/shared/app"
	"github.com/modelplane/modelplane/shared/syncgate"
)

// ControllerName names the binary in logs, metrics and its leader election lease.
const ControllerName = "adapter-controller"

// Options are the shared options plus this binary's own.
type Options struct {
	*app.Options
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{Options: app.NewOptions(ControllerName)}
}

// AddFlags registers every flag of the binary.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	o.Options.AddFlags(fs)
}

// Scheme holds the types the binary reads and writes.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	return s
}

// PodSelector scopes the Pod cache to model pods, so memory grows with model pods only.
func PodSelector() labels.Selector {
	req, err := labels.NewRequirement(v1alpha1.ModelNameLabel, selection.Exists, nil)
	utilruntime.Must(err)
	return labels.NewSelector().Add(*req)
}

// Resources are the kinds the controller reads through its cache.
func Resources() []syncgate.Resource {
	return []syncgate.Resource{
		syncgate.Typed(&v1alpha1.ModelAdapter{}),
		syncgate.Typed(&corev1.Pod{}),
		syncgate.Typed(&corev1.Service{}),
		syncgate.Typed(&discoveryv1.EndpointSlice{}),
	}
}

// Run builds the manager, declares the caches and runs until ctx ends.
func Run(ctx context.Context, o *Options) error {
	a, err := app.New(o.Options, app.Config{
		Controller: ControllerName,
		Scheme:     Scheme(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: PodSelector()},
		},
	})
	if err != nil {
		return err
	}
	if err := a.Gate.Register(ctx, Resources()...); err != nil {
		return err
	}
	return a.Run(ctx)
}
