package setup_test

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/loraplane/loraplane/adapter-controller/internal/setup"
	"github.com/loraplane/loraplane/test/testenv"
)

// TestChartValuesNameEveryFlag: the Helm chart's adapterController.flags (deploy/chart/loraplane/
// values.yaml and its schema) names only flags the binary has, and every flag it has except
// those the chart sets from other values and klog's output plumbing (a new flag must be added
// to the chart); and no values file of the chart (values.yaml, ci/*.yaml) passes a flag, in
// flags or extraArgs, that the binary does not define.
func TestChartValuesNameEveryFlag(t *testing.T) {
	fs := flag.NewFlagSet("adapter-controller", flag.ContinueOnError)
	setup.NewOptions().AddFlags(fs)
	testenv.ChartFlags(t, filepath.Join("..", "..", "..", "deploy", "chart", "loraplane"), "adapterController", "adapter-controller", fs,
		map[string]string{
			"kubeconfig":                "in-cluster configuration",
			"metrics-bind-address":      "adapterController.metricsPort",
			"health-probe-bind-address": "adapterController.healthPort",
			"watch-namespace":           "watchNamespaces",
			"delete-all-adapters":       "the cleanup hook sets it",
			"cleanup-timeout":           "adapterController.cleanupOnUninstall.timeout",
		})
}
