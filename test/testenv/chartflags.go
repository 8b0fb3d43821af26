package testenv

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/klog/v2"
)

// ChartFlags checks the Helm chart (the directory chartDir) against the binary's flag set fs:
//   - values.yaml's <valuesKey>.flags names every flag of fs except those the chart sets from
//     other values (setByChart: flag → the value that sets it) and klog's output plumbing (-v
//     and -vmodule are values): a new flag must be added to the chart;
//   - values.schema.json's <valuesKey>.flags allows exactly the flags values.yaml names;
//   - every values file (values.yaml and ci/*.yaml) names in <valuesKey>.flags and
//     <valuesKey>.extraArgs only flags of fs, so that no install the chart documents or tests
//     passes a flag the binary would exit on.
func ChartFlags(t *testing.T, chartDir, valuesKey, binary string, fs *flag.FlagSet, setByChart map[string]string) {
	t.Helper()
	valuesPath := filepath.Join(chartDir, "values.yaml")
	chart := chartValues(t, valuesPath, valuesKey)
	flags, _ := chart["flags"].(map[string]any)
	if len(flags) == 0 {
		t.Fatalf("%s has no %s.flags", valuesPath, valuesKey)
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	var missing []string
	fs.VisitAll(func(f *flag.Flag) {
		_, inChart := flags[f.Name]
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
	schemaFlags(t, filepath.Join(chartDir, "values.schema.json"), valuesKey, flags)

	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range append([]string{valuesPath}, files...) {
		for _, bad := range UnknownFlags(chartValues(t, path, valuesKey), fs) {
			t.Errorf("%s: %s.%s, which is not a flag of %s: the pod would exit at start", path, valuesKey, bad, binary)
		}
	}
}

// UnknownFlags returns the entries of a controller's values (its flags map and extraArgs
// list) that name no flag of fs, as "flags.<name>" and "extraArgs[i] <arg>".
func UnknownFlags(controller map[string]any, fs *flag.FlagSet) []string {
	var out []string
	flags, _ := controller["flags"].(map[string]any)
	for name := range flags {
		if fs.Lookup(name) == nil {
			out = append(out, "flags."+name)
		}
	}
	extra, _ := controller["extraArgs"].([]any)
	for i, a := range extra {
		arg := fmt.Sprint(a)
		name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
		if !strings.HasPrefix(arg, "-") || fs.Lookup(name) == nil {
			out = append(out, fmt.Sprintf("extraArgs[%d] %s", i, arg))
		}
	}
	sort.Strings(out)
	return out
}

func chartValues(t *testing.T, path, valuesKey string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	controller, _ := values[valuesKey].(map[string]any)
	return controller
}

// schemaFlags checks that the schema's <valuesKey>.flags properties are exactly the flags
// values.yaml names, and that it refuses any other.
func schemaFlags(t *testing.T, path, valuesKey string, flags map[string]any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]struct {
			Properties map[string]struct {
				AdditionalProperties json.RawMessage `json:"additionalProperties"`
				Properties           map[string]any  `json:"properties"`
			} `json:"properties"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	s := schema.Properties[valuesKey].Properties["flags"]
	if string(s.AdditionalProperties) != "false" {
		t.Errorf("%s: %s.flags allows unknown flags (want additionalProperties: false)", path, valuesKey)
	}
	var inSchema, inValues []string
	for name := range s.Properties {
		inSchema = append(inSchema, name)
	}
	for name := range flags {
		inValues = append(inValues, name)
	}
	sort.Strings(inSchema)
	sort.Strings(inValues)
	if !slices.Equal(inSchema, inValues) {
		t.Errorf("%s: %s.flags allows %v; values.yaml names %v", path, valuesKey, inSchema, inValues)
	}
}
