package main

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// converged builds a world of one model (3 pods) with two adapters — one on every pod, one
// on a single pod — and the snapshot of a cluster that has converged to it.
func converged() (*worldView, *snapshot) {
	w := &worldView{
		models: []model{{ns: "ns", name: "m", replicas: 3}},
		adapters: map[string]adapter{
			"ns/all": {ns: "ns", name: "all", model: "m", artifact: "huggingface://soak/all-v1"},
			"ns/one": {ns: "ns", name: "one", model: "m", replicas: 1, artifact: "huggingface://soak/one-v2"},
		},
	}
	s := &snapshot{adapters: map[string]*v1alpha1.ModelAdapter{}, engines: map[string]engineView{}, namespace: map[string]bool{"ns": true}}
	for _, p := range []string{"m-0", "m-1", "m-2"} {
		s.pods = append(s.pods, corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: p, Labels: map[string]string{v1alpha1.ModelNameLabel: "m"}},
			Status:     corev1.PodStatus{PodIP: "127.0.1.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}
	instances := map[string][]string{"all": {"m-0", "m-1", "m-2"}, "one": {"m-1"}}
	for name, pods := range instances {
		a := w.adapters["ns/"+name]
		obj := &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: 2}, Spec: v1alpha1.ModelAdapterSpec{ArtifactURL: a.artifact}}
		obj.Status.Phase = v1alpha1.ModelAdapterRunning
		obj.Status.ReadyReplicas = int32(len(pods))
		obj.Status.Instances = pods
		for _, c := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionUpToDate} {
			obj.Status.Conditions = append(obj.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, ObservedGeneration: 2})
		}
		es := discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: name}}}
		for _, p := range pods {
			obj.Status.InstanceArtifacts = append(obj.Status.InstanceArtifacts, v1alpha1.InstanceArtifact{Pod: p, ArtifactURL: a.artifact})
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{TargetRef: &corev1.ObjectReference{Name: p}})
		}
		s.adapters["ns/"+name] = obj
		s.services = append(s.services, corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}})
		s.slices = append(s.slices, es)
	}
	s.engines["ns/m-0"] = engineView{Namespace: "ns", Pod: "m-0", Loaded: []string{"all"}, Adapters: map[string]string{"all": "soak/all-v1"}}
	s.engines["ns/m-1"] = engineView{Namespace: "ns", Pod: "m-1", Loaded: []string{"all", "one"}, Adapters: map[string]string{"all": "soak/all-v1", "one": "soak/one-v2"}}
	s.engines["ns/m-2"] = engineView{Namespace: "ns", Pod: "m-2", Loaded: []string{"all"}, Adapters: map[string]string{"all": "soak/all-v1"}}
	for _, r := range []string{"m-router", "all-router", "one-router"} {
		s.routes = append(s.routes, gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "gw", Name: r}})
	}
	g := gatewayv1beta1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g"}}
	for _, svc := range []string{"one", "m", "all"} {
		g.Spec.To = append(g.Spec.To, gatewayv1beta1.ReferenceGrantTo{Kind: "Service", Name: ptr.To(gatewayv1.ObjectName(svc))})
	}
	s.grants = []gatewayv1beta1.ReferenceGrant{g}
	return w, s
}

func TestProblems(t *testing.T) {
	tests := []struct {
		name   string
		change func(w *worldView, s *snapshot)
		want   string // a substring of one problem; "" means converged
	}{
		{"converged", func(*worldView, *snapshot) {}, ""},
		{"a model short of a pod", func(w *worldView, _ *snapshot) { w.models[0].replicas = 4 }, "model ns/m: 3 Ready pods, want 4"},
		{"an adapter missing", func(_ *worldView, s *snapshot) { delete(s.adapters, "ns/one") }, "adapter ns/one: missing"},
		{"an adapter not Running", func(_ *worldView, s *snapshot) { s.adapters["ns/all"].Status.Phase = v1alpha1.ModelAdapterScaled }, "want Running on 3"},
		{"an adapter on too few pods", func(_ *worldView, s *snapshot) {
			s.adapters["ns/all"].Status.Instances = []string{"m-0", "m-1"}
			s.adapters["ns/all"].Status.ReadyReplicas = 2
		}, "2 ready, 2 instances; want Running on 3"},
		{"a stale condition", func(_ *worldView, s *snapshot) { s.adapters["ns/one"].Generation = 3 }, "condition Ready True/ (observedGeneration 2 of 3)"},
		{"an old artifact on an instance", func(_ *worldView, s *snapshot) {
			s.adapters["ns/one"].Status.InstanceArtifacts[0].ArtifactURL = "huggingface://soak/one-v1"
		}, "instance m-1 serves huggingface://soak/one-v1"},
		{"the engine serves an old path", func(_ *worldView, s *snapshot) { s.engines["ns/m-1"].Adapters["one"] = "soak/one-v1" }, `the engine of m-1 serves "soak/one-v1"`},
		{"status lists a pod whose engine lost it", func(_ *worldView, s *snapshot) {
			e := s.engines["ns/m-2"]
			e.Loaded = nil
			s.engines["ns/m-2"] = e
		}, "status lists m-2, whose engine does not hold it"},
		{"an engine holds an unrecorded adapter", func(_ *worldView, s *snapshot) {
			e := s.engines["ns/m-0"]
			e.Loaded = append(e.Loaded, "one")
			s.engines["ns/m-0"] = e
		}, "engine ns/m-0 holds [one], which no ModelAdapter records on it"},
		{"a deleted adapter still exists", func(w *worldView, _ *snapshot) { delete(w.adapters, "ns/one") }, "adapter ns/one: exists, the driver deleted it"},
		{"a second Service", func(_ *worldView, s *snapshot) {
			s.services = append(s.services, corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "one"}, Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}})
		}, "Services [all one one]"},
		{"a Service with a cluster IP", func(_ *worldView, s *snapshot) { s.services[0].Spec.ClusterIP = "" }, "is not headless"},
		{"an EndpointSlice with a stale endpoint", func(_ *worldView, s *snapshot) {
			for i := range s.slices {
				if s.slices[i].Labels[discoveryv1.LabelServiceName] == "one" {
					s.slices[i].Endpoints[0].TargetRef.Name = "m-0"
				}
			}
		}, "endpoints [m-0], instances [m-1]"},
		{"a missing route", func(_ *worldView, s *snapshot) { s.routes = s.routes[1:] }, "HTTPRoutes: missing [m-router]"},
		{"an orphan route", func(_ *worldView, s *snapshot) {
			s.routes = append(s.routes, gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "gone-router"}})
		}, "extra [gone-router]"},
		{"a Service admitted twice", func(_ *worldView, s *snapshot) {
			s.grants = append(s.grants, gatewayv1beta1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"},
				Spec: gatewayv1beta1.ReferenceGrantSpec{To: []gatewayv1beta1.ReferenceGrantTo{{Name: ptr.To(gatewayv1.ObjectName("m"))}}}})
		}, "ReferenceGrants admit [all m m one]"},
		{"an engine in another namespace is not ours", func(_ *worldView, s *snapshot) {
			s.engines["other/p"] = engineView{Namespace: "other", Pod: "p", Loaded: []string{"x"}}
		}, ""},
		{"a static adapter named like another model's adapter", func(w *worldView, s *snapshot) { withStatic(w, s, "other-a1", staticPath("other-a1")) }, ""},
		{"a static adapter replaced from another path", func(w *worldView, s *snapshot) {
			withStatic(w, s, "other-a1", "soak/other-a1-v1")
		}, "engine ns/m-2 holds [other-a1], which no ModelAdapter records on it"},
		{"a static adapter gone", func(w *worldView, s *snapshot) {
			withStatic(w, s, "other-a1", staticPath("other-a1"))
			e := s.engines["ns/m-0"]
			e.Loaded, e.Adapters, e.Preloaded = []string{"all"}, map[string]string{"all": "soak/all-v1"}, nil
			s.engines["ns/m-0"] = e
		}, `engine ns/m-0 does not hold its static adapter other-a1 from /models/static/other-a1 (holds it from "")`},
		{"an adapter waiting for room while every other pod is full", func(_ *worldView, s *snapshot) {
			capped(s, 2)
			waitOn(s, "all", "m-0", "m-1")
			fill(s, "m-2", "x", "y")
		}, "engine ns/m-2 holds [x y]"}, // only the strays are wrong: the wait is right
		{"an adapter waiting while a pod has room", func(_ *worldView, s *snapshot) {
			capped(s, 2)
			waitOn(s, "all", "m-0", "m-1")
		}, "adapter ns/all: phase Running, 2 ready, 2 instances; want Running on 3"},
		{"a waiting adapter's status not current", func(_ *worldView, s *snapshot) {
			capped(s, 1)
			waitOn(s, "all", "m-0", "m-2")
			s.adapters["ns/all"].Generation = 3
		}, "adapter ns/all: on 2 of 3 pods, the others full: m-1 (1 of 1), but condition Ready"},
		{"an adapter loaded where a static one was expected is not static", func(_ *worldView, s *snapshot) {
			e := s.engines["ns/m-0"]
			e.Loaded = append(e.Loaded, "x")
			e.Adapters["x"] = staticPath("x") // the path, but not held from the start
			s.engines["ns/m-0"] = e
		}, "engine ns/m-0 holds [x], which no ModelAdapter records on it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, s := converged()
			tt.change(w, s)
			got := problems(w, s)
			if tt.want == "" {
				if len(got) > 0 {
					t.Fatalf("problems = %q, want none", got)
				}
				return
			}
			for _, p := range got {
				if strings.Contains(p, tt.want) {
					return
				}
			}
			t.Fatalf("problems = %q, want one containing %q", got, tt.want)
		})
	}
}

// withStatic gives model m a static adapter and each of its engines that adapter, held from
// the start from path (the static path, or another if something loaded it again in place).
func withStatic(w *worldView, s *snapshot, name, path string) {
	w.models[0].static = name
	for key, e := range s.engines {
		if e.Namespace != "ns" {
			continue
		}
		e.Loaded = append(slices.Clone(e.Loaded), name)
		e.Adapters = maps.Clone(e.Adapters)
		e.Adapters[name] = path
		e.Preloaded = map[string]string{name: path}
		s.engines[key] = e
	}
}

// capped gives every engine of the converged world a capacity.
func capped(s *snapshot, capacity int) {
	for k, e := range s.engines {
		e.Capacity = capacity
		s.engines[k] = e
	}
}

// waitOn leaves adapter name on the pods given only: it waits for room on the others.
func waitOn(s *snapshot, name string, pods ...string) {
	a := s.adapters["ns/"+name]
	a.Status.Instances, a.Status.ReadyReplicas = pods, int32(len(pods))
	a.Status.InstanceArtifacts = slices.DeleteFunc(a.Status.InstanceArtifacts, func(ia v1alpha1.InstanceArtifact) bool { return !slices.Contains(pods, ia.Pod) })
	for i := range s.slices {
		if s.slices[i].Labels[discoveryv1.LabelServiceName] == name {
			s.slices[i].Endpoints = slices.DeleteFunc(s.slices[i].Endpoints, func(ep discoveryv1.Endpoint) bool { return !slices.Contains(pods, ep.TargetRef.Name) })
		}
	}
	for k, e := range s.engines {
		if !slices.Contains(pods, e.Pod) {
			e.Loaded = slices.DeleteFunc(slices.Clone(e.Loaded), func(n string) bool { return n == name })
			s.engines[k] = e
		}
	}
}

// fill makes a pod's engine hold other adapters.
func fill(s *snapshot, pod string, names ...string) {
	e := s.engines["ns/"+pod]
	e.Loaded = append(e.Loaded, names...)
	s.engines["ns/"+pod] = e
}

func TestEngineBreaches(t *testing.T) {
	keys := map[string][]string{"ns-a": {"key-a1", "key-a2"}, "ns-b": {"key-b1"}}
	engine := func(ns, pod string, change func(e *engineView)) engineView {
		e := engineView{Namespace: ns, Pod: pod, UID: pod + "-uid", KeysSeen: []string{"", "key-a1"},
			Preloaded: map[string]string{"b-m1-a2": staticPath("b-m1-a2")}}
		if change != nil {
			change(&e)
		}
		return e
	}
	tests := []struct {
		name    string
		engines []engineView
		want    []breach
	}{
		{"clean: no key, its namespace's keys (an old one too), a static adapter left alone", []engineView{
			engine("ns-a", "p1", nil),
			engine("ns-a", "p2", func(e *engineView) { e.KeysSeen = []string{"key-a2"} }),
			engine("ns-b", "p3", func(e *engineView) { e.KeysSeen = []string{"", "key-b1"} }),
		}, nil},
		{"another namespace's key", []engineView{
			engine("ns-b", "p3", func(e *engineView) { e.KeysSeen = []string{"key-a2", "key-b1"} }),
		}, []breach{{id: "key p3-uid key-a2", invariant: invariantForeignKey,
			detail: `engine ns-b/p3 (pod uid p3-uid) was sent namespace ns-a's API key "key-a2"`}}},
		{"a key of no namespace, on an engine stopped since", []engineView{
			engine("ns-a", "p1", func(e *engineView) { e.KeysSeen = []string{"guess"}; e.Retired = true }),
		}, []breach{{id: "key p1-uid guess", invariant: invariantForeignKey,
			detail: `engine ns-a/p1 (pod uid p1-uid) (stopped) was sent a key of no soak namespace "guess"`}}},
		{"a soak key on an engine of a namespace without keys", []engineView{
			engine("elsewhere", "q", func(e *engineView) { e.KeysSeen = []string{"key-b1"} }),
		}, []breach{{id: "key q-uid key-b1", invariant: invariantForeignKey,
			detail: `engine elsewhere/q (pod uid q-uid) was sent namespace ns-b's API key "key-b1"`}}},
		{"an unload of an adapter it was started with", []engineView{
			engine("ns-a", "p1", func(e *engineView) { e.Counts.ForeignUnloads = 2; e.Preloaded = nil }),
			engine("ns-a", "p2", nil),
		}, []breach{{id: "unload p1-uid", invariant: invariantForeignUnload,
			detail: "engine ns-a/p1 (pod uid p1-uid) received 2 unload(s) of an adapter it held from the start (static now: [])"}}},
		{"an engine over capacity", []engineView{
			engine("ns-a", "p1", func(e *engineView) {
				e.Capacity, e.Loaded, e.Evicted, e.Counts.Evictions = 1, []string{"a", "b"}, []string{"a"}, 1
			}),
			engine("ns-a", "p2", func(e *engineView) { e.Capacity, e.Loaded = 1, []string{"a"} }),
			engine("ns-a", "p3", func(e *engineView) { e.Capacity, e.Counts.CapacityRefusals, e.Retired = 2, 1, true }),
		}, []breach{
			{id: "capacity p1-uid", invariant: invariantCapacity,
				detail: "engine ns-a/p1 (pod uid p1-uid) (capacity 1) was asked to hold more adapters than it can: 1 evicted [a], 0 loads refused; it lists [a b]"},
			{id: "capacity p3-uid", invariant: invariantCapacity,
				detail: "engine ns-a/p3 (pod uid p3-uid) (stopped) (capacity 2) was asked to hold more adapters than it can: 0 evicted [], 1 loads refused; it lists []"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := engineBreaches(keys, tt.engines)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("engineBreaches =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// TestCheckEnginesReportsOnce: the monitor reads every engine the fake engine ran (stopped
// ones included) and reports each breach once, however often it reads it.
func TestCheckEnginesReportsOnce(t *testing.T) {
	var query string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		query = r.URL.RawQuery
		fmt.Fprint(w, `[{"namespace":"ns-a","pod":"p","uid":"u1","keysSeen":["key-b"],"counts":{"foreignUnloads":0}},
			{"namespace":"ns-a","pod":"p","uid":"u0","retired":true,"keysSeen":[""],"counts":{"foreignUnloads":1}}]`)
	}))
	defer srv.Close()
	w := newWorld([]string{"ns-a", "ns-b"})
	w.keyLog = map[string][]string{"ns-a": {"key-a"}, "ns-b": {"key-b"}}
	d := &driver{o: options{engineAdmin: srv.URL, seed: 7}, world: w, step: 3, logf: func(string, ...any) {}}
	m := &monitor{d: d}
	for range 2 {
		if _, err := m.checkEngines(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if query != "retired=true" {
		t.Errorf("read /engines?%s, want the stopped engines too", query)
	}
	want := []violation{
		{Step: 3, Seed: 7, Invariant: invariantForeignKey, Detail: `engine ns-a/p (pod uid u1) was sent namespace ns-b's API key "key-b"`},
		{Step: 3, Seed: 7, Invariant: invariantForeignUnload, Detail: "engine ns-a/p (pod uid u0) (stopped) received 1 unload(s) of an adapter it held from the start (static now: [])"},
	}
	if got := m.violations(); !slices.Equal(got, want) {
		t.Fatalf("violations =\n%+v\nwant\n%+v", got, want)
	}
}

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Second)
	}
	got := summarize(ds)
	if got.N != 100 || got.P50 != 50 || got.P99 != 99 || got.Max != 100 {
		t.Fatalf("summarize(1..100 s) = %+v", got)
	}
	if got := summarize(nil); got != (summary{}) {
		t.Fatalf("summarize(nil) = %+v", got)
	}
	if got := summarize([]time.Duration{3 * time.Second}); got.P50 != 3 || got.P99 != 3 || got.Max != 3 {
		t.Fatalf("summarize(3 s) = %+v", got)
	}
}

func TestSlope(t *testing.T) {
	tests := []struct {
		name    string
		samples []sample
		want    float64
	}{
		{"flat", []sample{{0, 5}, {10, 5}, {20, 5}}, 0},
		{"rising 2 per second", []sample{{0, 1}, {1, 3}, {2, 5}, {3, 7}}, 2},
		{"noisy but flat", []sample{{0, 10}, {1, 12}, {2, 8}, {3, 10}, {4, 10}}, -0.2},
		{"one sample", []sample{{0, 1}}, 0},
		{"same time", []sample{{1, 1}, {1, 9}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := slope(tt.samples); got < tt.want-1e-9 || got > tt.want+1e-9 {
				t.Fatalf("slope = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestTrends(t *testing.T) {
	series := func(start, perMinute float64, seconds int) []sample {
		var s []sample
		for sec := 0; sec <= seconds; sec += 5 {
			s = append(s, sample{T: float64(sec), V: start + perMinute*float64(sec)/60})
		}
		return s
	}
	tests := []struct {
		name       string
		samples    []sample
		metric     string
		rows       int
		wantUpward bool
	}{
		{"flat goroutines", series(200, 0, 600), "goroutines", 1, false},
		{"goroutines leaking 20 a minute", series(200, 20, 600), "goroutines", 1, true},
		{"small goroutine growth under the floor", series(60, 4, 600), "goroutines", 1, false},
		{"RSS growing 20 MiB a minute", series(40<<20, 20<<20, 600), "rss", 1, true},
		{"RSS growing 1 MiB a minute", series(40<<20, 1<<20, 600), "rss", 1, false},
		{"warm-up growth only", append(series(100, 200, 55), series(300, 0, 500)[12:]...), "goroutines", 1, false},
		{"too short to judge", series(200, 50, 150), "goroutines", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &monitor{d: &driver{o: options{seed: 7}}, samples: map[string]map[string][]sample{"x": {"42 leader " + tt.metric: tt.samples}}}
			rows, bad := m.trends()
			if len(rows) != tt.rows {
				t.Fatalf("rows = %+v, want %d", rows, tt.rows)
			}
			if tt.rows == 0 {
				return
			}
			if rows[0].Upward != tt.wantUpward || (len(bad) == 1) != tt.wantUpward {
				t.Fatalf("row %+v, violations %+v; want upward %v", rows[0], bad, tt.wantUpward)
			}
		})
	}
}
