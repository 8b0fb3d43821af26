package fakeengine

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loraplane/loraplane/test/testenv"
)

// ipSeq hands out a fresh 127.0.9.x (then 127.0.10.x, ...) address to each engine a test
// starts, so that tests never share an address.
var ipSeq atomic.Int32

func nextIP() string {
	n := int(ipSeq.Add(1)) + 8 // from 127.0.9.10: TestSharedPort uses 127.0.9.1 and .2
	return fmt.Sprintf("127.0.%d.%d", 9+n/250, 1+n%250)
}

// start starts an engine on a fresh IP and a free port, closed at the end of the test.
func start(t *testing.T, opts Options) *Engine {
	t.Helper()
	e, err := Start(nextIP(), 0, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(e.Close)
	return e
}

// answer is a response read in full.
type answer struct {
	status int
	ctype  string
	body   string
}

// call sends one request and reads the answer; hdr is "Key: value" pairs.
func call(t *testing.T, hc *http.Client, method, url, body string, hdr ...string) (answer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range hdr {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b)}, nil
}

// must is call that fails the test on a transport error.
func must(t *testing.T, method, url, body string, hdr ...string) answer {
	t.Helper()
	a, err := call(t, http.DefaultClient, method, url, body, hdr...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return a
}

// models parses a /v1/models answer into "id" (base) and "id<parent>root" entries.
func models(t *testing.T, body string) []string {
	t.Helper()
	var l struct {
		Object string `json:"object"`
		Data   []struct {
			ID     string  `json:"id"`
			Object string  `json:"object"`
			Root   string  `json:"root"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Fatalf("bad /v1/models body %q: %v", body, err)
	}
	if l.Object != "list" {
		t.Fatalf("object = %q, want list", l.Object)
	}
	var out []string
	for _, m := range l.Data {
		if m.Object != "model" {
			t.Fatalf("model object = %q", m.Object)
		}
		if m.Parent == nil {
			out = append(out, m.ID)
		} else {
			out = append(out, m.ID+"<"+*m.Parent+">"+m.Root)
		}
	}
	return out
}

func url(e *Engine, path string) string { return "http://" + e.Addr() + path }

func runtimeURL(e *Engine, path string) string { return "http://" + e.RuntimeAddr() + path }

// eventually polls cond for up to 5s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, what, func() (bool, string) { return cond(), "" })
}
