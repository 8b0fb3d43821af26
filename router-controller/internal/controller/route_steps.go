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

	"github.com/loraplane/loraplane/router-controller/internal/routes"
	"github.com/loraplane/loraplane/shared/aibrix"
	"github.com/loraplane/loraplane/shared/objmeta"
)

// reconcileModel makes the HTTPRoute of model match the live workloads claiming it: created
// when missing, updated when it differs, deleted when no workload claims the model any more,
// adopted when AIBrix's model router made it, and left alone (reported) when a route of that
// name is not ours or when some of its sources lie outside this router's view. Only the
// claimants of the model's owner namespace are served (claims.go). A route of ours under the
// name earlier releases gave the model (routes.LegacyRouteName) is deleted once the route
// under RouteName serves. At most one route write, except that a route whose name is taken
// keeps its legacy route up to date; a route that gains a Service in a namespace no grant
// admits yet has that grant written first.
func (r *RouteReconciler) reconcileModel(ctx context.Context, model string) error {
	objs, err := r.listSources(ctx, modelIndexValue(model))
	if err != nil {
		return err
	}
	claimants := liveClaimants(objs)
	existing, err := r.getRoute(ctx, routes.RouteName(model))
	if err != nil {
		return err
	}
	legacy, err := r.legacyRoute(ctx, model)
	if err != nil {
		return err
	}
	serving := r.servingRoute(model, existing, legacy)
	if outside := r.outsideView(serving); len(outside) > 0 {
		return r.keepOutsideView(ctx, model, serving, outside, claimants)
	}
	if len(claimants) == 0 {
		r.states.clear(model)
		r.grantsNotAhead(model)
		return errors.Join(r.deleteRoute(ctx, model, existing), r.deleteRoute(ctx, model, legacy))
	}
	var prior []string
	if serving != nil {
		prior = routes.ScopeNamespaces(routes.RouteScopes(serving))
	}
	served, refused, owner := r.splitClaims(claimants, prior)
	r.reportRefused(ctx, model, owner, refused)
	live, sources, err := r.routableSources(ctx, model, served)
	if err != nil {
		return err
	}
	if len(sources) == 0 {
		return r.keepUnroutable(ctx, model, served, serving != nil, "no workload claiming it can be routed (see the InvalidSource events on them)")
	}
	desired, err := routes.BuildRoute(r.cfg.Routes, model, sources)
	if err != nil {
		// Retrying cannot fix the sources; the next change of one reconciles again.
		_ = r.keepUnroutable(ctx, model, live, true, err.Error())
		return reconcile.TerminalError(err)
	}
	m := modelRoutes{model: model, desired: desired, existing: existing, legacy: legacy, live: live, sources: sources}
	return r.applyRoute(ctx, &m)
}

// keepUnroutable leaves the model's route as it is while workloads still claim the model but
// none of them can make a valid route (a typo in an annotation must not take a live model
// offline): counted as state invalid and, when report is set, reported once per reason on
// the claimants. Without a route and without a route's worth of sources (a ModelAdapter
// waiting for its Service), the InvalidSource events say it all.
func (r *RouteReconciler) keepUnroutable(ctx context.Context, model string, claimants []sourceObject, report bool, why string) error {
	news := r.states.invalid(model, why, claimants)
	if report && len(news) > 0 {
		ctrl.LoggerFrom(ctx).Info("Cannot publish a valid route for the model; any route it has is kept as it is", "model", model, "reason", why)
		r.eventOnSources(news, nil, corev1.EventTypeWarning, ReasonRouteInvalid, ActionSkip,
			"Cannot publish a valid HTTPRoute for model %q: %s; its current route, if any, is kept as it is", model, why)
	}
	return nil
}

// modelRoutes is what reconciling the route of one model works on.
type modelRoutes struct {
	model    string
	desired  *gatewayv1.HTTPRoute // built from the live sources
	existing *gatewayv1.HTTPRoute // the route named RouteName(model), if any
	legacy   *gatewayv1.HTTPRoute // our route under LegacyRouteName(model), if any and not existing
	live     []sourceObject
	sources  []routes.Source // what each of live contributes, in the same order
}

// routableSources converts the live claimants of model into routing sources. Problems are
// reported as Warning events on the workload (once per set of problems); workloads that
// cannot be routed (a ModelAdapter among them until its Service is published) are left out.
// An error is a failed cache read.
func (r *RouteReconciler) routableSources(ctx context.Context, model string, objs []sourceObject) ([]sourceObject, []routes.Source, error) {
	var (
		live    []sourceObject
		sources []routes.Source
	)
	for _, o := range objs {
		port, err := r.sourcePort(ctx, o)
		if err != nil {
			return nil, nil, err
		}
		src, ok, problems := routes.SourceFromObject(o.kind.GVK.Kind, o.obj, port)
		if r.states.problems(model, o, problems) {
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
	return live, sources, nil
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

// legacyRoute returns our route of model under the name earlier releases gave it, when that
// name differs from RouteName(model); nil otherwise.
func (r *RouteReconciler) legacyRoute(ctx context.Context, model string) (*gatewayv1.HTTPRoute, error) {
	name := routes.LegacyRouteName(model)
	if name == routes.RouteName(model) {
		return nil, nil
	}
	route, err := r.getRoute(ctx, name)
	if err != nil || route == nil || !r.ownsRouteOf(route, model) {
		return nil, err
	}
	return route, nil
}

// applyRoute brings the route named RouteName(model) to the desired state: created when
// missing, updated when ours and different, adopted when AIBrix's model router made it, and
// reported as a conflict otherwise.
func (r *RouteReconciler) applyRoute(ctx context.Context, m *modelRoutes) error {
	switch existing := m.existing; {
	case existing == nil:
		return r.createRoute(ctx, m)
	case routes.OwnershipOf(r.cfg.Routes, existing) == routes.OtherInstall:
		return r.reportConflict(ctx, m, "it belongs to "+routes.DescribeOwner(existing))
	case routes.OwnershipOf(r.cfg.Routes, existing) == routes.Mine && !r.ownsRouteOf(existing, m.model):
		// Two models whose route names collide (see routes.RouteName): the route stays with
		// the model that has it while that model is claimed by a workload.
		other := routes.ModelOf(existing)
		claimed, err := r.modelClaimed(ctx, other)
		if err != nil {
			return err
		}
		if claimed {
			return r.reportConflict(ctx, m, fmt.Sprintf("it routes model %q, whose route name is the same", other))
		}
		return r.updateRoute(ctx, m)
	case routes.OwnershipOf(r.cfg.Routes, existing) == routes.Mine:
		return r.updateRoute(ctx, m)
	case r.cfg.AdoptAIBrix:
		return r.adoptOrReport(ctx, m)
	default:
		return r.reportConflict(ctx, m, notManaged)
	}
}

// createRoute creates the desired route.
func (r *RouteReconciler) createRoute(ctx context.Context, m *modelRoutes) error {
	desired := m.desired
	log := ctrl.LoggerFrom(ctx).WithValues("route", klog.KObj(desired))
	log.V(2).Info("Creating route", "scopes", desired.Annotations[routes.ScopesAnnotation])
	if err := r.waitForGrants(ctx, m.model, desired, nil); err != nil {
		return err
	}
	if err := r.client.Create(ctx, desired.DeepCopy()); err != nil {
		if isNamespaceNotFound(err, desired.Namespace) {
			r.states.clear(m.model)
			log.Info("Cannot create route: the gateway namespace does not exist; create it or set --gateway-namespace",
				"gatewayNamespace", desired.Namespace, "retryAfter", r.cfg.GatewayNamespaceRetry)
			r.eventOnSources(m.live, nil, corev1.EventTypeWarning, ReasonGatewayNamespaceMissing, ActionCreate,
				"Cannot create HTTPRoute %s/%s for model %q: namespace %q does not exist (the router's --gateway-namespace); retrying every %s",
				desired.Namespace, desired.Name, m.model, desired.Namespace, r.cfg.GatewayNamespaceRetry)
			return &gatewayNamespaceMissingError{namespace: desired.Namespace, err: err}
		}
		return fmt.Errorf("creating HTTPRoute %s: %w", klog.KObj(desired), err)
	}
	r.states.owned(m.model)
	r.eventOnSources(r.states.newlyRouted(m.model, m.live, m.sources), desired, corev1.EventTypeNormal, ReasonRouteCreated, ActionCreate,
		"Created HTTPRoute %s/%s for model %q", desired.Namespace, desired.Name, m.model)
	return nil
}

// updateRoute writes the desired spec and our labels and annotations on the existing route
// of ours when they differ; once it is up to date, its acceptance is read and a legacy route
// is retired.
func (r *RouteReconciler) updateRoute(ctx context.Context, m *modelRoutes) error {
	existing := m.existing
	if routeUpToDate(existing, m.desired) {
		// The route is in the cache as desired: the grants reconcile sees what it needs.
		r.grantsNotAhead(m.model)
		r.states.newlyRouted(m.model, m.live, m.sources)
		r.observeAcceptance(ctx, m.model, existing, m.live)
		return r.retireLegacyRoute(ctx, m)
	}
	updated := mergeRoute(existing, m.desired)
	ctrl.LoggerFrom(ctx).V(2).Info("Updating route", "route", klog.KObj(existing), "scopes", m.desired.Annotations[routes.ScopesAnnotation])
	if err := r.waitForGrants(ctx, m.model, m.desired, existing); err != nil {
		return err
	}
	if err := r.client.Update(ctx, updated); err != nil {
		return fmt.Errorf("updating HTTPRoute %s: %w", klog.KObj(existing), err)
	}
	r.states.owned(m.model)
	r.eventOnSources(r.states.newlyRouted(m.model, m.live, m.sources), updated, corev1.EventTypeNormal, ReasonRouteUpdated, ActionUpdate,
		"HTTPRoute %s/%s of model %q now routes to this workload as it is", existing.Namespace, existing.Name, m.model)
	// A legacy route kept until the Gateway accepts this one must not serve stale backends
	// meanwhile (it wins by age where both match).
	return r.applyLegacy(ctx, m)
}

// adoptRoute takes over the route AIBrix's model router made for the model: our labels,
// annotations and spec are written on it, and from then on it is ours. Not while AIBrix's
// controllers run: they would race the take-over.
func (r *RouteReconciler) adoptRoute(ctx context.Context, m *modelRoutes) error {
	existing := m.existing
	log := ctrl.LoggerFrom(ctx).WithValues("route", klog.KObj(existing))
	if st := r.cfg.AIBrix.Check(ctx); st.Running {
		r.states.set(m.model, RouteStateWaitingForAIBrix)
		if r.states.waitingForAIBrix(m.model, st.Episode) {
			log.Info("Not adopting the route AIBrix's model router made: AIBrix's controllers are running", "reason", st.Reason)
			r.eventOnSources(m.live, existing, corev1.EventTypeWarning, ReasonAIBrixRunning, ActionSkip,
				"Not adopting HTTPRoute %s/%s (made by AIBrix's model router) for model %q while AIBrix's controllers run: %s; stop AIBrix's model-route-controller (docs/switching-from-aibrix.md)",
				existing.Namespace, existing.Name, m.model, st.Reason)
		}
		if err := r.applyLegacy(ctx, m); err != nil {
			return err
		}
		return &waitingForAIBrixError{reason: st.Reason}
	}
	updated := mergeRoute(existing, m.desired)
	log.Info("Adopting the route AIBrix's model router made", "scopes", m.desired.Annotations[routes.ScopesAnnotation])
	if err := r.waitForGrants(ctx, m.model, m.desired, existing); err != nil {
		return err
	}
	if err := r.client.Update(ctx, updated); err != nil {
		return fmt.Errorf("adopting HTTPRoute %s: %w", klog.KObj(existing), err)
	}
	aibrix.RecordTakeOver(aibrix.ObjectHTTPRoute)
	r.states.owned(m.model)
	r.states.newlyRouted(m.model, m.live, m.sources)
	r.eventOnSources(m.live, updated, corev1.EventTypeNormal, ReasonRouteAdopted, ActionUpdate,
		"Adopted HTTPRoute %s/%s, made by AIBrix's model router, for model %q: %s", existing.Namespace, existing.Name, m.model,
		adoptionChanges(existing, updated))
	return nil
}

// reportConflict leaves a route of the model's name that is not ours untouched and reports
// it; a legacy route of ours keeps serving the model meanwhile.
func (r *RouteReconciler) reportConflict(ctx context.Context, m *modelRoutes, why string) error {
	existing := m.existing
	r.states.set(m.model, RouteStateConflict)
	ctrl.LoggerFrom(ctx).Info("Leaving route untouched: "+why, "route", klog.KObj(existing), "managedBy", existing.Labels[routes.ManagedByLabel])
	r.eventOnSources(m.live, existing, corev1.EventTypeWarning, ReasonRouteConflict, ActionSkip,
		"HTTPRoute %s/%s exists but %s; model %q is not routed by loraplane until it is removed",
		existing.Namespace, existing.Name, why, m.model)
	return r.applyLegacy(ctx, m)
}

// applyLegacy keeps the legacy route of the model up to date while the route under its
// current name cannot be ours, so that the model stays served as before.
func (r *RouteReconciler) applyLegacy(ctx context.Context, m *modelRoutes) error {
	if m.legacy == nil {
		return nil
	}
	desired := m.desired.DeepCopy()
	desired.Name = m.legacy.Name
	if routeUpToDate(m.legacy, desired) {
		return nil
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Updating the route under its legacy name: its current name is taken", "route", klog.KObj(m.legacy))
	if err := r.client.Update(ctx, mergeRoute(m.legacy, desired)); err != nil {
		return fmt.Errorf("updating HTTPRoute %s: %w", klog.KObj(m.legacy), err)
	}
	return nil
}

// retireLegacyRoute deletes the model's route under its legacy name once the route under
// RouteName(model), ours and up to date, serves at least as well: the Gateway accepts it, or
// it judges neither (no status), or the legacy route is not accepted either. While the
// Gateway has not judged the new route but accepts the legacy one, the legacy route stays,
// so requests never find neither.
func (r *RouteReconciler) retireLegacyRoute(ctx context.Context, m *modelRoutes) error {
	if m.legacy == nil {
		return nil
	}
	current := routes.RouteAcceptance(r.cfg.Routes, m.existing).Verdict
	previous := routes.RouteAcceptance(r.cfg.Routes, m.legacy).Verdict
	log := ctrl.LoggerFrom(ctx).WithValues("route", klog.KObj(m.existing), "legacyRoute", klog.KObj(m.legacy))
	if current != routes.Accepted && (current == routes.Pending || previous == routes.Accepted) {
		log.V(2).Info("Keeping the route under its legacy name until the Gateway accepts its replacement", "verdict", current, "legacyVerdict", previous)
		return nil
	}
	log.Info("Deleting the route under its legacy name: replaced by the route named as AIBrix's gateway looks it up", "verdict", current)
	if err := r.client.Delete(ctx, m.legacy, client.Preconditions{UID: &m.legacy.UID}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting HTTPRoute %s: %w", klog.KObj(m.legacy), err)
	}
	r.eventOnSources(m.live, m.existing, corev1.EventTypeNormal, ReasonRouteRenamed, ActionUpdate,
		"HTTPRoute %s/%s of model %q replaced %s/%s, its name in earlier loraplane releases",
		m.existing.Namespace, m.existing.Name, m.model, m.legacy.Namespace, m.legacy.Name)
	return nil
}

// modelClaimed reports whether a live workload claims model.
func (r *RouteReconciler) modelClaimed(ctx context.Context, model string) (bool, error) {
	objs, err := r.listSources(ctx, modelIndexValue(model))
	if err != nil {
		return false, err
	}
	for _, o := range objs {
		if o.obj.DeletionTimestamp == nil {
			return true, nil
		}
	}
	return false, nil
}

// waitForGrants returns a waitingForGrantsError when the desired route must wait for the
// grants of its new Services (grantsReady).
func (r *RouteReconciler) waitForGrants(ctx context.Context, model string, desired, existing *gatewayv1.HTTPRoute) error {
	ready, err := r.grantsReady(ctx, model, desired, existing)
	if err == nil && !ready {
		err = &waitingForGrantsError{}
	}
	return err
}

// waitingForAIBrixError: a take-over step waits while AIBrix's controllers run.
type waitingForAIBrixError struct{ reason string }

func (e *waitingForAIBrixError) Error() string {
	return "waiting for AIBrix's controllers to stop: " + e.reason
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

// deleteRoute deletes a route of ours serving model, which has no live source. Routes we do
// not own, or that serve another model, are never deleted here.
func (r *RouteReconciler) deleteRoute(ctx context.Context, model string, existing *gatewayv1.HTTPRoute) error {
	if existing == nil || !r.ownsRouteOf(existing, model) || existing.DeletionTimestamp != nil {
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
	_, legacy := existing.Annotations[routes.LegacySourcesAnnotation]
	return !legacy && equality.Semantic.DeepEqual(existing.Spec, desired.Spec) && metadataUpToDate(existing, desired)
}

// mergeRoute returns existing with the desired spec and our labels and annotations.
func mergeRoute(existing, desired *gatewayv1.HTTPRoute) *gatewayv1.HTTPRoute {
	out := existing.DeepCopy()
	out.Spec = *desired.Spec.DeepCopy()
	mergeMetadata(out, desired)
	if _, ok := out.Annotations[routes.LegacySourcesAnnotation]; ok {
		out.Annotations = maps.Clone(out.Annotations)
		delete(out.Annotations, routes.LegacySourcesAnnotation)
	}
	return out
}

// metadataUpToDate reports whether every label and annotation of desired is on existing.
func metadataUpToDate(existing, desired metav1.Object) bool {
	return objmeta.HasAll(existing.GetLabels(), desired.GetLabels()) && objmeta.HasAll(existing.GetAnnotations(), desired.GetAnnotations())
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
