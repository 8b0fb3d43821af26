package fakeengine

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestCapacityFromArgs(t *testing.T) {
	tests := map[string]struct {
		kind    Kind
		args    []string
		want    Capacity
		limit   int
		wantErr string
	}{
		"no LoRA arguments: unlimited": {VLLM, []string{"vllm", "serve", "m", "--port", "8000"}, Capacity{}, 0, ""},
		"vllm --enable-lora: defaults": {VLLM, []string{"--enable-lora"}, Capacity{LoRA: true, MaxLoras: 1, MaxCPULoras: 1}, 1, ""},
		"vllm --max-loras N":           {VLLM, []string{"--enable-lora", "--max-loras", "4"}, Capacity{LoRA: true, MaxLoras: 4, MaxCPULoras: 4}, 4, ""},
		"vllm --flag=N and --max-cpu-loras": {VLLM, []string{"--max-loras=2", "--max-cpu-loras=6"},
			Capacity{LoRA: true, MaxLoras: 2, MaxCPULoras: 6}, 6, ""},
		"vllm underscores":            {VLLM, []string{"--max_loras", "3"}, Capacity{LoRA: true, MaxLoras: 3, MaxCPULoras: 3}, 3, ""},
		"vllm ignores SGLang's flags": {VLLM, []string{"--max-loaded-loras", "3"}, Capacity{}, 0, ""},
		"vllm cpu below gpu":          {VLLM, []string{"--max-loras", "4", "--max-cpu-loras", "2"}, Capacity{}, 0, "--max-cpu-loras (2) must be >= --max-loras (4)"},
		"vllm zero":                   {VLLM, []string{"--max-loras", "0"}, Capacity{}, 0, `--max-loras "0" is not a positive integer`},
		"vllm not a number":           {VLLM, []string{"--max-cpu-loras=x"}, Capacity{}, 0, `--max-cpu-loras "x" is not a positive integer`},
		"vllm missing value":          {VLLM, []string{"--max-loras"}, Capacity{}, 0, "--max-loras needs a value"},
		"sglang --enable-lora: unlimited, 8 GPU slots": {SGLang, []string{"--enable-lora"},
			Capacity{LoRA: true, MaxLoras: 8}, 0, ""},
		"sglang --lora-paths turns LoRA on": {SGLang, []string{"--lora-paths", "a=/p/a"}, Capacity{LoRA: true, MaxLoras: 8}, 0, ""},
		"sglang --max-loaded-loras": {SGLang, []string{"--enable-lora", "--max-loras-per-batch", "2", "--max-loaded-loras=4", "--lora-eviction-policy", "fifo"},
			Capacity{LoRA: true, MaxLoras: 2, MaxLoadedLoras: 4, EvictionPolicy: "fifo"}, 4, ""},
		"sglang loaded below per batch": {SGLang, []string{"--max-loaded-loras", "2"}, Capacity{}, 0, "--max-loaded-loras (2) must be >= --max-loras-per-batch (8)"},
		"sglang unknown policy":         {SGLang, []string{"--lora-eviction-policy", "random"}, Capacity{}, 0, `unknown --lora-eviction-policy "random"`},
		"unknown kind":                  {Kind("tgi"), nil, Capacity{}, 0, `unknown engine kind "tgi"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := CapacityFromArgs(tc.kind, tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got = got.withDefaults(tc.kind)
			if diff := cmp.Diff(tc.want.withDefaults(tc.kind), got); diff != "" {
				t.Errorf("capacity (-want +got):\n%s", diff)
			}
			if l := got.Limit(tc.kind); l != tc.limit {
				t.Errorf("Limit = %d, want %d", l, tc.limit)
			}
		})
	}
}

func TestStartRejectsInvalidCapacity(t *testing.T) {
	for _, tc := range []struct {
		kind Kind
		c    Capacity
	}{
		{VLLM, Capacity{MaxLoras: -1}},
		{VLLM, Capacity{MaxLoadedLoras: 2}},
		{SGLang, Capacity{MaxCPULoras: 2}},
		{SGLang, Capacity{EvictionPolicy: "mru"}},
	} {
		if e, err := Start(nextIP(), 0, Options{Kind: tc.kind, Capacity: tc.c}); err == nil {
			e.Close()
			t.Errorf("Start(%s, %+v) succeeded, want an error", tc.kind, tc.c)
		}
	}
}

func load(t *testing.T, e *Engine, name string) answer {
	t.Helper()
	path := "/v1/load_lora_adapter"
	if e.Kind() == SGLang {
		path = "/load_lora_adapter"
	}
	return must(t, "POST", url(e, path), fmt.Sprintf(`{"lora_name":%q,"lora_path":"/p/%s"}`, name, name))
}

func complete(t *testing.T, e *Engine, model string, hdr ...string) {
	t.Helper()
	if a := must(t, "POST", url(e, "/v1/completions"), fmt.Sprintf(`{"model":%q,"prompt":"hi"}`, model), hdr...); a.status != http.StatusOK {
		t.Fatalf("completion for %s: %d %s", model, a.status, a.body)
	}
}

// scrape parses the engine's /metrics into "name{labels}" -> value.
func scrape(t *testing.T, e *Engine) map[string]float64 {
	t.Helper()
	a := must(t, "GET", url(e, "/metrics"), "")
	if a.status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", a.status, a.body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(a.body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, a.body)
	}
	out := map[string]float64{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			out[name+"{"+strings.Join(ls, ",")+"}"] = m.GetGauge().GetValue()
		}
	}
	return out
}

func TestVLLMEvictsLeastRecentlyUsedBeyondCapacity(t *testing.T) {
	e := start(t, Options{Capacity: Capacity{MaxLoras: 1, MaxCPULoras: 2}, APIKey: "k"})
	key := "Authorization: Bearer k"
	for _, n := range []string{"a", "b"} {
		if a := must(t, "POST", url(e, "/v1/load_lora_adapter"), fmt.Sprintf(`{"lora_name":%q,"lora_path":"/p/%s"}`, n, n), key); a.status != http.StatusOK {
			t.Fatalf("load %s: %d %s", n, a.status, a.body)
		}
	}
	if c := e.Counts(); c.Evictions != 0 || !slices.Equal(e.Resident(), []string{"a", "b"}) {
		t.Fatalf("within capacity: evictions %d, resident %v", c.Evictions, e.Resident())
	}
	// A third load succeeds, as on vLLM, and silently evicts a, which stays listed.
	if a := must(t, "POST", url(e, "/v1/load_lora_adapter"), `{"lora_name":"c","lora_path":"/p/c"}`, key); a.status != http.StatusOK {
		t.Fatalf("load c: %d %s", a.status, a.body)
	}
	listed := models(t, must(t, "GET", url(e, "/v1/models"), "", key).body)
	if want := []string{DefaultBaseModel, "a<" + DefaultBaseModel + ">/p/a", "b<" + DefaultBaseModel + ">/p/b", "c<" + DefaultBaseModel + ">/p/c"}; !slices.Equal(listed, want) {
		t.Errorf("listed %v, want %v (eviction does not change the listing)", listed, want)
	}
	if got := e.Resident(); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("resident %v, want [b c]", got)
	}
	if c := e.Counts(); c.Evictions != 1 || c.Reloads != 0 || !slices.Equal(e.Evicted(), []string{"a"}) {
		t.Errorf("evictions %d (%v), reloads %d; want 1 ([a]), 0", c.Evictions, e.Evicted(), c.Reloads)
	}
	// A request for b makes c the least recently used; a request for a loads it again
	// and evicts c.
	complete(t, e, "b", key)
	complete(t, e, "a", key)
	if got := e.Resident(); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("resident after requests for b, a: %v, want [b a]", got)
	}
	if c := e.Counts(); c.Evictions != 2 || c.Reloads != 1 {
		t.Errorf("evictions %d, reloads %d; want 2, 1", c.Evictions, c.Reloads)
	}
	// An unload makes room: the next load evicts nothing.
	must(t, "POST", url(e, "/v1/unload_lora_adapter"), `{"lora_name":"b"}`, key)
	must(t, "POST", url(e, "/v1/load_lora_adapter"), `{"lora_name":"d","lora_path":"/p/d"}`, key)
	if c := e.Counts(); c.Evictions != 2 || !slices.Equal(e.Resident(), []string{"a", "d"}) {
		t.Errorf("after unload b, load d: evictions %d, resident %v; want 2, [a d]", c.Evictions, e.Resident())
	}

	// /metrics needs no key (as vLLM's) and tells the GPU slots and the residency.
	m := scrape(t, e)
	for series, want := range map[string]float64{
		"vllm:max_gpu_lora_adapters{engine=0,model_name=fake-base-model}":                                     1,
		"vllm:num_gpu_loaded_lora_adapters{engine=0,model_name=fake-base-model}":                              1,
		"vllm:num_cpu_loaded_lora_adapters{engine=0,model_name=fake-base-model}":                              2,
		"vllm:lora_adapter_loaded{adapter_name=a,engine=0,level=cpu,model_name=fake-base-model,pinned=false}": 1,
		"vllm:lora_adapter_loaded{adapter_name=d,engine=0,level=gpu,model_name=fake-base-model,pinned=false}": 1,
	} {
		if got, ok := m[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v; all: %v", series, got, ok, want, m)
		}
	}
	info := 0
	for series, v := range m {
		if strings.HasPrefix(series, "vllm:lora_requests_info{") {
			info++
			if !strings.Contains(series, "max_lora=1,") || v < 1e9 {
				t.Errorf("%s = %v: want max_lora 1 and a Unix time", series, v)
			}
		}
	}
	if info != 2 { // one series per distinct running set: a, b
		t.Errorf("%d vllm:lora_requests_info series, want 2: %v", info, m)
	}

	// A restart empties the cache with the listing.
	e.Restart()
	if got := e.Resident(); len(got) != 0 {
		t.Errorf("resident after restart %v, want none", got)
	}
}

func TestVLLMPreloadAndInPlaceCountInTheCache(t *testing.T) {
	e := start(t, Options{Capacity: Capacity{MaxLoras: 2}, Preload: map[string]string{"s": "/static/s"}})
	load(t, e, "a")
	// In place: the same entry, now the most recently used.
	must(t, "POST", url(e, "/v1/load_lora_adapter"), `{"lora_name":"s","lora_path":"/static/s2","load_inplace":true}`)
	load(t, e, "b") // evicts a, the least recently used
	if got, c := e.Resident(), e.Counts(); !slices.Equal(got, []string{"s", "b"}) || c.Evictions != 1 {
		t.Errorf("resident %v, evictions %d; want [s b], 1", got, c.Evictions)
	}
}

func TestSGLangRefusesLoadsBeyondMaxLoadedLoras(t *testing.T) {
	e := start(t, Options{Kind: SGLang, Capacity: Capacity{MaxLoras: 1, MaxLoadedLoras: 2}})
	load(t, e, "a")
	load(t, e, "b")
	a := load(t, e, "c")
	want := `{"success":false,"error_message":"Cannot load LoRA adapter c at path /p/c. Maximum number of loaded LoRA adapters is 2. Please unload some LoRA adapters before loading new ones."}`
	if a.status != http.StatusBadRequest || a.body != want {
		t.Errorf("load beyond capacity: %d %s, want 400 %s", a.status, a.body, want)
	}
	if got, c := e.Loaded(), e.Counts(); !slices.Equal(got, []string{"a", "b"}) || c.CapacityRefusals != 1 || c.Evictions != 0 {
		t.Errorf("loaded %v, refusals %d, evictions %d; want [a b], 1, 0", got, c.CapacityRefusals, c.Evictions)
	}
	must(t, "POST", url(e, "/unload_lora_adapter"), `{"lora_name":"a"}`)
	if a := load(t, e, "c"); a.status != http.StatusOK {
		t.Errorf("load after an unload: %d %s", a.status, a.body)
	}
	if got := e.Resident(); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("resident %v, want every loaded adapter [b c]", got)
	}
	m := scrape(t, e)
	if got := m["sglang:lora_pool_slots_total{engine_type=unified,model_name=fake-base-model,pp_rank=0,tp_rank=0}"]; got != 1 {
		t.Errorf("sglang:lora_pool_slots_total = %v, want 1; all: %v", got, m)
	}
}

func TestSGLangGPUPoolPolicy(t *testing.T) {
	for policy, want := range map[string][]string{
		"lru":  {"a", "c"}, // a was used again: b goes
		"fifo": {"b", "c"}, // a came first: a goes
	} {
		t.Run(policy, func(t *testing.T) {
			e := start(t, Options{Kind: SGLang, Capacity: Capacity{MaxLoras: 2, EvictionPolicy: policy}})
			for _, n := range []string{"a", "b", "c"} {
				load(t, e, n)
			}
			for _, n := range []string{"a", "b", "a", "c"} {
				complete(t, e, n)
			}
			e.mu.Lock()
			got := slices.Sorted(slices.Values(e.res.gpu.names))
			e.mu.Unlock()
			if !slices.Equal(got, want) {
				t.Errorf("GPU pool %v, want %v", got, want)
			}
			if c := e.Counts(); c.Evictions != 0 || !slices.Equal(e.Loaded(), []string{"a", "b", "c"}) {
				t.Errorf("evictions %d, loaded %v: the pool evicts nothing loaded", c.Evictions, e.Loaded())
			}
		})
	}
}

func TestNoCapacityIsUnlimited(t *testing.T) {
	for _, kind := range []Kind{VLLM, SGLang} {
		e := start(t, Options{Kind: kind})
		for i := range 50 {
			if a := load(t, e, fmt.Sprintf("a%d", i)); a.status != http.StatusOK {
				t.Fatalf("%s load %d: %d %s", kind, i, a.status, a.body)
			}
		}
		complete(t, e, "a0")
		if c := e.Counts(); c.Evictions != 0 || c.CapacityRefusals != 0 || len(e.Resident()) != 50 || e.Limit() != 0 {
			t.Errorf("%s: evictions %d, refusals %d, resident %d, limit %d; want 0, 0, 50, 0", kind, c.Evictions, c.CapacityRefusals, len(e.Resident()), e.Limit())
		}
		if m := scrape(t, e); len(m) != 0 {
			t.Errorf("%s without LoRA arguments exports LoRA metrics: %v", kind, m)
		}
	}
}
