package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/modelplane/modelplane/router-controller/internal/routes"
)

// reconcileModel makes the HTTPRoute of model match the live sources claiming it: created
// when missing, updated when it differs, deleted when no source is left, and left alone
// (reported) when a route of that name is not ours. At most one write.
func (r *RouteReconciler) reconcileModel(ctx context.Context, model string) error {
	objs, err := r.listSources(ctx, modelIndexValue(model))
	if err != nil {
		return err
	}
	live, sources := r.routableSources(ctx, model, objs)

	existing, err := r.getRoute(ctx, routes.RouteName(model))
	if err != nil {
		return err
	}
	if len(sources) == 0 {
		r.states.clear(model)
		return r.deleteRoute(ctx, existing)
	}

	desired, err := routes.BuildRoute(r.cfg.Routes, model, sources)
	if err != nil {
		// Retrying cannot fix the sources; the next change of one reconciles again. An
		// existing route is left as it is rather than removed.
		r.states.clear(model)
		r.eventOnSources(live, nil, corev1.EventTypeWarning, ReasonRouteInvalid, ActionSkip,
			"Cannot publish a valid HTTPRoute for model %q: %v", model, err)
		return reconcile.TerminalError(err)
	}
	return r.applyRoute(ctx, model, desired, existing, live)
}

// routableSources converts the cached workloads of model into routing sources. Workloads
// being deleted are not live. Problems are reported as Warning events on the workload;
// workloads that cannot be routed are left out.
func (r *RouteReconciler) routableSources(ctx context.Context, model string, objs []sourceObject) ([]sourceObject, []routes.Source) {
	var (
		live    []sourceObject
		sources []routes.Source
	)
	for _, o := range objs {
		if o.obj.DeletionTimestamp != nil {
			continue
		}
		src, ok, problems := routes.SourceFromObject(o.kind.GVK.Kind, o.obj)
		if len(problems) > 0 {
			ctrl.LoggerFrom(ctx).V(2).Info("Source has problems", "kind", o.kind.GVK.Kind, "source", klog.KObj(o.obj), "problems", problems)
			r.eventOnSources([]sourceObject{o}, nil, corev1.EventTypeWarning, ReasonInvalidSource, ActionReadLabels,
				"%s", strings.Join(problems, " "))
		}
		if !ok || src.Model != model {
			continue
		}
		live = append(live, o)
		sources = append(sources, src)
	}
	return live, sources
}

// getRoute returns the cached route of that name in the gateway namespace, or nil.
func (r *RouteReconciler) getRoute(ctx context.Context, name string) (*gatewayv1.HTTPRoute, error) {
	route := &gatewayv1.HTTPRoute{}
	err := r.cache.Get(ctx, types.NamespacedName{Namespace: r.cfg.Routes.GatewayNamespace, Name: name}, route)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading HTTPRoute %s/%s: %w", r.cfg.Routes.GatewayNamespace, name, err)
	}
	return route, nil
}

// applyRoute writes desired when the existing route is missing or differs, unless the
// existing route is not ours.
func (r *RouteReconciler) applyRoute(ctx context.Context, model string, desired, existing *gatewayv1.HTTPRoute, live []sourceObject) error {
	log := ctrl.LoggerFrom(ctx).WithValues("route", klog.KObj(desired))
	switch {
	case existing == nil:
		log.V(2).Info("Creating route", "sources", desired.Annotations[routes.SourcesAnnotation])
		if err := r.client.Create(ctx, desired.DeepCopy()); err != nil {
			if isNamespaceNotFound(err, desired.Namespace) {
				r.states.clear(model)
				log.Info("Cannot create route: the gateway namespace does not exist; create it or set --gateway-namespace",
					"gatewayNamespace", desired.Namespace, "retryAfter", r.cfg.GatewayNamespaceRetry)
				r.eventOnSources(live, nil, corev1.EventTypeWarning, ReasonGatewayNamespaceMissing, ActionCreate,
					"Cannot create HTTPRoute %s/%s for model %q: namespace %q does not exist (the router's --gateway-namespace); retrying every %s",
					desired.Namespace, desired.Name, model, desired.Namespace, r.cfg.GatewayNamespaceRetry)
				return &gatewayNamespaceMissingError{namespace: desired.Namespace, err: err}
			}
			return fmt.Errorf("creating HTTPRoute %s: %w", klog.KObj(desired), err)
		}
		r.states.owned(model)
		r.eventOnSources(live, desired, corev1.EventTypeNormal, ReasonRouteCreated, ActionCreate,
			"Created HTTPRoute %s/%s for model %q", desired.Namespace, desired.Name, model)

	case !routes.IsManaged(existing):
		r.states.set(model, RouteStateConflict)
		log.Info("Leaving route untouched: it is not managed by modelplane", "managedBy", existing.Labels[routes.ManagedByLabel])
		r.eventOnSources(live, existing, corev1.EventTypeWarning, ReasonRouteConflict, ActionSkip,
			"HTTPRoute %s/%s exists but is not managed by modelplane (label %s=%s missing); model %q is not routed by modelplane until it is removed",
			existing.Namespace, existing.Name, routes.ManagedByLabel, routes.ManagedByValue, model)

	case routeUpToDate(existing, desired):
		r.observeAcceptance(ctx, model, existing, live)

	default:
		updated := mergeRoute(existing, desired)
		log.V(2).Info("Updating route", "sources", desired.Annotations[routes.SourcesAnnotation])
		if err := r.client.Update(ctx, updated); err != nil {
			return fmt.Errorf("updating HTTPRoute %s: %w", klog.KObj(existing), err)
		}
		r.states.owned(model)
		r.eventOnSources(live, updated, corev1.EventTypeNormal, ReasonRouteUpdated, ActionUpdate,
			"Updated HTTPRoute %s/%s for model %q", existing.Namespace, existing.Name, model)
	}
	return nil
}

// gatewayNamespaceMissingError: a route could not be created because the gateway namespace
// does not exist.
type gatewayNamespaceMissingError struct {
	namespace string
	err       error
}

func (e *gatewayNamespaceMissingError) Error() string {
	return fmt.Sprintf("gateway namespace %q does not exist: %v", e.namespace, e.err)
}

func (e *gatewayNamespaceMissingError) Unwrap() error { return e.err }

// isNamespaceNotFound reports whether err is the API server's answer to a create in a
// namespace that does not exist: NotFound with details naming the namespace itself.
func isNamespaceNotFound(err error, namespace string) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Group == "" && d.Kind == "namespaces" && d.Name == namespace
}

// deleteRoute deletes a route of ours whose model has no live source. Routes we do not own
// are never deleted.
func (r *RouteReconciler) deleteRoute(ctx context.Context, existing *gatewayv1.HTTPRoute) error {
	if existing == nil || !routes.IsManaged(existing) || existing.DeletionTimestamp != nil {
		return nil
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Deleting route: no live source claims its model", "route", klog.KObj(existing))
	err := r.client.Delete(ctx, existing, client.Preconditions{UID: &existing.UID})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting HTTPRoute %s: %w", klog.KObj(existing), err)
	}
	return nil
}

// routeUpToDate reports whether existing already has the desired spec, labels and
// annotations. Labels and annotations others added are kept and not compared.
func routeUpToDate(existing, desired *gatewayv1.HTTPRoute) bool {
	return equality.Semantic.DeepEqual(existing.Spec, desired.Spec) && metadataUpToDate(existing, desired)
}

// mergeRoute returns existing with the desired spec and our labels and annotations.
func mergeRoute(existing, desired *gatewayv1.HTTPRoute) *gatewayv1.HTTPRoute {
	out := existing.DeepCopy()
	out.Spec = *desired.Spec.DeepCopy()
	mergeMetadata(out, desired)
	return out
}

// metadataUpToDate reports whether every label and annotation of desired is on existing.
func metadataUpToDate(existing, desired metav1.Object) bool {
	return hasAll(existing.GetLabels(), desired.GetLabels()) && hasAll(existing.GetAnnotations(), desired.GetAnnotations())
}

func hasAll(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// mergeMetadata sets the labels and annotations of desired on dst, keeping the others.
func mergeMetadata(dst, desired metav1.Object) {
	dst.SetLabels(merged(dst.GetLabels(), desired.GetLabels()))
	dst.SetAnnotations(merged(dst.GetAnnotations(), desired.GetAnnotations()))
}

// merged is base with overlay's entries set, in a new map (base is a cached object's).
func merged(base, overlay map[string]string) map[string]string {
	if len(overlay) == 0 {
		return base
	}
	out := maps.Clone(base)
	if out == nil {
		out = make(map[string]string, len(overlay))
	}
	maps.Copy(out, overlay)
	return out
}
