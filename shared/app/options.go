// Package app is the bootstrap shared by both loraplane binaries: one options struct with
// the common flags, klog as controller-runtime's logger, manager construction with
// memory-saving cache defaults, health and readiness probes, and the sync gate in front of
// every controller.
package app

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/loraplane/loraplane/shared/aibrix"
	"github.com/loraplane/loraplane/shared/syncgate"
)

// Options are the flags both binaries share. Flow: NewOptions → AddFlags → parse → Validate.
type Options struct {
	Kubeconfig              string
	MetricsBindAddress      string
	MetricsSecure           bool
	MetricsCertDir          string
	HealthProbeBindAddress  string
	PprofBindAddress        string
	LeaderElect             bool
	LeaderElectionID        string
	LeaderElectionNamespace string
	LeaseDuration           time.Duration
	RenewDeadline           time.Duration
	RetryPeriod             time.Duration
	CacheSyncTimeout        time.Duration
	ControllerStartTimeout  time.Duration
	GracefulShutdownTimeout time.Duration
	WatchNamespaces         []string
	QPS                     float64
	Burst                   int
	// AIBrixControllerLeases are the leader election Leases of AIBrix's controllers, each
	// "namespace/name"; while one is held and renewed the take-over from AIBrix waits
	// (package aibrix). None turns the check off.
	AIBrixControllerLeases []string
	// SlowHandlerSyncThreshold is how long a controller's event handler may take to receive
	// its initial list before it is logged and reported slow (not a flag; tests shorten it).
	SlowHandlerSyncThreshold time.Duration
}

// NewOptions returns the defaults for the named controller.
func NewOptions(controller string) *Options {
	return &Options{
		MetricsBindAddress:      ":8080",
		HealthProbeBindAddress:  ":8081",
		PprofBindAddress:        "0",
		LeaderElectionID:        controller + ".loraplane.io",
		LeaseDuration:           15 * time.Second,
		RenewDeadline:           10 * time.Second,
		RetryPeriod:             2 * time.Second,
		CacheSyncTimeout:        syncgate.DefaultTimeout,
		ControllerStartTimeout:  syncgate.DefaultTimeout,
		GracefulShutdownTimeout: 30 * time.Second,
		QPS:                     50,
		Burst:                   100,
		AIBrixControllerLeases:  []string{aibrix.ControllerManagerLease},

		SlowHandlerSyncThreshold: syncgate.DefaultSlowHandlerSync,
	}
}

// AddFlags registers the options and klog's flags (-v, -vmodule, ...) on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig. Empty: $KUBECONFIG, in-cluster config, then ~/.kube/config.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, `Address of the metrics endpoint; "0" disables it.`)
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", o.MetricsSecure, "Serve metrics over HTTPS, authenticating and authorizing each scrape with the API server.")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", o.MetricsCertDir, "With --metrics-secure: directory holding tls.crt and tls.key to serve metrics with (reloaded when they change). Empty, or without both files: a self-signed certificate made at start, which scrapers cannot verify.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "Address of /healthz and /readyz.")
	fs.StringVar(&o.PprofBindAddress, "pprof-bind-address", o.PprofBindAddress, `Address of the pprof endpoint; "0" disables it.`)
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Elect a leader so that only one replica reconciles; standbys keep warm caches.")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "Name of the leader election Lease.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "Namespace of the leader election Lease (default: the pod's namespace).")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "How long standbys wait before taking over a lease that is not renewed.")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "How long the leader retries renewing before giving up leadership.")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "Interval between leader election attempts.")
	fs.DurationVar(&o.CacheSyncTimeout, "cache-sync-timeout", o.CacheSyncTimeout, "How long each informer cache may take to sync before the process exits with the cause.")
	fs.DurationVar(&o.ControllerStartTimeout, "controller-start-timeout", o.ControllerStartTimeout,
		"Once the caches synced: how long each watch of a controller may take to register its event handler and have it receive every object of the initial list "+
			"(controller-runtime's CacheSyncTimeout; a slow mapping function makes this long) before the process exits naming the controller and kind.")
	fs.DurationVar(&o.GracefulShutdownTimeout, "graceful-shutdown-timeout", o.GracefulShutdownTimeout, "How long running work may take to finish on shutdown.")
	fs.Func("watch-namespace", "Comma-separated namespaces to watch (default: all).", func(s string) error {
		o.WatchNamespaces = SplitList(s)
		return nil
	})
	fs.Float64Var(&o.QPS, "kube-api-qps", o.QPS, "Sustained requests per second to the API server, per resource kind: controller-runtime gives each kind its own REST client and rate limiter, and Events have theirs.")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "Burst of requests to the API server, per resource kind (see --kube-api-qps).")
	fs.Func("aibrix-controller-leases", fmt.Sprintf("Comma-separated leader election Leases (namespace/name) of AIBrix's controllers (default %q). "+
		"While one is held and renewed, the take-over from AIBrix waits: the adapter-controller acts on no ModelAdapter, "+
		"the router adopts no AIBrix HTTPRoute and removes no AIBrix ReferenceGrant. Empty turns the check off "+
		"(for an AIBrix controller-manager run without its model-adapter-controller and model-route-controller).",
		strings.Join(o.AIBrixControllerLeases, ",")), func(s string) error {
		o.AIBrixControllerLeases = SplitList(s)
		return nil
	})
	klog.InitFlags(fs)
}

// SplitList splits a comma-separated flag value: items trimmed, empty ones dropped.
func SplitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Validate checks the options and says what is wrong with each bad one.
func (o *Options) Validate() error {
	var errs []error
	for name, addr := range map[string]string{
		"--metrics-bind-address":      o.MetricsBindAddress,
		"--health-probe-bind-address": o.HealthProbeBindAddress,
		"--pprof-bind-address":        o.PprofBindAddress,
	} {
		if err := validateBindAddress(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", name, addr, err))
		}
	}
	if o.HealthProbeBindAddress == "0" {
		errs = append(errs, errors.New("--health-probe-bind-address must not be disabled: readiness reports the cache sync"))
	}
	if o.CacheSyncTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--cache-sync-timeout must be positive, got %s", o.CacheSyncTimeout))
	}
	if o.ControllerStartTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--controller-start-timeout must be positive, got %s", o.ControllerStartTimeout))
	}
	if o.GracefulShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("--graceful-shutdown-timeout must not be negative, got %s", o.GracefulShutdownTimeout))
	}
	if o.LeaderElect {
		if msgs := validation.IsDNS1123Subdomain(o.LeaderElectionID); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--leader-election-id %q: %s", o.LeaderElectionID, strings.Join(msgs, "; ")))
		}
		if o.LeaseDuration <= o.RenewDeadline || o.RenewDeadline <= o.RetryPeriod || o.RetryPeriod <= 0 {
			errs = append(errs, fmt.Errorf("leader election timings must satisfy lease duration (%s) > renew deadline (%s) > retry period (%s) > 0",
				o.LeaseDuration, o.RenewDeadline, o.RetryPeriod))
		}
	}
	for _, ns := range o.WatchNamespaces {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--watch-namespace %q: %s", ns, strings.Join(msgs, "; ")))
		}
	}
	if _, err := aibrix.ParseLeases(o.AIBrixControllerLeases); err != nil {
		errs = append(errs, fmt.Errorf("--aibrix-controller-leases: %w", err))
	}
	if o.QPS <= 0 || o.Burst <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive, got %v and %d", o.QPS, o.Burst))
	}
	return errors.Join(errs...)
}

func validateBindAddress(addr string) error {
	if addr == "0" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port or \"0\": %w", err)
	}
	if host != "" && net.ParseIP(host) == nil && validation.IsDNS1123Subdomain(host) != nil {
		return fmt.Errorf("invalid host %q", host)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("invalid port %q", port)
	}
	return nil
}

// serviceAccountNamespaceFile holds the namespace of the pod the process runs in.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// OwnNamespace is the controller's namespace: --leader-election-namespace when set (its
// Lease is there), else the namespace of the pod it runs in, else "" (out of a cluster).
func (o *Options) OwnNamespace() string {
	if o.LeaderElectionNamespace != "" {
		return o.LeaderElectionNamespace
	}
	b, err := os.ReadFile(serviceAccountNamespaceFile)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
