// Command promcheck turns the PrometheusRule in deploy/prometheus into the plain rule file
// promtool reads, so the manifest stays the one source of the alerts:
//
//	promcheck rules deploy/prometheus/prometheusrule.yaml > rules.yaml
//
// Its tests (go test, GOWORK=off: this module is outside the workspace so that the
// Prometheus module's dependencies never reach the controllers) parse every PromQL
// expression of the rules and of the Grafana dashboard and check that each metric it names is
// exported by the binaries, as listed in testdata/exported-metrics.txt (kept current by
// test/scrape from a real scrape), and that promtool's tests cover every alert.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"
)

func main() {
	if len(os.Args) != 3 || os.Args[1] != "rules" {
		fmt.Fprintln(os.Stderr, "usage: promcheck rules <prometheusrule.yaml>")
		os.Exit(2)
	}
	if err := writeRuleFile(os.Stdout, os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "promcheck:", err)
		os.Exit(1)
	}
}

// prometheusRule is the part of a monitoring.coreos.com/v1 PrometheusRule that a rule file
// holds: spec.groups, kept as YAML nodes so nothing is lost or reordered.
type prometheusRule struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Spec       struct {
		Groups yaml.Node `yaml:"groups"`
	} `yaml:"spec"`
}

// readPrometheusRule reads the PrometheusRule at path.
func readPrometheusRule(path string) (*prometheusRule, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pr prometheusRule
	if err := yaml.Unmarshal(data, &pr); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		return nil, fmt.Errorf("%s: %s %s is not a monitoring.coreos.com/v1 PrometheusRule", path, pr.APIVersion, pr.Kind)
	}
	if pr.Spec.Groups.Kind != yaml.SequenceNode || len(pr.Spec.Groups.Content) == 0 {
		return nil, errors.New(path + ": spec.groups is empty")
	}
	return &pr, nil
}

// writeRuleFile writes the rule file of the PrometheusRule at path: {groups: spec.groups}.
func writeRuleFile(w io.Writer, path string) error {
	pr, err := readPrometheusRule(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "# Generated from %s by hack/promcheck: do not edit.\n", path)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(map[string]*yaml.Node{"groups": &pr.Spec.Groups}); err != nil {
		return err
	}
	return enc.Close()
}
