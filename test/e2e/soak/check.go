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
	UID       string            `json:"uid"`
	Loaded    []string          `json:"loaded"`
	Adapters  map[string]string `json:"adapters"`  // path by adapter name
	Preloaded map[string]string `json:"preloaded"` // held from the start (not loaded through the API), path by name
	KeysSeen  []string          `json:"keysSeen"`  // every API key presented to it, "" for none
	Counts    engineCounts      `json:"counts"`
	Retired   bool              `json:"retired"` // stopped: its pod is gone or was recreated
	// Capacity is how many adapters it holds at once, from its container's arguments (0:
	// unlimited); Evicted the adapters it evicted because it was asked to hold more.
	Capacity int      `json:"capacity"`
	Evicted  []string `json:"evicted"`
}

// engineCounts are the counters of an engine the checker reads.
type engineCounts struct {
	// ForeignUnloads are the unload requests it received for an adapter it held from the
	// start: the controller unloading what it did not load.
	ForeignUnloads int `json:"foreignUnloads"`
	// Evictions are the adapters it evicted beyond its capacity; CapacityRefusals the loads
	// it refused at its capacity (SGLang): the controller asked it to hold more than it can.
	Evictions        int `json:"evictions"`
	CapacityRefusals int `json:"capacityRefusals"`
}

// full reports whether the engine has no room for one more adapter.
func (e engineView) full() bool { return e.Capacity > 0 && len(e.Loaded) >= e.Capacity }

// static reports whether the engine holds name as a static adapter: from the start, from
// the path the driver gave it.
func (e engineView) static(name string) bool {
	p, ok := e.Preloaded[name]
	return ok && p == staticPath(name) && e.Adapters[name] == p
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
//   - no engine holds an adapter that no ModelAdapter records on it, but for a static one
//     (held from the start, from its static path); each engine of a model with a static
//     adapter holds it so.
//
// What an engine must never be sent, at any time, is checked by engineBreaches.
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
		if waiting := s.waitingForCapacity(a, st.Instances, want); waiting != "" {
			// Placed on fewer pods than wanted, every other pod full: the adapter waits
			// for room, and its status is current.
			if cond := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady); cond == nil || cond.ObservedGeneration != obj.Generation {
				add("adapter %s: %s, but condition %s %s", key, waiting, v1alpha1.ConditionReady, condString(cond, obj.Generation))
			}
		} else {
			if st.Phase != v1alpha1.ModelAdapterRunning || int(st.ReadyReplicas) != want || len(st.Instances) != want {
				add("adapter %s: phase %s, %d ready, %d instances; want Running on %d", key, st.Phase, st.ReadyReplicas, len(st.Instances), want)
			}
			for _, c := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionUpToDate} {
				cond := meta.FindStatusCondition(st.Conditions, c)
				if cond == nil || cond.Status != metav1.ConditionTrue || cond.ObservedGeneration != obj.Generation {
					add("adapter %s: condition %s %s", key, c, condString(cond, obj.Generation))
				}
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
	static := map[string]string{} // namespace/pod -> its model's static adapter
	for _, m := range w.models {
		if m.static == "" {
			continue
		}
		for _, p := range s.pods {
			if p.Namespace == m.ns && p.Labels[v1alpha1.ModelNameLabel] == m.name {
				static[p.Namespace+"/"+p.Name] = m.static
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(s.engines)) {
		e := s.engines[key]
		if !s.namespace[e.Namespace] {
			continue
		}
		var extra []string
		for _, name := range missingFrom(e.Loaded, wantOn[key]) {
			if !e.static(name) {
				extra = append(extra, name)
			}
		}
		if len(extra) > 0 {
			add("engine %s holds %v, which no ModelAdapter records on it", key, extra)
		}
		if name, ok := static[key]; ok && !e.static(name) {
			add("engine %s does not hold its static adapter %s from %s (holds it from %q)", key, name, staticPath(name), e.Adapters[name])
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

// waitingForCapacity explains why an adapter is rightly placed on fewer pods than wanted —
// its model's engines have a capacity and every Ready pod of the model that does not hold
// it is full — or returns "" when it should be on want pods.
func (s *snapshot) waitingForCapacity(a adapter, instances []string, want int) string {
	if len(instances) >= want {
		return ""
	}
	var full []string
	for _, pod := range s.readyPods(a.ns, a.model) {
		if slices.Contains(instances, pod) {
			continue
		}
		e, ok := s.engines[a.ns+"/"+pod]
		if !ok || !e.full() {
			return ""
		}
		full = append(full, fmt.Sprintf("%s (%d of %d)", pod, len(e.Loaded), e.Capacity))
	}
	return fmt.Sprintf("on %d of %d pods, the others full: %s", len(instances), want, strings.Join(full, ", "))
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

// breach is a never-invariant an engine broke, at some time of its life; id names the engine
// (by pod UID) and what it broke, so that a breach is reported once however often it is read.
type breach struct {
	id, invariant, detail string
}

// The invariants over an engine's whole life.
const (
	invariantForeignKey    = "no foreign API key"
	invariantForeignUnload = "no foreign unload"
	invariantCapacity      = "no engine over capacity"
)

// engineBreaches checks every engine the fake engine has run, stopped ones included, against
// what must never happen to an engine, whenever the checker looks:
//
//   - an engine is never sent an API key other than one its namespace has had (keys: every
//     key of each namespace over the run), be it another namespace's or no namespace's;
//   - an engine never receives an unload of an adapter it held from the start (a static one,
//     --lora-modules): the controller unloads only what it loaded;
//   - an engine is never asked to hold more adapters than its capacity: it never evicts one
//     (vLLM, silently, still listing it) nor refuses a load at its limit (SGLang).
func engineBreaches(keys map[string][]string, engines []engineView) []breach {
	owner := map[string]string{} // key -> namespace
	for ns, ks := range keys {
		for _, k := range ks {
			owner[k] = ns
		}
	}
	var out []breach
	for _, e := range engines {
		id := fmt.Sprintf("%s/%s (pod uid %s)", e.Namespace, e.Pod, e.UID)
		if e.Retired {
			id += " (stopped)"
		}
		for _, k := range e.KeysSeen {
			if k == "" || slices.Contains(keys[e.Namespace], k) {
				continue
			}
			whose := "a key of no soak namespace"
			if ns, ok := owner[k]; ok {
				whose = "namespace " + ns + "'s API key"
			}
			out = append(out, breach{id: "key " + e.UID + " " + k, invariant: invariantForeignKey,
				detail: fmt.Sprintf("engine %s was sent %s %q", id, whose, k)})
		}
		if n := e.Counts.ForeignUnloads; n > 0 {
			out = append(out, breach{id: "unload " + e.UID, invariant: invariantForeignUnload,
				detail: fmt.Sprintf("engine %s received %d unload(s) of an adapter it held from the start (static now: %v)", id, n, slices.Sorted(maps.Keys(e.Preloaded)))})
		}
		if n, r := e.Counts.Evictions, e.Counts.CapacityRefusals; n > 0 || r > 0 {
			out = append(out, breach{id: "capacity " + e.UID, invariant: invariantCapacity,
				detail: fmt.Sprintf("engine %s (capacity %d) was asked to hold more adapters than it can: %d evicted %v, %d loads refused; it lists %v",
					id, e.Capacity, n, e.Evicted, r, e.Loaded)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}
