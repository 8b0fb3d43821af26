package engine

import (
	"context"
	"net/http"
	"testing"
)

const vllmMetricsOld = `# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="a,b",waiting_lora_adapters=""} 1.7e+09
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 0
`

const vllmMetricsNew = `# HELP vllm:max_gpu_lora_adapters Max GPU LoRA slots.
# TYPE vllm:max_gpu_lora_adapters gauge
vllm:max_gpu_lora_adapters{engine="0",model_name="m"} 8
` + vllmMetricsOld

func TestParseMetrics(t *testing.T) {
	tests := map[string]struct {
		text    string
		want    int
		wantErr bool
	}{
		"lora_requests_info max_lora":        {text: vllmMetricsOld, want: 4},
		"max_gpu_lora_adapters preferred":    {text: vllmMetricsNew, want: 8},
		"no lora metrics":                    {text: "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"},
		"sglang pool slots are not capacity": {text: "# TYPE sglang:lora_pool_slots_total gauge\nsglang:lora_pool_slots_total 8\n"},
		"bad max_lora label":                 {text: `vllm:lora_requests_info{max_lora="x"} 1` + "\n"},
		"not the text format":                {text: "{not metrics", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m, err := ParseMetrics([]byte(tc.text))
			if (err != nil) != tc.wantErr || m.MaxLoras != tc.want {
				t.Errorf("ParseMetrics = %+v, %v; want MaxLoras %d, error %v", m, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestReadMetrics(t *testing.T) {
	f := newFakeEngine(t, map[string]http.HandlerFunc{"GET /metrics": answer(http.StatusOK, "text/plain; version=0.0.4", vllmMetricsOld)})
	c := newTestClient(t, Options{})
	m, err := c.ReadMetrics(context.Background(), f.endpoint(t, KindVLLM, "k"))
	if err != nil || m.MaxLoras != 4 {
		t.Fatalf("ReadMetrics = %+v, %v; want MaxLoras 4", m, err)
	}
	if got := f.requests(); len(got) != 1 || got[0].Path != "/metrics" || got[0].Auth != "Bearer k" {
		t.Errorf("requests = %+v, want one GET /metrics with the key", got)
	}

	missing := newFakeEngine(t, nil)
	if _, err := c.ReadMetrics(context.Background(), missing.endpoint(t, KindVLLM, "")); ReasonOf(err) != ReasonEngineRejected {
		t.Errorf("an engine without /metrics: error %v (reason %q), want %s", err, ReasonOf(err), ReasonEngineRejected)
	}
	sglang := newFakeEngine(t, nil)
	if m, err := c.ReadMetrics(context.Background(), sglang.endpoint(t, KindSGLang, "")); err != nil || m.MaxLoras != 0 || len(sglang.requests()) != 0 {
		t.Errorf("SGLang: %+v, %v, %d requests; want nothing asked", m, err, len(sglang.requests()))
	}
}
