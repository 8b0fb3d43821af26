package main

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// model is a model Deployment the driver created (its Service name is its name).
type model struct {
	ns, name string
	replicas int
	keyed    bool // its engines want the namespace's API key
	// static is an adapter its engines hold from the start (vLLM's --lora-modules: not the
	// controller's to unload), from staticPath; "" for none. It is named like a ModelAdapter
	// of another model, of this namespace or another, so that a controller going by name
	// alone would take it for that adapter's.
	static string
	// capacity is how many adapters each of its engines holds (its container's vLLM
	// arguments; see capacityArgs), 0 for no limit.
	capacity int
	// cpuLoras gives the capacity as --max-cpu-loras over one GPU slot rather than as
	// --max-loras.
	cpuLoras bool
}

// capacityArgs are the arguments of a capacity-limited model's engine container, as vLLM
// takes them: the fake engine (and the adapter-controller) read its LoRA flags.
func (m *model) capacityArgs() []string {
	args := []string{m.name, "--port", "8000"}
	switch {
	case m.cpuLoras:
		args = append(args, "--enable-lora", "--max-loras", "1", "--max-cpu-loras", fmt.Sprint(m.capacity))
	default:
		args = append(args, "--enable-lora", "--max-loras", fmt.Sprint(m.capacity))
	}
	return args
}

// staticPath is where an engine holds a static adapter from: no artifact the driver sets.
func staticPath(name string) string { return "/models/static/" + name }

// adapter is a ModelAdapter the driver created.
type adapter struct {
	ns, name, model string
	replicas        int // 0: every pod of the model
	artifact        string
	keyed           bool
}

// deletion is an adapter the driver deleted, until the checker has seen it gone.
type deletion struct {
	key  string
	at   time.Time
	step int
}

// world is what the driver has made: the checker's expectation. Names are unique over the
// whole run (a counter), so a deleted object's name never comes back.
type world struct {
	mu        sync.Mutex
	models    map[string]*model   // by namespace/name
	adapters  map[string]*adapter // by namespace/name
	deleting  map[string]deletion // adapters deleted, not yet seen gone
	keys      map[string]string   // API key by namespace
	keyLog    map[string][]string // every API key each namespace has had, oldest first
	next      int
	namespace []string
}

func newWorld(namespaces []string) *world {
	return &world{models: map[string]*model{}, adapters: map[string]*adapter{}, deleting: map[string]deletion{},
		keys: map[string]string{}, keyLog: map[string][]string{}, namespace: namespaces}
}

// keyHistory returns every API key each namespace has had: an engine of the namespace may
// be sent any of them (a rotation leaves pods with the previous key), and no other.
func (w *world) keyHistory() map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string][]string, len(w.keyLog))
	for ns, ks := range w.keyLog {
		out[ns] = slices.Clone(ks)
	}
	return out
}

// worldView is a consistent copy of the world for one check.
type worldView struct {
	models   []model
	adapters map[string]adapter
}

func (w *world) view() *worldView {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := &worldView{adapters: map[string]adapter{}}
	for _, k := range slices.Sorted(maps.Keys(w.models)) {
		v.models = append(v.models, *w.models[k])
	}
	for k, a := range w.adapters {
		v.adapters[k] = *a
	}
	return v
}

// adapterNames are the adapters of a namespace, sorted.
func (v *worldView) adapterNames(ns string) []string {
	out := []string{}
	for _, a := range v.adapters {
		if a.ns == ns {
			out = append(out, a.name)
		}
	}
	slices.Sort(out)
	return out
}

// routeNames are the HTTPRoutes the router should keep: one per model and per adapter (the
// names are short, so the route is "<model>-router").
func (v *worldView) routeNames() []string {
	out := []string{}
	for _, m := range v.models {
		out = append(out, m.name+"-router")
	}
	for _, a := range v.adapters {
		out = append(out, a.name+"-router")
	}
	slices.Sort(out)
	return out
}

// routedServices are the Services of a namespace the routes send traffic to: each model's
// (named like its Deployment) and each adapter's.
func (v *worldView) routedServices(ns string) []string {
	out := v.adapterNames(ns)
	for _, m := range v.models {
		if m.ns == ns {
			out = append(out, m.name)
		}
	}
	slices.Sort(out)
	return out
}

// inUse reports whether the route of that name still has a source in the world.
func (w *world) routeInUse(route string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.models {
		if m.name+"-router" == route {
			return true
		}
	}
	for _, a := range w.adapters {
		if a.name+"-router" == route {
			return true
		}
	}
	return false
}

// adapterExists reports whether the driver still wants the adapter namespace/name.
func (w *world) adapterExists(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.adapters[key]
	return ok
}

// allAdapterNames are the names of every adapter in the world, sorted; w.mu is held.
func (w *world) allAdapterNames() []string {
	out := []string{}
	for _, k := range slices.Sorted(maps.Keys(w.adapters)) {
		out = append(out, w.adapters[k].name)
	}
	return out
}

func (w *world) modelsOf(ns string) []*model {
	var out []*model
	for _, k := range slices.Sorted(maps.Keys(w.models)) {
		if m := w.models[k]; m.ns == ns {
			out = append(out, m)
		}
	}
	return out
}

func (w *world) adaptersOf(ns, modelName string) []*adapter {
	var out []*adapter
	for _, k := range slices.Sorted(maps.Keys(w.adapters)) {
		if a := w.adapters[k]; a.ns == ns && (modelName == "" || a.model == modelName) {
			out = append(out, a)
		}
	}
	return out
}
