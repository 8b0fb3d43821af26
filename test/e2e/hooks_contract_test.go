package e2e

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestHookContract: every verb of the hook contract (hooks.txt) is implemented by both stack
// scripts, and every variable it defines is one the suite reads (a misspelt name would leave
// the suite's variable unset, and its tests skipped).
func TestHookContract(t *testing.T) {
	f, err := os.Open("hooks.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	verbs := map[string]bool{}
	vars := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "E2E_") || !strings.Contains(line, " -- ") {
			t.Fatalf("hooks.txt: %q is not VARIABLE VERB ARGS... -- GUARANTEE", line)
		}
		vars[fields[0]], verbs[fields[1]] = true, true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, script := range []string{"../../hack/stack.sh", "../../hack/e2e-kind-stack.sh"} {
		have := caseLabels(t, script)
		for v := range verbs {
			if !have[v] {
				t.Errorf("%s does not implement the verb %q of hooks.txt", filepath.Base(script), v)
			}
		}
	}
	suite := suiteSource(t)
	for v := range vars {
		if !strings.Contains(suite, `"`+v+`"`) {
			t.Errorf("hooks.txt defines %s, which no test of the suite reads", v)
		}
	}
}

// caseLabels returns the labels of a script's top-level case branches ("kill)", "a | b)").
func caseLabels(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	label := regexp.MustCompile(`^([a-z][a-z-]*(?:\s*\|\s*[a-z][a-z-]*)*)\)`)
	out := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if m := label.FindStringSubmatch(line); m != nil {
			for _, l := range strings.Split(m[1], "|") {
				out[strings.TrimSpace(l)] = true
			}
		}
	}
	return out
}

// suiteSource returns the suite's test files, concatenated.
func suiteSource(t *testing.T) string {
	t.Helper()
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range files {
		if f == "hooks_contract_test.go" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}
