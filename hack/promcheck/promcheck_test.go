package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

const (
	root          = "../.."
	ruleManifest  = root + "/deploy/prometheus/prometheusrule.yaml"
	dashboardFile = root + "/deploy/grafana/loraplane.json"
	alertsDoc     = root + "/docs/alerts.md"
	exportedList  = "testdata/exported-metrics.txt"
	promtoolTests = "testdata/alerts_test.yaml"
	runbookPrefix = "https://github.com/loraplane/loraplane/blob/main/docs/alerts.md#"
)

// notFromBinaries are the series Prometheus itself makes for every target.
var notFromBinaries = []string{"up"}

// exportedLine is one line of the committed scrape list: <binary> <family> <type>.
type exportedLine struct{ binary, family, typ string }

// exportedLines reads the committed scrape list.
func exportedLines(t *testing.T) []exportedLine {
	t.Helper()
	f, err := os.Open(exportedList)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []exportedLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			t.Fatalf("%s: bad line %q", exportedList, line)
		}
		out = append(out, exportedLine{binary: fields[0], family: fields[1], typ: fields[2]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("%s lists no metrics", exportedList)
	}
	return out
}

// exported returns the series names the binaries export, from the committed scrape list:
// a histogram family f is queried as f_bucket, f_sum and f_count.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, l := range exportedLines(t) {
		switch l.typ {
		case "histogram":
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[l.family+s] = true
			}
		case "summary":
			for _, s := range []string{"", "_sum", "_count"} {
				out[l.family+s] = true
			}
		default:
			out[l.family] = true
		}
	}
	return out
}

// metricNames parses expr and returns the metric names its selectors use. A selector
// without a literal name (e.g. {__name__=~"..."}) is an error: its metrics cannot be checked.
func metricNames(expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	var selErr error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel {
				if m.Type != labels.MatchEqual {
					selErr = fmt.Errorf("selector %s matches metric names by pattern", vs)
				}
				name = m.Value
			}
		}
		names = append(names, name)
		return nil
	})
	return names, selErr
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func rules(t *testing.T) []rule {
	t.Helper()
	var buf bytes.Buffer
	if err := writeRuleFile(&buf, ruleManifest); err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(buf.Bytes(), &file); err != nil {
		t.Fatal(err)
	}
	var out []rule
	for _, g := range file.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatal("no rules")
	}
	return out
}

// TestRules: every rule's expression parses and names only exported metrics; every alert
// has a severity, a summary, a description and a runbook_url to its own section of
// docs/alerts.md.
func TestRules(t *testing.T) {
	known := exported(t)
	doc, err := os.ReadFile(alertsDoc)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (\S+)\s*$`).FindAllStringSubmatch(string(doc), -1) {
		sections[strings.ToLower(m[1])] = true
	}
	for _, r := range rules(t) {
		name := r.Alert + r.Record
		names, err := metricNames(r.Expr)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for _, n := range names {
			if !known[n] && !slices.Contains(notFromBinaries, n) {
				t.Errorf("%s uses %s, which neither binary exports (%s)", name, n, exportedList)
			}
		}
		if r.Alert == "" {
			continue
		}
		if r.Labels["severity"] == "" {
			t.Errorf("%s has no severity label", name)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				t.Errorf("%s has no %s annotation", name, a)
			}
		}
		if want := runbookPrefix + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", name, r.Annotations["runbook_url"], want)
		}
		if !sections[strings.ToLower(r.Alert)] {
			t.Errorf("%s has no runbook section (## %s) in %s", name, r.Alert, alertsDoc)
		}
	}
}

// ourJobs are the scrape jobs of the binaries (the ServiceMonitors' relabelings set them);
// foreignJobs are jobs a shared Prometheus has beside them, among them the Services' names
// and annotation-based jobs that may scrape the same pods.
var (
	ourJobs     = []string{"adapter-controller", "router-controller"}
	foreignJobs = []string{"", "adapter-controller-metrics", "router-controller-metrics", "controller-manager",
		"kubernetes-pods", "kubernetes-service-endpoints", "kube-state-metrics", "other-adapter-controller"}
)

// TestRulesScoped: every selector of every rule has a job matcher that matches one of our
// jobs and none of the foreign ones, so that no other operator's series (the generic
// controller-runtime ones above all) reaches an alert.
func TestRulesScoped(t *testing.T) {
	for _, r := range rules(t) {
		e, err := parser.NewParser(parser.Options{}).ParseExpr(r.Expr)
		if err != nil {
			t.Fatalf("%s: %v", r.Alert+r.Record, err)
		}
		parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				if err := scopedToOurJobs(vs.LabelMatchers); err != nil {
					t.Errorf("%s: %s: %v", r.Alert+r.Record, vs, err)
				}
			}
			return nil
		})
	}
}

// scopedToOurJobs checks that the matchers select only series of our jobs.
func scopedToOurJobs(ms []*labels.Matcher) error {
	var job *labels.Matcher
	for _, m := range ms {
		if m.Name == "job" {
			job = m
		}
	}
	if job == nil {
		return errors.New("no job matcher")
	}
	if !slices.ContainsFunc(ourJobs, job.Matches) {
		return fmt.Errorf("%s matches none of %v", job, ourJobs)
	}
	for _, f := range foreignJobs {
		if job.Matches(f) {
			return fmt.Errorf("%s matches job %q", job, f)
		}
	}
	return nil
}

// TestPromtoolCoverage: the promtool unit tests check every alert both firing and not
// firing, and name no alert that does not exist.
func TestPromtoolCoverage(t *testing.T) {
	data, err := os.ReadFile(promtoolTests)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTests []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	firing, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range file.Tests {
		for _, a := range tc.AlertRuleTests {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	alerts := map[string]bool{}
	for _, r := range rules(t) {
		if r.Alert == "" {
			continue
		}
		alerts[r.Alert] = true
		if !firing[r.Alert] {
			t.Errorf("no promtool test expects %s to fire", r.Alert)
		}
		if !silent[r.Alert] {
			t.Errorf("no promtool test expects %s not to fire", r.Alert)
		}
	}
	for a := range firing {
		if !alerts[a] {
			t.Errorf("promtool tests expect %s, which is not a rule", a)
		}
	}
}

// TestMetricNames checks the checker: names come from selectors, matrix selectors and
// __name__ matchers; a pattern on __name__ and a syntax error are errors.
func TestMetricNames(t *testing.T) {
	got, err := metricNames(`sum(rate(a_total[5m])) / on (x) {__name__="c"} or up unless {__name__="d", l="v"}`)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a_total", "c", "up", "d"}; !slices.Equal(got, want) {
		t.Errorf("metricNames = %v, want %v", got, want)
	}
	if _, err := metricNames(`{__name__=~"loraplane_.*"}`); err == nil {
		t.Error("a __name__ pattern passed")
	}
	if _, err := metricNames(`sum(rate(x[5m])`); err == nil {
		t.Error("a syntax error passed")
	}
}

func TestMain(m *testing.M) {
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		fmt.Fprintln(os.Stderr, "run from hack/promcheck:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}
