package adapter

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	v1alpha1 "github.com/modelplane/modelplane/shared/api/model/v1alpha1"
)

var (
	loadsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "modelplane_adapter_loads_total",
		Help: "Adapter load attempts on engine pods, by engine and result (success, error reason).",
	}, []string{"engine", "result"})
	loadDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "modelplane_adapter_load_duration_seconds",
		Help:    "Duration of one adapter load on one engine pod, including verification.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
	})
	unloadsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "modelplane_adapter_unloads_total",
		Help: "Adapter unload attempts on engine pods, by result (success, error reason).",
	}, []string{"result"})
	engineRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "modelplane_engine_requests_total",
		Help: "HTTP requests to inference engines, by engine, operation and HTTP status or transport failure.",
	}, []string{"engine", "op", "code"})
	reloadsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "modelplane_adapter_reloads_total",
		Help: "Reloads of an adapter whose artifactURL changed, on one engine pod each, by engine, method (inplace, unload-load) and result (success, error reason).",
	}, []string{"engine", "method", "result"})
	strayUnloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "modelplane_adapter_stray_unloads_total",
		Help: "Unloads by the inventory sweep of adapters this controller loaded whose ModelAdapter is gone, by result (success, error reason).",
	}, []string{"result"})
	listRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "modelplane_adapter_inventory_list_requests_total",
		Help: "Requests for the adapters of an engine pod (load verifications and inventory polls), by whether they started a GET /v1/models call (started) or shared one (shared).",
	}, []string{"call"})
	adaptersByPhase = &phaseCollector{desc: prometheus.NewDesc("modelplane_adapters",
		"ModelAdapters by status phase, counted from the informer cache at scrape time.", []string{"phase"}, nil)}
)

// Values of the method label of reloadsTotal.
const (
	reloadInPlace    = "inplace"
	reloadUnloadLoad = "unload-load"
)

// Values of the call label of listRequests.
const (
	listStarted = "started"
	listShared  = "shared"
)

var registerOnce sync.Once

// RegisterMetrics registers the adapter metrics on controller-runtime's registry.
func RegisterMetrics() {
	registerOnce.Do(func() {
		crmetrics.Registry.MustRegister(loadsTotal, loadDuration, unloadsTotal, reloadsTotal, strayUnloads, engineRequests, listRequests, adaptersByPhase)
	})
}

// ObserveEngineRequest is the engine client's observer hook.
func ObserveEngineRequest(engineKind, op, code string, _ time.Duration) {
	engineRequests.WithLabelValues(engineKind, op, code).Inc()
}

// phaseCollector counts ModelAdapters by phase from the cache when scraped.
type phaseCollector struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	reader client.Reader
}

func (c *phaseCollector) setReader(r client.Reader) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reader = r
}

func (c *phaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *phaseCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	r := c.reader
	c.mu.Unlock()
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var list v1alpha1.ModelAdapterList
	if err := r.List(ctx, &list); err != nil {
		return
	}
	counts := map[v1alpha1.ModelAdapterPhase]int{}
	for i := range list.Items {
		counts[list.Items[i].Status.Phase]++
	}
	for _, p := range allPhases {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[p]), string(p))
	}
}

var allPhases = []v1alpha1.ModelAdapterPhase{
	v1alpha1.ModelAdapterPending, v1alpha1.ModelAdapterScheduled, v1alpha1.ModelAdapterBound,
	v1alpha1.ModelAdapterResourceCreated, v1alpha1.ModelAdapterRunning, v1alpha1.ModelAdapterFailed,
	v1alpha1.ModelAdapterUnknown, v1alpha1.ModelAdapterScaled,
}
