package engine

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func enginePod(engineLabel string, c corev1.Container) *corev1.Pod {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sidecar", Image: "busybox"}, c}}}
	pod.Name = "p"
	if engineLabel != "" {
		pod.Labels = map[string]string{LabelEngine: engineLabel}
	}
	return pod
}

var runtimeOn = []corev1.EnvVar{{Name: RuntimeLoRAUpdatingEnv, Value: "True"}}

func TestPodSpecCapacity(t *testing.T) {
	vllm := func(args ...string) corev1.Container {
		return corev1.Container{Name: "vllm", Command: []string{"vllm", "serve"}, Args: args, Env: runtimeOn}
	}
	tests := map[string]struct {
		pod       *corev1.Pod
		reported  int
		want      int
		wantKnown bool
	}{
		"vllm --max-loras N":                   {pod: enginePod("", vllm("m", "--enable-lora", "--max-loras", "4")), want: 4, wantKnown: true},
		"vllm --max-loras=N":                   {pod: enginePod("", vllm("m", "--enable-lora", "--max-loras=3")), want: 3, wantKnown: true},
		"vllm --max-cpu-loras wins":            {pod: enginePod("", vllm("--enable-lora", "--max-loras", "2", "--max-cpu-loras=8")), want: 8, wantKnown: true},
		"vllm underscores":                     {pod: enginePod("", vllm("--enable-lora", "--max_cpu_loras", "5")), want: 5, wantKnown: true},
		"vllm default is 1":                    {pod: enginePod("", vllm("m", "--enable-lora")), want: 1, wantKnown: true},
		"vllm metrics beat --max-loras":        {pod: enginePod("", vllm("--enable-lora", "--max-loras", "2")), reported: 6, want: 6, wantKnown: true},
		"vllm --max-cpu-loras beats metrics":   {pod: enginePod("", vllm("--enable-lora", "--max-cpu-loras", "9")), reported: 6, want: 9, wantKnown: true},
		"vllm python -m":                       {pod: enginePod("", corev1.Container{Name: "e", Command: []string{"python3", "-m", "vllm.entrypoints.openai.api_server"}, Args: []string{"--enable-lora", "--max-loras", "7"}}), want: 7, wantKnown: true},
		"vllm image entrypoint":                {pod: enginePod("", corev1.Container{Name: "e", Image: "vllm/vllm-openai:v0.11.0", Args: []string{"--enable-lora", "--max-loras", "2"}}), want: 2, wantKnown: true},
		"vllm in sh -c":                        {pod: enginePod("", corev1.Container{Name: "e", Command: []string{"sh", "-c", "vllm serve m --enable-lora --max-cpu-loras 12"}}), want: 12, wantKnown: true},
		"vllm sh -c without flags: no default": {pod: enginePod("", corev1.Container{Name: "e", Command: []string{"sh", "-c", "vllm serve m --enable-lora $EXTRA"}})},
		"vllm variable value":                  {pod: enginePod("", vllm("--enable-lora", "--max-loras", "$(N)"))},
		"unknown image":                        {pod: enginePod("", corev1.Container{Name: "e", Image: "fake-engine", Args: []string{"--max-loras", "4"}})},
		"unknown image, metrics":               {pod: enginePod("", corev1.Container{Name: "e", Image: "fake-engine"}), reported: 4, want: 4, wantKnown: true},
		"sglang --max-loaded-loras":            {pod: enginePod("sglang", corev1.Container{Name: "s", Command: []string{"python3", "-m", "sglang.launch_server"}, Args: []string{"--enable-lora", "--max-loras-per-batch", "8", "--max-loaded-loras", "16"}}), want: 16, wantKnown: true},
		"sglang without it: unlimited":         {pod: enginePod("sglang", corev1.Container{Name: "s", Command: []string{"sglang", "serve"}, Args: []string{"--enable-lora", "--max-loras-per-batch", "8"}})},
		"vllm command on an sglang pod":        {pod: enginePod("sglang", vllm("--enable-lora", "--max-loras", "4"))},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, known := InspectPod(tc.pod).Capacity(tc.reported)
			if got != tc.want || known != tc.wantKnown {
				t.Errorf("Capacity = %d, %v; want %d, %v (spec %+v)", got, known, tc.want, tc.wantKnown, InspectPod(tc.pod))
			}
		})
	}
}

func TestPodSpecUnfit(t *testing.T) {
	tests := map[string]struct {
		c          corev1.Container
		sglang     bool
		rank       int
		wantReason Reason
	}{
		"vllm ready":                 {c: corev1.Container{Name: "v", Command: []string{"vllm", "serve"}, Args: []string{"--enable-lora"}, Env: runtimeOn}},
		"vllm env 1":                 {c: corev1.Container{Name: "v", Command: []string{"vllm", "serve"}, Args: []string{"--enable-lora"}, Env: []corev1.EnvVar{{Name: RuntimeLoRAUpdatingEnv, Value: "1"}}}},
		"vllm without --enable-lora": {c: corev1.Container{Name: "v", Command: []string{"vllm", "serve"}, Env: runtimeOn}, wantReason: ReasonLoRADisabled},
		"vllm --enable-lora=false":   {c: corev1.Container{Name: "v", Command: []string{"vllm", "serve"}, Args: []string{"--enable-lora=false"}, Env: runtimeOn}, wantReason: ReasonLoRADisabled},
		"vllm without the env":       {c: corev1.Container{Name: "v", Command: []string{"vllm", "serve"}, Args: []string{"--enable-lora"}}, wantReason: ReasonLoRAUpdatingDisabled},
		"vllm env false":             {c: corev1.Container{Name: "v", Command: []string{"vllm", "serve"}, Args: []string{"--enable-lora"}, Env: []corev1.EnvVar{{Name: RuntimeLoRAUpdatingEnv, Value: "false"}}}, wantReason: ReasonLoRAUpdatingDisabled},
		"vllm env from a ConfigMap":  {c: corev1.Container{Name: "v", Command: []string{"vllm", "serve"}, Args: []string{"--enable-lora"}, EnvFrom: []corev1.EnvFromSource{{}}}},
		"vllm env in the script":     {c: corev1.Container{Name: "v", Command: []string{"sh", "-c", "VLLM_ALLOW_RUNTIME_LORA_UPDATING=true vllm serve m --enable-lora"}}},
		"vllm script without --enable-lora: not conclusive": {c: corev1.Container{Name: "v", Command: []string{"bash", "-c", "source env.sh; vllm serve m"}}},
		"vllm rank over the default 16":                     {c: corev1.Container{Name: "v", Command: []string{"vllm", "serve"}, Args: []string{"--enable-lora"}, Env: runtimeOn}, rank: 32, wantReason: ReasonLoRARankTooHigh},
		"vllm rank within --max-lora-rank":                  {c: corev1.Container{Name: "v", Command: []string{"vllm", "serve"}, Args: []string{"--enable-lora", "--max-lora-rank", "64"}, Env: runtimeOn}, rank: 32},
		"unknown image":                                     {c: corev1.Container{Name: "e", Image: "fake"}, rank: 512},
		"sglang --lora-paths":                               {c: corev1.Container{Name: "s", Command: []string{"sglang", "serve"}, Args: []string{"--lora-paths", "a=/x"}}, sglang: true, rank: 64},
		"sglang without lora":                               {c: corev1.Container{Name: "s", Command: []string{"sglang", "serve"}}, sglang: true, wantReason: ReasonLoRADisabled},
		"sglang rank over its flag":                         {c: corev1.Container{Name: "s", Command: []string{"sglang", "serve"}, Args: []string{"--enable-lora", "--max-lora-rank=8"}}, sglang: true, rank: 16, wantReason: ReasonLoRARankTooHigh},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			label := ""
			if tc.sglang {
				label = string(KindSGLang)
			}
			reason, msg := InspectPod(enginePod(label, tc.c)).Unfit(tc.rank)
			if reason != tc.wantReason {
				t.Errorf("Unfit = %q (%s), want %q", reason, msg, tc.wantReason)
			}
			if reason != "" && msg == "" {
				t.Error("no message")
			}
		})
	}
}
