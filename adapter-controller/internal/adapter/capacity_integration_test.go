package adapter_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/fakeengine"
)

// capacityPod starts a fake engine and a Ready pod whose adapter capacity the annotation
// sets.
func capacityPod(t *testing.T, ns, name, model string, capacity int) *fakeengine.Engine {
	t.Helper()
	ip := newIP()
	e := engine(t, ip, 8000, fakeengine.Options{})
	modelPod(t, ns, name, ip, modelLabels(model), func(p *corev1.Pod) {
		p.Annotations = map[string]string{v1alpha1.AdapterCapacityAnnotation: strconv.Itoa(capacity)}
	})
	return e
}

func createAdapters(t *testing.T, ns, model string, from, to int) []*v1alpha1.ModelAdapter {
	t.Helper()
	var out []*v1alpha1.ModelAdapter
	for i := from; i < to; i++ {
		a := newAdapter(ns, fmt.Sprintf("lora-%d", i), model, func(a *v1alpha1.ModelAdapter) { a.Spec.Replicas = ptr.To[int32](1) })
		if err := k8s.Create(ctxFor(t), a); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// checkCapacity fails when an engine holds more adapters than its capacity.
func checkCapacity(t *testing.T, engines map[string]*fakeengine.Engine, capacity map[string]int) (total int) {
	t.Helper()
	for name, e := range engines {
		n := len(e.Loaded())
		total += n
		if n > capacity[name] {
			t.Errorf("pod %s holds %d adapters %v, capacity %d", name, n, e.Loaded(), capacity[name])
		}
	}
	return total
}

func waitingForCapacity(a *v1alpha1.ModelAdapter) bool {
	return conditionIs(a, v1alpha1.ConditionScheduled, "False", "InsufficientCapacity") && a.Status.WaitingReplicas == 1 && len(a.Status.Instances) == 0
}

// TestCapacityMixedPods: pods of capacity 4, 1 and 1 take 6 single-replica adapters without
// going over any capacity; a 7th waits with the InsufficientCapacity condition, an event and
// the pool metric, and is placed once one of the others is deleted.
func TestCapacityMixedPods(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	capacity := map[string]int{"big": 4, "small-1": 1, "small-2": 1}
	engines := map[string]*fakeengine.Engine{}
	for name, c := range capacity {
		engines[name] = capacityPod(t, ns, name, "mixed", c)
	}
	six := createAdapters(t, ns, "mixed", 0, 6)
	for _, a := range six {
		waitAdapter(t, client.ObjectKeyFromObject(a), time.Minute, a.Name+" Running on one pod", running(1))
	}
	if total := checkCapacity(t, engines, capacity); total != 6 {
		t.Errorf("the engines hold %d adapters, want 6", total)
	}
	loads := 0
	for _, e := range engines {
		loads += e.Loads()
	}

	seventh := createAdapters(t, ns, "mixed", 6, 7)[0]
	key := client.ObjectKeyFromObject(seventh)
	got := waitAdapter(t, key, 30*time.Second, "the 7th adapter waiting for capacity", waitingForCapacity)
	if got.Status.DesiredReplicas != 1 || got.Status.PlacedReplicas != 0 || got.Status.Phase != v1alpha1.ModelAdapterPending {
		t.Errorf("7th: desired %d placed %d phase %s; want 1, 0, Pending", got.Status.DesiredReplicas, got.Status.PlacedReplicas, got.Status.Phase)
	}
	waitEvent(t, ns, seventh.Name, "InsufficientCapacity")
	if v := metricValue(t, "loraplane_adapters_waiting_for_capacity", map[string]string{"namespace": ns, "model": "mixed"}); v != 1 {
		t.Errorf("loraplane_adapters_waiting_for_capacity = %v, want 1", v)
	}
	if v := metricValue(t, "loraplane_adapter_slots", map[string]string{"namespace": ns, "model": "mixed", "state": "total"}); v != 6 {
		t.Errorf("slots total = %v, want 6", v)
	}
	if v := metricValue(t, "loraplane_adapter_slots", map[string]string{"namespace": ns, "model": "mixed", "state": "used"}); v != 6 {
		t.Errorf("slots used = %v, want 6", v)
	}
	after := 0
	for _, e := range engines {
		after += e.Loads()
	}
	if after != loads || checkCapacity(t, engines, capacity) != 6 {
		t.Errorf("the waiting adapter changed the engines: %d loads after, %d before", after, loads)
	}

	if err := k8s.Delete(ctx, six[2]); err != nil {
		t.Fatal(err)
	}
	waitAdapter(t, key, 30*time.Second, "the 7th adapter Running once another is deleted", running(1))
	if total := checkCapacity(t, engines, capacity); total != 6 {
		t.Errorf("the engines hold %d adapters, want 6", total)
	}
}

// TestCapacityScaleIn: when a full pod goes, its adapters move only as far as room exists
// (the others stay loaded where they are); a new pod's room goes to the oldest waiter.
func TestCapacityScaleIn(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	capacity := map[string]int{"p1": 2, "p2": 2}
	engines := map[string]*fakeengine.Engine{}
	for name, c := range capacity {
		engines[name] = capacityPod(t, ns, name, "scalein", c)
	}
	adapters := createAdapters(t, ns, "scalein", 0, 4)
	for _, a := range adapters {
		waitAdapter(t, client.ObjectKeyFromObject(a), time.Minute, a.Name+" Running on one pod", running(1))
	}
	var onP1, onP2 []string
	for _, a := range adapters {
		cur := &v1alpha1.ModelAdapter{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(a), cur); err != nil {
			t.Fatal(err)
		}
		if cur.Status.Instances[0] == "p1" {
			onP1 = append(onP1, a.Name)
		} else {
			onP2 = append(onP2, a.Name)
		}
	}
	if len(onP1) != 2 || len(onP2) != 2 {
		t.Fatalf("p1 holds %v, p2 %v; want two each", onP1, onP2)
	}

	if err := k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1ObjectMeta(ns, "p1")}, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	for _, name := range onP1 {
		waitAdapter(t, client.ObjectKey{Namespace: ns, Name: name}, 30*time.Second, name+" waiting for capacity after its pod went", waitingForCapacity)
	}
	for _, name := range onP2 {
		waitAdapter(t, client.ObjectKey{Namespace: ns, Name: name}, 10*time.Second, name+" still Running on p2", running(1))
	}
	delete(engines, "p1")
	checkCapacity(t, engines, capacity)

	capacity["p3"] = 1
	engines["p3"] = capacityPod(t, ns, "p3", "scalein", 1)
	oldest, younger := onP1[0], onP1[1] // created in this order, lora-0 first
	waitAdapter(t, client.ObjectKey{Namespace: ns, Name: oldest}, 30*time.Second, oldest+" (the oldest waiter) Running on the new pod", running(1))
	got := waitAdapter(t, client.ObjectKey{Namespace: ns, Name: younger}, 10*time.Second, younger+" still waiting", waitingForCapacity)
	if got.Status.Phase == v1alpha1.ModelAdapterRunning {
		t.Errorf("%s is Running", younger)
	}
	checkCapacity(t, engines, capacity)
}

// TestPreflightExcludesEnginesWithoutRuntimeLoRA: of three matching pods, one runs vLLM
// without --enable-lora and one without VLLM_ALLOW_RUNTIME_LORA_UPDATING; the adapter (on
// every pod) is loaded on the third only, no load is sent to the others, and the Scheduled
// condition names the missing flag and variable.
func TestPreflightExcludesEnginesWithoutRuntimeLoRA(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	vllm := func(args []string, env []corev1.EnvVar) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Containers = []corev1.Container{{Name: "vllm", Image: "vllm", Command: []string{"vllm", "serve"}, Args: args, Env: env}}
		}
	}
	on := []corev1.EnvVar{{Name: "VLLM_ALLOW_RUNTIME_LORA_UPDATING", Value: "true"}}
	engines := map[string]*fakeengine.Engine{}
	for name, mutate := range map[string]func(*corev1.Pod){
		"no-lora":    vllm([]string{"m"}, on),
		"no-runtime": vllm([]string{"m", "--enable-lora", "--max-loras", "4"}, nil),
		"ready":      vllm([]string{"m", "--enable-lora", "--max-loras", "4"}, on),
	} {
		ip := newIP()
		engines[name] = engine(t, ip, 8000, fakeengine.Options{})
		modelPod(t, ns, name, ip, modelLabels("pre"), mutate)
	}
	a := newAdapter(ns, "lora", "pre")
	if err := k8s.Create(ctxFor(t), a); err != nil {
		t.Fatal(err)
	}
	got := waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "Running on the one pod that can take it", running(1))
	if joined(got.Status.Instances) != "ready" || got.Status.Candidates != 1 {
		t.Errorf("instances %v, candidates %d; want ready, 1", got.Status.Instances, got.Status.Candidates)
	}
	msg := condition(got, v1alpha1.ConditionScheduled).Message
	for _, want := range []string{"pod no-lora cannot take it (LoRADisabled): container vllm runs vLLM without --enable-lora",
		"pod no-runtime cannot take it (LoRAUpdatingDisabled): container vllm runs vLLM without VLLM_ALLOW_RUNTIME_LORA_UPDATING=true"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Scheduled message %q does not say %q", msg, want)
		}
	}
	for _, name := range []string{"no-lora", "no-runtime"} {
		if n := engines[name].Loads(); n != 0 {
			t.Errorf("%d loads sent to %s", n, name)
		}
	}
}

// TestCapacityCountsWhatANewPodHolds: before the first adapter is placed on a pod, its engine
// is listed and its metrics read, so that adapters the engine was started with
// (--lora-modules) take slots and a capacity only the engine's metrics tell is known: neither
// engine here is ever asked to hold more than it can (no eviction), and the adapters that do
// not fit wait.
func TestCapacityCountsWhatANewPodHolds(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	oneReplica := func(a *v1alpha1.ModelAdapter) { a.Spec.Replicas = ptr.To[int32](1) }
	// Capacity 1 by annotation, taken by an adapter the engine was started with.
	sip := newIP()
	static := engine(t, sip, 8000, fakeengine.Options{Preload: map[string]string{"started-with": "/models/started-with"}})
	modelPod(t, ns, "static", sip, modelLabels("held"), func(p *corev1.Pod) {
		p.Annotations = map[string]string{v1alpha1.AdapterCapacityAnnotation: "1"}
	})
	// Capacity 1 known only from the engine's metrics (its pod names no vLLM command line).
	mip := newIP()
	reported := engine(t, mip, 8000, fakeengine.Options{Capacity: fakeengine.Capacity{LoRA: true, MaxLoras: 1}})
	modelPod(t, ns, "reported", mip, modelLabels("told"))

	held := newAdapter(ns, "held", "held", oneReplica)
	told := []*v1alpha1.ModelAdapter{newAdapter(ns, "told-0", "told", oneReplica), newAdapter(ns, "told-1", "told", oneReplica)}
	for _, a := range append([]*v1alpha1.ModelAdapter{held}, told...) {
		if err := k8s.Create(ctxFor(t), a); err != nil {
			t.Fatal(err)
		}
	}
	waitAdapter(t, client.ObjectKeyFromObject(held), 30*time.Second, "the adapter waiting behind the one the engine was started with", waitingForCapacity)
	states := func() (runs, waits int) {
		for _, a := range told {
			var got v1alpha1.ModelAdapter
			if err := k8s.Get(ctxFor(t), client.ObjectKeyFromObject(a), &got); err != nil {
				t.Fatal(err)
			}
			if running(1)(&got) {
				runs++
			} else if waitingForCapacity(&got) {
				waits++
			}
		}
		return runs, waits
	}
	deadline := time.Now().Add(30 * time.Second)
	runs, waits := states()
	for (runs != 1 || waits != 1) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		runs, waits = states()
	}
	if runs != 1 || waits != 1 {
		t.Errorf("of two adapters for an engine of capacity 1: %d Running, %d waiting; want 1 and 1", runs, waits)
	}
	for name, e := range map[string]*fakeengine.Engine{"static": static, "reported": reported} {
		if c := e.Counts(); c.Evictions > 0 || len(e.Loaded()) > 1 {
			t.Errorf("engine %s (capacity 1) holds %v, %d evictions (evicted %v)", name, e.Loaded(), c.Evictions, e.Evicted())
		}
	}
	if n := static.Loads(); n != 0 {
		t.Errorf("the engine full with what it was started with got %d loads", n)
	}
}
