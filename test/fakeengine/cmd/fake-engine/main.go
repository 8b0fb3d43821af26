// Command fake-engine serves fake vLLM/SGLang engines for the pods of a local kwok cluster.
//
// kwok's fake nodes give pods loopback IPs (127.x.y.z) on which nothing listens. fake-engine
// watches the pods matching --label-selector and, for each Running pod whose IP is in
// 127.0.0.0/8, runs a fakeengine on podIP:port, so that controllers talking to "the pods"
// reach an engine with the real engines' LoRA API. It never listens outside 127.0.0.0/8.
//
// Per pod:
//
//	port       label model.aibrix.ai/port (default 8000)
//	kind       sglang if label model.aibrix.ai/engine is "sglang", else vllm
//	base model label model.aibrix.ai/name
//	sidecar    the runtime sidecar API on podIP:8080 if the pod has a container named
//	           aibrix-runtime
//	capacity   the engine container's LoRA arguments (vLLM --enable-lora, --max-loras,
//	           --max-cpu-loras; SGLang --max-loras-per-batch, --max-loaded-loras,
//	           --lora-eviction-policy), read as the engine reads them; none: unlimited
//
// An engine is closed when its pod is deleted, stops running or changes IP, and replaced by
// a fresh one (no adapters, zeroed counters) when the pod is recreated with the same name;
// GET /engines?retired=true still lists the closed ones, as they were (keys sent, unloads).
//
// The admin API on --admin-address lists the engines, restarts them, injects faults and
// serves metrics; see adminHandler.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/loraplane/loraplane/test/fakeengine"
)

type options struct {
	kubeconfig    string
	namespace     string
	labelSelector string
	apiKey        string
	latency       time.Duration
	adminAddress  string
	// In-pod mode (the fake engine image on kind): serve this container's own pod, and its
	// admin API on podAdminAddress when set.
	servePod        bool
	port            int
	baseModel       string
	engine          string
	podAdminAddress string
	podNamespace    string
	podName         string
	podIP           string
	preload         string
	// Aggregator mode (kind): one admin API over the in-pod admin APIs of every model pod.
	aggregate    bool
	podAdminPort int
	// loraArgs are the engine's LoRA arguments with --serve-pod, as given (the pod spec
	// carries the real engine's flags): fakeengine.CapacityFromArgs reads them.
	loraArgs []string
}

func main() {
	var o options
	klog.InitFlags(nil)
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to the kubeconfig of the cluster (default $KUBECONFIG; one of them is required).")
	flag.StringVar(&o.namespace, "namespace", metav1.NamespaceAll, "Namespace of the pods to serve (default all namespaces).")
	flag.StringVar(&o.labelSelector, "label-selector", labelName, "Label selector of the pods to serve.")
	flag.StringVar(&o.apiKey, "api-key", os.Getenv("FAKE_ENGINE_API_KEY"), "API key the engines require as \"Authorization: Bearer <key>\" (default $FAKE_ENGINE_API_KEY, else none; a pod annotation "+annotationAPIKey+" overrides it for that pod).")
	flag.DurationVar(&o.latency, "latency", 0, "Delay added to every engine request.")
	flag.StringVar(&o.adminAddress, "admin-address", "127.0.0.1:9400", "Address of the admin API (must be in 127.0.0.0/8).")
	flag.BoolVar(&o.servePod, "serve-pod", false, "Serve one engine on every interface of this container (the fake engine image inside a kind pod) instead of watching kwok pods.")
	flag.IntVar(&o.port, "port", 8000, "Engine port with --serve-pod.")
	flag.StringVar(&o.baseModel, "base-model", fakeengine.DefaultBaseModel, "Base model name with --serve-pod.")
	flag.StringVar(&o.engine, "engine", string(fakeengine.VLLM), "Engine API with --serve-pod: vllm or sglang.")
	flag.StringVar(&o.podAdminAddress, "pod-admin-address", "", "With --serve-pod: serve the admin API for this pod's engine on this address (e.g. :9400; default off).")
	flag.StringVar(&o.podNamespace, "pod-namespace", os.Getenv("POD_NAMESPACE"), "With --serve-pod: this pod's namespace, as the admin API names it (default $POD_NAMESPACE).")
	flag.StringVar(&o.podName, "pod-name", os.Getenv("POD_NAME"), "With --serve-pod: this pod's name, as the admin API names it (default $POD_NAME).")
	flag.StringVar(&o.podIP, "pod-ip", os.Getenv("POD_IP"), "With --serve-pod: this pod's IP, as the admin API reports it (default $POD_IP).")
	flag.StringVar(&o.preload, "preload", os.Getenv("FAKE_ENGINE_PRELOAD"), "With --serve-pod: adapters the engine holds from the start, name=path,... (default $FAKE_ENGINE_PRELOAD; on kwok the pod annotation "+annotationPreload+").")
	flag.BoolVar(&o.aggregate, "aggregate", false, "Serve one admin API on --admin-address over the in-pod admin APIs (--pod-admin-port) of the pods matching --label-selector (kind; in-cluster credentials when no kubeconfig is given).")
	flag.IntVar(&o.podAdminPort, "pod-admin-port", 9400, "With --aggregate: the port of the pods' admin APIs.")
	for _, name := range []string{"max-loras", "max-cpu-loras", "max-loras-per-batch", "max-loaded-loras", "lora-eviction-policy"} {
		flag.Func(name, "With --serve-pod: the engine's --"+name+", as the real engine takes it (its capacity; see package fakeengine).", func(v string) error {
			o.loraArgs = append(o.loraArgs, "--"+name, v)
			return nil
		})
	}
	flag.BoolFunc("enable-lora", "With --serve-pod: the engine's --enable-lora (LoRA on, with the engine's default capacity).", func(string) error {
		o.loraArgs = append(o.loraArgs, "--enable-lora")
		return nil
	})
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: %s [flags]\n\nServes fake vLLM/SGLang engines on the loopback IPs of kwok pods.\n\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unexpected arguments: %v\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal kills the process
	}()
	var err error
	switch {
	case o.servePod:
		err = servePod(ctx, o)
	case o.aggregate:
		err = aggregate(ctx, o)
	default:
		err = run(ctx, o)
	}
	stop()
	if err != nil {
		klog.ErrorS(err, "fake-engine failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func run(ctx context.Context, o options) error {
	logger := klog.FromContext(ctx)
	if err := checkLoopbackAddress(o.adminAddress); err != nil {
		return fmt.Errorf("--admin-address: %w", err)
	}
	if o.latency < 0 {
		return errors.New("--latency must not be negative")
	}
	cfg, client, err := podClient(o)
	if err != nil {
		return err
	}

	m := newManager(logger, fakeengine.Options{APIKey: o.apiKey, Latency: o.latency})
	defer m.closeAll()

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp4", o.adminAddress)
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	srv := &http.Server{Handler: adminHandler(m), ReadHeaderTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	serveDone := make(chan struct{})
	go func() {
		defer close(serveDone)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			cancel(fmt.Errorf("admin API: %w", err))
		}
	}()
	logger.Info("Serving admin API", "address", ln.Addr().String())

	c, err := newController(logger, podListWatch(client, o.namespace, o.labelSelector), m)
	if err != nil {
		return err
	}
	logger.Info("Watching pods", "namespace", o.namespace, "labelSelector", o.labelSelector, "apiServer", cfg.Host)
	runErr := c.run(ctx)

	logger.Info("Shutting down")
	shutdownCtx, cancelShutdown := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancelShutdown()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	<-serveDone
	if runErr != nil {
		return runErr
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err // the admin API failed
	}
	return nil
}

// checkLoopbackAddress accepts host:port with host an IPv4 address in 127.0.0.0/8 or
// "localhost".
func checkLoopbackAddress(address string) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Is4() || !loopback.Contains(ip) {
		return fmt.Errorf("host %q is not an IPv4 address in %s", host, loopback)
	}
	return nil
}

// podClient checks --label-selector and returns a client for the pods' cluster.
func podClient(o options) (*rest.Config, kubernetes.Interface, error) {
	if _, err := labels.Parse(o.labelSelector); err != nil {
		return nil, nil, fmt.Errorf("--label-selector: %w", err)
	}
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	return cfg, client, err
}

// restConfig loads the kubeconfig at path, or the ones in $KUBECONFIG.
func restConfig(path string) (*rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	if path == "" {
		env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar)
		if env == "" && os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
			cfg, err := rest.InClusterConfig() // --aggregate inside a cluster
			if err != nil {
				return nil, err
			}
			cfg.UserAgent = "loraplane-fake-engine"
			return cfg, nil
		}
		if env == "" {
			return nil, errors.New("--kubeconfig or $KUBECONFIG is required")
		}
		rules.Precedence = filepath.SplitList(env)
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.UserAgent = "loraplane-fake-engine"
	return cfg, nil
}

// podListWatch lists and watches the pods of namespace ("" for all) matching selector.
func podListWatch(client kubernetes.Interface, namespace, selector string) cache.ListerWatcher {
	pods := client.CoreV1().Pods(namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return pods.Watch(ctx, o)
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, client)
}
