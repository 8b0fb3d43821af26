package main

import (
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
