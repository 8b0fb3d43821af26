package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/modelplane/modelplane/router-controller/internal/routes"
)

// reconcileGrants makes the ReferenceGrants of namespace admit exactly the Services that
// our routes send to there. Services stay in the grant that already admits them
// (routes.AssignReferenceGrants), so a change rewrites the grants it concerns and no others:
// desired grants are created or updated first, then grants of ours left without Services
// are deleted. Grants we do not own are never modified, and their names are not reused.
// The work is proportional to the routes with a backend in the namespace (found through an
// index) and the grants in it.
func (r *RouteReconciler) reconcileGrants(ctx context.Context, namespace string) error {
	services, err := r.servicesRoutedTo(ctx, namespace)
	if err != nil {
		return err
	}
	var list gatewayv1beta1.ReferenceGrantList
	if err := r.cache.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("listing ReferenceGrants in %s: %w", namespace, err)
	}
	existing := make(map[string]*gatewayv1beta1.ReferenceGrant, len(list.Items))
	var (
		current  []*gatewayv1beta1.ReferenceGrant
		reserved []string
	)
	for i := range list.Items {
		g := &list.Items[i]
		existing[g.Name] = g
		if r.ownsGrant(g) && g.DeletionTimestamp == nil {
			current = append(current, g)
		} else {
			reserved = append(reserved, g.Name)
		}
	}
	// Sorted so that surplus grants are deleted in a stable order.
	slices.SortFunc(current, func(a, b *gatewayv1beta1.ReferenceGrant) int { return strings.Compare(a.Name, b.Name) })
	desired, err := routes.AssignReferenceGrants(r.cfg.Routes, namespace, services, current, reserved)
	if err != nil {
		return reconcile.TerminalError(err)
	}

	log := ctrl.LoggerFrom(ctx)
	var errs []error
	wanted := map[string]bool{}
	for _, d := range desired {
		wanted[d.Name] = true
		cur := existing[d.Name]
		switch {
		case cur == nil:
			log.V(2).Info("Creating ReferenceGrant", "grant", klog.KObj(d), "services", len(d.Spec.To))
			if err := r.client.Create(ctx, d); err != nil {
				errs = append(errs, fmt.Errorf("creating ReferenceGrant %s: %w", klog.KObj(d), err))
			}
		case !r.ownsGrant(cur):
			// Not reached: the names of foreign grants are reserved. Kept as a safety net.
			errs = append(errs, fmt.Errorf("ReferenceGrant %s exists and is not managed by this router; leaving it untouched", klog.KObj(cur)))
		case grantUpToDate(cur, d):
		default:
			updated := cur.DeepCopy()
			updated.Spec = *d.Spec.DeepCopy()
			mergeMetadata(updated, d)
			log.V(2).Info("Updating ReferenceGrant", "grant", klog.KObj(d), "services", len(d.Spec.To))
			if err := r.client.Update(ctx, updated); err != nil {
				errs = append(errs, fmt.Errorf("updating ReferenceGrant %s: %w", klog.KObj(d), err))
			}
		}
	}
	if len(errs) > 0 {
		// Surplus grants may still admit Services that the failed ones were to take over.
		return errors.Join(errs...)
	}

	for _, cur := range current {
		if wanted[cur.Name] {
			continue
		}
		log.V(2).Info("Deleting ReferenceGrant: no route sends to its Services", "grant", klog.KObj(cur))
		if err := r.client.Delete(ctx, cur, client.Preconditions{UID: &cur.UID}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting ReferenceGrant %s: %w", klog.KObj(cur), err))
		}
	}
	return errors.Join(errs...)
}

// servicesRoutedTo returns the sorted distinct Services in namespace that our routes send
// to. Nothing needs granting in the gateway namespace itself.
func (r *RouteReconciler) servicesRoutedTo(ctx context.Context, namespace string) ([]string, error) {
	if namespace == r.cfg.Routes.GatewayNamespace {
		return nil, nil
	}
	var list gatewayv1.HTTPRouteList
	if err := r.cache.List(ctx, &list, client.InNamespace(r.cfg.Routes.GatewayNamespace),
		client.MatchingFields{routeBackendIndex: namespace}); err != nil {
		return nil, fmt.Errorf("listing HTTPRoutes with backends in %s: %w", namespace, err)
	}
	var services []string
	for i := range list.Items {
		if routes.IsManaged(&list.Items[i]) {
			services = append(services, routedServices(&list.Items[i], namespace)...)
		}
	}
	slices.Sort(services)
	return slices.Compact(services), nil
}

// ownsGrant reports whether the grant is managed by a router of this gateway namespace.
func (r *RouteReconciler) ownsGrant(g *gatewayv1beta1.ReferenceGrant) bool {
	return routes.IsManaged(g) && g.Labels[routes.GatewayNamespaceLabel] == r.cfg.Routes.GatewayNamespace
}

// grantUpToDate reports whether existing already has the desired spec, labels and
// annotations.
func grantUpToDate(existing, desired *gatewayv1beta1.ReferenceGrant) bool {
	return equality.Semantic.DeepEqual(existing.Spec, desired.Spec) && metadataUpToDate(existing, desired)
}
