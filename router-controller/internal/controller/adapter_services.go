package controller

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
	modelv1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/shared/objmeta"
)

// A ModelAdapter is routed to the headless Service the adapter-controller publishes for it,
// named after it, on that Service's port: the adapter-controller puts the Service on its
// engines' port (an SGLang engine listens on 30000, not 8000), so the Service is the one
// place that says where the adapter is served. The router caches only the Services the
// adapter-controller publishes (AdapterServiceSelector); until an adapter's Service is
// there, the adapter claims its model but adds no backend.

// AdapterServiceSelector selects the Services the router caches: those the adapter-controller
// publishes for ModelAdapters, by the labels it sets on them.
func AdapterServiceSelector() labels.Selector {
	managed, err := labels.NewRequirement(objmeta.ManagedByLabel, selection.Equals, []string{objmeta.AdapterControllerManagedBy})
	if err != nil {
		panic(err) // constant, valid input
	}
	named, err := labels.NewRequirement(modelv1alpha1.ModelNameLabel, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*managed, *named)
}

// adapterPort returns the port of the Service the adapter-controller published for adapter,
// read from the declared Service cache; 0 while there is none that is the adapter's (see
// routes.IsAdapterService). An error is a failed cache read, never a missing Service.
func (r *RouteReconciler) adapterPort(ctx context.Context, adapter metav1.Object) (int32, error) {
	svc := &corev1.Service{}
	key := types.NamespacedName{Namespace: adapter.GetNamespace(), Name: adapter.GetName()}
	switch err := r.cache.Get(ctx, key, svc); {
	case apierrors.IsNotFound(err):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("reading the Service of ModelAdapter %s: %w", key, err)
	}
	return routes.AdapterPort(adapter, svc), nil
}

// sourcePort is adapterPort for a ModelAdapter and 0 (unused) for other kinds: the
// adapterPort argument of routes.SourceFromObject.
func (r *RouteReconciler) sourcePort(ctx context.Context, o sourceObject) (int32, error) {
	if o.kind.GVK.Kind != routes.KindModelAdapter {
		return 0, nil
	}
	return r.adapterPort(ctx, o.obj)
}

// serviceToModel maps a Service of the adapter-controller to the model of its adapter: the
// adapter's name, which is the Service's.
func (r *RouteReconciler) serviceToModel(_ context.Context, svc *corev1.Service) []Key {
	return []Key{ModelKey(svc.Name)}
}

// adapterServiceChanged lets through creations, deletions and the updates of an adapter's
// Service that can change its route: ports, labels and owners.
func adapterServiceChanged() predicate.TypedPredicate[*corev1.Service] {
	return predicate.TypedFuncs[*corev1.Service]{
		UpdateFunc: func(e event.TypedUpdateEvent[*corev1.Service]) bool {
			o, n := e.ObjectOld, e.ObjectNew
			return !equality.Semantic.DeepEqual(o.Spec.Ports, n.Spec.Ports) ||
				!maps.Equal(o.Labels, n.Labels) ||
				!equality.Semantic.DeepEqual(o.OwnerReferences, n.OwnerReferences)
		},
	}
}
