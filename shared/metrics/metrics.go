// Package metrics defines the metrics shared by both loraplane controllers. Every metric is
// registered on controller-runtime's metrics.Registry, next to its built-in reconcile,
// workqueue and REST client metrics.
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

const namespace = "loraplane"

// Label names of the per-resource cache metrics.
const (
	LabelController = "controller"
	LabelGroup      = "group"
	LabelVersion    = "version"
	LabelKind       = "kind"
	LabelReason     = "reason"
	// LabelReconciler names a controller-runtime controller of the binary (what
	// controller-runtime's own metrics call "controller").
	LabelReconciler = "reconciler"
	// LabelName, LabelResource: the informer identity of upstream client-go's informer
	// metrics (KEP-4346): the informer's name, and the API resource (plural) it lists.
	LabelName     = "name"
	LabelResource = "resource"
)

var (
	resourceLabels = []string{LabelController, LabelGroup, LabelVersion, LabelKind}
	handlerLabels  = []string{LabelController, LabelReconciler, LabelGroup, LabelVersion, LabelKind}
	informerLabels = []string{LabelName, LabelGroup, LabelVersion, LabelResource}
)

// syncBuckets are the buckets of the per-resource and per-handler sync histograms.
var syncBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 180, 300}

// informerInitBuckets are those of upstream's informer_initialization_duration_seconds
// (kubernetes PR 142312), which took them from apiserver_watch_cache_initialization_duration_seconds.
var informerInitBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 180, 600}

// NewCounterVec returns the counter vector loraplane_<name>. Both binaries declare their
// metrics through these constructors, so every name carries the project's namespace and a
// declaration is one line.
func NewCounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
}

// NewGaugeVec returns the gauge vector loraplane_<name>.
func NewGaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
}

// NewHistogramVec returns the histogram vector loraplane_<name> with the given buckets.
func NewHistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets}, labels)
}

var (
	// CacheSyncDuration observes, per resource, the time from the start of the wait to the
	// informer's initial list being complete.
	CacheSyncDuration = NewHistogramVec("cache_sync_duration_seconds",
		"Time from the start of the cache sync wait until the informer of the resource held its initial list.",
		syncBuckets, resourceLabels...)

	// InformerInitDuration is the informer stage again, under the name and labels upstream
	// client-go proposes for it (informer_initialization_duration_seconds{name,group,version,
	// resource}, KEP-4346, alpha): name is the binary, group the API group ("" for the core
	// group, as upstream has it), resource the plural resource name. Same observation as
	// CacheSyncDuration, upstream's buckets; prefixed loraplane_ so that it never collides with
	// client-go's own once that is exported.
	InformerInitDuration = NewHistogramVec("informer_initialization_duration_seconds",
		"Time from the start of the cache sync wait until the informer held its initial list (the informer stage only, without handler delivery; upstream client-go's proposed informer_initialization_duration_seconds, prefixed).",
		informerInitBuckets, informerLabels...)

	// HandlerSyncDuration observes, per event handler a controller registers, the time from
	// its registration until it has received every object of the informer's initial list
	// (the handler registration's HasSynced, which controller-runtime waits for before
	// starting the controller's workers).
	HandlerSyncDuration = NewHistogramVec("handler_sync_duration_seconds",
		"Time from the registration of a controller's event handler on the informer of the kind until the handler had received every object of the initial list (one observation per handler).",
		syncBuckets, handlerLabels...)

	// HandlerSynced is 1 once every event handler the controller registered for the kind has
	// received the initial list, 0 while one is still receiving it.
	HandlerSynced = NewGaugeVec("handler_synced",
		"1 when every event handler the controller (reconciler) registered on the informer of the kind has received every object of the initial list, 0 while one is still receiving it.",
		handlerLabels...)

	// CacheSynced is 1 once the informer of the resource is synced, 0 before and for skipped
	// optional resources.
	CacheSynced = NewGaugeVec("cache_synced",
		"1 when the informer cache of the resource has synced, 0 while pending or when the resource was skipped.", resourceLabels...)

	// CacheSkipped is 1 for an optional resource whose API is not served.
	CacheSkipped = NewGaugeVec("cache_resource_skipped",
		"1 when an optional resource was skipped because its API is not served (CRD not installed).", resourceLabels...)

	// CacheWatchErrors counts list and watch failures of an informer by classified reason.
	CacheWatchErrors = NewCounterVec("cache_watch_errors_total",
		"List and watch failures of the informer of the resource, by reason (forbidden, not-found, unreachable, other).",
		append(append([]string{}, resourceLabels...), LabelReason)...)

	// StartupDuration is the time from process start until the sync gate opened.
	StartupDuration = NewGaugeVec("startup_duration_seconds",
		"Time from process start until every required informer cache had synced and the controllers were released.", LabelController)

	// CacheObjects reports the objects in each registered informer store at scrape time.
	CacheObjects = &objectCollector{
		desc: prometheus.NewDesc(namespace+"_cache_objects",
			"Objects currently held in the informer store of the resource, read at scrape time.",
			resourceLabels, nil),
		sources: map[ResourceLabels]func() int{},
	}
)

var registerOnce sync.Once

// Register registers the shared metrics on controller-runtime's registry. It is safe to call
// more than once.
func Register() {
	registerOnce.Do(func() {
		crmetrics.Registry.MustRegister(CacheSyncDuration, CacheSynced, CacheSkipped,
			CacheWatchErrors, StartupDuration, CacheObjects, InformerInitDuration,
			HandlerSyncDuration, HandlerSynced)
	})
}

// ResourceLabels identifies one resource of one controller in the cache metrics.
type ResourceLabels struct {
	Controller string
	GVK        schema.GroupVersionKind
}

// Values returns the label values in the order of the resource label names.
func (l ResourceLabels) Values() []string {
	group := l.GVK.Group
	if group == "" {
		group = "core"
	}
	return []string{l.Controller, group, l.GVK.Version, l.GVK.Kind}
}

// InformerValues returns the label values of InformerInitDuration: the informer's name (the
// binary), its API group as upstream has it ("" for the core group), version and resource.
func InformerValues(name string, gvr schema.GroupVersionResource) []string {
	return []string{name, gvr.Group, gvr.Version, gvr.Resource}
}

// HandlerLabels identifies the event handlers one controller-runtime controller (the
// reconciler) of a binary registered on the informer of one kind.
type HandlerLabels struct {
	Controller string
	Reconciler string
	GVK        schema.GroupVersionKind
}

// Values returns the label values in the order of the handler label names.
func (l HandlerLabels) Values() []string {
	r := ResourceLabels{Controller: l.Controller, GVK: l.GVK}.Values()
	return append([]string{r[0], l.Reconciler}, r[1:]...)
}

// objectCollector computes loraplane_cache_objects at scrape time from the registered
// counting functions, so the figure is never stale and costs nothing between scrapes.
type objectCollector struct {
	desc    *prometheus.Desc
	mu      sync.Mutex
	sources map[ResourceLabels]func() int
}

// Set registers (or replaces) the counting function of a resource.
func (c *objectCollector) Set(l ResourceLabels, count func() int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources[l] = count
}

// Delete removes the counting function of a resource.
func (c *objectCollector) Delete(l ResourceLabels) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.sources, l)
}

// Describe implements prometheus.Collector.
func (c *objectCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *objectCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for l, count := range c.sources {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(count()), l.Values()...)
	}
}
