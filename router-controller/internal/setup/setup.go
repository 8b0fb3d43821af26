// Package setup wires the router-controller binary: flags, scheme, declared caches and
// controllers on the shared, sync-gated manager.
package setup

import (
	"context"
	"flag"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	v1alpha1 "github.com/modelplane/modelplane/shared/api/model/v1alpha1"
	"github.com/modelplane/modelplane/shared/app"
	"github.com/modelplane/modelplane/shared/syncgate"
)

// ControllerName names the binary in logs, metrics and its leader election lease.
const ControllerName = "router-controller"

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
	utilruntime.Must(gatewayv1.Install(s))
	utilruntime.Must(gatewayv1beta1.Install(s))
	return s
}

// Resources are the kinds the controller reads through its cache: workloads metadata-only,
// since labels and annotations are all the routes need.
func Resources() []syncgate.Resource {
	return []syncgate.Resource{
		syncgate.Metadata(appsv1.SchemeGroupVersion.WithKind("Deployment")),
		syncgate.Metadata(appsv1.SchemeGroupVersion.WithKind("StatefulSet")),
		syncgate.Metadata(v1alpha1.GroupVersion.WithKind("ModelAdapter")),
		syncgate.Typed(&gatewayv1.HTTPRoute{}),
		syncgate.Typed(&gatewayv1beta1.ReferenceGrant{}),
	}
}

// Run builds the manager, declares the caches and runs until ctx ends.
func Run(ctx context.Context, o *Options) error {
	a, err := app.New(o.Options, app.Config{Controller: ControllerName, Scheme: Scheme()})
	if err != nil {
		return err
	}
	if err := a.Gate.Register(ctx, Resources()...); err != nil {
		return err
	}
	return a.Run(ctx)
}
