package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// violation is one broken invariant, with what replays it.
type violation struct {
	Step      int    `json:"step"`
	Seed      uint64 `json:"seed"`
	Invariant string `json:"invariant"`
	Detail    string `json:"detail"`
}

// resourceTrend is the fitted trend of one process's goroutines or RSS.
type resourceTrend struct {
	Replica        string  `json:"replica"`
	PID            string  `json:"pid"`
	Role           string  `json:"role"`   // leader or standby
	Metric         string  `json:"metric"` // goroutines or rss (bytes)
	Samples        int     `json:"samples"`
	SpanSeconds    float64 `json:"spanSeconds"`
	First          float64 `json:"first"`
	Last           float64 `json:"last"`
	Mean           float64 `json:"mean"`
	SlopePerMinute float64 `json:"slopePerMinute"`
	Upward         bool    `json:"upward"`
}

// report is the soak's result, written as soak.json and soak.md.
type report struct {
	mu sync.Mutex

	Seed          uint64                     `json:"seed"`
	Requested     string                     `json:"requestedDuration"`
	Duration      string                     `json:"duration"`
	Steps         int                        `json:"steps"`
	Namespaces    int                        `json:"namespaces"`
	Operations    map[string]int             `json:"operations"`
	Faults        map[string]int             `json:"faults"`
	Convergence   map[string]summary         `json:"convergenceAfterFault"`
	Deletions     summary                    `json:"deletionToGone"`
	DeletionBound string                     `json:"deletionBound"`
	Exits         map[string]int             `json:"unplannedExits"`
	Engines       engineSummary              `json:"engines"`
	Resources     []resourceTrend            `json:"resources"`
	Trends        []violation                `json:"-"`
	Violations    []violation                `json:"violations"`
	convergence   map[string][]time.Duration `json:"-"`
	deletions     []time.Duration            `json:"-"`
}

// engineSummary is how much the invariants over the engines' lives had to judge.
type engineSummary struct {
	Engines int `json:"engines"` // every engine the fake engine ran
	Stopped int `json:"stopped"` // of which stopped (pods gone or recreated)
	Keyed   int `json:"sentAKey"`
	Static  int `json:"heldAStaticAdapter"`
	// StaticUnloads are unloads of a static adapter's name sent to engines that held it
	// from the start: each is a violation.
	StaticUnloads int `json:"foreignUnloads"`
	// Capped engines had a capacity; Evictions (and CapacityRefusals) are how often one was
	// asked to hold more than it can: each is a violation.
	Capped           int `json:"hadACapacity"`
	Evictions        int `json:"evictions"`
	CapacityRefusals int `json:"capacityRefusals"`
}

func summarizeEngines(es []engineView) engineSummary {
	var s engineSummary
	for _, e := range es {
		s.Engines++
		if e.Retired {
			s.Stopped++
		}
		if slices.ContainsFunc(e.KeysSeen, func(k string) bool { return k != "" }) {
			s.Keyed++
		}
		if len(e.Preloaded) > 0 || e.Counts.ForeignUnloads > 0 {
			s.Static++
		}
		s.StaticUnloads += e.Counts.ForeignUnloads
		if e.Capacity > 0 {
			s.Capped++
		}
		s.Evictions += e.Counts.Evictions
		s.CapacityRefusals += e.Counts.CapacityRefusals
	}
	return s
}

func (s engineSummary) String() string {
	return fmt.Sprintf("%d engines ran (%d stopped since): %d were sent an API key, %d held a static adapter, %d had a capacity; "+
		"%d unloads of a static adapter, %d adapters evicted and %d loads refused beyond a capacity",
		s.Engines, s.Stopped, s.Keyed, s.Static, s.Capped, s.StaticUnloads, s.Evictions, s.CapacityRefusals)
}

func newReport(o options) *report {
	return &report{Seed: o.seed, Requested: o.duration.String(), Namespaces: o.namespaces, DeletionBound: o.deletionBound.String(),
		Operations: map[string]int{}, Faults: map[string]int{}, Exits: map[string]int{},
		convergence: map[string][]time.Duration{}, Violations: []violation{}}
}

func (r *report) violate(step int, seed uint64, invariant, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Violations = append(r.Violations, violation{Step: step, Seed: seed, Invariant: invariant, Detail: detail})
}

func (r *report) converged(kind string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.convergence[kind] = append(r.convergence[kind], d)
}

func (r *report) deletion(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deletions = append(r.deletions, d)
}

func (r *report) write(dir string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Convergence = map[string]summary{}
	for k, ds := range r.convergence {
		r.Convergence[k] = summarize(ds)
	}
	r.Deletions = summarize(r.deletions)
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "soak.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "soak.md"), []byte(r.markdown()), 0o644)
}

func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# loraplane soak\n\nSeed **%d** (replay: `make soak SOAK_SEED=%d SOAK_DURATION=%s`), %s requested, ran %s: %d steps in %d namespaces.\n\n",
		r.Seed, r.Seed, r.Requested, r.Requested, r.Duration, r.Steps, r.Namespaces)
	fmt.Fprintf(&b, "**Invariant violations: %d**\n\n", len(r.Violations))
	b.WriteString("| operation | count |\n|---|---:|\n")
	for _, k := range slices.Sorted(maps.Keys(r.Operations)) {
		fmt.Fprintf(&b, "| %s | %d |\n", k, r.Operations[k])
	}
	b.WriteString("\n| fault | injected | converged after (p50 / p99 / max) |\n|---|---:|---|\n")
	for _, k := range slices.Sorted(maps.Keys(r.Convergence)) {
		s := r.Convergence[k]
		fmt.Fprintf(&b, "| %s | %d | %.1f s / %.1f s / %.1f s (%d steps) |\n", k, r.Faults[k], s.P50, s.P99, s.Max, s.N)
	}
	fmt.Fprintf(&b, "\nConvergence is measured from the end of a step's fault window (engine faults removed, killed\nprocesses started again) until every invariant holds. A step with two faults counts under both.\n\n")
	fmt.Fprintf(&b, "Deleted ModelAdapters gone (finalizer released) after p50 %.1f s, p99 %.1f s, max %.1f s (%d deletions; bound %s).\n\n",
		r.Deletions.P50, r.Deletions.P99, r.Deletions.Max, r.Deletions.N, r.DeletionBound)
	fmt.Fprintf(&b, "Engines, over their whole lives: %s. None may be sent a key its namespace never had, nor an unload of an adapter it was started with.\n\n", r.Engines)
	if len(r.Exits) > 0 {
		b.WriteString("Unplanned process exits (restarted by the driver, as a kubelet would):")
		for _, k := range slices.Sorted(maps.Keys(r.Exits)) {
			fmt.Fprintf(&b, " %s %d;", k, r.Exits[k])
		}
		b.WriteString("\n\n")
	}
	b.WriteString("| replica (pid, role) | metric | span | first → last | mean | slope per minute | upward |\n|---|---|---:|---|---:|---:|---|\n")
	for _, t := range r.Resources {
		f := func(v float64) string {
			if t.Metric == "rss" {
				return fmt.Sprintf("%.1f MiB", v/(1<<20))
			}
			return fmt.Sprintf("%.0f", v)
		}
		fmt.Fprintf(&b, "| %s (%s, %s) | %s | %.0f s | %s → %s | %s | %s | %v |\n", t.Replica, t.PID, t.Role, t.Metric, t.SpanSeconds,
			f(t.First), f(t.Last), f(t.Mean), f(t.SlopePerMinute), t.Upward)
	}
	if len(r.Violations) > 0 {
		b.WriteString("\n## Violations\n\n| step | seed | invariant | detail |\n|---:|---|---|---|\n")
		for _, v := range r.Violations {
			fmt.Fprintf(&b, "| %d | %d | %s | %s |\n", v.Step, v.Seed, v.Invariant, strings.ReplaceAll(v.Detail, "|", "\\|"))
		}
	}
	return b.String()
}
