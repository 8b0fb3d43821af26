package fakeengine

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Capacity is how many runtime adapters an engine holds, from the same arguments the real
// engines take. The zero value is an engine without any of them: unlimited, as the fake has
// always been.
//
// vLLM keeps the adapters it loaded in an LRU cache of MaxCPULoras entries (--max-cpu-loras,
// default --max-loras, itself 1 by default once --enable-lora is given): a load beyond it
// evicts the least recently used adapter, /v1/models still lists every one, and the next
// request for an evicted adapter loads it again, evicting another. Of those, MaxLoras (GPU
// slots) are active at a time, also least recently used first. vLLM exports MaxLoras as the
// max_lora label of vllm:lora_requests_info.
//
// SGLang refuses a load beyond MaxLoadedLoras (--max-loaded-loras; unlimited by default)
// with 400 "Maximum number of loaded LoRA adapters is N": it never evicts a loaded adapter.
// Its GPU pool has MaxLoras slots (--max-loras-per-batch, default 8; exported as
// sglang:lora_pool_slots_total), refilled by EvictionPolicy (--lora-eviction-policy: lru,
// the default, or fifo) when a batch needs an adapter the pool lacks.
type Capacity struct {
	// LoRA is set once any LoRA argument is given (--enable-lora, a capacity flag, or
	// SGLang's --lora-paths): the engine then applies its defaults and exports its LoRA
	// metrics.
	LoRA bool
	// MaxLoras is vLLM's --max-loras or SGLang's --max-loras-per-batch: GPU slots.
	MaxLoras int
	// MaxCPULoras is vLLM's --max-cpu-loras: the adapters it holds (0: MaxLoras).
	MaxCPULoras int
	// MaxLoadedLoras is SGLang's --max-loaded-loras: the adapters it accepts (0: unlimited).
	MaxLoadedLoras int
	// EvictionPolicy is SGLang's --lora-eviction-policy for its GPU pool: "lru" or "fifo".
	EvictionPolicy string
}

// The engines' defaults.
const (
	defaultVLLMMaxLoras   = 1
	defaultSGLangMaxLoras = 8
	policyLRU             = "lru"
	policyFIFO            = "fifo"
)

// capacityFlags are the arguments CapacityFromArgs reads, per engine; the value is whether
// the flag takes a value.
var capacityFlags = map[Kind]map[string]bool{
	VLLM:   {"--enable-lora": false, "--max-loras": true, "--max-cpu-loras": true},
	SGLang: {"--enable-lora": false, "--lora-paths": true, "--max-loras-per-batch": true, "--max-loaded-loras": true, "--lora-eviction-policy": true},
}

// CapacityFromArgs reads an engine's capacity from its command line, as the engine would:
// "--flag N" and "--flag=N", with dashes or underscores in the flag's name. Other arguments
// are ignored. A value that is not a positive integer, a vLLM --max-cpu-loras below
// --max-loras, an SGLang --max-loaded-loras below --max-loras-per-batch (both of which the
// engines refuse at start) or an unknown eviction policy is an error. Without any LoRA
// argument the result is the zero Capacity (unlimited).
func CapacityFromArgs(kind Kind, args []string) (Capacity, error) {
	flags, ok := capacityFlags[kind]
	if !ok {
		return Capacity{}, fmt.Errorf("fakeengine: unknown engine kind %q", kind)
	}
	vals := map[string]string{}
	for i := 0; i < len(args); i++ {
		name, val, hasVal := strings.Cut(args[i], "=")
		name = "--" + strings.ReplaceAll(strings.TrimPrefix(name, "--"), "_", "-")
		takesValue, known := flags[name]
		if !known || !strings.HasPrefix(args[i], "--") {
			continue
		}
		if takesValue && !hasVal {
			if i+1 >= len(args) {
				return Capacity{}, fmt.Errorf("fakeengine: %s needs a value", name)
			}
			i++
			val = args[i]
		}
		vals[name] = val
	}
	if len(vals) == 0 {
		return Capacity{}, nil
	}
	c := Capacity{LoRA: true}
	var err error
	switch kind {
	case VLLM:
		if c.MaxLoras, err = positive(vals, "--max-loras", defaultVLLMMaxLoras); err != nil {
			return Capacity{}, err
		}
		if c.MaxCPULoras, err = positive(vals, "--max-cpu-loras", c.MaxLoras); err != nil {
			return Capacity{}, err
		}
		if c.MaxCPULoras < c.MaxLoras {
			return Capacity{}, fmt.Errorf("fakeengine: --max-cpu-loras (%d) must be >= --max-loras (%d)", c.MaxCPULoras, c.MaxLoras)
		}
	case SGLang:
		if c.MaxLoras, err = positive(vals, "--max-loras-per-batch", defaultSGLangMaxLoras); err != nil {
			return Capacity{}, err
		}
		if c.MaxLoadedLoras, err = positive(vals, "--max-loaded-loras", 0); err != nil {
			return Capacity{}, err
		}
		if c.MaxLoadedLoras != 0 && c.MaxLoadedLoras < c.MaxLoras {
			return Capacity{}, fmt.Errorf("fakeengine: --max-loaded-loras (%d) must be >= --max-loras-per-batch (%d)", c.MaxLoadedLoras, c.MaxLoras)
		}
		c.EvictionPolicy = vals["--lora-eviction-policy"]
	}
	return c, c.validate(kind)
}

func positive(vals map[string]string, name string, def int) (int, error) {
	v, ok := vals[name]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("fakeengine: %s %q is not a positive integer", name, v)
	}
	return n, nil
}

// validate checks a Capacity given in Options (CapacityFromArgs's results pass).
func (c Capacity) validate(kind Kind) error {
	if c.MaxLoras < 0 || c.MaxCPULoras < 0 || c.MaxLoadedLoras < 0 {
		return fmt.Errorf("fakeengine: negative capacity %+v", c)
	}
	switch c.EvictionPolicy {
	case "", policyLRU, policyFIFO:
	default:
		return fmt.Errorf("fakeengine: unknown --lora-eviction-policy %q (want %s or %s)", c.EvictionPolicy, policyLRU, policyFIFO)
	}
	if kind == VLLM && (c.MaxLoadedLoras != 0 || c.EvictionPolicy != "") {
		return fmt.Errorf("fakeengine: max-loaded-loras and the eviction policy are SGLang's, not vLLM's")
	}
	if kind == SGLang && c.MaxCPULoras != 0 {
		return fmt.Errorf("fakeengine: --max-cpu-loras is vLLM's, not SGLang's")
	}
	return nil
}

// withDefaults fills in what the engine defaults to once LoRA is on.
func (c Capacity) withDefaults(kind Kind) Capacity {
	if !c.LoRA && c != (Capacity{}) {
		c.LoRA = true
	}
	if !c.LoRA {
		return c
	}
	switch kind {
	case VLLM:
		if c.MaxLoras == 0 {
			c.MaxLoras = defaultVLLMMaxLoras
		}
		if c.MaxCPULoras == 0 {
			c.MaxCPULoras = c.MaxLoras
		}
	case SGLang:
		if c.MaxLoras == 0 {
			c.MaxLoras = defaultSGLangMaxLoras
		}
		if c.EvictionPolicy == "" {
			c.EvictionPolicy = policyLRU
		}
	}
	return c
}

// Limit is how many adapters the engine holds at once (vLLM: --max-cpu-loras; SGLang:
// --max-loaded-loras), 0 for no limit. It is the capacity a controller must not exceed.
func (c Capacity) Limit(kind Kind) int {
	c = c.withDefaults(kind)
	if kind == SGLang {
		return c.MaxLoadedLoras
	}
	return c.MaxCPULoras
}

// tier is an ordered set of adapter names with a bound, the one to go first at the front:
// least recently used, or first in for a FIFO tier (touch does not reorder it).
type tier struct {
	names []string
	size  int // 0: unbounded
	fifo  bool
}

func (t *tier) has(name string) bool { return slices.Contains(t.names, name) }

// touch makes name the most recently used (adding it if absent) and returns the name it
// pushed out of a full tier, if any.
func (t *tier) touch(name string) (evicted string, ok bool) {
	if i := slices.Index(t.names, name); i >= 0 {
		if !t.fifo {
			t.names = append(slices.Delete(t.names, i, i+1), name)
		}
		return "", false
	}
	t.names = append(t.names, name)
	if t.size > 0 && len(t.names) > t.size {
		evicted = t.names[0]
		t.names = slices.Delete(t.names, 0, 1)
		return evicted, true
	}
	return "", false
}

func (t *tier) remove(name string) {
	if i := slices.Index(t.names, name); i >= 0 {
		t.names = slices.Delete(t.names, i, i+1)
	}
}

func (t *tier) clear() { t.names = t.names[:0] }

// residency is what a capacity-limited engine holds beyond what it lists: for vLLM the CPU
// cache (the adapters resident, LRU) and the GPU slots among them; for SGLang the GPU pool
// (SGLang holds every listed adapter: it refuses loads beyond its limit instead).
type residency struct {
	cpu tier // vLLM only
	gpu tier
}

func newResidency(kind Kind, c Capacity) *residency {
	if !c.LoRA {
		return nil
	}
	r := &residency{gpu: tier{size: c.MaxLoras, fifo: c.EvictionPolicy == policyFIFO}}
	if kind == VLLM {
		r.cpu = tier{size: c.MaxCPULoras}
	}
	return r
}

// maxEvicted bounds the evicted names an engine remembers (Engine.Evicted).
const maxEvicted = 100

// use records that the engine loaded or served name (e.mu is held): a vLLM engine puts it
// first in its cache and its GPU slots, evicting the least recently used beyond them. It
// reports whether name had been evicted (it is loaded again). SGLang's loads do not touch
// its GPU pool: a batch does (serve).
func (e *Engine) use(name string) (reloaded bool) {
	if e.res == nil || e.opts.Kind != VLLM {
		return false
	}
	reloaded = !e.res.cpu.has(name)
	if out, ok := e.res.cpu.touch(name); ok {
		e.counts.Evictions++
		e.res.gpu.remove(out)
		e.evicted = append(e.evicted, out)
		if len(e.evicted) > maxEvicted {
			e.evicted = slices.Delete(e.evicted, 0, len(e.evicted)-maxEvicted)
		}
	}
	e.res.gpu.touch(name)
	return reloaded
}

// served records a request for a loaded adapter (e.mu is held): vLLM loads it again if it
// was evicted; SGLang brings it into its GPU pool by its eviction policy.
func (e *Engine) served(name string) {
	if e.res == nil {
		return
	}
	if e.opts.Kind == SGLang {
		e.res.gpu.touch(name)
		return
	}
	if e.use(name) {
		e.counts.Reloads++
	}
}

// forget drops name from the residency (e.mu is held): it was unloaded.
func (e *Engine) forget(name string) {
	if e.res != nil {
		e.res.cpu.remove(name)
		e.res.gpu.remove(name)
	}
}

// full reports whether an SGLang engine refuses to load one more adapter (e.mu is held).
func (e *Engine) full() bool {
	limit := e.opts.Capacity.MaxLoadedLoras
	return e.opts.Kind == SGLang && limit > 0 && len(e.adapters) >= limit
}

// Capacity is the engine's capacity, with the engine's defaults filled in.
func (e *Engine) Capacity() Capacity { return e.opts.Capacity }

// Limit is how many adapters the engine holds at once, 0 for no limit (Capacity.Limit).
func (e *Engine) Limit() int { return e.opts.Capacity.Limit(e.opts.Kind) }

// Resident returns the adapters the engine holds, least recently used first: for a vLLM
// engine with a capacity its cache, which lacks the adapters it evicted though /v1/models
// still lists them; otherwise every loaded adapter (sorted), as Loaded.
func (e *Engine) Resident() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.res == nil || e.opts.Kind != VLLM {
		return append([]string{}, slices.Sorted(maps.Keys(e.adapters))...)
	}
	return append([]string{}, e.res.cpu.names...)
}

// Evicted returns the names of the adapters the engine evicted, oldest first (the last 100;
// Counts.Evictions counts them all).
func (e *Engine) Evicted() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string{}, e.evicted...)
}
