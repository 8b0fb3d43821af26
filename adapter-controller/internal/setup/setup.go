// Package setup wires the adapter-controller binary: flags, scheme, declared caches and
// controllers on the shared, sync-gated manager.
package setup

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/adapter"
	"github.com/loraplane/loraplane/adapter-controller/internal/cleanup"
	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	"github.com/loraplane/loraplane/shared/aibrix"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/shared/app"
	"github.com/loraplane/loraplane/shared/syncgate"
)

// ControllerName names the binary in logs, metrics and its leader election lease.
const ControllerName = "adapter-controller"

// Options are the shared options plus this binary's own.
type Options struct {
	*app.Options
	Adapter       adapter.Options
	EngineTimeout time.Duration

	// DeleteAllAdapters runs the uninstall cleanup instead of the controller: delete every
	// ModelAdapter (in --watch-namespace, else everywhere), wait for their finalizers, exit.
	DeleteAllAdapters bool
	// CleanupTimeout bounds that wait.
	CleanupTimeout time.Duration
	// AIBrixCheckPeriod overrides how long a reading of AIBrix's Leases is reused (tests
	// shorten it; zero: aibrix.DefaultCheckPeriod).
	AIBrixCheckPeriod time.Duration
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	o := &Options{Options: app.NewOptions(ControllerName), Adapter: adapter.DefaultOptions(), EngineTimeout: 10 * time.Second,
		CleanupTimeout: 4 * time.Minute}
	// AIBrix's model-adapter-controller runs in its controller-manager, or on its own.
	o.AIBrixControllerLeases = []string{aibrix.ControllerManagerLease, aibrix.StandaloneAdapterLease}
	return o
}

// AddFlags registers every flag of the binary.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	o.Options.AddFlags(fs)
	fs.IntVar(&o.Adapter.MaxConcurrentReconciles, "max-concurrent-reconciles", o.Adapter.MaxConcurrentReconciles, "ModelAdapters reconciled in parallel.")
	fs.DurationVar(&o.Adapter.InventoryPeriod, "inventory-period", o.Adapter.InventoryPeriod, "How often each engine pod is asked which adapters it holds (one GET /v1/models per pod, shared by all adapters).")
	fs.DurationVar(&o.Adapter.NotReadyGracePeriod, "not-ready-grace-period", o.Adapter.NotReadyGracePeriod, "How long a pod that holds an adapter may stay not Ready before the adapter is unloaded from it; it leaves the EndpointSlice and status.instances at once (0: unload at once).")
	fs.IntVar(&o.Adapter.MaxParallelEngineCalls, "max-parallel-engine-calls", o.Adapter.MaxParallelEngineCalls, "Engine load and unload calls in flight at once, across all adapters and pods.")
	fs.IntVar(&o.Adapter.MaxParallelEngineListings, "max-parallel-engine-listings", o.Adapter.MaxParallelEngineListings, "Engine listings (GET /v1/models: load verifications and the inventory poll) in flight at once; separate from --max-parallel-engine-calls, so a verification never takes a load slot, and fewer, so one listing verifies more of the loads onto a pod.")
	fs.IntVar(&o.Adapter.RetryLimit, "load-retry-limit", o.Adapter.RetryLimit, "Failed loads on a pod before the adapter reports Failed (retries continue at the maximum backoff).")
	fs.DurationVar(&o.Adapter.BaseBackoff, "load-backoff-base", o.Adapter.BaseBackoff, "First wait after a failed load or unload on a pod; doubles per failure.")
	fs.DurationVar(&o.Adapter.MaxBackoff, "load-backoff-max", o.Adapter.MaxBackoff, "Longest wait between retries on a pod.")
	fs.IntVar(&o.Adapter.DeletionRetryLimit, "deletion-retry-limit", o.Adapter.DeletionRetryLimit, "Unload attempts on deletion before the finalizer is released anyway (with a Warning event).")
	fs.BoolVar(&o.Adapter.RuntimeSidecar, "enable-runtime-sidecar", o.Adapter.RuntimeSidecar, "Load adapters through the AIBrix runtime sidecar of pods that have one (a container named aibrix-runtime, port 8080), as AIBrix's --enable-runtime-sidecar does; false: through the engine's own API on every pod.")
	fs.DurationVar(&o.EngineTimeout, "engine-timeout", o.EngineTimeout, "Timeout of one engine HTTP request other than a load (listings, unloads).")
	fs.DurationVar(&o.Adapter.EngineLoadTimeout, "engine-load-timeout", o.Adapter.EngineLoadTimeout, "Timeout of one engine load request (the engine answers once the adapter is loaded: large artifacts and downloads through the runtime sidecar take long). A load that ended without an answer is taken as possibly landing for as long again.")
	fs.BoolVar(&o.DeleteAllAdapters, "delete-all-adapters", o.DeleteAllAdapters, "Do not run the controller: delete every ModelAdapter (in --watch-namespace, else in all namespaces), "+
		"wait until a running adapter-controller has unloaded them and released their finalizers, then exit (an uninstall's first step).")
	fs.Var(selectorFlag{&o.Adapter.SecretSelector}, "secret-label-selector", "Hardening, off by default: a label selector (e.g. loraplane.io/engine-credentials=true) a credentials Secret must match "+
		"for the controller to use it; an adapter whose credentialsSecretRef names another Secret reports Ready=False, reason SecretNotSelected, and nothing of that Secret is sent to any engine.")
	fs.DurationVar(&o.CleanupTimeout, "cleanup-timeout", o.CleanupTimeout, "How long --delete-all-adapters waits for the finalizers before failing with the adapters left.")
}

// Validate checks every option and says what is wrong with each bad one.
func (o *Options) Validate() error {
	var errs []error
	if err := o.Options.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.CleanupTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--cleanup-timeout must be positive, got %s", o.CleanupTimeout))
	}
	if o.EngineTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--engine-timeout must be positive, got %s", o.EngineTimeout))
	}
	if o.Adapter.EngineLoadTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--engine-load-timeout must be positive, got %s", o.Adapter.EngineLoadTimeout))
	}
	if err := o.Adapter.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// selectorFlag is a label selector flag: parsed when set, so that a malformed selector
// stops the binary at its flags; empty means no selector (nil).
type selectorFlag struct{ sel *labels.Selector }

func (f selectorFlag) String() string {
	if f.sel == nil || *f.sel == nil {
		return ""
	}
	return (*f.sel).String()
}

func (f selectorFlag) Set(v string) error {
	if strings.TrimSpace(v) == "" {
		*f.sel = nil
		return nil
	}
	sel, err := labels.Parse(v)
	if err != nil {
		return fmt.Errorf("invalid label selector %q: %w", v, err)
	}
	if sel.Empty() {
		return fmt.Errorf("label selector %q selects every Secret", v)
	}
	*f.sel = sel
	return nil
}

// Scheme holds the types the binary reads and writes.
func Scheme() *runtime.Scheme { return app.NewScheme() }

// PodSelector scopes the Pod cache to model pods, so memory grows with model pods only.
func PodSelector() labels.Selector {
	req, err := labels.NewRequirement(v1alpha1.ModelNameLabel, selection.Exists, nil)
	utilruntime.Must(err)
	return labels.NewSelector().Add(*req)
}

// Resources are the kinds the controller reads through its cache.
func Resources() []syncgate.Resource {
	return []syncgate.Resource{
		syncgate.Typed(&v1alpha1.ModelAdapter{}),
		syncgate.Typed(&corev1.Pod{}),
		syncgate.Typed(&corev1.Service{}),
		syncgate.Typed(&discoveryv1.EndpointSlice{}),
	}
}

// CacheScopes keep the caches small: model pods only, and only the Services and
// EndpointSlices this controller manages.
func CacheScopes() map[client.Object]cache.ByObject {
	owned := labels.SelectorFromSet(labels.Set{adapter.ManagedByLabel: adapter.ManagedByValue})
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}:                {Label: PodSelector()},
		&corev1.Service{}:            {Label: owned},
		&discoveryv1.EndpointSlice{}: {Label: owned},
	}
}

// AIBrix's controller-manager is looked for among Deployments once at start (aibrix.CheckCovered).
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=list

// Build validates the options, builds the gated manager, declares the caches and sets the
// ModelAdapter controller up. restConfig overrides the kubeconfig lookup (tests); nil means
// the usual lookup. Nothing here blocks on a cache.
func Build(ctx context.Context, o *Options, restConfig *rest.Config) (*app.App, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("invalid options: %w", err)
	}
	a, err := app.New(o.Options, app.Config{
		Controller: ControllerName,
		Scheme:     Scheme(),
		ByObject:   CacheScopes(),
		RESTConfig: restConfig,
	})
	if err != nil {
		return nil, err
	}
	if err := a.Gate.Register(ctx, Resources()...); err != nil {
		return nil, err
	}
	eng, err := engine.New(engine.Options{Timeout: o.EngineTimeout, LoadTimeout: o.Adapter.EngineLoadTimeout, Observer: adapter.ObserveEngineRequest})
	if err != nil {
		return nil, err
	}
	leases, _ := aibrix.ParseLeases(o.AIBrixControllerLeases) // validated above
	if err := aibrix.CheckCovered(ctx, a.Manager.GetAPIReader(), leases, aibrix.AdapterController, o.WatchNamespaces); err != nil {
		return nil, err
	}
	opts := o.Adapter
	opts.AIBrix = aibrix.NewDetector(a.Manager.GetAPIReader(), leases, ControllerName, clock.RealClock{}, o.AIBrixCheckPeriod)
	if opts.StrayNamespace == "" {
		opts.StrayNamespace = o.OwnNamespace()
	}
	if opts.StrayNamespace == "" {
		klog.FromContext(ctx).Info("Keeping stray loads in memory only: the controller's namespace is unknown (not in a cluster, no --leader-election-namespace)")
	}
	if opts.AIBrix != nil {
		// Its own readings keep loraplane_aibrix_controller_running current between reconciles.
		if err := a.Manager.Add(opts.AIBrix); err != nil {
			return nil, fmt.Errorf("adding the AIBrix detector: %w", err)
		}
	}
	r := adapter.NewReconciler(a.Manager.GetClient(), a.Manager.GetAPIReader(), eng,
		a.Manager.GetEventRecorder(ControllerName), clock.RealClock{}, opts)
	if err := r.SetupWithManager(a.Manager); err != nil {
		return nil, fmt.Errorf("setting up the ModelAdapter controller: %w", err)
	}
	return a, nil
}

// Run builds the manager (see Build) and runs it until ctx ends; with --delete-all-adapters
// it runs the uninstall cleanup instead.
func Run(ctx context.Context, o *Options, restConfig *rest.Config) error {
	if o.DeleteAllAdapters {
		return runCleanup(ctx, o, restConfig)
	}
	return app.BuildAndRun(ctx, func(ctx context.Context) (*app.App, error) { return Build(ctx, o, restConfig) })
}

// runCleanup deletes every ModelAdapter in scope and waits for their finalizers (package
// cleanup).
func runCleanup(ctx context.Context, o *Options, restConfig *rest.Config) error {
	if err := o.Validate(); err != nil {
		return fmt.Errorf("invalid options: %w", err)
	}
	ctrl.SetLogger(klog.NewKlogr())
	if restConfig == nil {
		var err error
		if restConfig, err = app.RESTConfig(o.Kubeconfig); err != nil {
			return err
		}
	}
	c, err := client.New(restConfig, client.Options{Scheme: Scheme()})
	if err != nil {
		return fmt.Errorf("creating a client: %w", err)
	}
	return cleanup.Run(klog.NewContext(ctx, klog.NewKlogr().WithName("cleanup")), c,
		cleanup.Options{Namespaces: o.WatchNamespaces, Timeout: o.CleanupTimeout})
}
