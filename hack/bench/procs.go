package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// proc is a controller process started by the harness.
type proc struct {
	name    string
	cmd     *exec.Cmd
	metrics string // host:port
	probe   string
	start   time.Time
	done    chan struct{}
}

var localHTTP = &http.Client{Timeout: 5 * time.Second}

func (b *bench) startController(name string, idx int, extra ...string) (*proc, error) {
	ports := map[string][2]string{
		"adapter-controller": {"127.0.0.1:28080", "127.0.0.1:28081"},
		"router-controller":  {"127.0.0.1:28082", "127.0.0.1:28083"},
	}[name]
	args := append([]string{
		"--kubeconfig", b.kubeconfig,
		"--metrics-bind-address", ports[0], "--health-probe-bind-address", ports[1],
		"--kube-api-qps", fmt.Sprint(b.o.qps), "--kube-api-burst", fmt.Sprint(b.o.burst),
	}, extra...)
	args = append(args, strings.Fields(b.o.extraArgs[name])...)
	logPath := filepath.Join(b.o.out, fmt.Sprintf("%s-point%d.log", name, idx+1))
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(context.Background(), filepath.Join(b.o.root, "bin", name), args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, cmd: cmd, metrics: ports[0], probe: ports[1], done: make(chan struct{})}
	p.start = time.Now()
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		return nil, err
	}
	go func() { _ = cmd.Wait(); _ = lf.Close(); close(p.done) }()
	b.procs = append(b.procs, p)
	return p, nil
}

// waitReady polls /readyz until it answers 200 and returns process start → ready.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.done:
			return 0, fmt.Errorf("%s exited before it was ready (see its log)", p.name)
		default:
		}
		resp, err := get(ctx, "http://"+p.probe+"/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(p.start), nil
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s not ready after %s: %w", p.name, timeout, errTimeout)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM, then SIGKILL after 10s.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// vmRSS reads VmRSS of the process from /proc, in bytes.
func (p *proc) vmRSS() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				kb, _ := strconv.ParseFloat(f[1], 64)
				return kb * 1024
			}
		}
	}
	return 0
}

// sample is one Prometheus text-format sample.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

func get(ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return localHTTP.Do(req)
}

func (p *proc) scrape() ([]sample, error) {
	resp, err := get(context.Background(), "http://"+p.metrics+"/metrics")
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s /metrics: %s", p.name, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s /metrics: %w", p.name, err)
	}
	return samples(families), nil
}

// samples flattens metric families into the samples of the text format: counters, gauges
// and untyped metrics under their name, histograms and summaries as name_sum and
// name_count.
func samples(families map[string]*dto.MetricFamily) []sample {
	var out []sample
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			add := func(name string, v float64) { out = append(out, sample{name: name, labels: labels, value: v}) }
			switch {
			case m.Counter != nil:
				add(name, m.GetCounter().GetValue())
			case m.Gauge != nil:
				add(name, m.GetGauge().GetValue())
			case m.Untyped != nil:
				add(name, m.GetUntyped().GetValue())
			case m.Histogram != nil:
				add(name+"_sum", m.GetHistogram().GetSampleSum())
				add(name+"_count", float64(m.GetHistogram().GetSampleCount()))
			case m.Summary != nil:
				add(name+"_sum", m.GetSummary().GetSampleSum())
				add(name+"_count", float64(m.GetSummary().GetSampleCount()))
			}
		}
	}
	return out
}

// sum adds the samples named name whose labels pass keep.
func sum(ss []sample, name string, keep func(map[string]string) bool) float64 {
	t := 0.0
	for _, s := range ss {
		if s.name == name && (keep == nil || keep(s.labels)) {
			t += s.value
		}
	}
	return t
}

func isWrite(l map[string]string) bool {
	switch l["method"] {
	case "POST", "PUT", "PATCH", "DELETE":
		return true
	}
	return false
}

func (p *proc) writes() (float64, error) {
	ss, err := p.scrape()
	if err != nil {
		return 0, err
	}
	return sum(ss, "rest_client_requests_total", isWrite), nil
}

func (p *proc) writesByMethod() (map[string]float64, error) {
	ss, err := p.scrape()
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	for _, s := range ss {
		if s.name == "rest_client_requests_total" && isWrite(s.labels) {
			m[s.labels["method"]] += s.value
		}
	}
	return m, nil
}
