package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/loraplane/loraplane/test/fakeengine"
)

func withContainers(cs ...corev1.Container) podOpt {
	return func(p *corev1.Pod) { p.Spec.Containers = cs }
}

func TestSpecForReadsCapacityFromTheEngineContainer(t *testing.T) {
	runtime := corev1.Container{Name: runtimeContainer, Args: []string{"--max-loras", "9"}}
	tests := map[string]struct {
		pod     *corev1.Pod
		want    fakeengine.Capacity
		limit   int
		wantErr string
	}{
		"no arguments: unlimited": {pod("p", "127.0.0.1"), fakeengine.Capacity{}, 0, ""},
		"vllm args": {pod("p", "127.0.0.1", withContainers(corev1.Container{Name: "vllm",
			Command: []string{"vllm", "serve"}, Args: []string{"m", "--enable-lora", "--max-loras", "2", "--max-cpu-loras=4"}})),
			fakeengine.Capacity{LoRA: true, MaxLoras: 2, MaxCPULoras: 4}, 4, ""},
		"sh -c, after a sidecar and the runtime sidecar": {pod("p", "127.0.0.1", withContainers(runtime, corev1.Container{Name: "proxy", Args: []string{"--port", "9"}},
			corev1.Container{Name: "engine", Command: []string{"sh", "-c", "exec vllm serve m --enable-lora --max-loras 3"}})),
			fakeengine.Capacity{LoRA: true, MaxLoras: 3, MaxCPULoras: 3}, 3, ""},
		"sglang args": {pod("p", "127.0.0.1", withLabel(labelEngine, "sglang"), withContainers(corev1.Container{Name: "sglang",
			Args: []string{"--enable-lora", "--max-loras-per-batch", "2", "--max-loaded-loras", "5"}})),
			fakeengine.Capacity{LoRA: true, MaxLoras: 2, MaxLoadedLoras: 5}, 5, ""},
		"bad args refuse the pod": {pod("p", "127.0.0.1", withContainers(corev1.Container{Name: "vllm", Args: []string{"--max-loras", "many"}})),
			fakeengine.Capacity{}, 0, `container vllm: fakeengine: --max-loras "many" is not a positive integer`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			spec, ok, err := specFor(tc.pod)
			if tc.wantErr != "" {
				if err == nil || ok || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("specFor = %v, %v, want a refusal %q", ok, err, tc.wantErr)
				}
				return
			}
			if err != nil || !ok {
				t.Fatalf("specFor = %v, %v", ok, err)
			}
			if diff := cmp.Diff(tc.want, spec.Capacity); diff != "" {
				t.Errorf("capacity (-want +got):\n%s", diff)
			}
		})
	}
}

func TestManagerStartsEnginesWithTheirCapacity(t *testing.T) {
	m, _ := newTestManager(t, fakeengine.Options{})
	p := pod("capped", "127.0.19.95", withContainers(corev1.Container{Name: "vllm", Args: []string{"--enable-lora", "--max-loras", "2"}}))
	if err := m.sync([]*corev1.Pod{p}); err != nil {
		t.Fatal(err)
	}
	r := m.get("ns", "capped")
	if r == nil {
		t.Fatal("no engine for the pod")
	}
	if got := r.engine.Limit(); got != 2 {
		t.Errorf("engine limit %d, want 2 (from --max-loras)", got)
	}
	if v := viewOf(r); v.Capacity != 2 || v.Resident == nil || v.Evicted == nil {
		t.Errorf("view capacity %d, resident %v, evicted %v; want 2, [], []", v.Capacity, v.Resident, v.Evicted)
	}
}
