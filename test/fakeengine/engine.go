package fakeengine

import (
	"context"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is the engine whose API an Engine serves.
type Kind string

// The supported engine kinds.
const (
	VLLM   Kind = "vllm"
	SGLang Kind = "sglang"
)

const (
	// DefaultRuntimePort is the port of the runtime sidecar.
	DefaultRuntimePort = 8080
	// DefaultBaseModel is the base model served when Options.BaseModel is empty.
	DefaultBaseModel = "fake-base-model"
)

// Options configure one Engine.
type Options struct {
	// BaseModel is the id of the base model listed by /v1/models (DefaultBaseModel if empty).
	BaseModel string
	// Kind is the API served: VLLM (the default) or SGLang.
	Kind Kind
	// APIKey, when set, is required as "Authorization: Bearer <key>" on every request
	// except GET /health.
	APIKey string
	// Runtime also serves the runtime sidecar API on ip:RuntimePort.
	Runtime bool
	// RuntimePort is the sidecar port (DefaultRuntimePort if 0).
	RuntimePort int
	// Latency delays every request by this much, for benchmarks.
	Latency time.Duration
	// NoLoadInplace makes a vLLM engine ignore load_inplace, as vLLM did before it had the
	// field: a load of a name already loaded is answered "already loaded".
	NoLoadInplace bool
	// Preload lists adapters loaded when the engine starts (and again when it restarts), by
	// name and path, as vLLM's --lora-modules does. They are not the API client's: an unload
	// request naming one while the engine holds it is counted (Counts.ForeignUnloads).
	Preload map[string]string
	// LoadDelay makes every load take effect this long after its request arrived, whether
	// or not the client still waits for the answer (as a real engine loading a large
	// artifact does); the answer follows. The engine's closing ends the wait without loading.
	LoadDelay time.Duration
	// OnUnload, when set, is called with the adapter's name by every unload request (engine
	// or sidecar), before the unload takes effect: tests check what holds at that moment.
	OnUnload func(name string)
	// Name is who answers completions (the pod's name in pod mode; the engine's address if
	// empty): a test sending requests through a gateway learns which engine served each.
	Name string
	// Capacity bounds the adapters the engine holds, as the real engine's arguments do (see
	// Capacity and CapacityFromArgs); the zero value is unlimited.
	Capacity Capacity
}

// Counts is a snapshot of request counters.
type Counts struct {
	// Requests counts every request by "METHOD /path", whatever its outcome.
	Requests map[string]int
	// Loads, Unloads and Lists count authorized requests to the load endpoints (engine
	// and sidecar), the unload endpoints and GET /v1/models, whatever their outcome.
	Loads, Unloads, Lists int
	// ForeignUnloads counts the authorized unload requests (engine or sidecar) that named an
	// adapter the engine held from Options.Preload, not loaded through the API, whatever
	// their outcome (a faulted one included): a client unloading what it did not load.
	ForeignUnloads int
	// Evictions counts the adapters a vLLM engine evicted from its cache because a load (or
	// a request for an evicted adapter) went beyond Options.Capacity: the engine was asked to
	// hold more than it can. They stay listed.
	Evictions int
	// Reloads counts requests to a vLLM engine for an adapter it had evicted: it loaded the
	// adapter again from its path (a latency cliff on a real engine).
	Reloads int
	// CapacityRefusals counts the loads an SGLang engine refused at its --max-loaded-loras.
	CapacityRefusals int
}

func (c *Counts) add(o Counts) {
	if c.Requests == nil {
		c.Requests = map[string]int{}
	}
	for k, v := range o.Requests {
		c.Requests[k] += v
	}
	c.Loads += o.Loads
	c.Unloads += o.Unloads
	c.Lists += o.Lists
	c.ForeignUnloads += o.ForeignUnloads
	c.Evictions += o.Evictions
	c.Reloads += o.Reloads
	c.CapacityRefusals += o.CapacityRefusals
}

type adapter struct {
	path string
	seq  uint64 // load order: /v1/models lists adapters in the order they were loaded
	// preloaded: held from Options.Preload, not loaded through the API. A load in place
	// through the API changes the path and keeps the adapter the preloader's.
	preloaded bool
}

// Engine is the state of one fake pod's engine and its listeners.
type Engine struct {
	opts        Options
	addr        string
	runtimeAddr string
	created     int64

	mu       sync.Mutex
	adapters map[string]adapter
	seq      uint64
	counts   Counts
	faults   []Fault
	keysSeen map[string]bool // bearer tokens presented, "" for none
	res      *residency      // nil without Options.Capacity
	evicted  []string        // the last maxEvicted adapters evicted, oldest first
	loraInfo map[loraInfoKey]float64

	inFlight  atomic.Int64 // requests being handled (tests check hangs end)
	ctx       context.Context
	cancel    context.CancelFunc
	servers   []*http.Server
	wg        sync.WaitGroup
	closeOnce sync.Once
}

var loopback = netip.MustParsePrefix("127.0.0.0/8")

// checkIP accepts only IPv4 literals in 127.0.0.0/8.
func checkIP(ip string) error {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return fmt.Errorf("fakeengine: invalid IP %q: %w", ip, err)
	}
	if !a.Is4() || !loopback.Contains(a) {
		return fmt.Errorf("fakeengine: IP %s is not in 127.0.0.0/8", ip)
	}
	return nil
}

// Start starts an engine listening on ip:port, and on ip:RuntimePort if opts.Runtime. The IP
// must be an IPv4 address in 127.0.0.0/8; port 0 picks a free port (see Addr). Call Close
// when done.
func Start(ip string, port int, opts Options) (*Engine, error) {
	if err := checkIP(ip); err != nil {
		return nil, err
	}
	return listenAndServe(ip, port, opts)
}

// StartInPod starts an engine on every interface of the container it runs in: the fake
// engine image for kind clusters serves its own pod this way. Tests and host processes use
// Start, which only listens on loopback addresses.
func StartInPod(port int, opts Options) (*Engine, error) {
	return listenAndServe("", port, opts)
}

func listenAndServe(ip string, port int, opts Options) (*Engine, error) {
	if port < 0 || port > 65535 {
		return nil, fmt.Errorf("fakeengine: invalid port %d", port)
	}
	switch opts.Kind {
	case "":
		opts.Kind = VLLM
	case VLLM, SGLang:
	default:
		return nil, fmt.Errorf("fakeengine: unknown engine kind %q", opts.Kind)
	}
	if opts.BaseModel == "" {
		opts.BaseModel = DefaultBaseModel
	}
	if err := opts.Capacity.validate(opts.Kind); err != nil {
		return nil, err
	}
	opts.Capacity = opts.Capacity.withDefaults(opts.Kind)
	if opts.RuntimePort == 0 {
		opts.RuntimePort = DefaultRuntimePort
	}
	if opts.Runtime && (opts.RuntimePort < 0 || opts.RuntimePort > 65535 || opts.RuntimePort == port) {
		return nil, fmt.Errorf("fakeengine: invalid runtime port %d (engine port %d)", opts.RuntimePort, port)
	}

	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp4", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("fakeengine: %w", err)
	}
	var rln net.Listener
	if opts.Runtime {
		rln, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp4", net.JoinHostPort(ip, strconv.Itoa(opts.RuntimePort)))
		if err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("fakeengine: runtime sidecar: %w", err)
		}
	}

	if opts.Name == "" {
		opts.Name = ln.Addr().String()
	}
	e := &Engine{
		opts:     opts,
		addr:     ln.Addr().String(),
		created:  time.Now().Unix(),
		adapters: map[string]adapter{},
		counts:   Counts{Requests: map[string]int{}},
		keysSeen: map[string]bool{},
		res:      newResidency(opts.Kind, opts.Capacity),
		loraInfo: map[loraInfoKey]float64{},
	}
	e.mu.Lock()
	e.preload()
	e.mu.Unlock()
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.serve(ln, e.engineRoutes())
	if rln != nil {
		e.runtimeAddr = rln.Addr().String()
		e.serve(rln, e.runtimeRoutes())
	}
	return e, nil
}

func (e *Engine) serve(ln net.Listener, routes map[string]route) {
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { e.handle(w, r, routes) }),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       time.Minute,
		BaseContext:       func(net.Listener) context.Context { return e.ctx },
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	e.servers = append(e.servers, srv)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		_ = srv.Serve(ln)
	}()
}

// Close stops the listeners, drops requests still in progress (hanging ones included) and
// waits for every goroutine of the engine to end. It may be called more than once.
func (e *Engine) Close() {
	e.closeOnce.Do(func() {
		e.cancel() // ends latency sleeps and hangs
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, s := range e.servers {
			if err := s.Shutdown(ctx); err != nil {
				_ = s.Close()
			}
		}
		e.wg.Wait()
	})
}

// Addr is the engine's listen address, "ip:port".
func (e *Engine) Addr() string { return e.addr }

// RuntimeAddr is the runtime sidecar's listen address, or "" without Options.Runtime.
func (e *Engine) RuntimeAddr() string { return e.runtimeAddr }

// Kind is the API the engine serves.
func (e *Engine) Kind() Kind { return e.opts.Kind }

// Loaded returns the names of the loaded adapters, sorted.
func (e *Engine) Loaded() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string{}, slices.Sorted(maps.Keys(e.adapters))...) // [] for none, not nil
}

// Adapters returns the loaded adapters' paths by name (for the sidecar: the artifact URL).
func (e *Engine) Adapters() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := make(map[string]string, len(e.adapters))
	for n, a := range e.adapters {
		m[n] = a.path
	}
	return m
}

// Restart forgets every adapter loaded through the API, as an engine restart does, and
// holds Options.Preload again (vLLM loads its --lora-modules at every start). Counters and
// faults are kept.
func (e *Engine) Restart() {
	e.mu.Lock()
	defer e.mu.Unlock()
	clear(e.adapters)
	if e.res != nil {
		e.res.cpu.clear()
		e.res.gpu.clear()
	}
	e.preload()
}

// preload loads Options.Preload, in name order; e.mu is held.
func (e *Engine) preload() {
	for _, name := range slices.Sorted(maps.Keys(e.opts.Preload)) {
		e.seq++
		e.adapters[name] = adapter{path: e.opts.Preload[name], seq: e.seq, preloaded: true}
		e.use(name)
	}
}

// Counts returns a snapshot of the counters.
func (e *Engine) Counts() Counts {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.counts
	c.Requests = make(map[string]int, len(e.counts.Requests))
	for k, v := range e.counts.Requests {
		c.Requests[k] = v
	}
	return c
}

// Requests counts every request received by "METHOD /path" (e.g. "POST
// /v1/load_lora_adapter"), whatever its outcome; the map is a copy.
func (e *Engine) Requests() map[string]int { return e.Counts().Requests }

// Loads counts authorized requests to a load endpoint (engine or sidecar), faulted ones
// included.
func (e *Engine) Loads() int { e.mu.Lock(); defer e.mu.Unlock(); return e.counts.Loads }

// Unloads counts authorized requests to an unload endpoint (engine or sidecar), faulted ones
// included.
func (e *Engine) Unloads() int { e.mu.Lock(); defer e.mu.Unlock(); return e.counts.Unloads }

// Lists counts authorized GET /v1/models requests, faulted ones included.
func (e *Engine) Lists() int { e.mu.Lock(); defer e.mu.Unlock(); return e.counts.Lists }

// ForeignUnloads counts authorized unload requests that named an adapter the engine held
// from Options.Preload (see Counts.ForeignUnloads).
func (e *Engine) ForeignUnloads() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.counts.ForeignUnloads
}

// Preloaded returns the adapters the engine holds from Options.Preload, by name, with the
// path it holds them from (changed if the API loaded them again in place).
func (e *Engine) Preloaded() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := map[string]string{}
	for n, a := range e.adapters {
		if a.preloaded {
			m[n] = a.path
		}
	}
	return m
}

// KeysSeen returns, sorted, every API key presented to the engine as "Authorization: Bearer
// <key>" (by any request but GET /health, authorized or not, answered or dropped), ""
// standing for requests without one: a test learns which keys a controller sent where.
func (e *Engine) KeysSeen() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string{}, slices.Sorted(maps.Keys(e.keysSeen))...) // [] for none, not nil
}
