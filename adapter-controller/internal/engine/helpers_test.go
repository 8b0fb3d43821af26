package engine

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	jsonType = "application/json"
	textType = "text/plain; charset=utf-8"
)

// recorded is what a fake engine saw of one request.
type recorded struct {
	Method      string
	Path        string
	Auth        string
	ContentType string
	Body        map[string]any
}

// fakeEngine is an httptest server on 127.0.0.1 that answers the routes it
// is given ("METHOD /path") and, like FastAPI, 404 {"detail":"Not Found"}
// for any other route. It records every request.
type fakeEngine struct {
	srv      *httptest.Server
	mu       sync.Mutex
	got      []recorded
	newConns atomic.Int32
}

func newFakeEngine(t *testing.T, routes map[string]http.HandlerFunc) *fakeEngine {
	t.Helper()
	f := &fakeEngine{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := recorded{
			Method:      r.Method,
			Path:        r.URL.Path,
			Auth:        r.Header.Get("Authorization"),
			ContentType: r.Header.Get("Content-Type"),
		}
		data, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("Reading request body: %v", err)
		}
		if len(data) > 0 {
			if err := json.Unmarshal(data, &rec.Body); err != nil {
				t.Errorf("Request body %q is not a JSON object: %v", data, err)
			}
		}
		f.mu.Lock()
		f.got = append(f.got, rec)
		f.mu.Unlock()
		if h, ok := routes[r.Method+" "+r.URL.Path]; ok {
			h(w, r)
			return
		}
		answer(http.StatusNotFound, jsonType, `{"detail":"Not Found"}`)(w, r)
	})
	f.srv = httptest.NewUnstartedServer(handler)
	f.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			f.newConns.Add(1)
		}
	}
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

// endpoint returns an Endpoint of the given kind whose ports all point at
// the fake engine.
func (f *fakeEngine) endpoint(t *testing.T, kind Kind, apiKey string) Endpoint {
	t.Helper()
	addr, ok := f.srv.Listener.Addr().(*net.TCPAddr)
	if !ok || !addr.IP.IsLoopback() {
		t.Fatalf("Fake engine listens on %v, want a loopback TCP address", f.srv.Listener.Addr())
	}
	return Endpoint{Kind: kind, Host: addr.IP.String(), Port: addr.Port, EnginePort: addr.Port, APIKey: apiKey}
}

func (f *fakeEngine) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.got...)
}

func answer(status int, contentType, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if contentType != "" {
			w.Header().Set("Content-Type", contentType)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// newTestClient builds a client and closes its idle connections at the end.
func newTestClient(t *testing.T, opts Options) *HTTPClient {
	t.Helper()
	c, err := New(opts)
	if err != nil {
		t.Fatalf("New(%+v) failed: %v", opts, err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// errView is the comparable part of an *Error.
type errView struct {
	Reason    Reason
	Status    int
	Message   string
	Retryable bool
}

// viewOf returns nil for nil, and a view that cannot match any expected
// *Error for errors of another type.
func viewOf(err error) *errView {
	if err == nil {
		return nil
	}
	var e *Error
	if !errors.As(err, &e) {
		return &errView{Reason: "<not an *engine.Error>", Message: err.Error()}
	}
	return &errView{Reason: e.Reason, Status: e.Status, Message: e.Message, Retryable: e.Retryable}
}

// reasonView keeps only the classification, for errors whose message comes
// from the Go runtime.
func reasonView(err error) *errView {
	v := viewOf(err)
	if v != nil && v.Reason != "<not an *engine.Error>" {
		v.Message = ""
		v.Status = 0
	}
	return v
}

// observation is one Observer call.
type observation struct {
	Engine, Op, Code string
	D                time.Duration
}

type observations struct {
	mu  sync.Mutex
	got []observation
}

func (o *observations) observe(engine, op, code string, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, observation{engine, op, code, d})
}

func (o *observations) list() []observation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]observation(nil), o.got...)
}

// fakeClock advances by step on every reading, so each request (two
// readings) takes exactly step.
type fakeClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.now
	c.now = c.now.Add(c.step)
	return t
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("Listening: %v", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatalf("Closing listener: %v", err)
	}
	return port
}
