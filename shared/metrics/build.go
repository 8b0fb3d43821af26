package metrics

import (
	"sync"

	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/loraplane/loraplane/shared/version"
)

// BuildInfo is 1 with the running binary's version, revision and Go version as labels, the
// way Prometheus' own build_info metrics are: join on it to see what runs where.
var BuildInfo = NewGaugeVec("build_info",
	"1, labelled with the version, revision and Go version of the running binary.", "version", "revision", "goversion")

var buildInfoOnce sync.Once

// RegisterBuildInfo registers loraplane_build_info on controller-runtime's registry and sets
// it for the running binary. It is safe to call more than once.
func RegisterBuildInfo() {
	buildInfoOnce.Do(func() {
		crmetrics.Registry.MustRegister(BuildInfo)
		b := version.Get()
		BuildInfo.WithLabelValues(b.Version, b.Revision, b.GoVersion).Set(1)
	})
}
