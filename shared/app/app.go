package app

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	sharedmetrics "github.com/loraplane/loraplane/shared/metrics"
	"github.com/loraplane/loraplane/shared/syncgate"
	"github.com/loraplane/loraplane/shared/version"
)

// processStart is when this process started; the startup metric measures from it.
var processStart = time.Now()

// Config is what each binary adds to the shared options.
type Config struct {
	// Controller names the binary in logs, metrics and the leader election lease.
	Controller string
	// Scheme holds every type the binary reads or writes.
	Scheme *runtime.Scheme
	// ByObject scopes or trims individual caches, e.g. Pods by label selector.
	ByObject map[client.Object]cache.ByObject
	// RESTConfig overrides the kubeconfig lookup (tests).
	RESTConfig *rest.Config
	// Transform, when set, runs on every object entering a cache after managedFields are
	// stripped, e.g. to drop annotations the controller never reads.
	Transform toolscache.TransformFunc
}

// App is a manager behind a sync gate.
type App struct {
	// Manager is the gated manager to set controllers up on.
	Manager manager.Manager
	// Gate is the sync gate; register every resource the controllers read before Run.
	Gate *syncgate.Gate
}

// New builds the manager and its gate from options that passed Options.Validate (each
// binary's setup validates all its options once, at the start). Nothing here talks to the
// API server or blocks.
func New(o *Options, c Config) (*App, error) {
	logger := klog.NewKlogr()
	ctrl.SetLogger(logger)
	b := version.Get()
	logger.Info("Starting", "controller", c.Controller, "version", b.Version, "revision", b.Revision, "goVersion", b.GoVersion)
	sharedmetrics.RegisterBuildInfo()

	cfg := c.RESTConfig
	if cfg == nil {
		var err error
		if cfg, err = RESTConfig(o.Kubeconfig); err != nil {
			return nil, err
		}
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS = float32(o.QPS)
	cfg.Burst = o.Burst
	cfg.UserAgent = c.Controller + "/" + version.Version

	cacheOpts := cache.Options{
		DefaultTransform:            cacheTransform(c.Transform),
		ByObject:                    maps.Clone(c.ByObject),
		ReaderFailOnMissingInformer: true,
	}
	if len(o.WatchNamespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range o.WatchNamespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	metricsOpts := metricsOptions(logger, o)
	gate, err := syncgate.New(syncgate.Options{
		Controller:      c.Controller,
		Timeout:         o.CacheSyncTimeout,
		ProcessStart:    processStart,
		SlowHandlerSync: o.SlowHandlerSyncThreshold,
	})
	if err != nil {
		return nil, err
	}
	shutdown := o.GracefulShutdownTimeout
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		NewCache: gate.NewCache,
		Scheme:   c.Scheme,
		Logger:   logger,
		Cache:    cacheOpts,
		Metrics:  metricsOpts,
		// Controllers warm up: once the caches synced, every replica (standbys too) starts
		// their sources and has their handlers receive the initial lists, within the start
		// timeout; readiness waits for it (syncgate), and a new leader starts its workers at
		// once.
		Controller: config.Controller{
			CacheSyncTimeout: o.ControllerStartTimeout,
			EnableWarmup:     ptr.To(true),
		},
		HealthProbeBindAddress:  o.HealthProbeBindAddress,
		PprofBindAddress:        o.PprofBindAddress,
		LeaderElection:          o.LeaderElect,
		LeaderElectionID:        o.LeaderElectionID,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		LeaseDuration:           &o.LeaseDuration,
		RenewDeadline:           &o.RenewDeadline,
		RetryPeriod:             &o.RetryPeriod,
		// Release the lease on shutdown so a standby takes over without waiting it out.
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &shutdown,
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("adding liveness check: %w", err)
	}
	gated, err := gate.Manage(mgr)
	if err != nil {
		return nil, err
	}
	return &App{Manager: gated, Gate: gate}, nil
}

// Run starts the manager behind the gate and blocks until ctx ends or startup fails.
func (a *App) Run(ctx context.Context) error {
	return a.Manager.Start(ctx)
}

// RESTConfig loads the configuration of a kubeconfig path; empty means $KUBECONFIG, the
// in-cluster configuration, then ~/.kube/config.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := ctrl.GetConfig()
		if err != nil {
			return nil, fmt.Errorf("loading kubeconfig: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

// metricsOptions are the metrics server's options: with --metrics-secure, scrapes
// authenticated and authorized with the API server, the certificate of --metrics-cert-dir
// served (and its expiry exported) when it holds one.
func metricsOptions(logger logr.Logger, o *Options) metricsserver.Options {
	opts := metricsserver.Options{BindAddress: o.MetricsBindAddress, SecureServing: o.MetricsSecure}
	if !o.MetricsSecure {
		return opts
	}
	opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	if logMetricsCertificate(logger, o.MetricsCertDir) {
		registerCertificateExpiry(o.MetricsCertDir)
	}
	if o.MetricsCertDir != "" {
		// controller-runtime serves (and watches) tls.crt and tls.key from there when both
		// exist, and falls back to a self-signed certificate otherwise.
		opts.CertDir = o.MetricsCertDir
	}
	return opts
}

// logMetricsCertificate says which certificate the secure metrics endpoint will serve, and
// reports whether it is the one in dir (true) or a self-signed one (which a scraper can only
// accept without verification).
func logMetricsCertificate(logger logr.Logger, dir string) bool {
	if dir != "" {
		_, certErr := os.Stat(filepath.Join(dir, "tls.crt"))
		_, keyErr := os.Stat(filepath.Join(dir, "tls.key"))
		if certErr == nil && keyErr == nil {
			cert, err := sharedmetrics.ReadCertificate(filepath.Join(dir, "tls.crt"))
			if err != nil {
				logger.Error(err, "Reading the mounted metrics certificate", "dir", dir)
			} else {
				logger.Info("Serving metrics with the mounted certificate", "dir", dir, "notAfter", cert.NotAfter)
			}
			return true
		}
	}
	logger.Info("Serving metrics with a self-signed certificate: scrapers cannot verify it", "certDir", dir)
	return false
}

// registerCertificateExpiry exports the notAfter of dir's tls.crt (the certificate the
// metrics server serves and reloads) as loraplane_metrics_certificate_expiry_timestamp_seconds,
// replacing the collector of an earlier New in the same process.
func registerCertificateExpiry(dir string) {
	c := sharedmetrics.NewCertificateExpiry(filepath.Join(dir, "tls.crt"))
	crmetrics.Registry.Unregister(c)
	crmetrics.Registry.MustRegister(c)
}

// cacheTransform strips managedFields from every cached object, then runs extra (if set).
func cacheTransform(extra toolscache.TransformFunc) toolscache.TransformFunc {
	strip := cache.TransformStripManagedFields()
	if extra == nil {
		return strip
	}
	return func(obj any) (any, error) {
		out, err := strip(obj)
		if err != nil {
			return nil, err
		}
		return extra(out)
	}
}
