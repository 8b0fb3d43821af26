package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const run = `{"Action":"run","Test":"TestA"}
{"Action":"output","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Test":"TestA","Output":"    gateway_test.go:50: E2E_GATEWAY_URL is not set\n"}
{"Action":"output","Test":"TestA","Output":"--- SKIP: TestA (0.00s)\n"}
{"Action":"skip","Test":"TestA"}
{"Action":"run","Test":"TestB/sub"}
{"Action":"output","Test":"TestB/sub","Output":"    resilience_test.go:40: E2E_KILL_ADAPTER is not set\n"}
{"Action":"skip","Test":"TestB/sub"}
{"Action":"output","Test":"TestC","Output":"--- PASS: TestC (1.00s)\n"}
{"Action":"pass","Test":"TestC"}
build output, not an event
`

func TestSkipSummary(t *testing.T) {
	for _, tc := range []struct {
		name       string
		expected   map[string]string
		unexpected int
		want       []string
	}{
		{"none expected", map[string]string{}, 2, []string{"UNEXPECTED TestA: gateway_test.go:50: E2E_GATEWAY_URL is not set", "UNEXPECTED TestB/sub: resilience_test.go:40: E2E_KILL_ADAPTER is not set"}},
		{"both expected, one through its parent", map[string]string{"TestA": "no gateway", "TestB": "no hooks"}, 0, []string{"expected   TestA", "(no gateway)", "expected   TestB/sub"}},
		{"a subtest of another test", map[string]string{"TestA/x": "other"}, 2, []string{"UNEXPECTED TestA"}},
	} {
		var out bytes.Buffer
		skips, err := copyAndCollect(strings.NewReader(run), &out)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "--- PASS: TestC") || !strings.Contains(out.String(), "build output, not an event") {
			t.Errorf("%s: the test output was not passed on:\n%s", tc.name, out.String())
		}
		var summary bytes.Buffer
		if got := report(&summary, skips, tc.expected, "list"); got != tc.unexpected {
			t.Errorf("%s: %d unexpected skips, want %d\n%s", tc.name, got, tc.unexpected, summary.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(summary.String(), w) {
				t.Errorf("%s: the summary lacks %q:\n%s", tc.name, w, summary.String())
			}
		}
	}
}

func TestReadExpected(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "list.txt")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := readExpected(write("# comment\n\nTestA  no gateway here # trailing\n"))
	if err != nil || got["TestA"] != "no gateway here" || len(got) != 1 {
		t.Errorf("readExpected = %v, %v", got, err)
	}
	for _, bad := range []string{"TestA\n", "NotATest reason\n"} {
		if _, err := readExpected(write(bad)); err == nil {
			t.Errorf("readExpected(%q) succeeded, want an error", bad)
		}
	}
}
