package fakeengine

import (
	"bytes"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// opMetrics names GET /metrics in the counters; faults do not apply to it.
const opMetrics = "metrics"

// loraInfoKey is one series of vllm:lora_requests_info.
type loraInfoKey struct{ running, waiting string }

// recordLoRAInfo updates vllm:lora_requests_info for a request to model (e.mu is held), as
// vLLM does at every scheduler step once LoRA is enabled: a series per distinct label set,
// valued the Unix time of its last update (consumers take the newest), max_lora the GPU
// slots. No series exists before the first request.
func (e *Engine) recordLoRAInfo(model string, adapter bool) {
	if e.opts.Kind != VLLM || !e.opts.Capacity.LoRA {
		return
	}
	k := loraInfoKey{}
	if adapter {
		k.running = model
	}
	e.loraInfo[k] = float64(time.Now().UnixNano()) / 1e9
}

// The LoRA metrics the real engines export (only with LoRA enabled).
var (
	vllmLoRAInfo = prometheus.NewDesc("vllm:lora_requests_info", "Running stats on lora requests.",
		[]string{"max_lora", "waiting_lora_adapters", "running_lora_adapters"}, nil)
	// The residency gauges of vLLM's main branch (not in a tagged release yet).
	vllmMaxGPU = prometheus.NewDesc("vllm:max_gpu_lora_adapters", "Number of GPU LoRA adapter slots (max_loras).",
		[]string{"model_name", "engine"}, nil)
	vllmNumGPU = prometheus.NewDesc("vllm:num_gpu_loaded_lora_adapters", "Number of LoRA adapters occupying GPU slots.",
		[]string{"model_name", "engine"}, nil)
	vllmNumCPU = prometheus.NewDesc("vllm:num_cpu_loaded_lora_adapters", "Number of LoRA adapters resident in the CPU cache.",
		[]string{"model_name", "engine"}, nil)
	vllmLoaded = prometheus.NewDesc("vllm:lora_adapter_loaded", "1 while the LoRA adapter is resident.",
		[]string{"model_name", "engine", "adapter_name", "level", "pinned"}, nil)

	sglangLabels     = []string{"model_name", "engine_type", "tp_rank", "pp_rank"}
	sglangSlotsUsed  = prometheus.NewDesc("sglang:lora_pool_slots_used", "Number of LoRA adapter slots currently occupied in GPU memory.", sglangLabels, nil)
	sglangSlotsTotal = prometheus.NewDesc("sglang:lora_pool_slots_total", "Total number of LoRA adapter slots available (max_loras_per_batch).", sglangLabels, nil)
	sglangUtil       = prometheus.NewDesc("sglang:lora_pool_utilization", "LoRA pool utilization ratio (used/total). 1.0 means pool is full.", sglangLabels, nil)
)

// engineMetrics collects an engine's LoRA metrics at scrape time.
type engineMetrics struct{ e *Engine }

func (c engineMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{vllmLoRAInfo, vllmMaxGPU, vllmNumGPU, vllmNumCPU, vllmLoaded, sglangSlotsUsed, sglangSlotsTotal, sglangUtil} {
		ch <- d
	}
}

func (c engineMetrics) Collect(ch chan<- prometheus.Metric) {
	e := c.e
	if !e.opts.Capacity.LoRA {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	model := e.opts.BaseModel
	if e.opts.Kind == SGLang {
		// Requests are answered at once: no batch holds an adapter between them.
		gauge(sglangSlotsUsed, 0, model, "unified", "0", "0")
		gauge(sglangSlotsTotal, float64(e.opts.Capacity.MaxLoras), model, "unified", "0", "0")
		gauge(sglangUtil, 0, model, "unified", "0", "0")
		return
	}
	maxLora := strconv.Itoa(e.opts.Capacity.MaxLoras)
	for k, ts := range e.loraInfo {
		gauge(vllmLoRAInfo, ts, maxLora, k.waiting, k.running)
	}
	gauge(vllmMaxGPU, float64(e.opts.Capacity.MaxLoras), model, "0")
	gauge(vllmNumGPU, float64(len(e.res.gpu.names)), model, "0")
	gauge(vllmNumCPU, float64(len(e.res.cpu.names)), model, "0")
	for _, name := range e.res.cpu.names {
		level := "cpu"
		if e.res.gpu.has(name) {
			level = "gpu"
		}
		gauge(vllmLoaded, 1, model, "0", name, level, "false")
	}
}

// metrics answers GET /metrics in Prometheus's text format: the engine's LoRA metrics (an
// engine without LoRA arguments exports none of them).
func (e *Engine) metrics(_ []byte, _ bool) reply {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(engineMetrics{e})
	mfs, err := reg.Gather()
	if err != nil {
		return reply{http.StatusInternalServerError, ctypeText, []byte(err.Error())}
	}
	var b bytes.Buffer
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	enc := expfmt.NewEncoder(&b, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return reply{http.StatusInternalServerError, ctypeText, []byte(err.Error())}
		}
	}
	return reply{http.StatusOK, string(format), b.Bytes()}
}
