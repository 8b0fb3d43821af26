//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// capacityAnnotation on a pod tells the adapter-controller its engine's adapter capacity.
const capacityAnnotation = "loraplane.io/adapter-capacity"

// capacityEngine is what the capacity test reads of an engine (GET /engines).
type capacityEngine struct {
	Pod      string   `json:"pod"`
	Loaded   []string `json:"loaded"`
	Capacity int      `json:"capacity"`
	Evicted  []string `json:"evicted"`
	Counts   struct {
		Evictions        int `json:"evictions"`
		CapacityRefusals int `json:"capacityRefusals"`
	} `json:"counts"`
}

// capacityEngines reads the engines of a namespace by pod name.
func capacityEngines(t *testing.T, ns string) map[string]capacityEngine {
	t.Helper()
	resp, err := http.Get(os.Getenv("E2E_ENGINE_ADMIN") + "/engines")
	if err != nil {
		t.Fatalf("engine admin: %v", err)
	}
	defer resp.Body.Close()
	var list []struct {
		Namespace string `json:"namespace"`
		capacityEngine
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatalf("engine admin: %v", err)
	}
	out := map[string]capacityEngine{}
	for _, e := range list {
		if e.Namespace == ns {
			out[e.Pod] = e.capacityEngine
		}
	}
	return out
}

// checkNoEngineOverCapacity fails the test when an engine of the namespace holds more
// adapters than its capacity, ever evicted one or refused a load at its capacity; it returns
// how many adapters each engine lists.
func checkNoEngineOverCapacity(t *testing.T, ns string) map[string]int {
	t.Helper()
	held := map[string]int{}
	for pod, e := range capacityEngines(t, ns) {
		held[pod] = len(e.Loaded)
		if e.Capacity == 0 || len(e.Loaded) > e.Capacity || e.Counts.Evictions > 0 || e.Counts.CapacityRefusals > 0 {
			t.Errorf("engine %s (capacity %d) lists %v, evicted %d %v, refused %d loads: want a capacity, at most that many adapters, no eviction, no refusal",
				pod, e.Capacity, e.Loaded, e.Counts.Evictions, e.Evicted, e.Counts.CapacityRefusals)
		}
	}
	return held
}

// capacityDeployment is a one-pod Deployment of the model whose engine holds capacity
// adapters: vLLM's --enable-lora --max-loras (read by the fake engine, on kwok from the pod
// spec and on kind in the pod), with runtime LoRA updating on. The controller learns the
// capacity from the pod annotation loraplane.io/adapter-capacity, the first of its sources:
// the fake engine's container is not a vLLM command line it would read, and an engine's
// metrics are read by the inventory only once an adapter is placed there.
func capacityDeployment(ctx context.Context, t *testing.T, ns, name, model string, capacity int) {
	t.Helper()
	d := modelDeployment(ns, model, 1)
	d.Name = name
	d.Spec.Selector.MatchLabels = map[string]string{"e2e-pool": name}
	tmpl := &d.Spec.Template
	tmpl.Labels["e2e-pool"] = name
	tmpl.Annotations = map[string]string{capacityAnnotation: fmt.Sprint(capacity)}
	c := &tmpl.Spec.Containers[0]
	c.Args = append(c.Args, "--enable-lora", fmt.Sprintf("--max-loras=%d", capacity))
	c.Env = append(c.Env, corev1.EnvVar{Name: "VLLM_ALLOW_RUNTIME_LORA_UPDATING", Value: "true"})
	if err := k8s.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
}

// waitingForCapacity reports whether a condition of the adapter says it waits for capacity.
func waitingForCapacity(a *v1alpha1.ModelAdapter) bool {
	for _, c := range a.Status.Conditions {
		if strings.Contains(c.Reason, "Capacity") && c.ObservedGeneration == a.Generation {
			return true
		}
	}
	return false
}

// TestPlacementWithinCapacity (issue 39): pods whose engines hold 4, 1 and 1 adapters and 6
// single-replica adapters → every adapter runs, no engine over its capacity, no eviction; a
// 7th waits with a condition naming capacity and is loaded nowhere; once one adapter is
// deleted the 7th is placed, still without eviction.
func TestPlacementWithinCapacity(t *testing.T) {
	ctx := ctxFor(t, 5*time.Minute)
	ns := namespace(t)
	model := "e2e-cap-" + suffix()
	for i, c := range []int{4, 1, 1} {
		capacityDeployment(ctx, t, ns, fmt.Sprintf("%s-%d", model, i), model, c)
	}
	waitModelPods(t, 90*time.Second, ns, model, 3)

	adapter := func(i int) *v1alpha1.ModelAdapter {
		return &v1alpha1.ModelAdapter{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-lora-%d", model, i), Namespace: ns},
			Spec: v1alpha1.ModelAdapterSpec{
				BaseModel:   ptr.To(model),
				Replicas:    ptr.To(int32(1)),
				PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.ModelNameLabel: model, v1alpha1.AdapterEnabledLabel: "true"}},
				ArtifactURL: fmt.Sprintf("huggingface://e2e/capacity-%d", i),
			},
		}
	}
	running := func(names ...string) func() (bool, string) {
		return func() (bool, string) {
			var state []string
			ok := true
			for _, n := range names {
				a, err := adapterStatus(ns, n)
				if err != nil {
					return false, err.Error()
				}
				if a.Status.Phase != v1alpha1.ModelAdapterRunning || len(a.Status.Instances) != 1 {
					ok = false
				}
				state = append(state, fmt.Sprintf("%s %s on %v", n, a.Status.Phase, a.Status.Instances))
			}
			return ok, strings.Join(state, "; ")
		}
	}
	var names []string
	for i := range 6 {
		a := adapter(i)
		names = append(names, a.Name)
		if err := k8s.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 90*time.Second, "6 single-replica adapters Running on one pod each", running(names...))
	if haveEngineAdmin() {
		held := checkNoEngineOverCapacity(t, ns)
		total := 0
		for _, n := range held {
			total += n
		}
		if total != 6 {
			t.Errorf("engines hold %v (%d adapters), want the 6 adapters once each", held, total)
		}
	}

	// Every slot is taken: a 7th waits, loaded nowhere.
	seventh := adapter(6)
	if err := k8s.Create(ctx, seventh); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the 7th adapter waiting with a condition naming capacity", func() (bool, string) {
		a, err := adapterStatus(ns, seventh.Name)
		if err != nil {
			return false, err.Error()
		}
		return waitingForCapacity(a) && len(a.Status.Instances) == 0, fmt.Sprintf("phase %s, instances %v, conditions %+v", a.Status.Phase, a.Status.Instances, a.Status.Conditions)
	})
	if haveEngineAdmin() {
		checkNoEngineOverCapacity(t, ns)
		for pod, e := range capacityEngines(t, ns) {
			if slices.Contains(e.Loaded, seventh.Name) {
				t.Errorf("the waiting 7th adapter is loaded on %s", pod)
			}
		}
	}

	// A slot frees: the 7th is placed.
	if err := k8s.Delete(ctx, adapter(0)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, "the 7th adapter Running once an adapter was deleted", running(seventh.Name))
	if a, err := adapterStatus(ns, seventh.Name); err == nil && waitingForCapacity(a) {
		t.Errorf("the 7th adapter runs but a condition still says it waits for capacity: %+v", a.Status.Conditions)
	}
	if haveEngineAdmin() {
		checkNoEngineOverCapacity(t, ns)
	}
}
