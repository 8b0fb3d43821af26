// Command bench is loraplane's benchmark harness. In one run on the local kwok cluster it
// populates the cluster through the API, starts both controllers as host processes and prints
// measured numbers next to a floor measured in the same run (a bare client doing the same
// work). It asserts nothing about time: it is a measuring tool, run by `make bench`.
//
// Traffic goes only to 127.0.0.0/8: the API server of the kwok cluster, the controllers'
// probe and metrics ports (127.0.0.1:2808x) and in-process fake engines on the pods' loopback
// IPs. Service ClusterIPs are never dialled.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Point is one size of the scale sweep.
type Point struct {
	S int `json:"modelPods"`     // model pods (label model.aibrix.ai/name) in the M Deployments
	U int `json:"unrelatedPods"` // pods without the model label
	A int `json:"adapters"`      // ModelAdapters
	P int `json:"adapterPods"`   // pods every adapter loads on (load-on-all)
	M int `json:"models"`        // model Deployments (one HTTPRoute each)
	// R is every adapter's spec.replicas (0: unset, every pool pod); C the adapter capacity
	// of every pool pod's engine, given as its vLLM arguments (--enable-lora --max-loras C)
	// (0: none, unlimited).
	R int `json:"replicas,omitempty"`
	C int `json:"capacity,omitempty"`
}

func (p Point) String() string {
	s := fmt.Sprintf("S=%d U=%d A×P=%d×%d M=%d", p.S, p.U, p.A, p.P, p.M)
	if p.R > 0 || p.C > 0 {
		s += fmt.Sprintf(" R=%d C=%d", p.R, p.C)
	}
	return s
}

// loads is how many adapter loads the point asks for: A adapters on P pods each, or on R.
func (p Point) loads() int {
	if p.R > 0 {
		return p.A * min(p.R, p.P)
	}
	return p.A * p.P
}

// presets of the sweep. Points are cumulative: a later point adds to what the earlier ones created.
var presets = map[string][]Point{
	"tiny":    {{S: 200, U: 0, A: 20, P: 5, M: 50}},
	"small":   {{S: 500, U: 0, A: 50, P: 10, M: 100}},
	"default": {{S: 500, U: 0, A: 50, P: 10, M: 100}, {S: 2000, U: 4000, A: 200, P: 20, M: 1000}},
	"large":   {{S: 500, U: 0, A: 50, P: 10, M: 100}, {S: 2000, U: 4000, A: 200, P: 20, M: 1000}, {S: 10000, U: 0, A: 500, P: 50, M: 2000}},
	// capacity: 500 single-replica adapters over 50 engines that hold 16 adapters each (one
	// load per adapter: the adapters' API writes bound it, not the engines), then 200 adapters
	// of 20 replicas over 40 engines that hold 110 each (4 000 loads into 4 400 slots: the
	// loads bound it).
	"capacity": {{S: 0, U: 0, A: 500, P: 50, M: 0, R: 1, C: 16}, {S: 0, U: 0, A: 200, P: 40, M: 0, R: 20, C: 110}},
}

type options struct {
	extraArgs       map[string]string // binary → extra flags
	root            string
	size            string
	points          string
	cluster         string
	keepCluster     bool
	out             string
	engineLatency   time.Duration
	enginePort      int
	inventoryPeriod time.Duration
	periods         int
	parallel        int
	engineParallel  int
	qps             float64
	burst           int
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() { os.Exit(run()) }

func run() int {
	var o options
	wd, _ := os.Getwd()
	defRoot := wd
	for _, c := range []string{wd, filepath.Join(wd, "..", "..")} {
		if _, err := os.Stat(filepath.Join(c, "hack", "cluster.sh")); err == nil {
			defRoot, _ = filepath.Abs(c)
			break
		}
	}
	flag.StringVar(&o.root, "root", env("BENCH_ROOT", defRoot), "Repository root (holds bin/ and hack/cluster.sh). Env BENCH_ROOT.")
	flag.StringVar(&o.size, "size", env("BENCH_SIZE", "default"), "Preset of the sweep: tiny, small, default, large, capacity. Env BENCH_SIZE.")
	flag.StringVar(&o.points, "points", env("BENCH_POINTS", ""), "Explicit sweep instead of a preset: S:U:A:P:M[:R:C][,...] (cumulative; R: adapter replicas, C: engine capacity of the pool pods). Env BENCH_POINTS.")
	flag.StringVar(&o.cluster, "cluster-name", env("BENCH_CLUSTER", "bench"), "kwok cluster name (created, then deleted at the end unless -keep-cluster). Env BENCH_CLUSTER.")
	flag.BoolVar(&o.keepCluster, "keep-cluster", env("BENCH_KEEP_CLUSTER", "") != "", "Do not delete the cluster at the end. Env BENCH_KEEP_CLUSTER=1.")
	flag.StringVar(&o.out, "out", env("BENCH_OUT", ""), "Directory of the results (default <root>/_artifacts/bench). Env BENCH_OUT.")
	flag.DurationVar(&o.engineLatency, "engine-latency", 50*time.Millisecond, "Latency the fake engines add to every request (a LoRA load is not free on a real engine).")
	flag.IntVar(&o.enginePort, "engine-port", 28100, "Engine port of the benchmark pods (label model.aibrix.ai/port); avoids ports of other local stacks.")
	flag.DurationVar(&o.inventoryPeriod, "inventory-period", 5*time.Second, "--inventory-period of the adapter-controller.")
	flag.IntVar(&o.periods, "periods", 3, "Inventory periods observed for engine traffic.")
	flag.IntVar(&o.parallel, "create-parallelism", 16, "Parallel creates when populating the cluster.")
	flag.IntVar(&o.engineParallel, "max-parallel-engine-calls", 32, "--max-parallel-engine-calls of the adapter-controller, and the parallelism of the engine floor client.")
	o.extraArgs = map[string]string{}
	adapterArgs := flag.String("adapter-args", env("BENCH_ADAPTER_ARGS", ""), "Extra flags of the adapter-controller, space separated (e.g. \"--max-concurrent-reconciles=8\"). Env BENCH_ADAPTER_ARGS.")
	routerArgs := flag.String("router-args", env("BENCH_ROUTER_ARGS", ""), "Extra flags of the router-controller, space separated. Env BENCH_ROUTER_ARGS.")
	flag.Float64Var(&o.qps, "kube-api-qps", 50, "--kube-api-qps of both controllers and of the floor clients.")
	flag.IntVar(&o.burst, "kube-api-burst", 100, "--kube-api-burst of both controllers and of the floor clients.")
	flag.Parse()
	o.extraArgs["adapter-controller"], o.extraArgs["router-controller"] = *adapterArgs, *routerArgs
	if o.out == "" {
		o.out = filepath.Join(o.root, "_artifacts", "bench")
	}
	points, err := parsePoints(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	b := &bench{o: o}
	code := 0
	if err := b.run(ctx, points); err != nil {
		fmt.Fprintln(os.Stderr, "bench: FAILED:", err)
		code = 1
	}
	b.cleanup()
	return code
}

func parsePoints(o options) ([]Point, error) {
	if o.points == "" {
		ps, ok := presets[o.size]
		if !ok {
			return nil, fmt.Errorf("unknown BENCH_SIZE %q (tiny, small, default, large, capacity)", o.size)
		}
		return ps, nil
	}
	var ps []Point
	for _, s := range strings.Split(o.points, ",") {
		f := strings.Split(strings.TrimSpace(s), ":")
		if len(f) != 5 && len(f) != 7 {
			return nil, fmt.Errorf("point %q: want S:U:A:P:M or S:U:A:P:M:R:C", s)
		}
		var n [7]int
		for i, x := range f {
			v, err := strconv.Atoi(x)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("point %q: %q is not a count", s, x)
			}
			n[i] = v
		}
		if n[0] > 0 && n[4] == 0 {
			return nil, fmt.Errorf("point %q: S=%d pods need M≥1 model Deployments to hold them", s, n[0])
		}
		ps = append(ps, Point{S: n[0], U: n[1], A: n[2], P: n[3], M: n[4], R: n[5], C: n[6]})
	}
	return ps, nil
}

// Machine describes where the numbers were measured.
type Machine struct {
	CPUs      int    `json:"cpus"`
	MemoryGiB string `json:"memory"`
	Go        string `json:"go"`
	Kernel    string `json:"kernel"`
	// LoadAvg is /proc/loadavg's 1, 5 and 15-minute load averages at the start and at the
	// end of the run: numbers measured on a busy machine are not comparable.
	LoadAvgStart string `json:"loadAverageAtStart"`
	LoadAvgEnd   string `json:"loadAverageAtEnd"`
}

// loadAvg is the 1, 5 and 15-minute load averages of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), LoadAvgStart: loadAvg()}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "MemTotal:") {
				f := strings.Fields(l)
				if len(f) > 1 {
					kb, _ := strconv.ParseFloat(f[1], 64)
					m.MemoryGiB = fmt.Sprintf("%.1f GiB", kb/1024/1024)
				}
			}
		}
	}
	if out, err := exec.CommandContext(context.Background(), "uname", "-r").Output(); err == nil {
		m.Kernel = strings.TrimSpace(string(out))
	}
	return m
}

// Report is the JSON output.
type Report struct {
	Started  time.Time      `json:"started"`
	Duration string         `json:"duration"`
	Machine  Machine        `json:"machine"`
	Settings map[string]any `json:"settings"`
	Points   []*Result      `json:"points"`
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
