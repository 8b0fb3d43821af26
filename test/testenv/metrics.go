package testenv

import (
	dto "github.com/prometheus/client_model/go"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics returns the series of a family on controller-runtime's registry whose labels
// include want.
func Metrics(family string, want map[string]string) ([]*dto.Metric, error) {
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		return nil, err
	}
	var out []*dto.Metric
	for _, f := range families {
		if f.GetName() != family {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue next
				}
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// MetricSum adds up the counter, gauge and histogram sample counts of the matching series.
func MetricSum(family string, want map[string]string) (float64, error) {
	ms, err := Metrics(family, want)
	total := 0.0
	for _, m := range ms {
		total += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
	}
	return total, err
}

// ReconcileCount is how many reconciles controller-runtime counted for the named controller
// in this process: a test that claims "nothing happened" first waits for this to grow after
// its change, which proves the controller looked.
func ReconcileCount(controller string) float64 {
	v, _ := MetricSum("controller_runtime_reconcile_total", map[string]string{"controller": controller})
	return v
}
