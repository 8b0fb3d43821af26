package adapter

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	"github.com/loraplane/loraplane/shared/aibrix"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/shared/objmeta"
)

// +kubebuilder:rbac:groups=model.aibrix.ai,resources=modeladapters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=model.aibrix.ai,resources=modeladapters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=model.aibrix.ai,resources=modeladapters/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// AIBrix's controller Leases, read to refuse acting on adapters while AIBrix's
// model-adapter-controller runs (package aibrix): get, and only those Leases.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get,resourceNames=aibrix-controller-manager;aibrix-model-adapter-controller
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete,namespace=loraplane-system
// The stray loads (unloads deletion gave up on) are kept in one ConfigMap of the controller's
// own namespace (StrayConfigMapName): create (which RBAC cannot limit by name), and get and
// update of that one only.
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create,namespace=loraplane-system
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;update,resourceNames=adapter-controller-stray-loads,namespace=loraplane-system
// Leader election records an event on its Lease: the namespaced install (no cluster-wide
// events rule) needs it here.
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch,namespace=loraplane-system

const (
	// Finalizer holds a ModelAdapter until it is unloaded from its pods.
	Finalizer = v1alpha1.Finalizer
	// ManagedByLabel marks the Services and EndpointSlices this controller owns; the caches
	// of those kinds are scoped to it.
	ManagedByLabel = objmeta.ManagedByLabel
	// ManagedByValue is the value of ManagedByLabel. The router-controller reads the
	// Services that carry it.
	ManagedByValue = objmeta.AdapterControllerManagedBy
	// EndpointSliceManagedBy is the endpointslice.kubernetes.io/managed-by value.
	EndpointSliceManagedBy = "adapter-controller.loraplane.io"
	// APIKeySecretKey is the entry of credentialsSecretRef sent to engines as a bearer token.
	APIKeySecretKey = "api-key"
)

// Options tune the reconciler.
type Options struct {
	// MaxConcurrentReconciles bounds the adapters reconciled at once. Reconciles wait on the
	// engines (bounded by MaxParallelEngineCalls) and on the API client (bounded by its
	// QPS), so more workers only hide latency; the default is chosen from make bench
	// (docs/performance.md has the figures).
	MaxConcurrentReconciles int
	// InventoryPeriod is how often each engine pod is asked for its adapters.
	InventoryPeriod time.Duration
	// MaxParallelEngineCalls bounds load and unload calls in flight across all adapters.
	MaxParallelEngineCalls int
	// MaxParallelEngineListings bounds GET /v1/models calls in flight (load verifications
	// and the inventory poll). Listings have slots of their own: when verifications took
	// load slots they halved the load rate of a busy controller. Fewer listing slots than
	// load slots batch more verifications into one listing (a pod's listing waits for a
	// slot while more loads onto it finish): a listing names every adapter on the pod, so
	// each one costs the engine and the controller more as adapters accumulate
	// (docs/performance.md, "Issue 24").
	MaxParallelEngineListings int
	// RetryLimit is the number of failed loads on a pod after which the adapter is Failed
	// (retries continue at the maximum backoff).
	RetryLimit int
	// BaseBackoff and MaxBackoff bound the wait between retries per (adapter, pod).
	BaseBackoff, MaxBackoff time.Duration
	// EngineLoadTimeout is the engine client's load timeout: a load that ended without an
	// answer may still take effect on the engine for as long again (unansweredLoads).
	EngineLoadTimeout time.Duration
	// NotReadyGracePeriod is how long a pod that holds the adapter may stay not Ready before
	// the adapter is unloaded from it (0: at once). It is taken out of the EndpointSlice and
	// status.instances at once either way.
	NotReadyGracePeriod time.Duration
	// DeletionRetryLimit is how many unload attempts deletion makes before it releases the
	// finalizer anyway (with a Warning event), so an unreachable pod never blocks deletion.
	DeletionRetryLimit int
	// SkipNameValidation allows a second controller of the same name in one process (tests
	// that restart the controller).
	SkipNameValidation bool
	// AIBrix tells whether AIBrix's model-adapter-controller is running; while it is, no
	// adapter is acted on and no engine is called (both would load and unload the same
	// adapters). Nil: never.
	AIBrix *aibrix.Detector
	// RuntimeSidecar drives the AIBrix runtime sidecar of pods that have one (a container
	// named aibrix-runtime), as AIBrix's --enable-runtime-sidecar does; otherwise engines are
	// loaded through their own API.
	RuntimeSidecar bool
	// StrayNamespace is the controller's own namespace, where the ConfigMap
	// StrayConfigMapName keeps the stray loads (unloads deletion gave up on) across restarts
	// and failovers. Empty: they are kept in memory only.
	StrayNamespace string
	// SecretSelector, when set (--secret-label-selector), is what a credentials Secret's
	// labels must match for anything of it to be used: the opt-in that keeps an adapter from
	// sending any other Secret of its namespace to the pods it selects. Nil: every Secret.
	SecretSelector labels.Selector
}

// DefaultOptions returns production defaults.
func DefaultOptions() Options {
	return Options{
		MaxConcurrentReconciles:   32,
		InventoryPeriod:           30 * time.Second,
		MaxParallelEngineCalls:    32,
		MaxParallelEngineListings: 8,
		RetryLimit:                5,
		BaseBackoff:               time.Second,
		MaxBackoff:                2 * time.Minute,
		DeletionRetryLimit:        5,
		NotReadyGracePeriod:       time.Minute,
		EngineLoadTimeout:         engine.DefaultLoadTimeout,
		RuntimeSidecar:            true,
	}
}

// MinDeletionWait is how long a deletion keeps trying before it releases the finalizer of an
// adapter whose unloads keep failing: DeletionRetryLimit attempts, each made only when the
// backoff since the previous one has expired (BaseBackoff, doubling, at most MaxBackoff), so
// the sum of the waits between them. 15 s with the defaults (1 + 2 + 4 + 8 s).
func (o Options) MinDeletionWait() time.Duration {
	var total time.Duration
	delay := o.BaseBackoff
	for range o.DeletionRetryLimit - 1 {
		total += min(delay, o.MaxBackoff)
		delay *= 2
	}
	return total
}

// Validate reports bad options.
func (o Options) Validate() error {
	switch {
	case o.MaxConcurrentReconciles < 1:
		return fmt.Errorf("--max-concurrent-reconciles must be at least 1, got %d", o.MaxConcurrentReconciles)
	case o.InventoryPeriod < time.Second:
		return fmt.Errorf("--inventory-period must be at least 1s, got %s", o.InventoryPeriod)
	case o.MaxParallelEngineCalls < 1:
		return fmt.Errorf("--max-parallel-engine-calls must be at least 1, got %d", o.MaxParallelEngineCalls)
	case o.MaxParallelEngineListings < 1:
		return fmt.Errorf("--max-parallel-engine-listings must be at least 1, got %d", o.MaxParallelEngineListings)
	case o.RetryLimit < 1 || o.DeletionRetryLimit < 1:
		return fmt.Errorf("retry limits must be at least 1, got %d and %d", o.RetryLimit, o.DeletionRetryLimit)
	case o.NotReadyGracePeriod < 0:
		return fmt.Errorf("--not-ready-grace-period must not be negative, got %s", o.NotReadyGracePeriod)
	case o.BaseBackoff <= 0 || o.MaxBackoff < o.BaseBackoff:
		return fmt.Errorf("backoff must satisfy 0 < base (%s) <= max (%s)", o.BaseBackoff, o.MaxBackoff)
	}
	return nil
}

// Reconciler reconciles ModelAdapters.
type Reconciler struct {
	client    client.Client
	apiReader client.Reader
	engine    engine.Client
	recorder  events.EventRecorder
	clock     clock.WithTicker
	opts      Options
	inventory *Inventory
	backoff   *backoffs
	slots     *semaphore.Weighted // engine load and unload calls in flight, all adapters together
	listSlots *semaphore.Weighted // engine listings in flight
	deletions *backoffs
	// aibrixWaits: the adapters told (Warning event) that they wait for AIBrix's
	// controllers to stop, and in which episode of AIBrix running.
	aibrixWaits *reportedOnce
	// prunedOnce: an outdated ModelAdapter CRD was reported.
	prunedOnce sync.Once
	// superseded: the adapter versions this process's own writes replaced.
	superseded *supersededVersions
	// unanswered: loads that ended without the engine's answer and may still take effect.
	unanswered *unansweredLoads
	// secrets: the credentials Secrets read in the last secretTTL.
	secrets *secretCache
	// ledger: where adapters are placed and which wait for room (capacity.go).
	ledger *ledger
}

var _ reconcile.Reconciler = (*Reconciler)(nil)

// NewReconciler builds the reconciler from options that passed Options.Validate (the
// binary's setup validates every option once, at the start). apiReader reads Secrets
// uncached (only the ones adapters reference, never a cluster-wide Secret cache).
func NewReconciler(c client.Client, apiReader client.Reader, eng engine.Client, recorder events.EventRecorder, clk clock.WithTicker, opts Options) *Reconciler {
	r := &Reconciler{
		client: c, apiReader: apiReader, engine: eng, recorder: recorder, clock: clk, opts: opts,
		backoff:     newBackoffs(opts.BaseBackoff, opts.MaxBackoff, clk),
		deletions:   newBackoffs(opts.BaseBackoff, opts.MaxBackoff, clk),
		slots:       semaphore.NewWeighted(int64(opts.MaxParallelEngineCalls)),
		listSlots:   semaphore.NewWeighted(int64(opts.MaxParallelEngineListings)),
		aibrixWaits: newReportedOnce(),
		superseded:  newSupersededVersions(),
		unanswered:  newUnansweredLoads(),
		secrets:     newSecretCache(apiReader, clk, opts.SecretSelector),
	}
	r.ledger = newLedger(r.wakeAdapter)
	r.inventory = NewInventory(eng, c, opts.InventoryPeriod, opts.MaxParallelEngineListings, clk, r.inventoryHooks())
	RegisterMetrics()
	return r
}

// SetupWithManager registers the controller and the inventory poller on the (gated)
// manager: both start only after every cache has synced.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	// The phase gauge reads the manager's cache at each scrape: set here, by the controller
	// the process runs, not by every reconciler built (unit tests build many, each on a fake
	// client, in the same process as the suite's controller).
	adaptersByPhase.setReader(r.client)
	capacityByPool.setUsage(r.usage)
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podModelIndex, podModel); err != nil {
		return fmt.Errorf("indexing pods by model: %w", err)
	}
	err := ctrl.NewControllerManagedBy(mgr).
		Named("modeladapter").
		For(&v1alpha1.ModelAdapter{}).
		Owns(&corev1.Service{}).
		Owns(&discoveryv1.EndpointSlice{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.podToAdapters), builder.WithPredicates(podServingChanged())).
		WatchesRawSource(source.Channel(r.inventory.events, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles, SkipNameValidation: &r.opts.SkipNameValidation}).
		Complete(r)
	if err != nil {
		return err
	}
	return mgr.Add(r.inventory)
}

// podModelIndex indexes the cached pods by the value of their model label, so that an adapter
// whose selector names its model reads that model's pods only.
const podModelIndex = "loraplane.podModel"

func podModel(o client.Object) []string {
	if m, ok := o.GetLabels()[v1alpha1.ModelNameLabel]; ok {
		return []string{m}
	}
	return nil
}

// Reconcile brings one ModelAdapter to its desired state.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := klog.FromContext(ctx).WithValues("modeladapter", req.NamespacedName)
	ctx = klog.NewContext(ctx, log)

	a := &v1alpha1.ModelAdapter{}
	if err := r.client.Get(ctx, req.NamespacedName, a); err != nil {
		if apierrors.IsNotFound(err) {
			r.backoff.forgetAdapter(req.Namespace, req.Name)
			r.deletions.forgetAdapter(req.Namespace, req.Name)
			r.superseded.forget(req.NamespacedName)
			r.unanswered.forgetAdapter(req.Namespace, req.Name)
			forgetInstances(req.Namespace, req.Name)
			r.ledger.forget(req.NamespacedName)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if r.superseded.stale(req.NamespacedName, a.ResourceVersion) {
		// The cache has not caught up with this process's own write: its watch event
		// enqueues the adapter again.
		log.V(4).Info("Skipping a reconcile of an adapter version this process already replaced", "resourceVersion", a.ResourceVersion)
		return reconcile.Result{}, nil
	}
	if st := r.opts.AIBrix.Check(ctx); st.Running {
		r.waitForAIBrix(ctx, a, st)
		return reconcile.Result{RequeueAfter: r.opts.AIBrix.Period()}, nil
	}
	r.aibrixWaits.reset()
	if !a.DeletionTimestamp.IsZero() {
		// The adapter is going: nothing is desired of it any more, so its series go at
		// once rather than when the finalizer is released.
		forgetInstances(a.Namespace, a.Name)
		r.ledger.forget(req.NamespacedName)
		return r.finalize(ctx, a)
	}

	p := newPass(a)
	if err := r.resolveSpec(ctx, p); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.choosePods(ctx, p); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.findHolders(ctx, p); err != nil {
		return reconcile.Result{}, err
	}
	// Before any engine call: the finalizer, and every pod a load may be sent to, recorded
	// on the adapter, so that whenever the process dies every pod that may hold the adapter
	// is known.
	if err := r.recordPods(ctx, p); err != nil {
		return reconcile.Result{}, err
	}
	r.syncEngines(ctx, p)
	if err := r.forgetUnloadedPods(ctx, p); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.syncResources(ctx, p); err != nil {
		p.resourceErr = err
	}
	recordInstances(a.Namespace, a.Name, len(p.desired), len(p.instances))
	if err := r.writeStatus(ctx, p); err != nil {
		return reconcile.Result{}, err
	}
	if p.resourceErr != nil {
		return reconcile.Result{}, p.resourceErr
	}
	return p.result(), nil
}

// podToAdapters maps a pod to the adapters in its namespace that select it or record it (as
// an instance or a scheduled pod), so that a pod that stops matching is unloaded.
func (r *Reconciler) podToAdapters(ctx context.Context, obj client.Object) []reconcile.Request {
	var list v1alpha1.ModelAdapterList // the cache's objects, read only: no copy per pod event
	if err := r.client.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.UnsafeDisableDeepCopy); err != nil {
		klog.FromContext(ctx).Error(err, "Listing adapters for a pod event", "pod", klog.KObj(obj))
		return nil
	}
	podLabels := labels.Set(obj.GetLabels())
	var reqs []reconcile.Request
	for i := range list.Items {
		a := &list.Items[i]
		if selectsPod(a, podLabels) || recordedPods(a)[obj.GetName()] {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(a)})
		}
	}
	return reqs
}

func selectsPod(a *v1alpha1.ModelAdapter, podLabels labels.Set) bool {
	sel, err := selectorOf(a)
	return err == nil && sel.Matches(podLabels)
}

// podServingChanged passes pod events that can change placement: creation, deletion, and
// updates of readiness, IP, labels, termination or the adapter capacity annotation.
func podServingChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, okOld := e.ObjectOld.(*corev1.Pod)
			n, okNew := e.ObjectNew.(*corev1.Pod)
			if !okOld || !okNew {
				return true
			}
			return podServes(o) != podServes(n) || o.Status.PodIP != n.Status.PodIP || !slices.Equal(o.Status.PodIPs, n.Status.PodIPs) ||
				!labels.Equals(o.Labels, n.Labels) || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) ||
				o.Annotations[v1alpha1.AdapterCapacityAnnotation] != n.Annotations[v1alpha1.AdapterCapacityAnnotation]
		},
	}
}
