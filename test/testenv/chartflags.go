package testenv

import (
	"flag"
	"os"
	"slices"
	"sort"
	"testing"

	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/klog/v2"
)

// ChartFlags checks that the Helm chart's <valuesKey>.flags (in the values.yaml at
// valuesPath) names only flags of the binary's flag set fs, and every flag it has except
// those the chart sets from other values (setByChart: flag → the value that sets it) and
// klog's output plumbing (-v and -vmodule are values); a new flag must be added to the chart.
func ChartFlags(t *testing.T, valuesPath, valuesKey, binary string, fs *flag.FlagSet, setByChart map[string]string) {
	t.Helper()
	data, err := os.ReadFile(valuesPath)
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	controller, _ := values[valuesKey].(map[string]any)
	chart, _ := controller["flags"].(map[string]any)
	if len(chart) == 0 {
		t.Fatalf("%s has no %s.flags", valuesPath, valuesKey)
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
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
		t.Errorf("flags of %s missing from the chart's %s.flags: %v", binary, valuesKey, missing)
	}
	for name := range chart {
		if fs.Lookup(name) == nil {
			t.Errorf("the chart's %s.flags names %q, which is not a flag of %s", valuesKey, name, binary)
		}
	}
}
