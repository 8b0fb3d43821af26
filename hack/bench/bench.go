package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/loraplane/loraplane/test/fakeengine"
)

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
}

type bench struct {
	o              options
	kubeconfig     string
	admin          *clients
	clusterStarted bool
	procs          []*proc
	fleet          fakeengine.Fleet
	poolPods       int
	poolIPs        map[int][]string
}

// Startup is one binary's startup at one point.
type Startup struct {
	ReadySeconds     float64            `json:"readySeconds"`
	CacheSyncSeconds map[string]float64 `json:"cacheSyncSeconds"`
	// HandlerSyncSeconds: per kind, the time the controllers' event handlers took to receive
	// its initial list once the informer had synced (mean over the kind's handlers).
	HandlerSyncSeconds map[string]float64 `json:"handlerSyncSeconds"`
	RSSMetricBytes     float64            `json:"processResidentMemoryBytes"`
	VMRSSBytes         float64            `json:"vmRSSBytes"`
	FloorSeconds       float64            `json:"floorListSeconds"`
	FloorObjects       map[string]int     `json:"floorObjects"`
	Ratio              float64            `json:"ratio"`
}

// Result holds the figures of one point.
type Result struct {
	Point   Point               `json:"point"`
	Startup map[string]*Startup `json:"startup"`

	AdapterSeconds     float64 `json:"adapterConvergenceSeconds"`
	AdapterLoads       int     `json:"adapterEngineLoadCalls"`
	AdapterLoadsPerSec float64 `json:"adapterLoadsPerSecond"`
	// When the engines had answered the first load, half of them and all of them, in
	// seconds from the first create (sampled every 20 ms): the loads' share of convergence.
	AdapterLoadTimeline *loadTimeline      `json:"adapterLoadTimeline,omitempty"`
	EngineFloorSeconds  float64            `json:"engineFloorSeconds"`
	EngineFloorPerSec   float64            `json:"engineFloorLoadsPerSecond"`
	AdapterRateOfFloor  float64            `json:"adapterRateOfFloor"`
	WritesPerAdapter    float64            `json:"apiWritesPerAdapter"`
	WritesByMethod      map[string]float64 `json:"apiWritesPerAdapterByMethod"`
	EventsPerAdapter    float64            `json:"eventsPerAdapter"`
	LoadsPerAdapter     float64            `json:"engineLoadCallsPerAdapter"`
	DeleteSeconds       float64            `json:"adapterDeleteSeconds"`
	UnloadsPerAdapter   float64            `json:"engineUnloadCallsPerAdapter"`
	DeleteWrites        float64            `json:"apiWritesPerAdapterDeletion"`
	ListsPerPodPeriod   float64            `json:"engineListsPerPodPerPeriod"`
	RouterSeconds       float64            `json:"routerConvergenceSeconds"`
	RouterWrites        float64            `json:"routerWrites"`
	RouterFloorSeconds  float64            `json:"routerFloorSeconds"`
	RouterRatio         float64            `json:"routerRatio"`
	// With a capacity (Point.C): the adapters the engines evicted because they were asked to
	// hold more (from create to the end of the inventory periods observed, before the engine
	// floor, whose own loads are not placed), the requests that loaded an evicted adapter
	// again, and the most adapters one engine listed then.
	Evictions    int      `json:"engineEvictions,omitempty"`
	Reloads      int      `json:"engineReloads,omitempty"`
	MaxPerEngine int      `json:"maxAdaptersOnAnEngine,omitempty"`
	Errors       []string `json:"errors,omitempty"`
}

func (b *bench) run(ctx context.Context, points []Point) error {
	started := time.Now()
	maxPods := 0
	for _, p := range points {
		if p.S+p.U > maxPods {
			maxPods = p.S + p.U
		}
	}
	pool := 0
	for _, p := range points {
		pool += p.P
	}
	for _, bin := range []string{"adapter-controller", "router-controller", "kubectl", "kwokctl"} {
		if _, err := os.Stat(filepath.Join(b.o.root, "bin", bin)); err != nil {
			return fmt.Errorf("bin/%s is missing: run make tools build", bin)
		}
	}
	b.kubeconfig = filepath.Join(b.o.root, "_artifacts", "kwok", "clusters", b.o.cluster, "kubeconfig.yaml")
	// The cluster must exist before clients can be built; clusterUp sets b.admin after the
	// cluster answers.
	if err := b.clusterUpAndClients(ctx, maxPods+pool); err != nil {
		return err
	}
	b.poolIPs = map[int][]string{}
	rep := &Report{Started: started.UTC(), Machine: machine(), Settings: map[string]any{
		"engineLatency": b.o.engineLatency.String(), "inventoryPeriod": b.o.inventoryPeriod.String(),
		"maxParallelEngineCalls": b.o.engineParallel, "kubeAPIQPS": b.o.qps, "kubeAPIBurst": b.o.burst,
		"size": b.o.size, "cluster": b.o.cluster,
		"adapterArgs": b.o.extraArgs["adapter-controller"], "routerArgs": b.o.extraArgs["router-controller"],
	}}
	for i, p := range points {
		r, err := b.runPoint(ctx, i, p)
		if r != nil {
			rep.Points = append(rep.Points, r)
		}
		if err != nil {
			if r != nil {
				r.Errors = append(r.Errors, err.Error())
			}
			logf("point %d: %v", i+1, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	rep.Duration = time.Since(started).Round(time.Second).String()
	rep.Machine.LoadAvgEnd = loadAvg()
	md := markdown(rep)
	fmt.Print(md)
	if err := os.WriteFile(filepath.Join(b.o.out, "results.md"), []byte(md), 0o644); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(b.o.out, "results.json"), rep); err != nil {
		return err
	}
	logf("results in %s/results.{md,json}", b.o.out)
	for _, r := range rep.Points {
		if len(r.Errors) > 0 {
			return fmt.Errorf("%d point(s) had errors (see the table)", len(r.Errors))
		}
	}
	return ctx.Err()
}

func (b *bench) clusterUpAndClients(ctx context.Context, pods int) error {
	var err error
	upErr := b.clusterUpNoNS(ctx, pods)
	if upErr != nil {
		return upErr
	}
	if b.admin, err = newClients(b.kubeconfig, 0, 0); err != nil {
		return err
	}
	return b.clusterUp(ctx, pods)
}

func (b *bench) cleanup() {
	for i := len(b.procs) - 1; i >= 0; i-- {
		b.procs[i].stop()
	}
	b.fleet.Close()
	if b.clusterStarted && !b.o.keepCluster {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		logf("deleting cluster %s", b.o.cluster)
		if err := b.sh(ctx, []string{"CLUSTER_NAME=" + b.o.cluster}, filepath.Join(b.o.root, "hack", "cluster.sh"), "down"); err != nil {
			logf("cluster down: %v", err)
		}
	}
}

func (b *bench) runPoint(ctx context.Context, idx int, p Point) (*Result, error) {
	logf("=== point %d: %s", idx+1, p)
	r := &Result{Point: p, Startup: map[string]*Startup{}}
	if err := b.populate(ctx, idx, p); err != nil {
		return r, err
	}
	stopEngines := b.serveEngines(ctx, idx)
	defer stopEngines()
	if err := b.adapterStages(ctx, idx, p, r); err != nil {
		return r, fmt.Errorf("adapter-controller: %w", err)
	}
	if err := b.routerStages(ctx, idx, p, r); err != nil {
		return r, fmt.Errorf("router-controller: %w", err)
	}
	return r, nil
}

// serveEngines starts a fake engine on the IP of every pod of this point's pool, as the pods
// get IPs, until the returned function is called.
func (b *bench) serveEngines(ctx context.Context, idx int) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	warned := map[string]string{}
	go func() {
		defer close(done)
		for {
			// ResourceVersion "0": served from the API server's watch cache, so polling stays
			// cheap with 10k pods in the namespace.
			l, err := b.admin.kube.CoreV1().Pods(modelsNS).List(ctx, metav1.ListOptions{LabelSelector: modelLabel + "=" + poolName(idx), ResourceVersion: "0"})
			if err != nil && ctx.Err() == nil {
				logf("listing the pool pods: %v", err)
			}
			if err == nil {
				for i := range l.Items {
					ip := l.Items[i].Status.PodIP
					if ip == "" || slices.Contains(b.pool(idx), ip) {
						continue
					}
					if b.fleet.Get(ip) != nil {
						// An engine of an earlier point's pool holds this IP: kwok reuses the IPs
						// of deleted pods. Log it once; the pod is not served.
						if warned[ip] == "" {
							warned[ip] = l.Items[i].Name
							logf("pool pod %s has IP %s, which an engine of an earlier point already serves", l.Items[i].Name, ip)
						}
						continue
					}
					// The engine's capacity comes from the pod's engine arguments, as a real engine's.
					capacity, err := fakeengine.CapacityFromArgs(fakeengine.VLLM, l.Items[i].Spec.Containers[0].Args)
					if err != nil {
						logf("pool pod %s: %v", l.Items[i].Name, err)
						continue
					}
					if _, err := b.fleet.Add(ip, b.o.enginePort, fakeengine.Options{Latency: b.o.engineLatency, Capacity: capacity}); err != nil {
						logf("fake engine on %s: %v", ip, err)
						continue
					}
					b.addPoolIP(idx, ip)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return func() { cancel(); <-done }
}

var poolMu sync.Mutex

func (b *bench) addPoolIP(idx int, ip string) {
	poolMu.Lock()
	defer poolMu.Unlock()
	b.poolIPs[idx] = append(b.poolIPs[idx], ip)
}

func (b *bench) pool(idx int) []string {
	poolMu.Lock()
	defer poolMu.Unlock()
	return append([]string(nil), b.poolIPs[idx]...)
}

// measureStartup waits for /readyz and reads the sync durations and memory.
func (b *bench) measureStartup(ctx context.Context, p *proc) (*Startup, error) {
	d, err := p.waitReady(ctx, 5*time.Minute)
	if err != nil {
		return nil, err
	}
	s := &Startup{ReadySeconds: d.Seconds(), CacheSyncSeconds: map[string]float64{}, HandlerSyncSeconds: map[string]float64{}}
	s.VMRSSBytes = p.vmRSS()
	ss, err := p.scrape()
	if err != nil {
		return s, err
	}
	handlers := map[string]float64{}
	for _, x := range ss {
		switch x.name {
		case "loraplane_cache_sync_duration_seconds_sum":
			s.CacheSyncSeconds[x.labels["kind"]] += x.value
		case "loraplane_handler_sync_duration_seconds_sum":
			s.HandlerSyncSeconds[x.labels["kind"]] += x.value
		case "loraplane_handler_sync_duration_seconds_count":
			handlers[x.labels["kind"]] += x.value
		}
	}
	for kind, n := range handlers {
		if n > 0 {
			s.HandlerSyncSeconds[kind] /= n
		}
	}
	s.RSSMetricBytes = sum(ss, "process_resident_memory_bytes", nil)
	logf("  %s ready after %.2fs; RSS %.1f MiB; informer sync %v; handler delivery %v", p.name, s.ReadySeconds, s.VMRSSBytes/(1<<20), s.CacheSyncSeconds, s.HandlerSyncSeconds)
	return s, nil
}

type listSpec struct {
	name     string
	gvr      schema.GroupVersionResource
	ns       string
	selector string
	meta     bool // metadata-only
	typedPod bool
}

// floorList lists the given resources in parallel, paginated, with a fresh client, and
// returns the wall time.
func (b *bench) floorList(ctx context.Context, specs []listSpec) (time.Duration, map[string]int, error) {
	c, err := newClients(b.kubeconfig, float32(b.o.qps), b.o.burst)
	if err != nil {
		return 0, nil, err
	}
	counts := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, len(specs))
	start := time.Now()
	for _, sp := range specs {
		wg.Go(func() {
			n := 0
			opts := metav1.ListOptions{LabelSelector: sp.selector, Limit: 500}
			for {
				var cont string
				switch {
				case sp.typedPod:
					l, err := c.kube.CoreV1().Pods(sp.ns).List(ctx, opts)
					if err != nil {
						errs <- err
						return
					}
					n += len(l.Items)
					cont = l.Continue
				case sp.meta:
					l, err := c.meta.Resource(sp.gvr).Namespace(sp.ns).List(ctx, opts)
					if err != nil {
						errs <- err
						return
					}
					n += len(l.Items)
					cont = l.Continue
				default:
					l, err := c.dyn.Resource(sp.gvr).Namespace(sp.ns).List(ctx, opts)
					if err != nil {
						errs <- err
						return
					}
					n += len(l.Items)
					cont = l.GetContinue()
				}
				if cont == "" {
					break
				}
				opts.Continue = cont
			}
			mu.Lock()
			counts[sp.name] = n
			mu.Unlock()
		})
	}
	wg.Wait()
	d := time.Since(start)
	close(errs)
	for err := range errs {
		return d, counts, err
	}
	return d, counts, nil
}

func adapterFloorSpecs() []listSpec {
	return []listSpec{
		{name: "Pod", ns: corev1.NamespaceAll, selector: modelLabel, typedPod: true},
		{name: "ModelAdapter", gvr: adapterGVR},
	}
}

func routerFloorSpecs() []listSpec {
	return []listSpec{
		{name: "Deployment", gvr: deployGVR, meta: true},
		{name: "StatefulSet", gvr: stsGVR, meta: true},
		{name: "ModelAdapter", gvr: adapterGVR},
		{name: "HTTPRoute", gvr: routeGVR, ns: gatewayNS},
		{name: "ReferenceGrant", gvr: grantGVR},
		// The adapters' Services, as the router caches them (by the adapter-controller's label).
		{name: "Service", gvr: svcGVR, selector: "app.kubernetes.io/managed-by=loraplane-adapter-controller"},
	}
}

func (b *bench) adapterStages(ctx context.Context, idx int, p Point, r *Result) error {
	// Floor first (same cluster contents), then the process.
	fd, fc, err := b.floorList(ctx, adapterFloorSpecs())
	if err != nil {
		return fmt.Errorf("floor list: %w", err)
	}
	proc, err := b.startController("adapter-controller", idx,
		"--inventory-period", b.o.inventoryPeriod.String(),
		"--max-parallel-engine-calls", fmt.Sprint(b.o.engineParallel))
	if err != nil {
		return err
	}
	defer proc.stop()
	st, err := b.measureStartup(ctx, proc)
	if st != nil {
		st.FloorSeconds, st.FloorObjects = fd.Seconds(), fc
		st.Ratio = st.ReadySeconds / st.FloorSeconds
		r.Startup["adapter-controller"] = st
	}
	if err != nil {
		return err
	}

	// Wait for the engines of this point's pool.
	deadline := time.Now().Add(2 * time.Minute)
	for len(b.pool(idx)) < p.P {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d pool pods have engines", len(b.pool(idx)), p.P)
		}
		time.Sleep(200 * time.Millisecond)
	}
	ips := b.pool(idx)
	loads0 := b.engineTotal(ips, func(e *fakeengine.Engine) int { return e.Loads() })
	evictions0 := b.engineTotal(ips, func(e *fakeengine.Engine) int { return e.Counts().Evictions })
	reloads0 := b.engineTotal(ips, func(e *fakeengine.Engine) int { return e.Counts().Reloads })
	w0, err := proc.writes()
	if err != nil {
		return err
	}
	m0, err := proc.writesByMethod()
	if err != nil {
		return err
	}

	logf("adapter convergence: %d adapters, %d loads over %d pods", p.A, p.loads(), p.P)
	start := time.Now()
	tlCtx, tlStop := context.WithCancel(ctx)
	defer tlStop()
	tlDone := make(chan *loadTimeline, 1)
	go func() {
		tlDone <- sampleLoads(tlCtx, start, p.loads(), func() int {
			return b.engineTotal(ips, func(e *fakeengine.Engine) int { return e.Loads() }) - loads0
		})
	}()
	api := b.admin.dyn.Resource(adapterGVR).Namespace(modelsNS)
	point := fmt.Sprint(idx + 1)
	if err := parallel(ctx, "adapters created", p.A, b.o.parallel, func(ctx context.Context, i int) error {
		_, err := api.Create(ctx, modelAdapter(idx, i, poolName(idx), p.R), metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	sel := metav1.ListOptions{LabelSelector: benchLabel + "=" + point}
	if err := watchUntil(ctx, api, sel, 10*time.Minute, func(items []any) (bool, string) {
		running := 0
		for _, o := range items {
			if ph, _, _ := unstructured.NestedString(o.(*unstructured.Unstructured).Object, "status", "phase"); ph == "Running" {
				running++
			}
		}
		return running >= p.A, fmt.Sprintf("adapters Running: %d/%d", running, p.A)
	}); err != nil {
		return err
	}
	r.AdapterSeconds = time.Since(start).Seconds()
	tlStop()
	r.AdapterLoadTimeline = <-tlDone
	r.AdapterLoads = b.engineTotal(ips, func(e *fakeengine.Engine) int { return e.Loads() }) - loads0
	r.AdapterLoadsPerSec = float64(p.loads()) / r.AdapterSeconds
	r.LoadsPerAdapter = float64(r.AdapterLoads) / float64(max(p.A, 1))
	logf("  all %d adapters Running after %.2fs (%d engine load calls; %s)", p.A, r.AdapterSeconds, r.AdapterLoads, r.AdapterLoadTimeline)
	time.Sleep(2 * time.Second) // let trailing status/EndpointSlice writes land
	w1, err := proc.writes()
	if err != nil {
		return err
	}
	r.WritesPerAdapter = (w1 - w0) / float64(max(p.A, 1))
	m1, err := proc.writesByMethod()
	if err != nil {
		return err
	}
	if ev, err := b.admin.kube.CoreV1().Events(modelsNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=ModelAdapter"}); err == nil {
		n := 0
		for i := range ev.Items {
			if strings.HasPrefix(ev.Items[i].InvolvedObject.Name, fmt.Sprintf("bench-p%d-", idx+1)) {
				n++
			}
		}
		r.EventsPerAdapter = float64(n) / float64(max(p.A, 1))
	}
	r.WritesByMethod = map[string]float64{}
	for k, v := range m1 {
		r.WritesByMethod[k] = (v - m0[k]) / float64(max(p.A, 1))
	}

	// Engine traffic over whole inventory periods.
	logf("engine traffic: observing %d inventory periods of %s", b.o.periods, b.o.inventoryPeriod)
	l0 := b.engineTotal(ips, func(e *fakeengine.Engine) int { return e.Lists() })
	window := time.Duration(b.o.periods) * b.o.inventoryPeriod
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(window):
	}
	l1 := b.engineTotal(ips, func(e *fakeengine.Engine) int { return e.Lists() })
	r.ListsPerPodPeriod = float64(l1-l0) / float64(len(ips)) / float64(b.o.periods)
	if p.C > 0 {
		r.Evictions = b.engineTotal(ips, func(e *fakeengine.Engine) int { return e.Counts().Evictions }) - evictions0
		r.Reloads = b.engineTotal(ips, func(e *fakeengine.Engine) int { return e.Counts().Reloads }) - reloads0
		for _, ip := range ips {
			if e := b.fleet.Get(ip); e != nil {
				r.MaxPerEngine = max(r.MaxPerEngine, len(e.Loaded()))
			}
		}
		logf("  capacity %d: %d adapters evicted, %d reloads; at most %d adapters on an engine", p.C, r.Evictions, r.Reloads, r.MaxPerEngine)
	}

	// Engine floor: the same number of load calls from a minimal client at the same parallelism.
	fs, err := b.engineFloor(ctx, ips, p.loads())
	if err != nil {
		return fmt.Errorf("engine floor: %w", err)
	}
	r.EngineFloorSeconds = fs.Seconds()
	r.EngineFloorPerSec = float64(p.loads()) / fs.Seconds()
	r.AdapterRateOfFloor = r.AdapterLoadsPerSec / r.EngineFloorPerSec

	// Delete the adapters while the controller runs (finalizers unload them).
	unloads0 := b.engineTotal(ips, func(e *fakeengine.Engine) int { return e.Unloads() })
	dw0, err := proc.writes()
	if err != nil {
		return err
	}
	start = time.Now()
	if err := api.DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		return err
	}
	if err := watchUntil(ctx, api, sel, 3*time.Minute, func(items []any) (bool, string) {
		return len(items) == 0, fmt.Sprintf("adapters left after delete: %d", len(items))
	}); err != nil {
		return err
	}
	r.DeleteSeconds = time.Since(start).Seconds()
	r.UnloadsPerAdapter = float64(b.engineTotal(ips, func(e *fakeengine.Engine) int { return e.Unloads() })-unloads0) / float64(max(p.A, 1))
	dw1, err := proc.writes()
	if err != nil {
		return err
	}
	r.DeleteWrites = (dw1 - dw0) / float64(max(p.A, 1))
	logf("  all %d adapters deleted after %.2fs: %.2f unload calls and %.2f API writes per adapter", p.A, r.DeleteSeconds, r.UnloadsPerAdapter, r.DeleteWrites)
	return nil
}

// modelAdapter is adapter i of point idx on the pool's pods: all of them, or replicas (> 0).
func modelAdapter(idx, i int, pool string, replicas int) *unstructured.Unstructured {
	a := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "model.aibrix.ai/v1alpha1",
		"kind":       "ModelAdapter",
		"metadata": map[string]any{
			"name":   fmt.Sprintf("bench-p%d-lora-%04d", idx+1, i),
			"labels": map[string]any{benchLabel: fmt.Sprint(idx + 1)},
		},
		"spec": map[string]any{
			"podSelector": map[string]any{"matchLabels": map[string]any{modelLabel: pool}},
			"artifactURL": fmt.Sprintf("huggingface://bench/lora-%04d", i),
		},
	}}
	if replicas > 0 {
		_ = unstructured.SetNestedField(a.Object, int64(replicas), "spec", "replicas")
	}
	return a
}

func (b *bench) engineTotal(ips []string, f func(*fakeengine.Engine) int) int {
	t := 0
	for _, ip := range ips {
		if e := b.fleet.Get(ip); e != nil {
			t += f(e)
		}
	}
	return t
}

// engineFloor issues n vLLM load calls spread over the pool engines, engineParallel at a
// time, and returns the wall time. The adapters are unloaded afterwards (not timed).
func (b *bench) engineFloor(ctx context.Context, ips []string, n int) (time.Duration, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: b.o.engineParallel, MaxConnsPerHost: 0}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	call := func(ctx context.Context, path string, i int, body map[string]string) error {
		ip := ips[i%len(ips)]
		buf, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://%s:%d%s", ip, b.o.enginePort, path), bytes.NewReader(buf))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s on %s: %s", path, ip, resp.Status)
		}
		return nil
	}
	name := func(i int) string { return fmt.Sprintf("floor-%d", i/len(ips)) }
	logf("engine floor: %d load calls, %d in parallel", n, b.o.engineParallel)
	start := time.Now()
	err := parallel(ctx, "engine floor loads", n, b.o.engineParallel, func(ctx context.Context, i int) error {
		return call(ctx, "/v1/load_lora_adapter", i, map[string]string{"lora_name": name(i), "lora_path": "bench/" + name(i)})
	})
	d := time.Since(start)
	if err != nil {
		return d, err
	}
	return d, parallel(ctx, "engine floor unloads", n, b.o.engineParallel, func(ctx context.Context, i int) error {
		return call(ctx, "/v1/unload_lora_adapter", i, map[string]string{"lora_name": name(i)})
	})
}

// loadTimeline: seconds from the first create to the engines' first answered load, half of
// the loads and all of them (-1: not reached).
type loadTimeline struct {
	First float64 `json:"firstLoadSeconds"`
	Half  float64 `json:"halfLoadsSeconds"`
	All   float64 `json:"allLoadsSeconds"`
}

func (t *loadTimeline) String() string {
	if t == nil {
		return "no load timeline"
	}
	return fmt.Sprintf("loads answered: first %.2f s, half %.2f s, all %.2f s", t.First, t.Half, t.All)
}

// sampleLoads samples loads() every 20 ms until ctx ends or want loads were answered.
func sampleLoads(ctx context.Context, start time.Time, want int, loads func() int) *loadTimeline {
	t := &loadTimeline{First: -1, Half: -1, All: -1}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		n, at := loads(), time.Since(start).Seconds()
		if n > 0 && t.First < 0 {
			t.First = at
		}
		if 2*n >= want && t.Half < 0 {
			t.Half = at
		}
		if n >= want {
			t.All = at
			return t
		}
		select {
		case <-ctx.Done():
			return t
		case <-tick.C:
		}
	}
}

// watchUntil watches the objects of api that sel selects until done, given all of them,
// says so (checked at once and at every change), or timeout passes. A watch, not a poll: the
// harness's own List requests (a quorum read of every object, ten times a second) competed
// with the process measured for the API server and the machine's two cores.
func watchUntil(ctx context.Context, api dynamic.ResourceInterface, sel metav1.ListOptions, timeout time.Duration, done func(items []any) (bool, string)) error {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel.LabelSelector
			return api.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel.LabelSelector
			return api.Watch(ctx, o)
		},
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var store cache.Store
	var msg string
	last := time.Now()
	check := func() bool {
		ok, m := done(store.List())
		msg = m
		if !ok && time.Since(last) > 3*time.Second {
			logf("  %s", m)
			last = time.Now()
		}
		return ok
	}
	_, err := watchtools.UntilWithSync(wctx, lw, &unstructured.Unstructured{},
		func(s cache.Store) (bool, error) { store = s; return check(), nil },
		func(watch.Event) (bool, error) { return check(), nil })
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return fmt.Errorf("%s after %s: %w", msg, timeout, errTimeout)
	}
	return err
}

// waitFor polls cond every interval until it holds, logging its message every few seconds;
// after timeout it fails with the last message.
func waitFor(ctx context.Context, timeout, every time.Duration, cond func() (bool, string, error)) error {
	var msg string
	last := time.Now()
	err := wait.PollUntilContextTimeout(ctx, every, timeout, true, func(context.Context) (bool, error) {
		ok, m, err := cond()
		msg = m
		if !ok && time.Since(last) > 3*time.Second {
			logf("  %s", m)
			last = time.Now()
		}
		return ok, err
	})
	if wait.Interrupted(err) && ctx.Err() == nil {
		return fmt.Errorf("%s after %s: %w", msg, timeout, errTimeout)
	}
	return err
}

func (b *bench) routerStages(ctx context.Context, idx int, p Point, r *Result) error {
	routes := b.admin.dyn.Resource(routeGVR).Namespace(gatewayNS)
	if err := routes.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return err
	}
	fd, fc, err := b.floorList(ctx, routerFloorSpecs())
	if err != nil {
		return fmt.Errorf("floor list: %w", err)
	}
	proc, err := b.startController("router-controller", idx)
	if err != nil {
		return err
	}
	defer proc.stop()
	st, err := b.measureStartup(ctx, proc)
	if st != nil {
		st.FloorSeconds, st.FloorObjects = fd.Seconds(), fc
		st.Ratio = st.ReadySeconds / st.FloorSeconds
		r.Startup["router-controller"] = st
	}
	if err != nil {
		return err
	}
	// Convergence: gate open → one HTTPRoute per model Deployment (plus the pools' models).
	want := p.M + idx + 1
	start := time.Now()
	logf("router convergence: %d model Deployments → HTTPRoutes", want)
	if err := waitFor(ctx, 10*time.Minute, 100*time.Millisecond, func() (bool, string, error) {
		l, err := b.admin.meta.Resource(routeGVR).Namespace(gatewayNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, "", err
		}
		return len(l.Items) >= want, fmt.Sprintf("HTTPRoutes: %d/%d", len(l.Items), want), nil
	}); err != nil {
		return err
	}
	r.RouterSeconds = time.Since(start).Seconds()
	time.Sleep(time.Second)
	if r.RouterWrites, err = proc.writes(); err != nil {
		return err
	}
	logf("  %d routes after %.2fs, %.0f API writes", want, r.RouterSeconds, r.RouterWrites)
	proc.stop()

	// Floor: the same number of HTTPRoutes created directly at the same client QPS/burst.
	c, err := newClients(b.kubeconfig, float32(b.o.qps), b.o.burst)
	if err != nil {
		return err
	}
	fapi := c.dyn.Resource(routeGVR).Namespace(floorNS)
	fstart := time.Now()
	if err := parallel(ctx, "floor HTTPRoutes created", want, b.o.parallel, func(ctx context.Context, i int) error {
		_, err := fapi.Create(ctx, floorRoute(i), metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	r.RouterFloorSeconds = time.Since(fstart).Seconds()
	r.RouterRatio = r.RouterSeconds / r.RouterFloorSeconds
	return b.admin.dyn.Resource(routeGVR).Namespace(floorNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
}

// defaultPaths are the router's default --route-paths (AIBrix's newest 16 path prefixes).
var defaultPaths = []string{"/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings",
	"/v1/rerank", "/v1/classify", "/v1/decisions", "/generate", "/generatevideo", "/v1/video", "/v1/videos",
	"/v1/audio/transcriptions", "/v1/audio/translations", "/tokenize", "/pooling"}

// floorRoute is an HTTPRoute shaped like the router's: one match per path with the model header.
func floorRoute(i int) *unstructured.Unstructured {
	model := modelName(i)
	var matches []any
	for _, p := range defaultPaths {
		matches = append(matches, map[string]any{
			"path":    map[string]any{"type": "PathPrefix", "value": p},
			"headers": []any{map[string]any{"type": "Exact", "name": "model", "value": model}},
		})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1",
		"kind":       "HTTPRoute",
		"metadata":   map[string]any{"name": model + "-router"},
		"spec": map[string]any{
			"parentRefs": []any{map[string]any{"name": "aibrix-eg", "namespace": gatewayNS}},
			"rules": []any{map[string]any{
				"matches":     matches,
				"backendRefs": []any{map[string]any{"name": model, "namespace": modelsNS, "port": int64(8000)}},
				"timeouts":    map[string]any{"request": "10m"}, // the default --route-timeout
			}},
		},
	}}
}

func markdown(rep *Report) string {
	var w strings.Builder
	m := rep.Machine
	fmt.Fprintf(&w, "\n## loraplane benchmark (%s, %s)\n\n", rep.Started.Format(time.RFC3339), rep.Duration)
	fmt.Fprintf(&w, "Machine: %d CPUs, %s memory, %s, kernel %s, load average %s at the start, %s at the end. Settings: engine latency %v, inventory period %v, "+
		"max parallel engine calls %v, kube-api-qps %v / burst %v.\n\n",
		m.CPUs, m.MemoryGiB, m.Go, m.Kernel, m.LoadAvgStart, m.LoadAvgEnd, rep.Settings["engineLatency"], rep.Settings["inventoryPeriod"],
		rep.Settings["maxParallelEngineCalls"], rep.Settings["kubeAPIQPS"], rep.Settings["kubeAPIBurst"])
	for _, k := range []string{"adapterArgs", "routerArgs"} {
		if v, _ := rep.Settings[k].(string); v != "" {
			fmt.Fprintf(&w, "Extra %s: `%s`.\n\n", k, v)
		}
	}
	fmt.Fprintf(&w, "| point | figure | measured | floor | ratio | target |\n|---|---|---|---|---|---|\n")
	for _, r := range rep.Points {
		pt := r.Point.String()
		for _, bin := range []string{"adapter-controller", "router-controller"} {
			s := r.Startup[bin]
			if s == nil {
				fmt.Fprintf(&w, "| %s | %s startup | not measured | | | |\n", pt, bin)
				continue
			}
			fmt.Fprintf(&w, "| %s | %s startup (process start → /readyz 200) | %.2f s | %.2f s (LIST %s) | %.2f× | ≤1.5× at S=2000+U=4000 |\n",
				pt, bin, s.ReadySeconds, s.FloorSeconds, objs(s.FloorObjects), s.Ratio)
			fmt.Fprintf(&w, "| %s | %s cache sync per kind (informer stage, s) | %s | | | |\n", pt, bin, syncs(s.CacheSyncSeconds))
			fmt.Fprintf(&w, "| %s | %s handler delivery per kind (handler stage, s, mean per handler) | %s | | | |\n", pt, bin, syncs(s.HandlerSyncSeconds))
			fmt.Fprintf(&w, "| %s | %s RSS after sync | %.1f MiB (VmRSS), %.1f MiB (metric) | | | |\n",
				pt, bin, s.VMRSSBytes/(1<<20), s.RSSMetricBytes/(1<<20))
		}
		if r.AdapterSeconds > 0 {
			target := "≥80% at 200×20 and 500×50"
			if r.Point.C > 0 {
				target = "≥80% where the loads bound it (docs/performance.md)"
			}
			fmt.Fprintf(&w, "| %s | adapter convergence (create → all Running) | %.2f s, %.0f loads/s (%d load calls; %s) | %.2f s, %.0f loads/s | %.0f%% of floor rate | %s |\n",
				pt, r.AdapterSeconds, r.AdapterLoadsPerSec, r.AdapterLoads, r.AdapterLoadTimeline, r.EngineFloorSeconds, r.EngineFloorPerSec, 100*r.AdapterRateOfFloor, target)
			fmt.Fprintf(&w, "| %s | API writes per adapter to Running | %.2f (%s; Event objects on the adapter: %.2f) | | | ≤4 |\n", pt, r.WritesPerAdapter, syncs(r.WritesByMethod), r.EventsPerAdapter)
			fmt.Fprintf(&w, "| %s | engine load calls per adapter to Running | %.2f (P=%d, R=%d) | | | P, or R |\n", pt, r.LoadsPerAdapter, r.Point.P, r.Point.R)
			if r.Point.C > 0 {
				fmt.Fprintf(&w, "| %s | engines of capacity %d: evictions from create to the end of the inventory periods | %d evicted, %d reloads; at most %d adapters on an engine | | | 0 evictions |\n",
					pt, r.Point.C, r.Evictions, r.Reloads, r.MaxPerEngine)
			}
			fmt.Fprintf(&w, "| %s | adapter deletion (delete → all gone) | %.2f s, %.2f unload calls and %.2f API writes per adapter | | | P unloads |\n", pt, r.DeleteSeconds, r.UnloadsPerAdapter, r.DeleteWrites)
			fmt.Fprintf(&w, "| %s | engine lists per pod per inventory period | %.2f | | | 1 (independent of A) |\n", pt, r.ListsPerPodPeriod)
		}
		if r.RouterSeconds > 0 {
			fmt.Fprintf(&w, "| %s | router convergence (/readyz → all HTTPRoutes) | %.2f s, %.0f API writes | %.2f s | %.2f× | ≤2× |\n",
				pt, r.RouterSeconds, r.RouterWrites, r.RouterFloorSeconds, r.RouterRatio)
		}
		for _, e := range r.Errors {
			fmt.Fprintf(&w, "| %s | ERROR | %s | | | |\n", pt, strings.ReplaceAll(e, "|", "/"))
		}
	}
	return w.String()
}

func objs(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

func syncs(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]))
	}
	if len(parts) == 0 {
		return "no samples"
	}
	return strings.Join(parts, ", ")
}
