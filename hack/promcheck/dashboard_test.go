package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

// grafanaVars are the values Grafana substitutes for the built-in variables the dashboard
// uses and stand-ins for its own (cluster, namespace, job), so that its expressions can be
// parsed and their scope checked.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$__interval", "1m",
	"$cluster", "__cluster__", "$namespace", "__namespace__", "$job", "__job__")

// dashboardScope are the matchers every selector of the dashboard carries (after
// grafanaVars), so that a shared Prometheus's other operators never mix in: cluster and
// namespace of the install, and the jobs exporting loraplane_build_info (the job variable).
var dashboardScope = []string{`cluster=~"__cluster__"`, `namespace=~"__namespace__"`, `job=~"__job__"`}

// adapterNamespaced are the series whose namespace label is not the controller's but an
// object's (the ServiceMonitor keeps it with honorLabels): the namespace variable does not
// apply to them.
var adapterNamespaced = []string{"loraplane_adapter_instances", "loraplane_adapter_slots", "loraplane_adapters_waiting_for_capacity"}

// unscopedSelectors returns the selectors of expr that lack one of the matchers want
// (written as label=~"value" or label="value"), except for namespace on adapterNamespaced.
func unscopedSelectors(expr string, want []string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		have := map[string]bool{}
		for _, m := range vs.LabelMatchers {
			have[m.String()] = true
		}
		for _, w := range want {
			exempt := strings.HasPrefix(w, "namespace") && slices.Contains(adapterNamespaced, vs.Name)
			if !have[w] && !exempt {
				out = append(out, fmt.Sprintf("%s lacks %s", vs, w))
			}
		}
		return nil
	})
	return out, nil
}

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
		UID        string  `json:"uid"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
				AllValue   string `json:"allValue"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	// The job variable lists only jobs exporting loraplane_build_info, and All means those:
	// a custom all value (e.g. .*) would let every operator's series in.
	vars := map[string]bool{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = true
		if v.Name == "job" && (!strings.HasPrefix(v.Definition, "label_values(loraplane_build_info") || v.AllValue != "") {
			t.Errorf("variable job: %q with all value %q, want label_values(loraplane_build_info...) and no custom all value", v.Definition, v.AllValue)
		}
	}
	for _, v := range []string{"datasource", "cluster", "namespace", "job"} {
		if !vars[v] {
			t.Errorf("the dashboard has no %s variable", v)
		}
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
			unscoped, err := unscopedSelectors(expr, dashboardScope)
			if err != nil {
				t.Errorf("panel %q: %q: %v", p.Title, tg.Expr, err)
				continue
			}
			for _, u := range unscoped {
				t.Errorf("panel %q: %s: not scoped to the dashboard's cluster, namespace and job", p.Title, u)
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
