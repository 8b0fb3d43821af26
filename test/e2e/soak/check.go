package main

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// snapshot is what the checker reads from the cluster and the engines in one pass.
type snapshot struct {
	adapters  map[string]*v1alpha1.ModelAdapter // by namespace/name
	pods      []corev1.Pod                      // in the soak namespaces
	services  []corev1.Service                  // in the soak namespaces
	slices    []discoveryv1.EndpointSlice       // in the soak namespaces
	routes    []gatewayv1.HTTPRoute             // in the gateway namespace
	grants    []gatewayv1beta1.ReferenceGrant   // in the soak namespaces
	engines   map[string]engineView             // by namespace/pod
	namespace map[string]bool                   // the soak namespaces
}

// engineView is one engine of the fake engine's admin API (GET /engines).
type engineView struct {
	Pod       string            `json:"pod"`
	Namespace string            `json:"namespace"`
	Loaded    []string          `json:"loaded"`
	Adapters  map[string]string `json:"adapters"` // path by adapter name
}

// readyPods returns the names of the Ready pods of a model in a namespace, sorted.
func (s *snapshot) readyPods(ns, model string) []string {
	var out []string
	for _, p := range s.pods {
		if p.Namespace != ns || p.Labels[v1alpha1.ModelNameLabel] != model || p.DeletionTimestamp != nil || p.Status.PodIP == "" {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				out = append(out, p.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// problems compares the snapshot with the world the driver made and returns every way the
// cluster is not (yet) converged or breaks an invariant, sorted. An empty result means the
// controllers have converged and every invariant holds:
//
//   - each model has its replicas Ready;
//   - each adapter is Running on the pods it should be (every Ready pod of its model, or
//     spec.replicas of them), up to date, and loaded on exactly the pods in its status and on
//     no other engine, with the artifact in its spec;
//   - exactly one headless Service and one EndpointSlice per adapter, whose endpoints are its
//     instances; no other Service or EndpointSlice in the soak namespaces;
//   - the HTTPRoutes are exactly those of the models and adapters in use, and each
//     namespace's ReferenceGrants admit exactly its routed Services, once each;
//   - no engine holds an adapter that no ModelAdapter records on it.
func problems(w *worldView, s *snapshot) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	for _, m := range w.models {
		if got := len(s.readyPods(m.ns, m.name)); got != m.replicas {
			add("model %s/%s: %d Ready pods, want %d", m.ns, m.name, got, m.replicas)
		}
	}

	// Adapters, and which adapters each engine should hold.
	wantOn := map[string][]string{} // namespace/pod -> adapters
	for _, a := range w.adapters {
		key := a.ns + "/" + a.name
		obj := s.adapters[key]
		if obj == nil {
			add("adapter %s: missing", key)
			continue
		}
		pods := s.readyPods(a.ns, a.model)
		want := len(pods)
		if a.replicas > 0 {
			want = min(want, a.replicas)
		}
		st := obj.Status
		if st.Phase != v1alpha1.ModelAdapterRunning || int(st.ReadyReplicas) != want || len(st.Instances) != want {
			add("adapter %s: phase %s, %d ready, %d instances; want Running on %d", key, st.Phase, st.ReadyReplicas, len(st.Instances), want)
		}
		for _, c := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionUpToDate} {
			cond := meta.FindStatusCondition(st.Conditions, c)
			if cond == nil || cond.Status != metav1.ConditionTrue || cond.ObservedGeneration != obj.Generation {
				add("adapter %s: condition %s %s", key, c, condString(cond, obj.Generation))
			}
		}
		if obj.Spec.ArtifactURL != a.artifact {
			add("adapter %s: artifactURL %q, the driver set %q", key, obj.Spec.ArtifactURL, a.artifact)
		}
		for _, ia := range st.InstanceArtifacts {
			if ia.ArtifactURL != a.artifact {
				add("adapter %s: instance %s serves %s, want %s", key, ia.Pod, ia.ArtifactURL, a.artifact)
			}
		}
		for _, pod := range st.Instances {
			if !slices.Contains(pods, pod) {
				add("adapter %s: instance %s is not a Ready pod of model %s", key, pod, a.model)
			}
			wantOn[a.ns+"/"+pod] = append(wantOn[a.ns+"/"+pod], a.name)
			e, ok := s.engines[a.ns+"/"+pod]
			switch {
			case !ok:
				add("adapter %s: instance %s has no engine", key, pod)
			case !slices.Contains(e.Loaded, a.name):
				add("adapter %s: status lists %s, whose engine does not hold it", key, pod)
			case e.Adapters[a.name] != artifactPath(a.artifact):
				add("adapter %s: the engine of %s serves %q, want %q", key, pod, e.Adapters[a.name], artifactPath(a.artifact))
			}
		}
	}
	for key, obj := range s.adapters {
		if _, ok := w.adapters[key]; !ok {
			add("adapter %s: exists, the driver deleted it (deletionTimestamp %v, finalizers %v)", key, obj.DeletionTimestamp, obj.Finalizers)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(s.engines)) {
		e := s.engines[key]
		if !s.namespace[e.Namespace] {
			continue
		}
		if extra := missingFrom(e.Loaded, wantOn[key]); len(extra) > 0 {
			add("engine %s holds %v, which no ModelAdapter records on it", key, extra)
		}
	}

	// Services and EndpointSlices: exactly one of each per adapter.
	svcs := map[string][]string{}
	for _, svc := range s.services {
		svcs[svc.Namespace] = append(svcs[svc.Namespace], svc.Name)
		if a, ok := w.adapters[svc.Namespace+"/"+svc.Name]; ok && svc.Spec.ClusterIP != corev1.ClusterIPNone {
			add("Service %s/%s of adapter %s is not headless", svc.Namespace, svc.Name, a.name)
		}
	}
	epSlices := map[string][]string{}
	for _, es := range s.slices {
		svc := es.Labels[discoveryv1.LabelServiceName]
		epSlices[es.Namespace] = append(epSlices[es.Namespace], svc)
		obj := s.adapters[es.Namespace+"/"+svc]
		if obj == nil {
			continue
		}
		var targets []string
		for _, e := range es.Endpoints {
			if e.TargetRef != nil {
				targets = append(targets, e.TargetRef.Name)
			}
		}
		slices.Sort(targets)
		if inst := slices.Sorted(slices.Values(obj.Status.Instances)); !slices.Equal(targets, inst) {
			add("EndpointSlice %s/%s: endpoints %v, instances %v", es.Namespace, es.Name, targets, inst)
		}
	}
	for ns := range s.namespace {
		want := w.adapterNames(ns)
		if got := sorted(svcs[ns]); !slices.Equal(got, want) {
			add("namespace %s: Services %v, want one per adapter %v", ns, got, want)
		}
		if got := sorted(epSlices[ns]); !slices.Equal(got, want) {
			add("namespace %s: EndpointSlices of %v, want one per adapter %v", ns, got, want)
		}
	}

	// Routes and grants.
	var routes []string
	for _, r := range s.routes {
		routes = append(routes, r.Name)
	}
	if got, want := sorted(routes), w.routeNames(); !slices.Equal(got, want) {
		missing, extra := missingFrom(want, got), missingFrom(got, want)
		add("HTTPRoutes: missing %v, extra %v", missing, extra)
	}
	granted := map[string][]string{}
	for _, g := range s.grants {
		for _, to := range g.Spec.To {
			if to.Name != nil {
				granted[g.Namespace] = append(granted[g.Namespace], string(*to.Name))
			}
		}
	}
	for ns := range s.namespace {
		if got, want := sorted(granted[ns]), w.routedServices(ns); !slices.Equal(got, want) {
			add("namespace %s: ReferenceGrants admit %v, want exactly %v", ns, got, want)
		}
	}
	sort.Strings(out)
	return out
}

func condString(c *metav1.Condition, generation int64) string {
	if c == nil {
		return "missing"
	}
	return fmt.Sprintf("%s/%s (observedGeneration %d of %d): %s", c.Status, c.Reason, c.ObservedGeneration, generation, c.Message)
}

// artifactPath is what the fake engine lists as an adapter's path: the URL without its
// huggingface:// scheme.
func artifactPath(url string) string { return strings.TrimPrefix(url, "huggingface://") }

// missingFrom returns the elements of a that b lacks.
func missingFrom(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	if out == nil {
		return []string{}
	}
	return out
}
