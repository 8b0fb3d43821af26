package controller

import (
	"context"
	"fmt"
	"iter"
	"slices"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/shared/syncgate"
)

// SourceKind is a kind of model workload the router reads, metadata-only.
type SourceKind struct {
	GVK schema.GroupVersionKind
	// Optional kinds are skipped when their API is not served (CRD not installed).
	Optional bool
}

// DefaultSourceKinds are the workload kinds every router reads: Deployments, StatefulSets and
// ModelAdapters. Their APIs must be served.
func DefaultSourceKinds() []SourceKind {
	return []SourceKind{
		{GVK: appsv1.SchemeGroupVersion.WithKind("Deployment")},
		{GVK: appsv1.SchemeGroupVersion.WithKind("StatefulSet")},
		{GVK: v1alpha1.GroupVersion.WithKind(routes.KindModelAdapter)},
	}
}

// String renders the kind as group/version/Kind.
func (k SourceKind) String() string { return syncgate.GVKString(k.GVK) }

// Object returns an empty metadata-only object of the kind, for caches and watches.
func (k SourceKind) Object() *metav1.PartialObjectMetadata {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(k.GVK)
	return obj
}

func (k SourceKind) list() *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(k.GVK.GroupVersion().WithKind(k.GVK.Kind + "List"))
	return l
}

// sourceKind is a SourceKind with what setup learnt about it.
type sourceKind struct {
	SourceKind
	// indexed is true when the field index sourceIndex was registered on its cache.
	indexed bool
}

// sourceObject is one cached workload of a source kind.
type sourceObject struct {
	kind SourceKind
	obj  *metav1.PartialObjectMetadata
}

// id identifies the workload in what the router remembers about it: kind, namespace, name
// and UID (a workload created again under its name is a new one).
func (o sourceObject) id() string {
	return o.kind.GVK.Kind + "/" + o.obj.Namespace + "/" + o.obj.Name + "/" + string(o.obj.UID)
}

// Field indexes on the caches.
const (
	// sourceIndex indexes workloads by modelIndexValue(model), routeIndexValue(RouteName(model))
	// and routeIndexValue(LegacyRouteName(model)) of the model they claim.
	sourceIndex = "loraplane.io/routing"
	// routeBackendIndex indexes HTTPRoutes, ours or not, by the namespaces of the Services
	// they send or mirror requests to (serviceRefs).
	routeBackendIndex = "loraplane.io/backend-namespace"
)

func modelIndexValue(model string) string { return "model:" + model }

func routeIndexValue(routeName string) string { return "route:" + routeName }

// sourceIndexValues is the indexer of sourceIndex for workloads of kind.
func sourceIndexValues(kind string) client.IndexerFunc {
	return func(obj client.Object) []string {
		m := routes.ClaimedModel(kind, obj)
		if m == "" {
			return nil
		}
		values := []string{modelIndexValue(m), routeIndexValue(routes.RouteName(m))}
		if legacy := routes.LegacyRouteName(m); legacy != routes.RouteName(m) {
			values = append(values, routeIndexValue(legacy))
		}
		return values
	}
}

// routeBackendNamespaces is the indexer of routeBackendIndex: the sorted distinct namespaces
// of the Services a route refers to (serviceRefs).
func routeBackendNamespaces(obj client.Object) []string {
	route, ok := obj.(*gatewayv1.HTTPRoute)
	if !ok {
		return nil
	}
	var out []string
	for ref := range serviceRefs(route) {
		out = append(out, ref.Namespace)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// routedServices returns the sorted distinct Services in namespace that route refers to
// (serviceRefs).
func routedServices(route *gatewayv1.HTTPRoute, namespace string) []string {
	var out []string
	for ref := range serviceRefs(route) {
		if ref.Namespace == namespace {
			out = append(out, ref.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// serviceRef is a Service a route refers to.
type serviceRef struct{ Namespace, Name string }

// serviceRefs yields every Service route refers to across namespaces' boundaries as far as
// a ReferenceGrant is concerned: its backends and the targets of its RequestMirror filters,
// of a rule or of a backend, the route's namespace being the default. Mirrored requests
// need a grant as much as routed ones.
func serviceRefs(route *gatewayv1.HTTPRoute) iter.Seq[serviceRef] {
	return func(yield func(serviceRef) bool) {
		emit := func(ref gatewayv1.BackendObjectReference) bool {
			if !isServiceRef(ref) {
				return true
			}
			return yield(serviceRef{Namespace: string(ptr.Deref(ref.Namespace, gatewayv1.Namespace(route.Namespace))), Name: string(ref.Name)})
		}
		mirrors := func(filters []gatewayv1.HTTPRouteFilter) bool {
			for _, f := range filters {
				if f.RequestMirror != nil && !emit(f.RequestMirror.BackendRef) {
					return false
				}
			}
			return true
		}
		for _, rule := range route.Spec.Rules {
			if !mirrors(rule.Filters) {
				return
			}
			for _, ref := range rule.BackendRefs {
				if !emit(ref.BackendObjectReference) || !mirrors(ref.Filters) {
					return
				}
			}
		}
	}
}

func isServiceRef(ref gatewayv1.BackendObjectReference) bool {
	return (ref.Group == nil || *ref.Group == "") && (ref.Kind == nil || *ref.Kind == "Service")
}

// skippedKind returns why the gate skipped an optional kind (its API is not served), and nil
// for a kind that has a cache: every required kind, and an optional kind the gate registered.
// The declared cache refuses skipped kinds without creating informers, so asking is free.
// Setup asks it, before start; afterwards activeKinds asks the gate whether a kind is synced.
func skippedKind(ctx context.Context, informers informerGetter, k SourceKind) error {
	if !k.Optional {
		return nil
	}
	_, err := informers.GetInformer(ctx, k.Object(), cache.BlockUntilSynced(false))
	return err
}

// registerIndexes adds the field indexes; they must be added before the manager starts.
// Optional kinds whose API is not served (skipped by the gate) get no index.
func registerIndexes(ctx context.Context, log logr.Logger, declared informerGetter, indexer client.FieldIndexer, kinds []sourceKind) error {
	for i := range kinds {
		k := &kinds[i]
		if err := skippedKind(ctx, declared, k.SourceKind); err != nil {
			log.V(2).Info("Not indexing optional source kind", "kind", k.String(), "reason", err.Error())
			continue
		}
		if err := indexer.IndexField(ctx, k.Object(), sourceIndex, sourceIndexValues(k.GVK.Kind)); err != nil {
			if k.Optional {
				log.Info("Not indexing optional source kind; lookups scan its cache", "kind", k.String(), "err", err.Error())
				continue
			}
			return fmt.Errorf("indexing %s by model: %w", k, err)
		}
		k.indexed = true
	}
	if err := indexer.IndexField(ctx, &gatewayv1.HTTPRoute{}, routeBackendIndex, routeBackendNamespaces); err != nil {
		return fmt.Errorf("indexing HTTPRoutes by backend namespace: %w", err)
	}
	return nil
}
