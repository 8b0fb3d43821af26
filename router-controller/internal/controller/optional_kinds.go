package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
)

// Optional source kinds come and go with their CRDs. A kind whose API is served is watched
// (informer synced through the sync gate, field index, the controller's watch); one whose
// API is not is skipped. Whether it is served is asked of discovery when the gate opens and
// every Config.KindRecheckPeriod after, on every replica (standbys too, so that failover
// finds the same kinds watched): a CRD installed after the router started is picked up
// within a period, without a restart, and one deleted stops being watched. Neither change
// deletes anything by itself.

// DefaultKindRecheckPeriod is the default Config.KindRecheckPeriod.
const DefaultKindRecheckPeriod = 30 * time.Second

// KindGate is what the router needs of the sync gate (*syncgate.Gate) to follow optional
// kinds after start.
type KindGate interface {
	// Synced reports whether the cache of a declared kind holds its initial list now.
	Synced(gvk schema.GroupVersionKind) bool
	// Activate creates the informer of a skipped optional kind, calls prepare, and returns
	// once the informer has synced (or with the reason it did not).
	Activate(ctx context.Context, obj client.Object, prepare func(context.Context) error) error
	// Deactivate stops and removes the informer of an optional kind.
	Deactivate(ctx context.Context, obj client.Object) error
}

// Discovery is what the re-check asks of the API server's discovery
// (discovery.DiscoveryInterface).
type Discovery interface {
	ServerGroups() (*metav1.APIGroupList, error)
	ServerResourcesForGroupVersion(groupVersion string) (*metav1.APIResourceList, error)
}

// optionalKinds follows the optional source kinds of a reconciler.
type optionalKinds struct {
	gate      KindGate
	discovery Discovery
	// indexer adds the field index to an informer being activated (the manager's field
	// indexer: it reaches the cache behind the gate's declared view).
	indexer client.FieldIndexer
	period  time.Duration
	kinds   []*optionalKind

	// mu guards optionalKind.indexed.
	mu sync.Mutex
}

// optionalKind is the state of one optional source kind.
type optionalKind struct {
	kind SourceKind
	// source is the kind's source in the controller; set in SetupWithManager.
	source *optionalSource
	// indexed: the current informer of the kind has the sourceIndex (guarded by mu).
	indexed bool
	// last is what the re-check last found (only the re-check goroutine uses it).
	last *servedness
}

func newOptionalKinds(kinds []SourceKind, gate KindGate, discovery Discovery, period time.Duration) *optionalKinds {
	o := &optionalKinds{gate: gate, discovery: discovery, period: period}
	for _, k := range kinds {
		if k.Optional {
			o.kinds = append(o.kinds, &optionalKind{kind: k})
		}
	}
	return o
}

func (o *optionalKinds) find(gvk schema.GroupVersionKind) *optionalKind {
	for _, k := range o.kinds {
		if k.kind.GVK == gvk {
			return k
		}
	}
	return nil
}

// watched reports whether the cache of an optional kind is synced now and whether it carries
// the field index. A nil receiver watches nothing.
func (o *optionalKinds) watched(gvk schema.GroupVersionKind) (indexed, ok bool) {
	if o == nil {
		return false, false
	}
	k := o.find(gvk)
	if k == nil || !o.gate.Synced(gvk) {
		return false, false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return k.indexed, true
}

func (o *optionalKinds) setIndexed(k *optionalKind, indexed bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k.indexed = indexed
}

// activeKinds are the source kinds whose caches are synced right now: every required kind,
// and the optional kinds being watched (API served, informer synced through the gate). The
// answer changes when an optional kind's CRD is installed or deleted: callers ask again
// each time instead of keeping it.
func (r *RouteReconciler) activeKinds(_ context.Context) []sourceKind {
	out := make([]sourceKind, 0, len(r.kinds))
	for _, k := range r.kinds {
		if k.Optional {
			indexed, ok := r.optional.watched(k.GVK)
			if !ok {
				continue
			}
			k.indexed = indexed
		}
		out = append(out, k)
	}
	return out
}

// watchesKind reports whether this replica's caches hold the workloads of the source kind
// named kind (a Kind name, as in the scopes annotation of a route, "Kind/namespace")
// right now. A route sustained by a kind this is false for is outside this replica's view:
// its sources may well exist.
func (r *RouteReconciler) watchesKind(kind string) bool {
	for _, k := range r.kinds {
		if k.GVK.Kind != kind {
			continue
		}
		if !k.Optional {
			return true
		}
		_, ok := r.optional.watched(k.GVK)
		return ok
	}
	return false
}

// setupOptionalKinds sets the served gauge of every source kind as registration found it,
// and prepares following the optional kinds: their index state as setup left it, the
// discovery client, and the re-check runnable on the gated manager (it starts when the gate
// opens).
func (r *RouteReconciler) setupOptionalKinds(ctx context.Context, mgr manager.Manager) error {
	for _, k := range r.kinds {
		setSourceKindServed(k.GVK, !k.Optional || skippedKind(ctx, mgr.GetCache(), k.SourceKind) == nil)
		if k.Optional {
			r.optional.setIndexed(r.optional.find(k.GVK), k.indexed)
		}
	}
	if r.optional == nil {
		return nil
	}
	r.optional.indexer = mgr.GetFieldIndexer()
	if r.optional.discovery == nil {
		d, err := discovery.NewDiscoveryClientForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
		if err != nil {
			return fmt.Errorf("building the discovery client: %w", err)
		}
		r.optional.discovery = d
	}
	if err := mgr.Add(&kindRechecker{optional: r.optional}); err != nil {
		return fmt.Errorf("adding the re-check of optional kinds: %w", err)
	}
	return nil
}

// optionalSource returns the controller's source of an optional kind; watch builds the
// watch of one informer of the kind.
func (r *RouteReconciler) optionalSource(kind SourceKind, watch func() source.TypedSyncingSource[Key]) *optionalSource {
	src := &optionalSource{
		kind: kind,
		watched: func() bool {
			_, ok := r.optional.watched(kind.GVK)
			return ok
		},
		newInner: watch,
		requeue:  func(ctx context.Context) ([]Key, error) { return r.modelsRoutedFrom(ctx, kind.GVK.Kind) },
	}
	r.optional.find(kind.GVK).source = src
	return src
}

// kindRechecker re-checks the optional kinds when the gate opens and every period after,
// until the manager stops. It runs on every replica.
type kindRechecker struct {
	optional *optionalKinds
}

var (
	_ manager.Runnable               = (*kindRechecker)(nil)
	_ manager.LeaderElectionRunnable = (*kindRechecker)(nil)
)

// NeedLeaderElection is false: standby replicas follow the kinds too, so that they fail
// over watching what the leader watched.
func (c *kindRechecker) NeedLeaderElection() bool { return false }

// Start re-checks at once, then every period (measured from the end of the last check).
func (c *kindRechecker) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("optional-kinds").WithValues("controller", ControllerName)
	wait.UntilWithContext(ctx, func(ctx context.Context) { c.optional.recheck(ctx, log) }, c.optional.period)
	return nil
}

// recheck asks discovery about every optional kind, reports what changed, and starts or
// stops watching the kinds whose API appeared or went.
func (o *optionalKinds) recheck(ctx context.Context, log logr.Logger) {
	for _, k := range o.kinds {
		if ctx.Err() != nil {
			return
		}
		o.recheckKind(ctx, log.WithValues("kind", k.kind.String()), k)
	}
}

func (o *optionalKinds) recheckKind(ctx context.Context, log logr.Logger, k *optionalKind) {
	s, err := discoverKind(o.discovery, k.kind.GVK)
	if err != nil {
		// Unknown is not "gone": keep whatever is watched.
		log.V(2).Info("Asking discovery whether an optional source kind is served failed; trying again at the next re-check", "err", err.Error())
		return
	}
	setSourceKindServed(k.kind.GVK, s.served)
	if k.last == nil || !k.last.equal(s) {
		s.report(log)
		k.last = &s
	}
	watching := o.gate.Synced(k.kind.GVK)
	switch {
	case s.served && !watching:
		o.activate(ctx, log, k)
	case !s.served && watching:
		o.deactivate(ctx, log, k)
	}
}

// activate watches an optional kind whose API is served now: the gate creates its informer,
// the field index is added before the informer is waited for, and once it has synced the
// controller's watch starts, which enqueues the model of every workload of the kind.
func (o *optionalKinds) activate(ctx context.Context, log logr.Logger, k *optionalKind) {
	log.V(2).Info("Starting to watch optional source kind: its API is served")
	err := o.gate.Activate(ctx, k.kind.Object(), func(ctx context.Context) error {
		err := o.indexer.IndexField(ctx, k.kind.Object(), sourceIndex, sourceIndexValues(k.kind.GVK.Kind))
		if apimeta.IsNoMatchError(err) {
			return err // gone again: not served after all
		}
		if err != nil {
			log.Info("Not indexing optional source kind; lookups scan its cache", "err", err.Error())
		}
		o.setIndexed(k, err == nil)
		return nil
	})
	if err != nil {
		log.Error(err, "Watching optional source kind failed; trying again at the next re-check", "period", o.period)
		return
	}
	if err := k.source.watch(); err != nil {
		log.Error(err, "Starting the watch of optional source kind")
	}
	indexed, _ := o.watched(k.kind.GVK)
	log.Info("Watching optional source kind", "indexed", indexed)
}

// deactivate stops watching an optional kind whose API is no longer served. Nothing is
// enqueued and nothing deleted on that account.
func (o *optionalKinds) deactivate(ctx context.Context, log logr.Logger, k *optionalKind) {
	k.source.unwatch()
	if err := o.gate.Deactivate(ctx, k.kind.Object()); err != nil {
		log.Error(err, "Stopping the informer of optional source kind")
	}
	o.setIndexed(k, false)
	log.Info("Not watching optional source kind any more: its API is no longer served")
}

// servedness is what discovery says of an optional kind.
type servedness struct {
	served bool
	// groupServed: some version of the kind's group is served.
	groupServed bool
	// versions are the other served versions of the group that have the Kind, sorted.
	versions []string
}

func (s servedness) equal(o servedness) bool {
	return s.served == o.served && s.groupServed == o.groupServed && slices.Equal(s.versions, o.versions)
}

// report logs an optional kind that is not served, saying what is served instead. A served
// kind is reported when its watch starts.
func (s servedness) report(log logr.Logger) {
	switch {
	case s.served:
	case len(s.versions) > 0:
		log.Info("Optional source kind is not served in this version; its group serves it in other versions: name one of them in --extra-workload-kinds",
			"servedVersions", s.versions)
	case s.groupServed:
		log.Info("Optional source kind is not served: its group is served, without this Kind")
	default:
		log.Info("Optional source kind is not served: its group is not served (CRD not installed)")
	}
}

// discoverKind asks discovery whether gvk is served and, when it is not, in which other
// versions of its group the Kind is.
func discoverKind(d Discovery, gvk schema.GroupVersionKind) (servedness, error) {
	served, err := hasKind(d, gvk.GroupVersion(), gvk.Kind)
	if err != nil || served {
		return servedness{served: served, groupServed: served}, err
	}
	groups, err := d.ServerGroups()
	if err != nil {
		return servedness{}, err
	}
	var s servedness
	for _, g := range groups.Groups {
		if g.Name != gvk.Group {
			continue
		}
		s.groupServed = true
		for _, v := range g.Versions {
			if v.Version == gvk.Version {
				continue
			}
			ok, err := hasKind(d, schema.GroupVersion{Group: g.Name, Version: v.Version}, gvk.Kind)
			if err != nil {
				return servedness{}, err
			}
			if ok {
				s.versions = append(s.versions, v.Version)
			}
		}
	}
	slices.Sort(s.versions)
	return s, nil
}

// hasKind reports whether the group version is served with a resource of kind (not a
// subresource). A group version that is not served is not an error.
func hasKind(d Discovery, gv schema.GroupVersion, kind string) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(gv.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, res := range list.APIResources {
		if res.Kind == kind && !strings.Contains(res.Name, "/") {
			return true, nil
		}
	}
	return false, nil
}

// optionalSource is the controller's source of an optional kind. It watches the kind while
// its cache is synced: from the start of the controller's sources when the kind was watched
// then, or from the moment the re-check activated it; it stops when the kind is deactivated,
// and starts again with a new informer if the kind comes back. The controller's sources start
// when it warms up, on every replica (standbys too) once the gate opened; before that, watch
// does nothing and the sources' start starts the watch.
type optionalSource struct {
	kind SourceKind
	// watched reports whether the kind's cache is synced now.
	watched func() bool
	// newInner builds the watch of one informer of the kind.
	newInner func() source.TypedSyncingSource[Key]
	// requeue returns the keys to reconcile when a watch starts after the controller did,
	// beyond those of the kind's workloads (which the new watch enqueues itself).
	requeue func(context.Context) ([]Key, error)

	mu    sync.Mutex
	ctx   context.Context //nolint:containedctx // the controller's, given to Start, for watches started later
	queue workqueue.TypedRateLimitingInterface[Key]
	inner source.TypedSyncingSource[Key]
	stop  context.CancelFunc
}

var _ source.TypedSyncingSource[Key] = (*optionalSource)(nil)

// Start is called once, when the controller's sources start (its warmup, on every replica).
func (s *optionalSource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[Key]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctx, s.queue = ctx, q
	if !s.watched() {
		ctrl.LoggerFrom(ctx).Info("Not watching optional source kind for now: its API is not served", "kind", s.kind.String())
		return nil
	}
	return s.startLocked()
}

func (s *optionalSource) startLocked() error {
	if s.inner != nil || s.queue == nil {
		return nil
	}
	ctx, stop := context.WithCancel(s.ctx)
	inner := s.newInner()
	if err := inner.Start(ctx, s.queue); err != nil {
		stop()
		return err
	}
	s.inner, s.stop = inner, stop
	return nil
}

// WaitForSync waits for the watch the controller's start began, if any.
func (s *optionalSource) WaitForSync(ctx context.Context) error {
	s.mu.Lock()
	inner := s.inner
	s.mu.Unlock()
	if inner == nil {
		return nil
	}
	return inner.WaitForSync(ctx)
}

// watch starts watching the kind once its cache has synced after the controller started,
// and enqueues the models of the routes that name a workload of the kind.
func (s *optionalSource) watch() error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	running := s.queue != nil && s.inner == nil
	err := s.startLocked()
	ctx, q := s.ctx, s.queue
	s.mu.Unlock()
	if err != nil || !running {
		return err
	}
	keys, err := s.requeue(ctx)
	for _, k := range keys {
		q.Add(k)
	}
	return err
}

// unwatch stops the watch; the informer itself is stopped by the gate.
func (s *optionalSource) unwatch() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		s.stop()
	}
	s.inner, s.stop = nil, nil
}

func (s *optionalSource) String() string { return "optional " + s.kind.String() }

// modelsRoutedFrom returns the models of our routes whose scopes name kind: when the kind is watched again, such a route is reconciled even if
// that workload is gone meanwhile (no event of the new watch would name its model).
func (r *RouteReconciler) modelsRoutedFrom(ctx context.Context, kind string) ([]Key, error) {
	var list gatewayv1.HTTPRouteList
	if err := r.cache.List(ctx, &list, client.InNamespace(r.cfg.Routes.GatewayNamespace),
		client.MatchingLabels{routes.ManagedByLabel: routes.ManagedByValue}); err != nil {
		return nil, err
	}
	keys := map[Key]bool{}
	for i := range list.Items {
		route := &list.Items[i]
		for _, sc := range routes.RouteScopes(route) {
			if sc.Kind == kind {
				if m := routes.ModelOf(route); m != "" {
					keys[ModelKey(m)] = true
				}
				break
			}
		}
	}
	return sortedKeys(keys), nil
}

// errNoGate: optional kinds are followed through the sync gate.
var errNoGate = errors.New("router controller: optional source kinds need the sync gate (Config.Gate)")
