package engine

import (
	"bytes"
	"context"
	"net/http"
	"strconv"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The engine metrics that tell adapter capacity. vLLM exports --max-loras (the GPU batch
// slots, which is also the default size of the LRU cache of runtime-loaded adapters,
// --max-cpu-loras) as the gauge vllm:max_gpu_lora_adapters in newer versions and, in every
// version since 0.6, as the max_lora label of vllm:lora_requests_info once an adapter has
// served a request. No version exports --max-cpu-loras. SGLang's sglang:lora_pool_slots_total
// is its GPU pool (--max-loras-per-batch), which swaps adapters in from CPU memory without
// evicting them: it does not bound the adapters loaded, and is not read.
const (
	metricVLLMMaxGPULoras  = "vllm:max_gpu_lora_adapters"
	metricVLLMLoRARequests = "vllm:lora_requests_info"
	labelVLLMMaxLora       = "max_lora"
	metricsPath            = "/metrics"
)

// Metrics is what an engine's metrics say about its adapters.
type Metrics struct {
	// MaxLoras is vLLM's --max-loras as the engine reports it; 0 when not reported.
	MaxLoras int
}

// ReadMetrics reads GET /metrics of the engine behind ep (its own port, also behind the
// runtime sidecar). Only vLLM exports what capacity needs; for SGLang nothing is asked and
// the zero Metrics is returned.
func (c *HTTPClient) ReadMetrics(ctx context.Context, ep Endpoint) (Metrics, error) {
	if ep.kind() == KindSGLang {
		return Metrics{}, nil
	}
	t := c.clients[KindVLLM].(*vllmClient).t
	r, err := t.do(ctx, call{engine: ep.kind(), op: OpMetrics, ep: ep, port: ep.enginePort(), method: http.MethodGet, path: metricsPath})
	if err != nil {
		return Metrics{}, err
	}
	if !r.ok() {
		return Metrics{}, statusError(ep.kind(), OpMetrics, r.status, r.header, r.message(ep))
	}
	m, err := ParseMetrics(r.body)
	if err != nil {
		e := badResponse(ep.kind(), OpMetrics, r.status, "the metrics are not in the Prometheus text format")
		e.Err = err
		return Metrics{}, e
	}
	return m, nil
}

// ParseMetrics reads the capacity metrics from a Prometheus text exposition: the gauge
// vllm:max_gpu_lora_adapters where present, else the largest max_lora label of
// vllm:lora_requests_info.
func ParseMetrics(text []byte) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return Metrics{}, err
	}
	var m Metrics
	if f := families[metricVLLMMaxGPULoras]; f != nil {
		for _, s := range f.GetMetric() {
			if v := gaugeValue(s); v > 0 {
				m.MaxLoras = max(m.MaxLoras, int(v))
			}
		}
	}
	if m.MaxLoras > 0 {
		return m, nil
	}
	if f := families[metricVLLMLoRARequests]; f != nil {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() != labelVLLMMaxLora {
					continue
				}
				if n, err := strconv.Atoi(l.GetValue()); err == nil && n > 0 {
					m.MaxLoras = max(m.MaxLoras, n)
				}
			}
		}
	}
	return m, nil
}

func gaugeValue(s *dto.Metric) float64 {
	if g := s.GetGauge(); g != nil {
		return g.GetValue()
	}
	if u := s.GetUntyped(); u != nil {
		return u.GetValue()
	}
	return 0
}
