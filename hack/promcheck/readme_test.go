package main

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const readme = root + "/README.md"

// readmeRow is a row of README.md's metrics table: | `loraplane_...` | labels | what |.
var readmeRow = regexp.MustCompile("^\\| `(loraplane_[a-z_]+)` \\|")

// TestReadmeMetrics: the metrics table of README.md lists exactly the loraplane_* families
// the binaries export (testdata/exported-metrics.txt, from a real scrape), each once.
func TestReadmeMetrics(t *testing.T) {
	f, err := os.Open(readme)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var documented []string
	inMetrics := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			inMetrics = line == "## Metrics"
			continue
		}
		if m := readmeRow.FindStringSubmatch(line); inMetrics && m != nil {
			if slices.Contains(documented, m[1]) {
				t.Errorf("%s: %s has two rows", readme, m[1])
			}
			documented = append(documented, m[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var families []string
	for _, l := range exportedLines(t) {
		if name := l.family; strings.HasPrefix(name, "loraplane_") && !slices.Contains(families, name) {
			families = append(families, name)
		}
	}
	for _, name := range families {
		if !slices.Contains(documented, name) {
			t.Errorf("%s is exported but has no row in the metrics table of %s", name, readme)
		}
	}
	for _, name := range documented {
		if !slices.Contains(families, name) {
			t.Errorf("%s has a row in the metrics table of %s but neither binary exports it (%s)", name, readme, exportedList)
		}
	}
	t.Logf("%d loraplane_* families exported, %d documented", len(families), len(documented))
}
