package main

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/loraplane/loraplane/test/fakeengine"
)

// Pod labels and names that shape an engine.
const (
	labelName        = "model.aibrix.ai/name"
	labelPort        = "model.aibrix.ai/port"
	labelEngine      = "model.aibrix.ai/engine"
	runtimeContainer = "aibrix-runtime"
	// annotationAPIKey on a pod overrides --api-key for that pod's engine (tests of API
	// key handling next to engines without a key).
	annotationAPIKey = "fake-engine.loraplane.dev/api-key"
	// annotationPreload on a pod lists the adapters its engine holds from the start, as
	// "name=path,name=path" (vLLM's --lora-modules): the engines of a fleet another
	// controller loaded before (the switch-over tests).
	annotationPreload = "fake-engine.loraplane.dev/preload"
	defaultPort       = 8000
)

var loopback = netip.MustParsePrefix("127.0.0.0/8")

// engineSpec is everything an engine is started from. Two specs are equal when the running
// engine can stay; any difference (the pod's UID included: a recreated pod) means a new one.
type engineSpec struct {
	Namespace string
	Pod       string
	UID       types.UID
	IP        string
	Port      int
	Kind      fakeengine.Kind
	BaseModel string
	Runtime   bool
	APIKey    string // from annotationAPIKey; empty means the manager's default
	Preload   string // annotationPreload, checked by parsePreload
	// Capacity is read from the engine container's arguments (engineCapacity).
	Capacity fakeengine.Capacity
}

func (s engineSpec) key() string { return s.Namespace + "/" + s.Pod }

// ports are the ports the engine listens on.
func (s engineSpec) ports() []int {
	if s.Runtime {
		return []int{s.Port, fakeengine.DefaultRuntimePort}
	}
	return []int{s.Port}
}

func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// specFor returns the engine a pod should have. ok is false when the pod should have none:
// with a nil error when it is simply not serving (not Running, or no IP yet), with an error
// when it is refused (an IP outside 127.0.0.0/8, a bad label), which deserves a warning.
func specFor(p *corev1.Pod) (spec engineSpec, ok bool, err error) {
	if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return engineSpec{}, false, nil
	}
	ip, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil {
		return engineSpec{}, false, fmt.Errorf("invalid pod IP %q", p.Status.PodIP)
	}
	if !ip.Is4() || !loopback.Contains(ip) {
		return engineSpec{}, false, fmt.Errorf("pod IP %s is not in %s; refusing to listen on it", ip, loopback)
	}
	spec = engineSpec{
		Namespace: p.Namespace,
		Pod:       p.Name,
		UID:       p.UID,
		IP:        ip.String(),
		Port:      defaultPort,
		Kind:      fakeengine.VLLM,
		BaseModel: p.Labels[labelName],
		Runtime:   hasRuntime(p),
		APIKey:    p.Annotations[annotationAPIKey],
		Preload:   p.Annotations[annotationPreload],
	}
	if _, err := parsePreload(spec.Preload); err != nil {
		return engineSpec{}, false, fmt.Errorf("annotation %s: %w", annotationPreload, err)
	}
	if v, set := p.Labels[labelPort]; set {
		port, err := strconv.Atoi(v)
		if err != nil || port < 1 || port > 65535 {
			return engineSpec{}, false, fmt.Errorf("invalid %s label %q", labelPort, v)
		}
		spec.Port = port
	}
	if p.Labels[labelEngine] == string(fakeengine.SGLang) {
		spec.Kind = fakeengine.SGLang
	}
	if spec.Capacity, err = engineCapacity(p, spec.Kind); err != nil {
		return engineSpec{}, false, err
	}
	if spec.Runtime && spec.Port == fakeengine.DefaultRuntimePort {
		return engineSpec{}, false, fmt.Errorf("engine port %d is the %s sidecar's port", spec.Port, runtimeContainer)
	}
	return spec, true, nil
}

// engineCapacity reads the engine's capacity from the pod spec, as the engine reads its
// command line: the first container (the runtime sidecar aside) whose command and arguments
// carry a LoRA argument of the engine (--enable-lora, --max-loras, --max-cpu-loras; SGLang's
// --max-loras-per-batch, --max-loaded-loras, --lora-paths) is the engine. Each command and
// argument is split at white space, so "sh -c 'vllm serve … --max-loras 4'" counts. No such
// container: unlimited.
func engineCapacity(p *corev1.Pod, kind fakeengine.Kind) (fakeengine.Capacity, error) {
	for _, c := range p.Spec.Containers {
		if c.Name == runtimeContainer {
			continue
		}
		var args []string
		for _, a := range append(slices.Clone(c.Command), c.Args...) {
			args = append(args, strings.Fields(a)...)
		}
		capacity, err := fakeengine.CapacityFromArgs(kind, args)
		if err != nil {
			return fakeengine.Capacity{}, fmt.Errorf("container %s: %w", c.Name, err)
		}
		if capacity.LoRA {
			return capacity, nil
		}
	}
	return fakeengine.Capacity{}, nil
}

// hasRuntime reports whether the pod runs the runtime sidecar, as a container or as a native
// sidecar (an init container that keeps running).
func hasRuntime(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		if c.Name == runtimeContainer {
			return true
		}
	}
	for _, c := range p.Spec.InitContainers {
		if c.Name == runtimeContainer && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			return true
		}
	}
	return false
}

// desiredEngines returns the engines the pods should have, by "namespace/pod", and the pods
// refused, with why. When pods claim the same ip:port (a stale pod and its replacement), the
// newest pod gets the engine.
func desiredEngines(pods []*corev1.Pod) (desired map[string]engineSpec, refused map[string]error) {
	desired = map[string]engineSpec{}
	refused = map[string]error{}
	type candidate struct {
		spec engineSpec
		pod  *corev1.Pod
	}
	var cands []candidate
	for _, p := range pods {
		spec, ok, err := specFor(p)
		switch {
		case err != nil:
			refused[podKey(p)] = err
		case ok:
			cands = append(cands, candidate{spec, p})
		}
	}
	// Newest first, then by key, so the outcome does not depend on the list's order.
	slices.SortFunc(cands, func(a, b candidate) int {
		if c := b.pod.CreationTimestamp.Compare(a.pod.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.spec.key(), b.spec.key())
	})
	claimed := map[string]string{} // "ip:port" -> pod key
	for _, c := range cands {
		var conflict error
		for _, port := range c.spec.ports() {
			if other, ok := claimed[addr(c.spec.IP, port)]; ok {
				conflict = fmt.Errorf("%s is taken by newer pod %s", addr(c.spec.IP, port), other)
				break
			}
		}
		if conflict != nil {
			refused[c.spec.key()] = conflict
			continue
		}
		for _, port := range c.spec.ports() {
			claimed[addr(c.spec.IP, port)] = c.spec.key()
		}
		desired[c.spec.key()] = c.spec
	}
	return desired, refused
}

// parsePreload parses "name=path,name=path" (empty: none) into adapters by name.
func parsePreload(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, item := range strings.Split(s, ",") {
		name, path, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" || path == "" {
			return nil, fmt.Errorf("%q is not name=path", item)
		}
		out[name] = path
	}
	return out, nil
}

func addr(ip string, port int) string {
	return netip.AddrPortFrom(netip.MustParseAddr(ip), uint16(port)).String()
}

// running is an engine started for a pod.
type running struct {
	spec   engineSpec
	engine *fakeengine.Engine
}

// manager runs one fake engine per serving pod.
type manager struct {
	opts   fakeengine.Options // APIKey and Latency; the rest comes from each pod
	logger klog.Logger
	warnf  func(format string, args ...any) // klog.Warningf; tests replace it

	syncMu  sync.Mutex        // one sync at a time
	refused map[string]string // pod key -> the refusal last logged; guarded by syncMu

	mu      sync.Mutex
	engines map[string]*running // by pod key
	retired []engineView        // engines stopped by sync, oldest first, at most maxRetired
}

// maxRetired bounds the stopped engines remembered for GET /engines?retired=true (a view is
// well under 1 KiB; a 10-minute soak stops a few hundred engines).
const maxRetired = 10000

func newManager(logger klog.Logger, opts fakeengine.Options) *manager {
	return &manager{
		opts:    opts,
		logger:  logger,
		warnf:   klog.Warningf,
		refused: map[string]string{},
		engines: map[string]*running{},
	}
}

// sync makes the running engines those the pods should have: it closes the engines of pods
// gone, no longer serving or changed (a new IP, or a new UID: the pod was recreated), then
// starts the missing ones. It returns the errors of engines that could not start; calling it
// again retries them.
func (m *manager) sync(pods []*corev1.Pod) error {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()

	desired, refused := desiredEngines(pods)
	m.logRefusals(refused)

	// Close before starting, so a new pod can take over its predecessor's address.
	var stale []*running
	m.mu.Lock()
	for key, r := range m.engines {
		if want, ok := desired[key]; !ok || want != r.spec {
			stale = append(stale, r)
			delete(m.engines, key)
		}
	}
	m.mu.Unlock()
	for _, r := range stale {
		r.engine.Close()
		m.retire(r)
		want, ok := desired[r.spec.key()]
		m.logger.Info("Stopped engine", "pod", klog.KRef(r.spec.Namespace, r.spec.Pod), "addr", r.engine.Addr(), "reason", stopReason(r.spec, want, ok))
	}

	var errs []error
	for _, key := range slices.Sorted(maps.Keys(desired)) {
		spec := desired[key]
		m.mu.Lock()
		_, ok := m.engines[key]
		m.mu.Unlock()
		if ok {
			continue
		}
		opts := m.opts
		opts.Kind = spec.Kind
		opts.BaseModel = spec.BaseModel
		opts.Runtime = spec.Runtime
		opts.RuntimePort = fakeengine.DefaultRuntimePort
		if spec.APIKey != "" {
			opts.APIKey = spec.APIKey
		}
		opts.Preload, _ = parsePreload(spec.Preload) // checked by specFor
		opts.Capacity = spec.Capacity
		e, err := fakeengine.Start(spec.IP, spec.Port, opts)
		if err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", key, err))
			continue
		}
		m.mu.Lock()
		m.engines[key] = &running{spec: spec, engine: e}
		m.mu.Unlock()
		m.logger.Info("Started engine", "pod", klog.KRef(spec.Namespace, spec.Pod), "uid", spec.UID,
			"addr", e.Addr(), "kind", spec.Kind, "baseModel", spec.BaseModel, "runtime", e.RuntimeAddr(), "capacity", e.Limit())
	}
	return errors.Join(errs...)
}

// logRefusals warns about each refused pod once per reason, not on every sync.
func (m *manager) logRefusals(refused map[string]error) {
	for key, err := range refused {
		if m.refused[key] == err.Error() {
			continue
		}
		m.refused[key] = err.Error()
		m.warnf("Not serving pod %s: %v", key, err)
	}
	for key := range m.refused {
		if _, ok := refused[key]; !ok {
			delete(m.refused, key)
		}
	}
}

func stopReason(had, want engineSpec, ok bool) string {
	switch {
	case !ok:
		return "pod gone or not serving"
	case had.UID != want.UID:
		return "pod recreated"
	case had.IP != want.IP:
		return "pod IP changed"
	default:
		return "engine settings changed"
	}
}

// retire remembers a stopped engine as it was at the end, for GET /engines?retired=true: a
// check of what an engine was sent over its whole life misses nothing when its pod goes
// between two reads.
func (m *manager) retire(r *running) {
	v := viewOf(r)
	v.Retired = true
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.retired) >= maxRetired {
		m.retired = slices.Delete(m.retired, 0, len(m.retired)-maxRetired+1)
	}
	m.retired = append(m.retired, v)
}

// retiredViews returns the engines stopped so far, oldest first.
func (m *manager) retiredViews() []engineView {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.retired)
}

// add takes over an engine started elsewhere (the in-pod engine of --serve-pod).
func (m *manager) add(spec engineSpec, e *fakeengine.Engine) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.engines[spec.key()] = &running{spec: spec, engine: e}
}

// get returns the engine of a pod, or nil.
func (m *manager) get(namespace, pod string) *running {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.engines[namespace+"/"+pod]
}

// list returns the running engines, sorted by pod key.
func (m *manager) list() []*running {
	m.mu.Lock()
	rs := make([]*running, 0, len(m.engines))
	for _, r := range m.engines {
		rs = append(rs, r)
	}
	m.mu.Unlock()
	slices.SortFunc(rs, func(a, b *running) int { return cmp.Compare(a.spec.key(), b.spec.key()) })
	return rs
}

// closeAll closes every engine.
func (m *manager) closeAll() {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	m.mu.Lock()
	rs := m.engines
	m.engines = map[string]*running{}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Go(r.engine.Close)
	}
	wg.Wait()
}
