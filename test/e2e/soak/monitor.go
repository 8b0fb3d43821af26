package main

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// monitor watches for owned objects deleted while their source still exists, checks what
// every engine was ever sent, and samples the controllers' goroutines and RSS.
type monitor struct {
	d     *driver
	k8s   client.WithWatch
	start time.Time

	mu      sync.Mutex
	bad     []violation
	samples map[string]map[string][]sample // replica -> "pid metric" -> samples

	engMu    sync.Mutex
	breached map[string]bool // breach ids reported
}

// watchEngines checks the engines' whole lives (engineBreaches) every interval until ctx
// ends. The fake engine keeps the record of stopped engines, so a breach on an engine whose
// pod went between two reads is still seen; reading often only dates it to its step.
func (m *monitor) watchEngines(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, _ = m.checkEngines(ctx) // a failed read is retried at the next tick
	}
}

// checkEngines reads every engine the fake engine has run and reports each breach not
// reported before, and returns what it read.
func (m *monitor) checkEngines(ctx context.Context) ([]engineView, error) {
	es, err := m.d.engineHistory(ctx)
	if err != nil {
		return nil, err
	}
	bs := engineBreaches(m.d.world.keyHistory(), es)
	m.engMu.Lock()
	defer m.engMu.Unlock()
	if m.breached == nil {
		m.breached = map[string]bool{}
	}
	for _, b := range bs {
		if !m.breached[b.id] {
			m.breached[b.id] = true
			m.violate(b.invariant, b.detail)
		}
	}
	return es, nil
}

// watchDeletions watches a collection in a namespace until ctx ends. A deleted HTTPRoute
// whose model or adapter the driver still has, or a deleted Service of an adapter the driver
// still has, is a violation: the controllers must never remove what is still wanted (a
// controller acting on a half-filled cache would). When a watch ends it is resumed from the
// last resourceVersion seen (from scratch after 410 Gone); a delete during the gap between
// two watches is not seen.
func (m *monitor) watchDeletions(ctx context.Context, list client.ObjectList, ns string) {
	rv := ""
	for ctx.Err() == nil {
		w, err := m.k8s.Watch(ctx, list, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
		if err != nil {
			time.Sleep(time.Second)
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				rv = "" // 410 Gone: start again from the current state
				break
			}
			obj, err := meta.Accessor(ev.Object)
			if err != nil {
				continue
			}
			rv = obj.GetResourceVersion()
			if ev.Type != watch.Deleted {
				continue
			}
			switch ev.Object.(type) {
			case *gatewayv1.HTTPRoute:
				if m.d.world.routeInUse(obj.GetName()) {
					m.violate("owned objects", fmt.Sprintf("HTTPRoute %s/%s deleted while its model or adapter exists", ns, obj.GetName()))
				}
			case *corev1.Service:
				if m.d.world.adapterExists(ns + "/" + obj.GetName()) {
					m.violate("owned objects", fmt.Sprintf("Service %s/%s deleted while its adapter exists", ns, obj.GetName()))
				}
			}
		}
		w.Stop()
	}
}

func (m *monitor) violate(invariant, detail string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bad = append(m.bad, violation{Step: m.d.step, Seed: m.d.o.seed, Invariant: invariant, Detail: detail})
	m.d.logf("VIOLATION (step %d): %s", m.d.step, detail)
}

func (m *monitor) violations() []violation {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.bad)
}

// sample reads every replica's RSS (from /proc) and goroutines (go_goroutines on its
// metrics endpoint) each interval, keyed by process id: a restarted replica starts a new
// series.
func (m *monitor) sample(ctx context.Context, interval time.Duration) {
	m.samples = map[string]map[string][]sample{}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for r, url := range metricsURL {
			pid, err := os.ReadFile(filepath.Join(m.d.o.stackDir, r+".pid"))
			if err != nil {
				continue
			}
			now := time.Since(m.start).Seconds()
			body, err := get(ctx, url)
			if err != nil {
				continue
			}
			// A standby that becomes the leader starts its controllers: a step up, not a
			// trend. Each process's series is split by role.
			role := "standby"
			if leaderIn(body) {
				role = "leader"
			}
			series := strings.TrimSpace(string(pid)) + " " + role
			rss, errRSS := rssBytes(strings.TrimSpace(string(pid)))
			g, okG := metricValue(body, "go_goroutines")
			m.mu.Lock()
			if m.samples[r] == nil {
				m.samples[r] = map[string][]sample{}
			}
			if errRSS == nil {
				m.samples[r][series+" rss"] = append(m.samples[r][series+" rss"], sample{now, rss})
			}
			if okG {
				m.samples[r][series+" goroutines"] = append(m.samples[r][series+" goroutines"], sample{now, g})
			}
			m.mu.Unlock()
		}
	}
}

func rssBytes(pid string) (float64, error) {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%s/status", pid)
}

func metricValue(body, name string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// Trend limits: a series grows "upward" when its fitted slope over the series' span adds
// more than trendShare of its mean and more than the absolute floor (goroutines, bytes).
const (
	trendShare          = 0.25
	trendGoroutineFloor = 50
	trendRSSFloor       = 64 << 20
	warmup              = 60.0 // seconds of each process's series left out (caches filling)
)

// trends fits a line to each process's series (per role) after its warm-up and returns one
// row per series long enough to judge (at least 2 minutes), and a violation per upward trend.
func (m *monitor) trends() ([]resourceTrend, []violation) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var rows []resourceTrend
	var bad []violation
	for _, r := range slices.Sorted(maps.Keys(m.samples)) {
		for _, key := range slices.Sorted(maps.Keys(m.samples[r])) {
			s := m.samples[r][key]
			if len(s) == 0 {
				continue
			}
			first := s[0].T
			var kept []sample
			for _, x := range s {
				if x.T-first >= warmup {
					kept = append(kept, x)
				}
			}
			if len(kept) < 2 || kept[len(kept)-1].T-kept[0].T < 120 {
				continue
			}
			f := strings.Fields(key) // pid role metric
			if len(f) != 3 {
				continue
			}
			pid, role, metric := f[0], f[1], f[2]
			span := kept[len(kept)-1].T - kept[0].T
			row := resourceTrend{Replica: r, PID: pid, Role: role, Metric: metric, Samples: len(kept), SpanSeconds: span,
				First: kept[0].V, Last: kept[len(kept)-1].V, Mean: mean(kept), SlopePerMinute: slope(kept) * 60}
			growth := row.SlopePerMinute / 60 * span
			floor := float64(trendGoroutineFloor)
			if metric == "rss" {
				floor = trendRSSFloor
			}
			row.Upward = growth > trendShare*row.Mean && growth > floor
			rows = append(rows, row)
			if row.Upward {
				bad = append(bad, violation{Seed: m.d.o.seed, Invariant: "no upward trend",
					Detail: fmt.Sprintf("%s (pid %s, %s) %s grew %.0f over %.0f s (slope %.1f/min, mean %.0f)", r, pid, role, metric, growth, span, row.SlopePerMinute, row.Mean)})
			}
		}
	}
	return rows, bad
}
