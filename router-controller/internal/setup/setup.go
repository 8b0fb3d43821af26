// Package setup wires the router-controller binary: flags, scheme, declared caches and
// controllers on the shared, sync-gated manager.
package setup

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/loraplane/loraplane/router-controller/internal/controller"
	"github.com/loraplane/loraplane/router-controller/internal/routes"
	"github.com/loraplane/loraplane/shared/aibrix"
	"github.com/loraplane/loraplane/shared/app"
	"github.com/loraplane/loraplane/shared/syncgate"
)

// ControllerName names the binary in logs, metrics and its leader election lease.
const ControllerName = "router-controller"

// Options are the shared options plus this binary's own.
type Options struct {
	*app.Options

	// GatewayNamespace is where routes are created and the Gateway lives.
	GatewayNamespace string
	// GatewayName is the Gateway every route attaches to.
	GatewayName string
	// RoutePaths are the path prefixes every model route matches.
	RoutePaths []string
	// RouteTimeout is the request timeout of every route rule.
	RouteTimeout time.Duration
	// ExtraWorkloadKinds are optional source kinds as group/version/Kind.
	ExtraWorkloadKinds []string
	// MaxConcurrentReconciles bounds parallel reconciles. A reconcile is mostly one API
	// round trip, so a few workers keep the client's QPS busy; the default is chosen from
	// make bench (docs/performance.md has the figures).
	MaxConcurrentReconciles int
	// GrantBatchWindow delays the ReferenceGrant reconcile of a namespace after a route
	// change, so that a burst of routes costs one grant write.
	GrantBatchWindow time.Duration
	// AdoptAIBrix takes over the routes and ReferenceGrants AIBrix's model router made.
	AdoptAIBrix bool
	// InstallID identifies this install on its routes and grants; empty: the controller's
	// namespace (OwnNamespace), else routes.DefaultInstallID.
	InstallID string
	// CrossNamespaceClaims serves a model from every namespace that claims it.
	CrossNamespaceClaims bool

	// SkipControllerNameValidation lets tests run several managers in one process.
	SkipControllerNameValidation bool
	// GatewayNamespaceRetry overrides how often routes are retried while the gateway
	// namespace is missing (tests shorten it; zero: controller.DefaultGatewayNamespaceRetry).
	GatewayNamespaceRetry time.Duration
	// AIBrixCheckPeriod overrides how long a reading of AIBrix's Leases is reused (tests
	// shorten it; zero: aibrix.DefaultCheckPeriod).
	AIBrixCheckPeriod time.Duration
	// KindRecheckPeriod overrides how often discovery is asked whether the optional kinds
	// are served (tests shorten it; zero: controller.DefaultKindRecheckPeriod).
	KindRecheckPeriod time.Duration
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Options:                 app.NewOptions(ControllerName),
		GatewayNamespace:        routes.DefaultGatewayNamespace,
		GatewayName:             routes.DefaultGatewayName,
		RoutePaths:              append([]string(nil), routes.DefaultPaths...),
		RouteTimeout:            routes.DefaultTimeout,
		MaxConcurrentReconciles: 8,
		GrantBatchWindow:        controller.DefaultGrantBatchWindow,
		AdoptAIBrix:             true,
	}
}

// AddFlags registers every flag of the binary.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	o.Options.AddFlags(fs)
	fs.StringVar(&o.GatewayNamespace, "gateway-namespace", o.GatewayNamespace, "Namespace of the Gateway; every HTTPRoute is created there.")
	fs.StringVar(&o.GatewayName, "gateway-name", o.GatewayName, "Name of the Gateway (in --gateway-namespace) every HTTPRoute attaches to.")
	fs.Func("route-paths", fmt.Sprintf("Comma-separated path prefixes every model route matches, together with the header \"model\" (default %q: AIBrix's newest).",
		strings.Join(routes.DefaultPaths, ",")), func(s string) error {
		o.RoutePaths = app.SplitList(s)
		return nil
	})
	fs.DurationVar(&o.RouteTimeout, "route-timeout", o.RouteTimeout, "Request timeout of every route rule (whole milliseconds; 0 leaves it to the gateway). "+
		"AIBrix's routes are adopted only when theirs is the same: the default is AIBrix's newest (600s); its releases v0.4.0 to v0.7.0 wrote 2m, "+
		"and AIBRIX_GATEWAY_TIMEOUT_SECONDS=N writes Ns.")
	fs.Func("extra-workload-kinds", "Comma-separated optional workload kinds read as route sources, each group/version/Kind, "+
		"e.g. leaderworkerset.x-k8s.io/v1/LeaderWorkerSet,orchestration.aibrix.ai/v1alpha1/RayClusterFleet. Kinds whose CRD is not installed are skipped; "+
		"whether each is served is checked again every "+controller.DefaultKindRecheckPeriod.String()+", so a CRD installed later is watched from then on, without a restart.",
		func(s string) error {
			o.ExtraWorkloadKinds = app.SplitList(s)
			return nil
		})
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", o.MaxConcurrentReconciles, "How many models or namespaces are reconciled in parallel.")
	fs.DurationVar(&o.GrantBatchWindow, "grant-batch-window", o.GrantBatchWindow,
		"How long the ReferenceGrants of a namespace wait after a route change, so that the routes written meanwhile cost one grant write (0: no wait).")
	fs.StringVar(&o.InstallID, "install-id", o.InstallID,
		"Identity of this install, written on its HTTPRoutes and ReferenceGrants (label "+routes.InstallLabel+"); the router acts only on its own install's objects. "+
			"Default: the controller's namespace (--leader-election-namespace or the pod's). Give two installs that share a gateway namespace different ids.")
	fs.BoolVar(&o.CrossNamespaceClaims, "allow-cross-namespace-claims", o.CrossNamespaceClaims,
		"Serve a model from every namespace whose workloads claim it (one route, the union of their backends). "+
			"Off (the default): a model is served from one namespace, where it was claimed first; claimants elsewhere get no traffic and a ClaimRefused event. "+
			"On, anyone who can label a workload in any watched namespace receives a share of any model's requests (prompts included): only for clusters whose namespaces trust each other.")
	fs.BoolVar(&o.AdoptAIBrix, "adopt-aibrix-objects", o.AdoptAIBrix,
		"Take over what AIBrix's model router made: adopt the HTTPRoute of a model in AIBrix's shape (named as AIBrix names it, attached to --gateway-name, "+
			"every match requiring the model header), and delete AIBrix's reserved ReferenceGrant of a namespace once loraplane's grants admit every Service routed to there. "+
			"False: such objects are foreign like any other (a RouteConflict).")
}

// RoutesConfig is the route builder configuration the options describe.
func (o *Options) RoutesConfig() routes.Config {
	return routes.Config{
		GatewayNamespace: o.GatewayNamespace,
		GatewayName:      o.GatewayName,
		InstallID:        o.installID(),
		Paths:            append([]string(nil), o.RoutePaths...),
		Timeout:          o.RouteTimeout,
	}
}

// installID is --install-id, else the controller's namespace, else the default id.
func (o *Options) installID() string {
	return cmp.Or(o.InstallID, o.OwnNamespace(), routes.DefaultInstallID)
}

// Validate checks every option and says what is wrong with each bad one.
func (o *Options) Validate() error {
	var errs []error
	if err := o.Options.Validate(); err != nil {
		errs = append(errs, err)
	}
	if msgs := validation.IsDNS1123Label(o.GatewayNamespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--gateway-namespace %q: %s", o.GatewayNamespace, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsDNS1123Subdomain(o.GatewayName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--gateway-name %q: %s", o.GatewayName, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsValidLabelValue(o.InstallID); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--install-id %q: %s", o.InstallID, strings.Join(msgs, "; ")))
	}
	if len(o.RoutePaths) == 0 {
		errs = append(errs, errors.New("--route-paths must name at least one path prefix"))
	}
	for _, p := range o.RoutePaths {
		if err := routes.ValidatePath(p); err != nil {
			errs = append(errs, fmt.Errorf("--route-paths %q: %w", p, err))
		} else if engine, endpoint, reaches := routes.ReachesEngineAdmin(p); reaches {
			errs = append(errs, fmt.Errorf("--route-paths %q would let gateway clients reach %s's endpoint %s, an engine adapter or admin endpoint", p, engine, endpoint))
		}
	}
	if n := len(o.RoutePaths); n > routes.MaxMatchesPerRoute {
		errs = append(errs, fmt.Errorf("--route-paths names %d prefixes, more than the Gateway API limit of %d matches per route", n, routes.MaxMatchesPerRoute))
	}
	if o.RouteTimeout < 0 || o.RouteTimeout%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("--route-timeout %s must be a non-negative whole number of milliseconds", o.RouteTimeout))
	}
	if len(errs) == 0 {
		// Whatever else the route builder would reject (e.g. a timeout too long to express).
		if err := o.RoutesConfig().Validate(); err != nil {
			errs = append(errs, fmt.Errorf("route configuration: %w", err))
		}
	}
	if _, err := o.SourceKinds(); err != nil {
		errs = append(errs, err)
	}
	if o.MaxConcurrentReconciles < 1 {
		errs = append(errs, fmt.Errorf("--max-concurrent-reconciles must be at least 1, got %d", o.MaxConcurrentReconciles))
	}
	if o.GrantBatchWindow < 0 {
		errs = append(errs, fmt.Errorf("--grant-batch-window must not be negative, got %s", o.GrantBatchWindow))
	}
	return errors.Join(errs...)
}

// kindPattern is the Kind rule (a CamelCase identifier).
var kindPattern = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// ParseWorkloadKind parses group/version/Kind, e.g. leaderworkerset.x-k8s.io/v1/LeaderWorkerSet.
func ParseWorkloadKind(s string) (schema.GroupVersionKind, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 {
		return schema.GroupVersionKind{}, fmt.Errorf("%q: want group/version/Kind, e.g. leaderworkerset.x-k8s.io/v1/LeaderWorkerSet", s)
	}
	gvk := schema.GroupVersionKind{Group: parts[0], Version: parts[1], Kind: parts[2]}
	var problems []string
	if msgs := validation.IsDNS1123Subdomain(gvk.Group); len(msgs) > 0 || !strings.Contains(gvk.Group, ".") {
		problems = append(problems, fmt.Sprintf("group %q must be a DNS subdomain with at least one dot (CRD groups are)", gvk.Group))
	}
	if msgs := validation.IsDNS1035Label(gvk.Version); len(msgs) > 0 {
		problems = append(problems, fmt.Sprintf("version %q is invalid: %s", gvk.Version, strings.Join(msgs, "; ")))
	}
	if len(gvk.Kind) > 63 || !kindPattern.MatchString(gvk.Kind) {
		problems = append(problems, fmt.Sprintf("Kind %q must be a CamelCase name starting with an upper-case letter", gvk.Kind))
	}
	if len(problems) > 0 {
		return schema.GroupVersionKind{}, fmt.Errorf("%q: %s", s, strings.Join(problems, "; "))
	}
	return gvk, nil
}

// SourceKinds returns the default source kinds followed by the parsed extra ones (optional).
// Kinds must be distinct by Kind name, since sources are named kind/namespace/name.
func (o *Options) SourceKinds() ([]controller.SourceKind, error) {
	kinds := controller.DefaultSourceKinds()
	seen := map[string]schema.GroupVersionKind{}
	for _, k := range kinds {
		seen[k.GVK.Kind] = k.GVK
	}
	var errs []error
	for _, s := range o.ExtraWorkloadKinds {
		gvk, err := ParseWorkloadKind(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("--extra-workload-kinds %w", err))
			continue
		}
		if prev, ok := seen[gvk.Kind]; ok {
			errs = append(errs, fmt.Errorf("--extra-workload-kinds %q: Kind %s is already a source (%s)", s, gvk.Kind, prev.GroupVersion()))
			continue
		}
		seen[gvk.Kind] = gvk
		kinds = append(kinds, controller.SourceKind{GVK: gvk, Optional: true})
	}
	return kinds, errors.Join(errs...)
}

// Scheme holds the types the binary reads and writes.
func Scheme() *runtime.Scheme { return app.NewScheme(gatewayv1.Install, gatewayv1beta1.Install) }

// Resources are the kinds the controller reads through its cache: workloads metadata-only,
// since labels and annotations are all the routes need, optional kinds skipped when their
// API is not served; HTTPRoutes and ReferenceGrants; and the Services the adapter-controller
// publishes for ModelAdapters (CacheScopes selects them), whose ports the adapters' routes
// take.
func Resources(kinds []controller.SourceKind) []syncgate.Resource {
	var out []syncgate.Resource
	for _, k := range kinds {
		r := syncgate.Metadata(k.GVK)
		if k.Optional {
			r = r.AsOptional()
		}
		out = append(out, r)
	}
	return append(out,
		syncgate.Typed(&gatewayv1.HTTPRoute{}),
		syncgate.Typed(&gatewayv1beta1.ReferenceGrant{}),
		syncgate.Typed(&corev1.Service{}),
	)
}

// CacheScopes keep the caches small. Routes live in the gateway namespace only; foreign ones
// there are kept in the cache too, so that a conflict is seen and its removal noticed.
// Services: only those the adapter-controller publishes for ModelAdapters. Every cache drops
// managedFields (the shared app's default transform).
func CacheScopes(gatewayNamespace string) map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&gatewayv1.HTTPRoute{}: {Namespaces: map[string]cache.Config{gatewayNamespace: {}}},
		&corev1.Service{}:      {Label: controller.AdapterServiceSelector()},
	}
}

// Build validates the options, builds the gated manager, declares the caches and sets the
// router controller up. restConfig overrides the kubeconfig lookup (tests); nil means the
// usual lookup. Nothing here blocks on a cache.
func Build(ctx context.Context, o *Options, restConfig *rest.Config) (*app.App, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("invalid options: %w", err)
	}
	kinds, _ := o.SourceKinds() // validated above
	a, err := app.New(o.Options, app.Config{
		Controller: ControllerName,
		Scheme:     Scheme(),
		RESTConfig: restConfig,
		ByObject:   CacheScopes(o.GatewayNamespace),
		Transform:  stripLastApplied,
	})
	if err != nil {
		return nil, err
	}
	if err := a.Gate.Register(ctx, Resources(kinds)...); err != nil {
		return nil, err
	}
	leases, _ := aibrix.ParseLeases(o.AIBrixControllerLeases) // validated above
	if err := aibrix.CheckCovered(ctx, a.Manager.GetAPIReader(), leases, aibrix.RouteController, o.WatchNamespaces); err != nil {
		return nil, err
	}
	detector := aibrix.NewDetector(a.Manager.GetAPIReader(), leases, ControllerName, clock.RealClock{}, o.AIBrixCheckPeriod)
	if detector != nil {
		// Its own readings keep loraplane_aibrix_controller_running current between reconciles.
		if err := a.Manager.Add(detector); err != nil {
			return nil, fmt.Errorf("adding the AIBrix detector: %w", err)
		}
	}
	r, err := controller.NewRouteReconciler(a.Manager.GetCache(), a.Manager.GetClient(),
		a.Manager.GetEventRecorder(ControllerName), controller.Config{
			Routes:                  o.RoutesConfig(),
			SourceKinds:             kinds,
			Gate:                    a.Gate,
			KindRecheckPeriod:       o.KindRecheckPeriod,
			MaxConcurrentReconciles: o.MaxConcurrentReconciles,
			GrantBatchWindow:        o.GrantBatchWindow,
			GatewayNamespaceRetry:   o.GatewayNamespaceRetry,
			SkipNameValidation:      o.SkipControllerNameValidation,
			AdoptAIBrix:             o.AdoptAIBrix,
			AIBrix:                  detector,
			CrossNamespaceClaims:    o.CrossNamespaceClaims,
			WatchNamespaces:         o.WatchNamespaces,
		})
	if err != nil {
		return nil, err
	}
	if err := r.SetupWithManager(ctx, a.Manager); err != nil {
		return nil, err
	}
	log := a.Manager.GetLogger()
	log.Info("Router install", "installID", o.installID(), "gateway", o.GatewayNamespace+"/"+o.GatewayName,
		"crossNamespaceClaims", o.CrossNamespaceClaims)
	if o.GatewayNamespace != routes.DefaultGatewayNamespace {
		log.Info("Warning: AIBrix's gateway plugin looks model routes up in "+routes.DefaultGatewayNamespace+
			" only; with another --gateway-namespace it cannot find them (use a gateway that routes by the HTTPRoutes alone), "+
			"and routes written under an earlier --gateway-namespace stay there until deleted by hand",
			"gatewayNamespace", o.GatewayNamespace)
	}
	return a, nil
}

// stripLastApplied drops kubectl's last-applied-configuration annotation from the
// metadata-only workloads the router caches: a copy of the whole object that routing never
// reads, often the largest part of a workload's metadata. Workloads are only read, never
// written back, so nothing is lost.
func stripLastApplied(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		if _, has := m.Annotations[corev1.LastAppliedConfigAnnotation]; has {
			m.Annotations = maps.Clone(m.Annotations)
			delete(m.Annotations, corev1.LastAppliedConfigAnnotation)
		}
	}
	return obj, nil
}

// Run builds the manager (see Build) and runs it until ctx ends.
func Run(ctx context.Context, o *Options, restConfig *rest.Config) error {
	return app.BuildAndRun(ctx, func(ctx context.Context) (*app.App, error) { return Build(ctx, o, restConfig) })
}
