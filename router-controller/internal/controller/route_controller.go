package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
	"github.com/loraplane/loraplane/shared/aibrix"
)

// Read-only on the workloads that carry model names (the optional kinds' groups included);
// write only on the objects the controller owns; events on sources; leases for leader
// election. No Secrets.
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=model.aibrix.ai,resources=modeladapters,verbs=get;list;watch
// The Services the adapter-controller publishes for ModelAdapters (the cache is scoped to
// them by label; RBAC cannot be): the port of an adapter's route.
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// +kubebuilder:rbac:groups=leaderworkerset.x-k8s.io,resources=leaderworkersets,verbs=get;list;watch
// +kubebuilder:rbac:groups=orchestration.aibrix.ai,resources=rayclusterfleets,verbs=get;list;watch
// ReferenceGrants live in the model namespaces (each admits the gateway namespace's routes
// to that namespace's Services): cluster-wide. HTTPRoutes live only in the gateway namespace
// (--gateway-namespace, whose default names the Role's namespace here; the cache of
// HTTPRoutes is scoped to it): a Role there, bound by deploy/router-controller/rbac.yaml and
// the chart in the namespace the router is given.
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=referencegrants,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes,verbs=get;list;watch;create;update;patch;delete,namespace=aibrix-system
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete,namespace=loraplane-system
// Leader election records an event on its Lease: the namespaced install (no cluster-wide
// events rule) needs it here.
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch,namespace=loraplane-system
// AIBrix's controller-manager Lease, read to refuse a take-over while AIBrix runs (package
// aibrix): get, and only that Lease.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get,resourceNames=aibrix-controller-manager
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// ControllerName names the controller in logs, metrics and events.
const ControllerName = "router"

// Retry backoff per key: errors are retried from 100ms, doubling up to 5 minutes.
const (
	retryBaseDelay = 100 * time.Millisecond
	retryMaxDelay  = 5 * time.Minute
)

// DefaultGrantBatchWindow is the default Config.GrantBatchWindow: long enough for a burst of
// route writes to collapse into one grant write per namespace, short next to the time a
// gateway takes to program a route.
const DefaultGrantBatchWindow = 500 * time.Millisecond

// grantsWaitRecheck is how soon a route waiting for its grants is looked at again without
// an event on them.
const grantsWaitRecheck = time.Second

// cacheBehindRetry is how soon a reconcile whose write found the cache behind the API server
// runs again.
const cacheBehindRetry = 200 * time.Millisecond

// isCacheBehind reports whether err is the API server's answer to a write made from a cache
// that has not seen the latest version yet: AlreadyExists on a create, Conflict on an update.
func isCacheBehind(err error) bool {
	return err != nil && (apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err))
}

// DefaultGatewayNamespaceRetry is the default Config.GatewayNamespaceRetry.
const DefaultGatewayNamespaceRetry = 30 * time.Second

// Config configures the RouteReconciler.
type Config struct {
	// Routes is what the route and grant builders need: gateway, paths, timeout.
	Routes routes.Config
	// SourceKinds are the workload kinds read as sources; optional ones may be absent.
	SourceKinds []SourceKind
	// Gate is the sync gate, through which optional kinds whose API appears after start
	// (or goes) are watched (or not any more). Required when SourceKinds has optional kinds.
	Gate KindGate
	// Discovery answers whether the API of an optional kind is served. Nil: a discovery
	// client on the manager's configuration.
	Discovery Discovery
	// KindRecheckPeriod is how often discovery is asked whether the optional kinds are
	// served, so that a CRD installed or deleted after start is followed within it. Zero
	// means DefaultKindRecheckPeriod.
	KindRecheckPeriod time.Duration
	// GrantBatchWindow delays the reconcile of a namespace's ReferenceGrants after an event on
	// a route or grant, so that the routes written within the window cost one grant write
	// rather than one each. Zero reconciles at once. See DefaultGrantBatchWindow.
	GrantBatchWindow time.Duration
	// GatewayNamespaceRetry is how often the route of a model is tried again while the
	// gateway namespace does not exist: steady, so that a namespace created later is noticed
	// within this period rather than after an exponential backoff grown to minutes. Zero
	// means DefaultGatewayNamespaceRetry.
	GatewayNamespaceRetry time.Duration
	// MaxConcurrentReconciles bounds parallel reconciles (default 1).
	MaxConcurrentReconciles int
	// SkipNameValidation allows several controllers of this name in one process (tests
	// that restart the manager).
	SkipNameValidation bool
	// AdoptAIBrix lets the controller take over what AIBrix's model router made: the route
	// of a model in AIBrix's shape (routes.IsAIBrixRoute) is adopted, and AIBrix's reserved
	// ReferenceGrant of a namespace is deleted once ours admit every Service routed to
	// there. False: those objects are foreign like any other.
	AdoptAIBrix bool
	// AIBrix tells whether AIBrix's controllers are running; while they are, the take-over
	// steps wait. Nil: never running.
	AIBrix *aibrix.Detector
	// CrossNamespaceClaims serves a model from every namespace that claims it (one route, the
	// union of their backends). False (the default): a model is served from one namespace,
	// its owner, and claimants elsewhere are refused (claims.go).
	CrossNamespaceClaims bool
	// WatchNamespaces are the namespaces the caches cover (empty: all). A route of ours with
	// sources elsewhere is outside the router's view: never deleted nor rewritten.
	WatchNamespaces []string
}

// RouteReconciler keeps one HTTPRoute per model name and the ReferenceGrants of every
// source namespace in line with the model workloads in its caches. See the package
// documentation for the design.
type RouteReconciler struct {
	cfg Config
	// cache reads the declared caches.
	cache    client.Reader
	client   client.Client
	recorder events.EventRecorder
	// kinds are every source kind, with whether setup indexed it; which are active (cache
	// synced) is asked of activeKinds.
	kinds []sourceKind
	// optional follows the optional kinds after start; nil when there are none.
	optional *optionalKinds
	states   *routeStates
	// keptGrants: the namespaces whose AIBrix grant is kept, and why.
	keptGrants *keptGrants
	// ahead: Services granted ahead of the route writes that need them (grant before route).
	ahead *grantsAhead
	// queue is the controller's workqueue, once it has started: grantsReady asks for the
	// grants of a namespace through it.
	queueMu  sync.Mutex
	queue    workqueue.TypedRateLimitingInterface[Key]
	gcEvents chan event.TypedGenericEvent[Key]

	// notAIBrixGrants: grants named as AIBrix names its grants that are not AIBrix's, and
	// why, reported once.
	notAIBrixGrants reportedOnce
}

var _ reconcile.TypedReconciler[Key] = (*RouteReconciler)(nil)

// NewRouteReconciler returns a reconciler reading through c (the gated manager's cache),
// writing with w and recording events with recorder.
func NewRouteReconciler(c cache.Cache, w client.Client, recorder events.EventRecorder, cfg Config) (*RouteReconciler, error) {
	if c == nil || w == nil || recorder == nil {
		return nil, errors.New("router controller: a cache, a client and an event recorder are required")
	}
	if err := cfg.Routes.Validate(); err != nil {
		return nil, fmt.Errorf("router controller: %w", err)
	}
	if len(cfg.SourceKinds) == 0 {
		return nil, errors.New("router controller: no source kinds")
	}
	if cfg.GrantBatchWindow < 0 {
		return nil, fmt.Errorf("router controller: negative grant batch window %s", cfg.GrantBatchWindow)
	}
	if cfg.MaxConcurrentReconciles <= 0 {
		cfg.MaxConcurrentReconciles = 1
	}
	if cfg.GatewayNamespaceRetry <= 0 {
		cfg.GatewayNamespaceRetry = DefaultGatewayNamespaceRetry
	}
	if cfg.KindRecheckPeriod <= 0 {
		cfg.KindRecheckPeriod = DefaultKindRecheckPeriod
	}
	kinds := make([]sourceKind, 0, len(cfg.SourceKinds))
	var optional *optionalKinds
	for _, k := range cfg.SourceKinds {
		kinds = append(kinds, sourceKind{SourceKind: k})
		if k.Optional && optional == nil {
			if cfg.Gate == nil {
				return nil, errNoGate
			}
			optional = newOptionalKinds(cfg.SourceKinds, cfg.Gate, cfg.Discovery, cfg.KindRecheckPeriod)
		}
	}
	Register()
	return &RouteReconciler{
		cfg:        cfg,
		cache:      c,
		client:     w,
		recorder:   recorder,
		kinds:      kinds,
		optional:   optional,
		states:     newRouteStates(),
		keptGrants: newKeptGrants(),
		ahead:      newGrantsAhead(),
		gcEvents:   make(chan event.TypedGenericEvent[Key]),
	}, nil
}

// informerGetter is the part of the gated manager's cache that knows whether an optional
// kind was skipped: it refuses the informers of skipped kinds without creating them.
type informerGetter interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error)
}

// SetupWithManager adds the field indexes, the controller, the garbage collector and the
// re-check of optional kinds to mgr, which must be the gated manager and not yet started.
// Nothing here blocks on a cache.
func (r *RouteReconciler) SetupWithManager(ctx context.Context, mgr manager.Manager) error {
	log := mgr.GetLogger().WithValues("controller", ControllerName)
	declared := mgr.GetCache()
	if err := registerIndexes(ctx, log, declared, mgr.GetFieldIndexer(), r.kinds); err != nil {
		return fmt.Errorf("router controller: %w", err)
	}
	if err := r.setupOptionalKinds(ctx, mgr); err != nil {
		return fmt.Errorf("router controller: %w", err)
	}

	b := builder.TypedControllerManagedBy[Key](mgr).
		Named(ControllerName).
		WithOptions(controller.TypedOptions[Key]{
			MaxConcurrentReconciles: r.cfg.MaxConcurrentReconciles,
			RateLimiter:             workqueue.NewTypedItemExponentialFailureRateLimiter[Key](retryBaseDelay, retryMaxDelay),
			SkipNameValidation:      ptr.To(r.cfg.SkipNameValidation),
		}).
		WithLogConstructor(func(k *Key) logr.Logger {
			l := log
			if k != nil {
				l = l.WithValues("key", k.String())
			}
			return l
		})
	for _, k := range r.kinds {
		watch := func() source.TypedSyncingSource[Key] {
			return source.TypedKind(declared, k.Object(),
				handler.TypedEnqueueRequestsFromMapFunc(r.workloadToModel(k.SourceKind)), routingChanged())
		}
		if !k.Optional {
			b = b.WatchesRawSource(watch())
			continue
		}
		b = b.WatchesRawSource(r.optionalSource(k.SourceKind, watch))
	}
	// The Services the adapter-controller publishes give the ports of adapters' routes.
	b = b.WatchesRawSource(source.TypedKind(declared, &corev1.Service{},
		handler.TypedEnqueueRequestsFromMapFunc(r.serviceToModel), adapterServiceChanged()))
	// Routes enqueue their models at once and the grants of their namespaces after the batch
	// window (two handlers on one informer); grant events too, so that our own grant writes
	// do not trigger an immediate reconcile that would write again for the next route.
	window := r.cfg.GrantBatchWindow
	// The first handler also sees the status the Gateway writes on a route, when its
	// judgement of the route changes.
	b = b.WatchesRawSource(source.TypedKind(declared, &gatewayv1.HTTPRoute{},
		handler.TypedEnqueueRequestsFromMapFunc(r.routeToModels),
		predicate.Or(specOrMetadataChanged[*gatewayv1.HTTPRoute](), acceptanceChanged(r.cfg.Routes)))).
		WatchesRawSource(source.TypedKind(declared, &gatewayv1.HTTPRoute{},
			enqueueAfter(window, r.routeToGrants), specOrMetadataChanged[*gatewayv1.HTTPRoute]())).
		WatchesRawSource(source.TypedKind(declared, &gatewayv1beta1.ReferenceGrant{},
			enqueueAfter(window, r.grantToNamespace), specOrMetadataChanged[*gatewayv1beta1.ReferenceGrant]())).
		// A grant written wakes the routes waiting for it at once (grant before route).
		WatchesRawSource(source.TypedKind(declared, &gatewayv1beta1.ReferenceGrant{},
			handler.TypedEnqueueRequestsFromMapFunc(r.grantToWaitingModels), specOrMetadataChanged[*gatewayv1beta1.ReferenceGrant]())).
		WatchesRawSource(source.TypedFunc[Key](func(_ context.Context, q workqueue.TypedRateLimitingInterface[Key]) error {
			r.queueMu.Lock()
			r.queue = q
			r.queueMu.Unlock()
			return nil
		})).
		WatchesRawSource(source.TypedChannel(r.gcEvents, handler.TypedFuncs[Key, Key]{
			GenericFunc: func(_ context.Context, e event.TypedGenericEvent[Key], q workqueue.TypedRateLimitingInterface[Key]) {
				q.Add(e.Object)
			},
		}))
	if err := b.Complete(r); err != nil {
		return fmt.Errorf("router controller: %w", err)
	}
	if err := mgr.Add(&garbageCollector{r: r, out: r.gcEvents}); err != nil {
		return fmt.Errorf("router controller: adding the garbage collector: %w", err)
	}
	return nil
}

// Reconcile brings the route of a model, or the ReferenceGrants of a namespace, in line with
// the caches. Errors are retried with per-key exponential backoff; terminal errors (a route
// that cannot be valid) wait for the next change of a source.
func (r *RouteReconciler) Reconcile(ctx context.Context, key Key) (reconcile.Result, error) {
	var (
		err    error
		object ReconcileObject
	)
	switch key.Kind {
	case KeyModel:
		object = ObjectRoute
		err = r.reconcileModel(ctx, key.Name)
	case KeyGrants:
		object = ObjectReferenceGrant
		var recheck time.Duration
		if recheck, err = r.reconcileGrants(ctx, key.Name); err == nil && recheck > 0 {
			return reconcile.Result{RequeueAfter: recheck}, nil
		}
	default:
		return reconcile.Result{}, reconcile.TerminalError(fmt.Errorf("unknown key %s", key))
	}
	if waiting := (*waitingForGrantsError)(nil); errors.As(err, &waiting) {
		// Woken by the grant's event; the requeue only covers a grant write that keeps failing.
		return reconcile.Result{RequeueAfter: grantsWaitRecheck}, nil
	}
	if waiting := (*waitingForAIBrixError)(nil); errors.As(err, &waiting) {
		// A wait, not a failure: reported (log line and Warning event) and looked at again
		// when the check may have changed.
		return reconcile.Result{RequeueAfter: r.cfg.AIBrix.Period()}, nil
	}
	if isCacheBehind(err) {
		// Our own write of a moment ago not in the cache yet (a create answered AlreadyExists,
		// an update Conflict): not a failure; tried again once the cache has caught up.
		ctrl.LoggerFrom(ctx).V(2).Info("The cache is behind the API server; trying again", "err", err.Error())
		return reconcile.Result{RequeueAfter: cacheBehindRetry}, nil
	}
	if err != nil {
		recordReconcileError(object)
	}
	if missing := (*gatewayNamespaceMissingError)(nil); errors.As(err, &missing) {
		// Reported (log line and Warning events); retried at a steady pace until it exists.
		return reconcile.Result{RequeueAfter: r.cfg.GatewayNamespaceRetry}, nil
	}
	return reconcile.Result{}, err
}

// listSources returns the cached workloads of every active kind whose sourceIndex values
// include value, through the index where there is one.
func (r *RouteReconciler) listSources(ctx context.Context, value string) ([]sourceObject, error) {
	var out []sourceObject
	for _, k := range r.activeKinds(ctx) {
		list := k.list()
		var opts []client.ListOption
		if k.indexed {
			opts = append(opts, client.MatchingFields{sourceIndex: value})
		}
		if err := r.cache.List(ctx, list, opts...); err != nil {
			return nil, fmt.Errorf("listing %s: %w", k, err)
		}
		index := sourceIndexValues(k.GVK.Kind)
		for i := range list.Items {
			obj := &list.Items[i]
			if !k.indexed && !slices.Contains(index(obj), value) {
				continue
			}
			obj.SetGroupVersionKind(k.GVK)
			out = append(out, sourceObject{kind: k.SourceKind, obj: obj})
		}
	}
	return out, nil
}
