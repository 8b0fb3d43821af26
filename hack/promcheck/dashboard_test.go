package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// grafanaVars are the values Grafana substitutes for the built-in variables the dashboard
// uses, so that its expressions can be parsed.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$__interval", "1m")

// TestDashboard: every expression of every panel parses (after Grafana's variable
// substitution) and names only exported metrics; every panel has a title, a description and
// at least one query.
func TestDashboard(t *testing.T) {
	known := exported(t)
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Type        string  `json:"type"`
		Title       string  `json:"title"`
		Description string  `json:"description"`
		Panels      []panel `json:"panels"`
		Targets     []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var dash struct {
		UID    string  `json:"uid"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	var all []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			all = append(all, p)
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	used := map[string]bool{}
	exprs, panels := 0, 0
	for _, p := range all {
		if p.Type == "row" {
			continue
		}
		panels++
		if p.Title == "" || p.Description == "" || len(p.Targets) == 0 {
			t.Errorf("panel %q: needs a title, a description and a query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs++
			expr := grafanaVars.Replace(tg.Expr)
			if strings.Contains(expr, "$") {
				t.Errorf("panel %q: unknown variable in %q", p.Title, tg.Expr)
				continue
			}
			names, err := metricNames(expr)
			if err != nil {
				t.Errorf("panel %q: %q: %v", p.Title, tg.Expr, err)
				continue
			}
			for _, n := range names {
				used[n] = true
				if !known[n] && !slices.Contains(notFromBinaries, n) {
					t.Errorf("panel %q uses %s, which neither binary exports (%s)", p.Title, n, exportedList)
				}
			}
		}
	}
	t.Logf("%d panels, %d expressions, %d metrics", panels, exprs, len(used))
	// What the dashboard is for (docs/monitoring.md): each of these is on it.
	for _, m := range []string{
		"loraplane_cache_sync_duration_seconds_bucket", "loraplane_cache_objects", "loraplane_cache_watch_errors_total",
		"loraplane_cache_synced", "loraplane_startup_duration_seconds", "loraplane_handler_sync_duration_seconds_bucket",
		"loraplane_handler_synced", "loraplane_adapters", "loraplane_adapter_loads_total",
		"loraplane_adapter_unloads_total", "loraplane_engine_request_duration_seconds_bucket", "loraplane_adapter_instances",
		"loraplane_routes", "controller_runtime_reconcile_total", "controller_runtime_reconcile_errors_total",
		"loraplane_adapter_slots", "loraplane_adapters_waiting_for_capacity",
	} {
		if !used[m] {
			t.Errorf("the dashboard has no panel on %s", m)
		}
	}
}
