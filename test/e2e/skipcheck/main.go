// Command skipcheck reads `go test -json` of the e2e suite on stdin, prints the test output as
// `go test -v` would, and ends with a summary of every skipped test and its reason. It exits
// 1 when a test skipped that the cluster kind's list (-expected) does not name: a hook or URL
// a script forgot to set, or misspelt, must fail the run rather than turn into a quiet pass.
//
//	go test -json ... | go run ./skipcheck -expected skips/kwok.txt
//
// The list has one test per line, its name (a test and all its subtests, or one subtest) and
// why the cluster kind skips it; '#' starts a comment.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is the part of a test2json event that skipcheck reads.
type event struct {
	Action string
	Test   string
	Output string
}

// skip is one skipped test and the reason its output gave.
type skip struct {
	test, reason string
}

func main() {
	expectedPath := flag.String("expected", "", "file listing the tests this cluster kind is expected to skip")
	flag.Parse()
	expected, err := readExpected(*expectedPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "skipcheck:", err)
		os.Exit(2)
	}
	skips, err := copyAndCollect(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "skipcheck:", err)
		os.Exit(2)
	}
	if unexpected := report(os.Stdout, skips, expected, *expectedPath); unexpected > 0 {
		os.Exit(1)
	}
}

// readExpected returns the test names of the list with their reasons.
func readExpected(path string) (map[string]string, error) {
	out := map[string]string{}
	if path == "" {
		return out, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for i, line := range strings.Split(string(data), "\n") {
		if c := strings.Index(line, "#"); c >= 0 {
			line = line[:c]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if !strings.HasPrefix(fields[0], "Test") {
			return nil, fmt.Errorf("%s:%d: %q is not a test name", path, i+1, fields[0])
		}
		if len(fields) < 2 {
			return nil, fmt.Errorf("%s:%d: %s has no reason", path, i+1, fields[0])
		}
		out[fields[0]] = strings.Join(fields[1:], " ")
	}
	return out, nil
}

// copyAndCollect writes every event's output to w and returns the skipped tests, each with
// the last line its output had before the skip (what t.Skip printed).
func copyAndCollect(r io.Reader, w io.Writer) ([]skip, error) {
	last := map[string]string{}
	var skips []skip
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// Not an event (the build's own output): pass it on.
			fmt.Fprintln(w, sc.Text())
			continue
		}
		if e.Output != "" {
			fmt.Fprint(w, e.Output)
			if line := strings.TrimSpace(e.Output); e.Test != "" && line != "" &&
				!strings.HasPrefix(line, "=== ") && !strings.HasPrefix(line, "--- ") {
				last[e.Test] = line
			}
		}
		if e.Action == "skip" && e.Test != "" {
			skips = append(skips, skip{test: e.Test, reason: last[e.Test]})
		}
	}
	return skips, sc.Err()
}

// report prints the summary and returns how many skips were not expected.
func report(w io.Writer, skips []skip, expected map[string]string, listPath string) int {
	sort.Slice(skips, func(i, j int) bool { return skips[i].test < skips[j].test })
	unexpected := 0
	fmt.Fprintf(w, "\n=== e2e skip summary: %d skipped (expected for this cluster kind: %s)\n", len(skips), listPath)
	for _, s := range skips {
		why, ok := expectedReason(s.test, expected)
		if !ok {
			unexpected++
			fmt.Fprintf(w, "  UNEXPECTED %s: %s\n", s.test, s.reason)
			continue
		}
		fmt.Fprintf(w, "  expected   %s: %s (%s)\n", s.test, s.reason, why)
	}
	if unexpected > 0 {
		fmt.Fprintf(w, "=== %d unexpected skip(s): a hook or URL is not set for this cluster kind, or the list %s is out of date\n", unexpected, listPath)
	}
	return unexpected
}

// expectedReason finds the list entry naming the test or one of its parents.
func expectedReason(test string, expected map[string]string) (string, bool) {
	for name := test; ; {
		if why, ok := expected[name]; ok {
			return why, true
		}
		i := strings.LastIndex(name, "/")
		if i < 0 {
			return "", false
		}
		name = name[:i]
	}
}
