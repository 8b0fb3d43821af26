package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
	"github.com/loraplane/loraplane/shared/aibrix"
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
	ours := make(map[string]*gatewayv1beta1.ReferenceGrant, len(current))
	for _, g := range current {
		ours[g.Name] = g
	}
	for _, d := range desired {
		wanted[d.Name] = true
		// The names of grants not ours (or being deleted) are reserved, so a desired grant
		// is new or one of ours; a foreign grant is never read here, let alone updated.
		cur := ours[d.Name]
		switch {
		case cur == nil:
			log.V(2).Info("Creating ReferenceGrant", "grant", klog.KObj(d), "services", len(d.Spec.To))
			if err := r.client.Create(ctx, d); err != nil {
				errs = append(errs, fmt.Errorf("creating ReferenceGrant %s: %w", klog.KObj(d), err))
			}
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
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return r.retireAIBrixGrant(ctx, namespace, existing[routes.AIBrixGrantName(r.cfg.Routes.GatewayNamespace, namespace)], current)
}

// retireAIBrixGrant deletes AIBrix's reserved grant of namespace (every Service, from the
// gateway namespace's routes) once the grants of ours, as the API server has them (the
// cache), admit every Service that a route in the gateway namespace sends to there, ours or
// not: no route loses its reference. A Service only routes we do not manage send to, and
// ours do not admit, keeps AIBrix's grant (a Warning event on it, counted in
// loraplane_aibrix_grants_kept); one of our routes whose grant is being written waits for
// that write. Not while AIBrix's controllers run: its model router would make it again. A
// grant of that name that is not AIBrix's (routes.AIBrixGrantShape: Helm or a GitOps tool
// keeps it, say) is never deleted, and reported once (NotAIBrixGrant).
func (r *RouteReconciler) retireAIBrixGrant(ctx context.Context, namespace string, g *gatewayv1beta1.ReferenceGrant, ours []*gatewayv1beta1.ReferenceGrant) error {
	if g == nil || !r.cfg.AdoptAIBrix || g.DeletionTimestamp != nil {
		r.keptGrants.set(namespace, "")
		return nil
	}
	if ok, why := routes.AIBrixGrantShape(r.cfg.Routes, g); !ok {
		r.keptGrants.set(namespace, "")
		r.reportNotAIBrixGrant(ctx, g, why)
		return nil
	}
	admitted := map[string]bool{}
	for _, o := range ours {
		for _, svc := range routes.AdmittedServices(o) {
			admitted[svc] = true
		}
	}
	var list gatewayv1.HTTPRouteList
	if err := r.cache.List(ctx, &list, client.InNamespace(r.cfg.Routes.GatewayNamespace),
		client.MatchingFields{routeBackendIndex: namespace}); err != nil {
		return fmt.Errorf("listing HTTPRoutes with backends in %s: %w", namespace, err)
	}
	var pending, foreign []string
	for i := range list.Items {
		route := &list.Items[i]
		for _, svc := range routedServices(route, namespace) {
			switch {
			case admitted[svc]:
			case routes.IsManaged(route):
				pending = append(pending, svc)
			default:
				foreign = append(foreign, fmt.Sprintf("%s (HTTPRoute %s)", svc, route.Name))
			}
		}
	}
	log := ctrl.LoggerFrom(ctx).WithValues("grant", klog.KObj(g))
	if len(foreign) > 0 {
		slices.Sort(foreign)
		msg := strings.Join(slices.Compact(foreign), ", ")
		if r.keptGrants.set(namespace, msg) {
			log.Info("Keeping AIBrix's ReferenceGrant: routes loraplane does not manage still need it", "services", msg)
			r.recorder.Eventf(g, nil, corev1.EventTypeWarning, ReasonAIBrixGrantKept, ActionDeleteGrant,
				"Keeping this ReferenceGrant, made by AIBrix's model router: HTTPRoutes in %s that loraplane does not manage send to Services that loraplane's grants do not admit: %s",
				r.cfg.Routes.GatewayNamespace, msg)
		}
		return nil
	}
	r.keptGrants.set(namespace, "")
	if len(pending) > 0 {
		log.V(2).Info("Keeping AIBrix's ReferenceGrant until the grants of ours admit the Services our routes use", "services", pending)
		return nil
	}
	if st := r.cfg.AIBrix.Check(ctx); st.Running {
		log.Info("Not removing AIBrix's ReferenceGrant: AIBrix's controllers are running", "reason", st.Reason)
		return &waitingForAIBrixError{reason: st.Reason}
	}
	log.Info("Deleting AIBrix's ReferenceGrant: the grants of ours admit every Service routed to in its namespace")
	if err := r.client.Delete(ctx, g, client.Preconditions{UID: &g.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting ReferenceGrant %s: %w", klog.KObj(g), err)
	}
	aibrix.RecordTakeOver(aibrix.ObjectReferenceGrant)
	r.recorder.Eventf(g, nil, corev1.EventTypeNormal, ReasonAIBrixGrantRemoved, ActionDeleteGrant,
		"Deleted this ReferenceGrant, made by AIBrix's model router (every Service of %s): loraplane's grants admit every Service routed to here",
		namespace)
	return nil
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
