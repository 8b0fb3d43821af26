package adapter

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	sharedmetrics "github.com/loraplane/loraplane/shared/metrics"
)

// Result is the value of the result label of the adapter operation counters: "success", or
// the classified reason of the failure (an engine.Reason or a condition reason).
type Result string

// ResultSuccess labels operations that succeeded.
const ResultSuccess Result = "success"

// resultOf is the result label of an operation that ended with err.
func resultOf(err error) Result {
	if err == nil {
		return ResultSuccess
	}
	return Result(engine.ReasonOf(err))
}

// ReloadMethod is the value of the method label of loraplane_adapter_reloads_total.
type ReloadMethod string

const (
	// ReloadInPlace replaces the weights of the loaded adapter (vLLM's load_inplace).
	ReloadInPlace ReloadMethod = "inplace"
	// ReloadUnloadLoad unloads the adapter, then loads the new artifact.
	ReloadUnloadLoad ReloadMethod = "unload-load"
)

// InstanceState is the value of the state label of loraplane_adapter_instances.
type InstanceState string

const (
	// InstancesDesired counts the pods an adapter is placed on (spec.replicas of the
	// candidates, or every candidate).
	InstancesDesired InstanceState = "desired"
	// InstancesReady counts the pods where the adapter is loaded and verified.
	InstancesReady InstanceState = "ready"
)

// ListCall is the value of the call label of loraplane_adapter_inventory_list_requests_total.
type ListCall string

const (
	// ListStarted counts requests that started a GET /v1/models call.
	ListStarted ListCall = "started"
	// ListShared counts requests answered by a call another request started.
	ListShared ListCall = "shared"
)

var (
	loadsTotal = sharedmetrics.NewCounterVec("adapter_loads_total",
		"Adapter load attempts on engine pods, by engine and result (success, error reason).", "engine", "result")
	loadDuration = sharedmetrics.NewHistogramVec("adapter_load_duration_seconds",
		"Duration of one adapter load on one engine pod, including verification.",
		[]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60})
	unloadsTotal = sharedmetrics.NewCounterVec("adapter_unloads_total",
		"Adapter unload attempts on engine pods, by result (success, error reason).", "result")
	reloadsTotal = sharedmetrics.NewCounterVec("adapter_reloads_total",
		"Reloads of an adapter whose artifactURL changed, on one engine pod each, by engine, method (inplace, unload-load) and result (success, error reason).",
		"engine", "method", "result")
	strayUnloads = sharedmetrics.NewCounterVec("adapter_stray_unloads_total",
		"Unloads by the inventory sweep of adapters this controller loaded whose ModelAdapter is gone, by result (success, error reason).", "result")
	engineRequests = sharedmetrics.NewCounterVec("engine_requests_total",
		"HTTP requests to inference engines, by engine, operation and HTTP status or transport failure.", "engine", "op", "code")
	engineRequestDuration = sharedmetrics.NewHistogramVec("engine_request_duration_seconds",
		"Duration of HTTP requests to inference engines, body included, by engine and operation (load, unload, list), whether or not the engine answered.",
		[]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}, "engine", "op")
	listRequests = sharedmetrics.NewCounterVec("adapter_inventory_list_requests_total",
		"Requests for the adapters of an engine pod (load verifications and inventory polls), by whether they started a GET /v1/models call (started) or shared one (shared).",
		"call")
	// adapterInstances has two series per ModelAdapter (desired, ready), set by the
	// reconcile of the adapter on the leader and deleted when the adapter is being deleted or
	// is gone from the cache: its cardinality is bounded by twice the number of adapters.
	adapterInstances = sharedmetrics.NewGaugeVec("adapter_instances",
		"Engine pods per ModelAdapter: desired (placed on) and ready (loaded and verified). Two series per adapter, removed when the adapter is deleted.",
		"namespace", "name", "state")
	adaptersByPhase = &phaseCollector{desc: prometheus.NewDesc("loraplane_adapters",
		"ModelAdapters by status phase, counted from the informer cache at scrape time.", []string{"phase"}, nil)}
	// capacityByPool has, per model pool (namespace and model label of the engine pods, not
	// per pod, to bound cardinality), the adapter slots and the adapters waiting for one.
	capacityByPool = &capacityCollector{
		slots: prometheus.NewDesc("loraplane_adapter_slots",
			"Adapter slots of the Ready engine pods whose adapter capacity is known, per model pool (namespace, model): total, and used (adapters placed there or listed by the engines).",
			[]string{"namespace", "model", "state"}, nil),
		waiting: prometheus.NewDesc("loraplane_adapters_waiting_for_capacity",
			"ModelAdapters with placements waiting for a free adapter slot, per model pool (namespace, model of the pods they select).",
			[]string{"namespace", "model"}, nil),
	}
)

var registerOnce sync.Once

// RegisterMetrics registers the adapter metrics on controller-runtime's registry, the
// series whose label values are known exposed at zero. It is safe to call more than once.
func RegisterMetrics() {
	registerOnce.Do(func() {
		crmetrics.Registry.MustRegister(loadsTotal, loadDuration, unloadsTotal, reloadsTotal, strayUnloads, engineRequests, engineRequestDuration, listRequests, adapterInstances, adaptersByPhase, capacityByPool)
		for _, c := range []ListCall{ListStarted, ListShared} {
			listRequests.WithLabelValues(string(c))
		}
		unloadsTotal.WithLabelValues(string(ResultSuccess))
		loadDuration.WithLabelValues() // no labels: the one series, exposed from the start
		strayUnloads.WithLabelValues(string(ResultSuccess))
	})
}

// recordLoad counts one load attempt on an engine of kind and, for a reload, its method.
func recordLoad(kind engine.Kind, reload ReloadMethod, err error) {
	loadsTotal.WithLabelValues(string(kind), string(resultOf(err))).Inc()
	if reload != "" {
		reloadsTotal.WithLabelValues(string(kind), string(reload), string(resultOf(err))).Inc()
	}
}

// recordInstances publishes the desired and ready instance counts of an adapter.
func recordInstances(namespace, name string, desired, ready int) {
	adapterInstances.WithLabelValues(namespace, name, string(InstancesDesired)).Set(float64(desired))
	adapterInstances.WithLabelValues(namespace, name, string(InstancesReady)).Set(float64(ready))
}

// forgetInstances deletes the instance series of an adapter that is being deleted or gone.
func forgetInstances(namespace, name string) {
	for _, st := range []InstanceState{InstancesDesired, InstancesReady} {
		adapterInstances.DeleteLabelValues(namespace, name, string(st))
	}
}

func recordUnload(err error) { unloadsTotal.WithLabelValues(string(resultOf(err))).Inc() }

func recordStrayUnload(err error) { strayUnloads.WithLabelValues(string(resultOf(err))).Inc() }

func recordListRequest(c ListCall) { listRequests.WithLabelValues(string(c)).Inc() }

// ObserveEngineRequest is the engine client's observer hook.
func ObserveEngineRequest(engineKind, op, code string, took time.Duration) {
	engineRequests.WithLabelValues(engineKind, op, code).Inc()
	engineRequestDuration.WithLabelValues(engineKind, op).Observe(took.Seconds())
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
	// Read-only: the cache's objects themselves, not a deep copy of every adapter per scrape.
	var list v1alpha1.ModelAdapterList
	if err := r.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
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

// SlotState is the value of the state label of loraplane_adapter_slots.
type SlotState string

const (
	// SlotsTotal counts the adapter slots of a pool's pods.
	SlotsTotal SlotState = "total"
	// SlotsUsed counts the slots taken.
	SlotsUsed SlotState = "used"
)

// capacityCollector publishes the model pools' adapter slots and waiting adapters at scrape
// time, from the pod cache and the placement ledger.
type capacityCollector struct {
	slots, waiting *prometheus.Desc
	mu             sync.Mutex
	usage          func(ctx context.Context) (map[poolKey]*poolUsage, error)
}

func (c *capacityCollector) setUsage(f func(ctx context.Context) (map[poolKey]*poolUsage, error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.usage = f
}

func (c *capacityCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.slots
	ch <- c.waiting
}

func (c *capacityCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	usage := c.usage
	c.mu.Unlock()
	if usage == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pools, err := usage(ctx)
	if err != nil {
		return
	}
	for k, u := range pools {
		if u.total > 0 || u.used > 0 {
			ch <- prometheus.MustNewConstMetric(c.slots, prometheus.GaugeValue, float64(u.total), k.namespace, k.model, string(SlotsTotal))
			ch <- prometheus.MustNewConstMetric(c.slots, prometheus.GaugeValue, float64(u.used), k.namespace, k.model, string(SlotsUsed))
		}
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(u.waiting), k.namespace, k.model)
	}
}
