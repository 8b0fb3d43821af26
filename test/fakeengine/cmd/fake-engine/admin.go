package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/loraplane/loraplane/test/fakeengine"
)

const maxAdminBody = 1 << 20

// engineView is one engine in GET /engines. preloaded are the adapters it holds from the
// pod's preload annotation (not loaded through the API), with the path it holds them from;
// keysSeen the API keys presented to it by any request but GET /health, accepted or not
// ("" for requests without one); retired marks an engine stopped (its pod gone, recreated or
// no longer serving), as it was then, listed only with GET /engines?retired=true.
type engineView struct {
	Pod       string            `json:"pod"`
	Namespace string            `json:"namespace"`
	UID       string            `json:"uid"`
	IP        string            `json:"ip"`
	Port      int               `json:"port"`
	Kind      fakeengine.Kind   `json:"kind"`
	BaseModel string            `json:"baseModel"`
	Runtime   bool              `json:"runtime"`
	Loaded    []string          `json:"loaded"`
	Adapters  map[string]string `json:"adapters"` // loaded adapters' paths by name
	Preloaded map[string]string `json:"preloaded"`
	KeysSeen  []string          `json:"keysSeen"`
	Counts    countsView        `json:"counts"`
	Retired   bool              `json:"retired,omitempty"`
	// Capacity is how many adapters the engine holds at once, from its container's
	// arguments (0: unlimited); resident the adapters it holds, least recently used first
	// (a vLLM engine lists more than it holds once it evicted some); evicted the names it
	// evicted, oldest first (the last 100).
	Capacity int      `json:"capacity"`
	Resident []string `json:"resident"`
	Evicted  []string `json:"evicted"`
}

// countsView are an engine's counters: requests is the total of requestsByPath, keyed by
// "METHOD /path"; foreignUnloads are the unloads that named an adapter the engine held from
// its preload annotation (a client unloading what it did not load).
type countsView struct {
	Requests       int            `json:"requests"`
	Loads          int            `json:"loads"`
	Unloads        int            `json:"unloads"`
	Lists          int            `json:"lists"`
	ForeignUnloads int            `json:"foreignUnloads"`
	RequestsByPath map[string]int `json:"requestsByPath"`
	// Evictions are the adapters a vLLM engine evicted beyond its capacity, reloads the
	// requests that loaded an evicted adapter again, capacityRefusals the loads an SGLang
	// engine refused at its capacity.
	Evictions        int `json:"evictions"`
	Reloads          int `json:"reloads"`
	CapacityRefusals int `json:"capacityRefusals"`
}

func viewOf(r *running) engineView {
	c := r.engine.Counts()
	total := 0
	for _, n := range c.Requests {
		total += n
	}
	return engineView{
		Pod:       r.spec.Pod,
		Namespace: r.spec.Namespace,
		UID:       string(r.spec.UID),
		IP:        r.spec.IP,
		Port:      r.spec.Port,
		Kind:      r.spec.Kind,
		BaseModel: r.spec.BaseModel,
		Runtime:   r.spec.Runtime,
		Loaded:    r.engine.Loaded(),
		Adapters:  r.engine.Adapters(),
		Preloaded: r.engine.Preloaded(),
		KeysSeen:  r.engine.KeysSeen(),
		Capacity:  r.engine.Limit(),
		Resident:  r.engine.Resident(),
		Evicted:   r.engine.Evicted(),
		Counts: countsView{
			Requests:         total,
			Loads:            c.Loads,
			Unloads:          c.Unloads,
			Lists:            c.Lists,
			ForeignUnloads:   c.ForeignUnloads,
			RequestsByPath:   c.Requests,
			Evictions:        c.Evictions,
			Reloads:          c.Reloads,
			CapacityRefusals: c.CapacityRefusals,
		},
	}
}

// faultRequest is the body of POST /engines/{namespace}/{pod}/fault: a fakeengine.Fault,
// whose field names match case-insensitively. Hang and Stall are nanoseconds, as a Fault
// marshals, or a duration string such as "30s".
type faultRequest struct {
	Op        string   `json:"op"`
	Status    int      `json:"status"`
	Body      string   `json:"body"`
	Hang      duration `json:"hang"`
	Stall     duration `json:"stall"`
	HugeBody  int      `json:"hugeBody"`
	Malformed bool     `json:"malformed"`
	Lie       bool     `json:"lie"`
	Times     int      `json:"times"`
}

type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("hang and stall must be nanoseconds or a duration string: %w", err)
	}
	*d = duration(n)
	return nil
}

func (f faultRequest) fault() (fakeengine.Fault, error) {
	switch f.Op {
	case fakeengine.OpAll, fakeengine.OpLoad, fakeengine.OpUnload, fakeengine.OpList:
	default:
		return fakeengine.Fault{}, fmt.Errorf("unknown op %q (want %q, %q, %q or empty for all)",
			f.Op, fakeengine.OpLoad, fakeengine.OpUnload, fakeengine.OpList)
	}
	switch {
	case f.Status != 0 && (f.Status < 100 || f.Status > 599):
		return fakeengine.Fault{}, fmt.Errorf("invalid status %d", f.Status)
	case f.Times < 0, f.HugeBody < 0, f.Hang < 0, f.Stall < 0:
		return fakeengine.Fault{}, errors.New("times, hugeBody, hang and stall must not be negative")
	}
	return fakeengine.Fault{
		Op:        f.Op,
		Status:    f.Status,
		Body:      f.Body,
		Hang:      time.Duration(f.Hang),
		Stall:     time.Duration(f.Stall),
		HugeBody:  f.HugeBody,
		Malformed: f.Malformed,
		Lie:       f.Lie,
		Times:     f.Times,
	}, nil
}

// adminHandler serves the admin API:
//
//	GET    /engines                              the engines, as JSON; with ?retired=true
//	                                             also the engines stopped since the start
//	                                             (the last maxRetired), as they were then
//	POST   /engines/{namespace}/{pod}/restart    the engine forgets its adapters
//	POST   /engines/{namespace}/{pod}/fault      install a fault (JSON fakeengine.Fault)
//	DELETE /engines/{namespace}/{pod}/fault      clear the engine's faults
//	POST   /engines/{namespace}/{pod}/complete   a completion (the body of POST
//	                                             /v1/completions) sent to the engine's own
//	                                             inference API over HTTP, its answer back: for
//	                                             a client that cannot reach the engine's port
//	                                             (the host, on kind) but must ask that engine
//	GET    /metrics                              Prometheus metrics
//	GET    /healthz                              200 ok
func adminHandler(m *manager) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(engineCollector{m})

	mux := http.NewServeMux()
	mux.HandleFunc("GET /engines", func(w http.ResponseWriter, req *http.Request) {
		withRetired := false
		if v := req.URL.Query().Get("retired"); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("invalid retired %q: want true or false", v))
				return
			}
			withRetired = b
		}
		rs := m.list()
		views := make([]engineView, 0, len(rs))
		for _, r := range rs {
			views = append(views, viewOf(r))
		}
		if withRetired {
			views = append(views, m.retiredViews()...)
		}
		writeJSON(w, http.StatusOK, views)
	})
	mux.HandleFunc("POST /engines/{namespace}/{pod}/restart", withEngine(m, func(w http.ResponseWriter, _ *http.Request, r *running) {
		r.engine.Restart()
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("POST /engines/{namespace}/{pod}/fault", withEngine(m, func(w http.ResponseWriter, req *http.Request, r *running) {
		var fr faultRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, maxAdminBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&fr); err != nil {
			writeError(w, http.StatusBadRequest, "invalid fault: "+err.Error())
			return
		}
		if dec.More() {
			writeError(w, http.StatusBadRequest, "invalid fault: trailing data after the JSON object")
			return
		}
		f, err := fr.fault()
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid fault: "+err.Error())
			return
		}
		r.engine.SetFault(f)
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("DELETE /engines/{namespace}/{pod}/fault", withEngine(m, func(w http.ResponseWriter, _ *http.Request, r *running) {
		r.engine.ClearFault()
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("POST /engines/{namespace}/{pod}/complete", withEngine(m, func(w http.ResponseWriter, req *http.Request, r *running) {
		completeVia(w, req, "http://"+r.engine.Addr()+"/v1/completions")
	}))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

func withEngine(m *manager, h func(http.ResponseWriter, *http.Request, *running)) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		ns, pod := req.PathValue("namespace"), req.PathValue("pod")
		r := m.get(ns, pod)
		if r == nil {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no engine for pod %s/%s", ns, pod))
			return
		}
		h(w, req, r)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

var (
	requestsDesc = prometheus.NewDesc("fake_engine_requests_total",
		"Requests received by a pod's fake engine (engine and runtime sidecar), by path; paths the engines do not serve are counted as \"other\".",
		[]string{"namespace", "pod", "path"}, nil)
	loadedDesc = prometheus.NewDesc("fake_engine_loaded_adapters",
		"Adapters loaded in a pod's fake engine.",
		[]string{"namespace", "pod"}, nil)
	capacityDesc = prometheus.NewDesc("fake_engine_lora_capacity",
		"Adapters a pod's fake engine holds at once, from its container's arguments (vLLM --max-cpu-loras, SGLang --max-loaded-loras); absent when unlimited.",
		[]string{"namespace", "pod"}, nil)
	residentDesc = prometheus.NewDesc("fake_engine_lora_resident_adapters",
		"Adapters a pod's fake engine holds (a vLLM engine lists the ones it evicted too).",
		[]string{"namespace", "pod"}, nil)
	evictionsDesc = prometheus.NewDesc("fake_engine_lora_evictions_total",
		"Adapters a pod's fake vLLM engine evicted because it was asked to hold more than its capacity.",
		[]string{"namespace", "pod"}, nil)
	refusalsDesc = prometheus.NewDesc("fake_engine_lora_capacity_refusals_total",
		"Loads a pod's fake SGLang engine refused at its capacity (--max-loaded-loras).",
		[]string{"namespace", "pod"}, nil)
)

// knownPaths are the paths a fake engine serves; others are counted as "other", so that
// stray requests cannot grow the metrics without bound.
var knownPaths = map[string]bool{
	"/health":                 true,
	"/v1/models":              true,
	"/v1/load_lora_adapter":   true,
	"/v1/unload_lora_adapter": true,
	"/load_lora_adapter":      true,
	"/unload_lora_adapter":    true,
	"/v1/lora_adapter/load":   true,
	"/v1/lora_adapter/unload": true,
	"/metrics":                true,
}

// engineCollector reads the counters of the running engines at scrape time. An engine's
// counters start from zero when its pod is recreated (a counter reset).
type engineCollector struct{ m *manager }

func (c engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{requestsDesc, loadedDesc, capacityDesc, residentDesc, evictionsDesc, refusalsDesc} {
		ch <- d
	}
}

func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.m.list() {
		ns, pod := r.spec.Namespace, r.spec.Pod
		byPath := map[string]int{}
		counts := r.engine.Counts()
		for k, n := range counts.Requests {
			_, path, _ := strings.Cut(k, " ")
			if !knownPaths[path] {
				path = "other"
			}
			byPath[path] += n
		}
		for path, n := range byPath {
			ch <- prometheus.MustNewConstMetric(requestsDesc, prometheus.CounterValue, float64(n), ns, pod, path)
		}
		ch <- prometheus.MustNewConstMetric(loadedDesc, prometheus.GaugeValue, float64(len(r.engine.Loaded())), ns, pod)
		if limit := r.engine.Limit(); limit > 0 {
			ch <- prometheus.MustNewConstMetric(capacityDesc, prometheus.GaugeValue, float64(limit), ns, pod)
		}
		ch <- prometheus.MustNewConstMetric(residentDesc, prometheus.GaugeValue, float64(len(r.engine.Resident())), ns, pod)
		ch <- prometheus.MustNewConstMetric(evictionsDesc, prometheus.CounterValue, float64(counts.Evictions), ns, pod)
		ch <- prometheus.MustNewConstMetric(refusalsDesc, prometheus.CounterValue, float64(counts.CapacityRefusals), ns, pod)
	}
}

// completeClient asks the engines for completeVia; a completion of the fake engine answers at once.
var completeClient = &http.Client{Timeout: 10 * time.Second}

// completeVia sends the completion in req (its body, Content-Type and Authorization) to the
// engine's inference URL and passes the answer back.
func completeVia(w http.ResponseWriter, req *http.Request, url string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxAdminBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	out, err := http.NewRequestWithContext(req.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	for _, h := range []string{"Content-Type", "Authorization"} {
		if v := req.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	resp, err := completeClient.Do(out)
	if err != nil {
		writeError(w, http.StatusBadGateway, err.Error())
		return
	}
	relay(w, resp)
}

// relay passes an answer back: its status, Content-Type and body.
func relay(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
