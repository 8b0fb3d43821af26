package adapter

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// TestServedArtifact: which artifact an engine pod serves, and whether it is the one the
// spec asks for, per engine API: vLLM and SGLang list the path they loaded; behind the
// runtime sidecar the status record (or this process's memory of its own loads) decides.
func TestServedArtifact(t *testing.T) {
	const v1, v2 = "huggingface://org/lora-v1", "huggingface://org/lora-v2"
	vllm := func(p *corev1.Pod) {}
	sglang := func(p *corev1.Pod) { p.Labels = map[string]string{v1alpha1.EngineLabel: "sglang"} }
	sidecar := func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: engine.RuntimeContainerName})
	}
	type want struct {
		Artifact string
		Current  bool
	}
	cases := map[string]struct {
		kind      func(*corev1.Pod)
		listed    *string // the path listed for the adapter; nil: the pod was never listed
		recorded  string  // status.instanceArtifacts of the pod
		instance  bool    // the pod is in status.instances
		loadedNow string  // this process loaded and verified this artifact there
		want      want
	}{
		"vllm lists the new path":                 {kind: vllm, listed: ptr.To("org/lora-v2"), recorded: v1, instance: true, want: want{v2, true}},
		"vllm lists the old path":                 {kind: vllm, listed: ptr.To("org/lora-v1"), recorded: v1, instance: true, want: want{v1, false}},
		"vllm lists a path nobody recorded":       {kind: vllm, listed: ptr.To("/mnt/other"), instance: true, want: want{"/mnt/other", false}},
		"vllm lists no path: the record decides":  {kind: vllm, listed: ptr.To(""), recorded: v1, instance: true, want: want{v1, false}},
		"vllm never listed: the record decides":   {kind: vllm, recorded: v2, instance: true, want: want{v2, true}},
		"sglang lists the old path":               {kind: sglang, listed: ptr.To("org/lora-v1"), recorded: v2, instance: true, want: want{"org/lora-v1", false}},
		"sglang lists the new path":               {kind: sglang, listed: ptr.To("org/lora-v2"), instance: true, want: want{v2, true}},
		"sidecar: local path ignored, record old": {kind: sidecar, listed: ptr.To("/var/lib/runtime/lora"), recorded: v1, instance: true, want: want{v1, false}},
		"sidecar: record current":                 {kind: sidecar, listed: ptr.To("/var/lib/runtime/lora"), recorded: v2, instance: true, want: want{v2, true}},
		"sidecar: instance without a record":      {kind: sidecar, listed: ptr.To("/var/lib/runtime/lora"), instance: true, want: want{v2, true}},
		"sidecar: no record, not an instance":     {kind: sidecar, listed: ptr.To("/var/lib/runtime/lora"), want: want{"", false}},
		"sidecar: this process loaded the new":    {kind: sidecar, listed: ptr.To("/var/lib/runtime/lora"), recorded: v1, loadedNow: v2, want: want{v2, true}},
		"vllm: this process loaded the old":       {kind: vllm, listed: ptr.To("org/lora-v1"), loadedNow: v1, want: want{v1, false}},
		// Memory says v2, the engine lists v1 (changed behind this process's back, or an
		// "already loaded" answer hid the old one): the listing wins, so it is reloaded.
		"vllm: loaded the new, lists the old": {kind: vllm, listed: ptr.To("org/lora-v1"), recorded: v2, loadedNow: v2, instance: true, want: want{"org/lora-v1", false}},
		"vllm: loaded the new, lists the new": {kind: vllm, listed: ptr.To("org/lora-v2"), recorded: v2, loadedNow: v2, instance: true, want: want{v2, true}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := &Reconciler{opts: DefaultOptions(), inventory: NewInventory(nil, nil, time.Minute, 1, clock.RealClock{}, inventoryHooks{})}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p0", UID: "uid-p0"},
				Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "engine"}}},
				Status: corev1.PodStatus{PodIP: "127.0.40.1"}}
			tc.kind(pod)
			a := &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lora"},
				Spec: v1alpha1.ModelAdapterSpec{ArtifactURL: v2}}
			if tc.recorded != "" {
				a.Status.InstanceArtifacts = []v1alpha1.InstanceArtifact{{Pod: "p0", ArtifactURL: tc.recorded}}
			}
			if tc.instance {
				a.Status.Instances = []string{"p0"}
			}
			if tc.listed != nil {
				r.inventory.record(pod, []engine.Adapter{{Name: "lora", Path: *tc.listed}})
			}
			if tc.loadedNow != "" {
				r.inventory.noteArtifact(pod, a, tc.loadedNow)
			}
			artifact, current := r.servedArtifact(pod, a)
			if diff := cmp.Diff(tc.want, want{artifact, current}); diff != "" {
				t.Errorf("servedArtifact() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
