package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

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
//
// Services granted ahead of a route write (grantsReady) are kept until the model's route is
// written and seen in the cache, or the wait for it ends; while some are, the returned
// duration asks for another reconcile when the first of them expires.
func (r *RouteReconciler) reconcileGrants(ctx context.Context, namespace string) (time.Duration, error) {
	routed, err := r.servicesRoutedTo(ctx, namespace)
	if err != nil {
		return 0, err
	}
	ahead, recheck := r.ahead.pending(namespace, time.Now())
	return recheck, r.writeGrants(ctx, namespace, append(slices.Clone(routed), ahead...))
}

// writeGrants makes the ReferenceGrants of ours in namespace admit exactly services (see
// reconcileGrants) and retires AIBrix's grant there when it can go.
func (r *RouteReconciler) writeGrants(ctx context.Context, namespace string, services []string) error {
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
		if routes.OwnershipOf(r.cfg.Routes, g) == routes.Mine && r.ownsGrant(g) && g.DeletionTimestamp == nil {
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
		if routes.OwnershipOf(r.cfg.Routes, &list.Items[i]) == routes.Mine {
			services = append(services, routedServices(&list.Items[i], namespace)...)
		}
	}
	slices.Sort(services)
	return slices.Compact(services), nil
}

// ownsGrant reports whether the grant is managed by a router of this gateway namespace, of
// this install or of another (OwnershipOf tells them apart).
func (r *RouteReconciler) ownsGrant(g *gatewayv1beta1.ReferenceGrant) bool {
	return routes.IsManaged(g) && g.Labels[routes.GatewayNamespaceLabel] == r.cfg.Routes.GatewayNamespace
}

// grantsReady reports whether the desired route of model may be written now: every Service
// it sends to in another namespace that the route as it is (existing) does not already send
// to is admitted by a ReferenceGrant in the cache. Otherwise those Services are kept as
// pending for the grants of their namespace, whose reconcile is asked for after the batch
// window (so that a burst of new routes still costs one grant write), and the route waits:
// the Gateway never sees a backend it may not reference (AIBrix's gateway plugin would cache
// that verdict for 30 s and answer 503 for the whole model). The grant's event wakes the
// waiting models. Shrinking needs nothing here: the route is written first and its grants
// follow after the batch window.
func (r *RouteReconciler) grantsReady(ctx context.Context, model string, desired, existing *gatewayv1.HTTPRoute) (bool, error) {
	ready := true
	for _, ns := range routeBackendNamespaces(desired) {
		if ns == r.cfg.Routes.GatewayNamespace {
			continue
		}
		need := routedServices(desired, ns)
		if existing != nil {
			have := routedServices(existing, ns)
			need = slices.DeleteFunc(need, func(svc string) bool { return slices.Contains(have, svc) })
		}
		if len(need) == 0 {
			continue
		}
		admitted, all, err := r.admittedServices(ctx, ns)
		if err != nil {
			return false, err
		}
		missing := slices.DeleteFunc(need, func(svc string) bool { return all || admitted[svc] })
		if len(missing) == 0 {
			continue
		}
		ready = false
		if r.ahead.add(ns, model, missing, time.Now()) {
			ctrl.LoggerFrom(ctx).V(2).Info("The route waits for the ReferenceGrant of its new Services", "namespace", ns, "services", missing)
			r.enqueueAfter(GrantsKey(ns), r.cfg.GrantBatchWindow)
		}
	}
	return ready, nil
}

// enqueueAfter adds key to the controller's queue after delay; before the controller has
// started (unit tests without one), nothing is added.
func (r *RouteReconciler) enqueueAfter(key Key, delay time.Duration) {
	r.queueMu.Lock()
	q := r.queue
	r.queueMu.Unlock()
	if q != nil {
		q.AddAfter(key, delay)
	}
}

// grantsNotAhead forgets the Services granted ahead for model and asks for the grants of
// their namespaces, which may shrink.
func (r *RouteReconciler) grantsNotAhead(model string) {
	for _, ns := range r.ahead.done(model) {
		r.enqueueAfter(GrantsKey(ns), r.cfg.GrantBatchWindow)
	}
}

// grantToWaitingModels maps a ReferenceGrant to the models whose route waits for a Service
// it admits (grantsReady), so that they are written as soon as the cache has it; the others
// wait for their own grant (a burst of new models in one namespace is woken once each, not
// once per grant written).
func (r *RouteReconciler) grantToWaitingModels(_ context.Context, g *gatewayv1beta1.ReferenceGrant) []Key {
	var keys []Key
	for _, m := range r.ahead.waitingFor(g.Namespace, routes.AdmittedServices(g)) {
		keys = append(keys, ModelKey(m))
	}
	return keys
}

// waitingForGrantsError: the route waits for the ReferenceGrants of its new Services.
type waitingForGrantsError struct{}

func (*waitingForGrantsError) Error() string {
	return "waiting for the ReferenceGrants of the route's new Services"
}

// admittedServices returns the Services of namespace that some ReferenceGrant there (ours
// or not) lets HTTPRoutes of the gateway namespace reference, and whether one admits every
// Service (AIBrix's reserved grant does).
func (r *RouteReconciler) admittedServices(ctx context.Context, namespace string) (map[string]bool, bool, error) {
	var list gatewayv1beta1.ReferenceGrantList
	if err := r.cache.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, false, fmt.Errorf("listing ReferenceGrants in %s: %w", namespace, err)
	}
	admitted := map[string]bool{}
	for i := range list.Items {
		g := &list.Items[i]
		if g.DeletionTimestamp != nil || !slices.ContainsFunc(g.Spec.From, func(f gatewayv1beta1.ReferenceGrantFrom) bool {
			return f.Group == gatewayv1.GroupName && f.Kind == "HTTPRoute" && string(f.Namespace) == r.cfg.Routes.GatewayNamespace
		}) {
			continue
		}
		for _, to := range g.Spec.To {
			switch {
			case to.Group != "" || to.Kind != "Service":
			case to.Name == nil:
				return nil, true, nil
			default:
				admitted[string(*to.Name)] = true
			}
		}
	}
	return admitted, false, nil
}

// aheadTTL is how long a Service granted ahead of a route write stays granted without a
// route of ours in the cache sending to it: the route write failed, the model went away, or
// the cache is that far behind.
const aheadTTL = 30 * time.Second

// grantsAhead remembers, per namespace and model, the Services granted ahead of the model's
// route write (grantsReady), until the model's route is written and seen, the model goes
// away, or aheadTTL passes.
type grantsAhead struct {
	mu          sync.Mutex
	byNamespace map[string]map[string]*aheadModel // namespace, model
}

type aheadModel struct {
	services []string
	until    time.Time
}

func newGrantsAhead() *grantsAhead {
	return &grantsAhead{byNamespace: map[string]map[string]*aheadModel{}}
}

// add keeps services of namespace granted for model until aheadTTL from now, and reports
// whether one of them was not kept already (the namespace's grants need a reconcile).
func (g *grantsAhead) add(namespace, model string, services []string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	models := g.byNamespace[namespace]
	if models == nil {
		models = map[string]*aheadModel{}
		g.byNamespace[namespace] = models
	}
	kept := map[string]bool{}
	for _, m := range models {
		for _, svc := range m.services {
			kept[svc] = true
		}
	}
	added := slices.ContainsFunc(services, func(svc string) bool { return !kept[svc] })
	m := models[model]
	if m == nil {
		m = &aheadModel{}
		models[model] = m
	}
	m.services = dedup(append(m.services, services...))
	m.until = now.Add(aheadTTL)
	return added
}

// done forgets what model waited for (its route is written and seen, or it has none to
// write) and returns the namespaces concerned, whose grants may shrink.
func (g *grantsAhead) done(model string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for ns, models := range g.byNamespace {
		if _, ok := models[model]; ok {
			delete(models, model)
			out = append(out, ns)
		}
		if len(models) == 0 {
			delete(g.byNamespace, ns)
		}
	}
	slices.Sort(out)
	return out
}

// waiting returns the models waiting for a grant in namespace.
func (g *grantsAhead) waiting(namespace string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Sorted(maps.Keys(g.byNamespace[namespace]))
}

// waitingFor returns the models waiting for a grant in namespace for one of services.
func (g *grantsAhead) waitingFor(namespace string, services []string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for model, m := range g.byNamespace[namespace] {
		if slices.ContainsFunc(m.services, func(svc string) bool { return slices.Contains(services, svc) }) {
			out = append(out, model)
		}
	}
	slices.Sort(out)
	return out
}

// pending returns the Services of namespace still kept ahead, forgetting the models whose
// wait expired, and how long until the first of the others expires (0: none left).
func (g *grantsAhead) pending(namespace string, now time.Time) ([]string, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var (
		out  []string
		next time.Duration
	)
	for model, m := range g.byNamespace[namespace] {
		if !now.Before(m.until) {
			delete(g.byNamespace[namespace], model)
			continue
		}
		out = append(out, m.services...)
		if d := m.until.Sub(now); next == 0 || d < next {
			next = d
		}
	}
	if len(g.byNamespace[namespace]) == 0 {
		delete(g.byNamespace, namespace)
	}
	return dedup(out), next
}

// dedup returns the sorted distinct elements of in (in is reordered).
func dedup(in []string) []string {
	slices.Sort(in)
	return slices.Compact(in)
}

// grantUpToDate reports whether existing already has the desired spec, labels and
// annotations.
func grantUpToDate(existing, desired *gatewayv1beta1.ReferenceGrant) bool {
	return equality.Semantic.DeepEqual(existing.Spec, desired.Spec) && metadataUpToDate(existing, desired)
}
