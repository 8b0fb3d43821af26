package setup_test

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/klog/v2"

	"github.com/modelplane/modelplane/router-controller/internal/setup"
)

// TestChartValuesNameEveryFlag: the Helm chart's routerController.flags (deploy/chart/modelplane/
// values.yaml) names only flags the binary has, and every flag it has except those the chart
// sets from other values and klog's output plumbing; a new flag must be added to the chart.
func TestChartValuesNameEveryFlag(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "chart", "modelplane", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Controller struct {
			Flags map[string]any `json:"flags"`
		} `json:"routerController"`
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	chart := values.Controller.Flags
	if len(chart) == 0 {
		t.Fatal("values.yaml has no routerController.flags")
	}
	setByChart := map[string]string{
		"kubeconfig":                "in-cluster configuration",
		"metrics-bind-address":      "routerController.metricsPort",
		"health-probe-bind-address": "routerController.healthPort",
		"watch-namespace":           "watchNamespaces",
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)

	fs := flag.NewFlagSet("router-controller", flag.ContinueOnError)
	setup.NewOptions().AddFlags(fs)
	var missing []string
	fs.VisitAll(func(f *flag.Flag) {
		_, inChart := chart[f.Name]
		_, bySetting := setByChart[f.Name]
		isKlog := klogFlags.Lookup(f.Name) != nil && !slices.Contains([]string{"v", "vmodule"}, f.Name)
		if !inChart && !bySetting && !isKlog {
			missing = append(missing, f.Name)
		}
	})
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("flags of router-controller missing from the chart's routerController.flags: %v", missing)
	}
	for name := range chart {
		if fs.Lookup(name) == nil {
			t.Errorf("the chart's routerController.flags names %q, which is not a flag of router-controller", name)
		}
	}
}
