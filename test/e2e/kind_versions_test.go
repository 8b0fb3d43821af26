package e2e

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestKindManifestVersions: the kind stack's manifests name the images of the versions the
// Makefile defines (their one definition; hack/e2e-kind.sh loads those images into the cluster,
// so a manifest that names another tag leaves its pod without an image on an offline machine).
func TestKindManifestVersions(t *testing.T) {
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	version := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + `\s*\?=\s*(\S+)\s*$`).FindSubmatch(makefile)
		if m == nil {
			t.Fatalf("the Makefile defines no %s", name)
		}
		return string(m[1])
	}
	traefik, operator, prometheus := version("TRAEFIK_VERSION"), version("PROMETHEUS_OPERATOR_VERSION"), version("PROMETHEUS_VERSION")
	for _, c := range []struct {
		file string
		want []string
	}{
		{"kind/gateway/traefik.yaml", []string{"image: traefik:" + traefik}},
		{"kind/monitoring/operator.yaml", []string{
			"image: quay.io/prometheus-operator/prometheus-operator:" + operator,
			"--prometheus-config-reloader=quay.io/prometheus-operator/prometheus-config-reloader:" + operator,
		}},
		{"kind/monitoring/prometheus.yaml", []string{"version: " + prometheus, "image: quay.io/prometheus/prometheus:" + prometheus}},
	} {
		b, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		lines := map[string]bool{}
		for _, l := range strings.Split(string(b), "\n") {
			lines[strings.TrimPrefix(strings.TrimSpace(l), "- ")] = true
		}
		for _, w := range c.want {
			if !lines[w] {
				t.Errorf("%s has no line %q: its versions must be the Makefile's", c.file, w)
			}
		}
	}
}
