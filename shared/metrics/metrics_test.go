package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestCacheObjectsIsComputedAtScrapeTime(t *testing.T) {
	c := &objectCollector{
		desc:    CacheObjects.desc,
		sources: map[ResourceLabels]func() int{},
	}
	n := 3
	pods := ResourceLabels{Controller: "a", GVK: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}}
	c.Set(pods, func() int { return n })
	c.Set(ResourceLabels{Controller: "a", GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}}, func() int { return 7 })

	want := `
# HELP loraplane_cache_objects Objects currently held in the informer store of the resource, read at scrape time.
# TYPE loraplane_cache_objects gauge
loraplane_cache_objects{controller="a",group="apps",kind="Deployment",version="v1"} 7
loraplane_cache_objects{controller="a",group="core",kind="Pod",version="v1"} 3
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	n = 5
	c.Delete(ResourceLabels{Controller: "a", GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}})
	want = `
# HELP loraplane_cache_objects Objects currently held in the informer store of the resource, read at scrape time.
# TYPE loraplane_cache_objects gauge
loraplane_cache_objects{controller="a",group="core",kind="Pod",version="v1"} 5
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

func TestSyncMetricsExposition(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(CacheSyncDuration, CacheSynced, CacheWatchErrors, StartupDuration)
	l := ResourceLabels{Controller: "expo", GVK: schema.GroupVersionKind{Group: "model.aibrix.ai", Version: "v1alpha1", Kind: "ModelAdapter"}}
	CacheSyncDuration.WithLabelValues(l.Values()...).Observe(0.2)
	CacheSynced.WithLabelValues(l.Values()...).Set(1)
	CacheWatchErrors.WithLabelValues(append(l.Values(), "forbidden")...).Add(2)
	StartupDuration.WithLabelValues("expo").Set(1.5)

	if got := testutil.ToFloat64(CacheSynced.WithLabelValues(l.Values()...)); got != 1 {
		t.Errorf("cache_synced = %v, want 1", got)
	}
	if got := testutil.ToFloat64(CacheWatchErrors.WithLabelValues(append(l.Values(), "forbidden")...)); got != 2 {
		t.Errorf("watch errors = %v, want 2", got)
	}
	want := `
# HELP loraplane_startup_duration_seconds Time from process start until every required informer cache had synced and the controllers were released.
# TYPE loraplane_startup_duration_seconds gauge
loraplane_startup_duration_seconds{controller="expo"} 1.5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "loraplane_startup_duration_seconds"); err != nil {
		t.Fatal(err)
	}
	n, err := testutil.GatherAndCount(reg, "loraplane_cache_sync_duration_seconds")
	if err != nil || n != 1 {
		t.Fatalf("sync duration series = %d (%v), want 1", n, err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("metric lint: %v %v", problems, err)
	}
}

// TestStartupStageMetrics: the informer stage under upstream's names and labels (group ""
// for the core group, the plural resource), the handler stage per controller and kind.
func TestStartupStageMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(InformerInitDuration, HandlerSyncDuration, HandlerSynced)
	InformerInitDuration.WithLabelValues(InformerValues("stages", schema.GroupVersionResource{Version: "v1", Resource: "pods"})...).Observe(0.3)
	h := HandlerLabels{Controller: "stages", Reconciler: "modeladapter", GVK: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}}
	HandlerSyncDuration.WithLabelValues(h.Values()...).Observe(2)
	HandlerSynced.WithLabelValues(h.Values()...).Set(1)

	want := `
# HELP loraplane_handler_synced 1 when every event handler the controller (reconciler) registered on the informer of the kind has received every object of the initial list, 0 while one is still receiving it.
# TYPE loraplane_handler_synced gauge
loraplane_handler_synced{controller="stages",group="core",kind="Pod",reconciler="modeladapter",version="v1"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "loraplane_handler_synced"); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[f.GetName()] = strings.Join(labels, ",")
		}
	}
	for family, labels := range map[string]string{
		"loraplane_informer_initialization_duration_seconds": "group=,name=stages,resource=pods,version=v1",
		"loraplane_handler_sync_duration_seconds":            "controller=stages,group=core,kind=Pod,reconciler=modeladapter,version=v1",
	} {
		if got[family] != labels {
			t.Errorf("%s labels: got %q, want %q", family, got[family], labels)
		}
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("metric lint: %v %v", problems, err)
	}
}
