package adapter_test

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/fakeengine"
)

// rolloutFleet is three engine pods of one kind with an adapter Running on all of them.
type rolloutFleet struct {
	ns      string
	engines map[string]*fakeengine.Engine // pod -> engine
	adapter *v1alpha1.ModelAdapter
	// path maps an artifact URL to what the engine reports for it (the lora_path sent).
	path func(artifact string) string
	// reasons are the UpToDate=False reasons watchServing saw.
	reasons map[string]bool
}

func newRolloutFleet(t *testing.T, model string, opts fakeengine.Options, runtime bool) *rolloutFleet {
	t.Helper()
	ctx := ctxFor(t)
	f := &rolloutFleet{ns: newNamespace(t), engines: map[string]*fakeengine.Engine{}, path: func(u string) string {
		return strings.TrimPrefix(u, "huggingface://")
	}}
	labels := modelLabels(model)
	if opts.Kind == fakeengine.SGLang {
		labels[v1alpha1.EngineLabel] = "sglang"
	}
	var mutate []func(*corev1.Pod)
	if runtime {
		opts.Runtime = true
		f.path = func(u string) string { return u } // the fake sidecar lists the URL it got
		mutate = append(mutate, func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "aibrix-runtime", Image: "runtime"})
		})
	}
	for i := range 3 {
		name := fmt.Sprintf("%s-%d", model, i)
		ip := newIP()
		f.engines[name] = engine(t, ip, 8000, opts)
		modelPod(t, f.ns, name, ip, labels, mutate...)
	}
	f.adapter = newAdapter(f.ns, "lora", model, func(a *v1alpha1.ModelAdapter) { a.Spec.ArtifactURL = "huggingface://org/lora-v1" })
	if err := k8s.Create(ctx, f.adapter); err != nil {
		t.Fatal(err)
	}
	waitAdapter(t, client.ObjectKeyFromObject(f.adapter), 30*time.Second, "Running on 3 pods", running(3))
	f.requirePaths(t, "huggingface://org/lora-v1")
	return f
}

// requirePaths fails unless every engine holds the adapter from artifact.
func (f *rolloutFleet) requirePaths(t *testing.T, artifact string) {
	t.Helper()
	for pod, e := range f.engines {
		if got := e.Adapters()["lora"]; got != f.path(artifact) {
			t.Errorf("engine of %s holds the adapter from %q, want %q", pod, got, f.path(artifact))
		}
	}
}

// setArtifact changes spec.artifactURL.
func (f *rolloutFleet) setArtifact(t *testing.T, artifact string) {
	t.Helper()
	a := &v1alpha1.ModelAdapter{}
	if err := k8s.Get(ctxFor(t), client.ObjectKeyFromObject(f.adapter), a); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(a.DeepCopy())
	a.Spec.ArtifactURL = artifact
	if err := k8s.Patch(ctxFor(t), a, patch); err != nil {
		t.Fatal(err)
	}
}

// serving samples which pods serve the adapter: in its EndpointSlice and holding it on
// their engine. The engines are read before the EndpointSlice: a pod leaves the slice
// before its reload starts, so a pod that held the adapter then and is in the slice now
// served it at the moment the slice was read.
func (f *rolloutFleet) serving(t *testing.T) (pods []string, paths map[string]string) {
	held := map[string]string{}
	for pod, e := range f.engines {
		if p, ok := e.Adapters()["lora"]; ok {
			held[pod] = p
		}
	}
	eps := &discoveryv1.EndpointSlice{}
	if err := k8s.Get(ctxFor(t), client.ObjectKeyFromObject(f.adapter), eps); err != nil {
		return nil, nil
	}
	paths = map[string]string{}
	for _, ep := range eps.Endpoints {
		if ep.TargetRef == nil {
			continue
		}
		if p, ok := held[ep.TargetRef.Name]; ok {
			pods = append(pods, ep.TargetRef.Name)
			paths[ep.TargetRef.Name] = p
		}
	}
	slices.Sort(pods)
	return pods, paths
}

// watchServing samples serving until stop is closed and returns the fewest pods seen
// serving, the number of samples, and the reasons of the UpToDate condition seen.
func (f *rolloutFleet) watchServing(t *testing.T, stop <-chan struct{}) (minimum func() (int, int, string)) {
	var (
		mu      sync.Mutex
		least   = len(f.engines)
		samples int
		worst   string
		done    = make(chan struct{})
	)
	f.reasons = map[string]bool{}
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			pods, paths := f.serving(t)
			a := &v1alpha1.ModelAdapter{}
			_ = k8s.Get(ctxFor(t), client.ObjectKeyFromObject(f.adapter), a)
			mu.Lock()
			if c := upToDateCondition(a); c != nil && c.Status == "False" {
				f.reasons[c.Reason] = true
			}
			samples++
			if len(pods) < least {
				least, worst = len(pods), fmt.Sprintf("%v %v", pods, paths)
			}
			mu.Unlock()
		}
	}()
	return func() (int, int, string) {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return least, samples, worst
	}
}

func upToDateCondition(a *v1alpha1.ModelAdapter) *metav1Condition {
	return meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionUpToDate)
}

func upToDate(artifact string, n int) func(*v1alpha1.ModelAdapter) bool {
	return func(a *v1alpha1.ModelAdapter) bool {
		c := upToDateCondition(a)
		if !running(n)(a) || c == nil || c.Status != "True" || c.ObservedGeneration != a.Generation || len(a.Status.InstanceArtifacts) != n {
			return false
		}
		for _, ia := range a.Status.InstanceArtifacts {
			if ia.ArtifactURL != artifact {
				return false
			}
		}
		return true
	}
}

// TestArtifactRollout: changing artifactURL of a Running adapter on 3 pods brings every
// engine to the new artifact, one pod at a time, with at least 2 pods serving the adapter
// at every sample; the status says Rolling while versions differ and UpToDate after. For
// each engine API: vLLM reloads in place (load_inplace), vLLM without load_inplace, SGLang
// and the runtime sidecar unload and load.
func TestArtifactRollout(t *testing.T) {
	needEnv(t)
	const latency = 50 * time.Millisecond // per engine request, so that the samples see each step
	cases := map[string]struct {
		opts    fakeengine.Options
		runtime bool
		method  string
	}{
		"vllm in place":          {opts: fakeengine.Options{Latency: latency}, method: "inplace"},
		"vllm without inplace":   {opts: fakeengine.Options{Latency: latency, NoLoadInplace: true}, method: "unload-load"},
		"sglang":                 {opts: fakeengine.Options{Latency: latency, Kind: fakeengine.SGLang}, method: "unload-load"},
		"runtime sidecar (vllm)": {opts: fakeengine.Options{Latency: latency}, runtime: true, method: "unload-load"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			model := strings.ReplaceAll(strings.ReplaceAll(name, " ", "-"), "(", "")
			model = strings.TrimSuffix(model, ")")
			f := newRolloutFleet(t, model, tc.opts, tc.runtime)
			key := client.ObjectKeyFromObject(f.adapter)
			reloadsBefore := metricValue(t, "loraplane_adapter_reloads_total", map[string]string{"method": tc.method, "result": "success"})

			stop := make(chan struct{})
			minimum := f.watchServing(t, stop)
			start := time.Now()
			f.setArtifact(t, "huggingface://org/lora-v2")
			waitAdapter(t, key, 20*time.Second, "every instance on lora-v2", upToDate("huggingface://org/lora-v2", 3))
			took := time.Since(start)
			close(stop)
			least, samples, worst := minimum()
			f.requirePaths(t, "huggingface://org/lora-v2")
			t.Logf("rolled out to 3 pods in %s; at least %d pods served the adapter in %d samples", took.Round(time.Millisecond), least, samples)
			if least < 2 {
				t.Errorf("only %d pods served the adapter at one sample (%s), want at least 2 of 3 throughout", least, worst)
			}
			if !f.reasons["Rolling"] {
				t.Errorf("the status never said UpToDate=False/Rolling during the rollout (saw %v)", f.reasons)
			}
			// 3× the measured time or more (docs/reliability.md, "Wall-clock limits").
			if limit := 2*inventoryPeriod + 10*time.Second; took > limit {
				t.Errorf("rollout took %s, want within %s (2 inventory periods of %s + 10 s)", took, limit, inventoryPeriod)
			}
			if got := metricValue(t, "loraplane_adapter_reloads_total", map[string]string{"method": tc.method, "result": "success"}) - reloadsBefore; got != 3 {
				t.Errorf("loraplane_adapter_reloads_total{method=%q,result=success} grew by %v, want 3", tc.method, got)
			}
		})
	}
}

// TestBrokenArtifactKeepsTheOldVersion: a new artifact that the engines refuse stops the
// rollout at the first pod: the other pods keep serving the earlier artifact, the status
// says RolloutFailed with the engine's message, a Warning event is recorded, and when the
// engines accept it again the rollout completes.
func TestBrokenArtifactKeepsTheOldVersion(t *testing.T) {
	needEnv(t)
	f := newRolloutFleet(t, "broken", fakeengine.Options{}, false)
	key := client.ObjectKeyFromObject(f.adapter)
	for _, e := range f.engines {
		e.SetFault(fakeengine.Fault{Op: fakeengine.OpLoad, Status: 400,
			Body: `{"error":{"message":"No adapter found for org/lora-broken","type":"NotFoundError","code":400}}`})
	}
	stop := make(chan struct{})
	minimum := f.watchServing(t, stop)
	f.setArtifact(t, "huggingface://org/lora-broken")
	failed := waitAdapter(t, key, 20*time.Second, "UpToDate=False/RolloutFailed", func(a *v1alpha1.ModelAdapter) bool {
		c := upToDateCondition(a)
		return c != nil && c.Status == "False" && c.Reason == "RolloutFailed" && c.ObservedGeneration == a.Generation
	})
	// Retries go on with backoff, and the rollout must not advance meanwhile: three more
	// refused reloads prove the controller looked again (each pass sees the failure and keeps
	// the other pods on the earlier artifact).
	loads := func() int {
		n := 0
		for _, e := range f.engines {
			n += e.Loads()
		}
		return n
	}
	refused := loads()
	waitFor(t, 30*time.Second, "three more refused reloads (retries with backoff)", func() bool { return loads() >= refused+3 })
	close(stop)
	least, _, worst := minimum()
	if least < 2 {
		t.Errorf("only %d pods served the adapter at one sample (%s), want at least 2", least, worst)
	}
	c := upToDateCondition(failed)
	if !strings.Contains(c.Message, "No adapter found for org/lora-broken") || !strings.Contains(c.Message, "keep serving the earlier artifact") {
		t.Errorf("UpToDate message %q does not give the engine's reason and the old version's fate", c.Message)
	}
	if failed.Status.Phase == v1alpha1.ModelAdapterRunning {
		t.Errorf("phase Running while the new artifact is not served")
	}
	pods, paths := f.serving(t)
	if len(pods) != 2 {
		t.Errorf("%d pods serve the adapter after the failed reload (%v), want the 2 not yet reloaded", len(pods), pods)
	}
	for pod, p := range paths {
		if p != "org/lora-v1" {
			t.Errorf("%s serves %q, want the earlier org/lora-v1", pod, p)
		}
	}
	a := &v1alpha1.ModelAdapter{}
	if err := k8s.Get(ctxFor(t), key, a); err != nil {
		t.Fatal(err)
	}
	for _, ia := range a.Status.InstanceArtifacts {
		if ia.ArtifactURL != "huggingface://org/lora-v1" {
			t.Errorf("status says %s serves %s, want huggingface://org/lora-v1", ia.Pod, ia.ArtifactURL)
		}
	}
	var events eventsList
	if err := k8s.List(ctxFor(t), &events, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	warned := false
	for _, e := range events.Items {
		warned = warned || (e.Reason == "ReloadFailed" && e.Type == corev1.EventTypeWarning)
	}
	if !warned {
		t.Error("no ReloadFailed Warning event")
	}

	for _, e := range f.engines {
		e.ClearFault()
	}
	waitAdapter(t, key, 30*time.Second, "the rollout to finish once the engines accept the artifact", upToDate("huggingface://org/lora-broken", 3))
	f.requirePaths(t, "huggingface://org/lora-broken")
}

// TestEngineHoldingAnEarlierArtifact: engines that already hold the adapter's name from
// another artifact when the adapter is first reconciled — the state a new leader finds on a
// pod its predecessor had taken out of the EndpointSlice for a reload — end up serving the
// spec's artifact, not the earlier one behind an "already loaded" answer. (Found by make soak:
// the status said every instance served v2 while the engines kept v1.)
func TestEngineHoldingAnEarlierArtifact(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	engines := map[string]*fakeengine.Engine{}
	var pods []*corev1.Pod
	for i := range 3 {
		name := fmt.Sprintf("held-%d", i)
		ip := newIP()
		engines[name] = engine(t, ip, 8000, fakeengine.Options{})
		body := `{"lora_name":"lora","lora_path":"org/lora-v1"}`
		resp, err := http.Post("http://"+net.JoinHostPort(ip, "8000")+"/v1/load_lora_adapter", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("preloading the engine of %s: %s", name, resp.Status)
		}
		pods = append(pods, modelPod(t, ns, name, ip, modelLabels("held")))
	}
	a := newAdapter(ns, "lora", "held", func(a *v1alpha1.ModelAdapter) { a.Spec.ArtifactURL = "huggingface://org/lora-v2" })
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "every instance on lora-v2", upToDate("huggingface://org/lora-v2", 3))
	for _, p := range pods {
		if got := engines[p.Name].Adapters()["lora"]; got != "org/lora-v2" {
			t.Errorf("the engine of %s holds the adapter from %q, want org/lora-v2", p.Name, got)
		}
	}
}
