package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// op runs one Client operation against ep.
type op struct {
	name string
	run  func(ctx context.Context, c Client, ep Endpoint) error
}

var ops = []op{
	{"load", func(ctx context.Context, c Client, ep Endpoint) error {
		return c.Load(ctx, ep, LoadRequest{Name: "sql-lora", ArtifactURL: "hf://org/sql-lora"})
	}},
	{"unload", func(ctx context.Context, c Client, ep Endpoint) error {
		return c.Unload(ctx, ep, "sql-lora")
	}},
	{"list", func(ctx context.Context, c Client, ep Endpoint) error {
		_, err := c.ListAdapters(ctx, ep)
		return err
	}},
}

// successRoutes answers every route of every kind with success, but only
// to the right bearer token; otherwise 401 echoing the token it got.
func successRoutes(wantKey string) map[string]http.HandlerFunc {
	guard := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if got := r.Header.Get("Authorization"); got != "Bearer "+wantKey {
				key := strings.TrimPrefix(got, "Bearer ")
				answer(http.StatusUnauthorized, jsonType,
					fmt.Sprintf(`{"error":{"message":"Invalid API key %s","type":"AuthenticationError","code":401}}`, key))(w, r)
				return
			}
			h(w, r)
		}
	}
	text := guard(answer(200, textType, "Success"))
	sglang := guard(answer(200, jsonType, `{"success":true,"error_message":""}`))
	return map[string]http.HandlerFunc{
		"POST /v1/load_lora_adapter":   text,
		"POST /v1/unload_lora_adapter": text,
		"POST /load_lora_adapter":      sglang,
		"POST /unload_lora_adapter":    sglang,
		"POST /v1/lora_adapter/load":   text,
		"POST /v1/lora_adapter/unload": text,
		"GET /v1/models":               guard(answer(200, jsonType, `{"data":[{"id":"base"},{"id":"sql-lora","parent":"base"}]}`)),
	}
}

func TestAPIKey(t *testing.T) {
	const rightKey = "sk-right-0123456789"
	cases := map[string]struct {
		key      string
		wantAuth string
		want     *errView
	}{
		"right key": {key: rightKey, wantAuth: "Bearer " + rightKey},
		"wrong key": {
			key: "sk-wrong-9876543210", wantAuth: "Bearer sk-wrong-9876543210",
			want: &errView{Reason: ReasonEngineUnauthorized, Status: 401, Message: "Invalid API key <redacted>"},
		},
		"no key sends no header": {
			wantAuth: "",
			want:     &errView{Reason: ReasonEngineUnauthorized, Status: 401, Message: "Invalid API key"},
		},
	}
	for _, kind := range []Kind{KindVLLM, KindSGLang, KindRuntime} {
		for _, o := range ops {
			for name, tc := range cases {
				t.Run(fmt.Sprintf("%s/%s/%s", kind, o.name, name), func(t *testing.T) {
					f := newFakeEngine(t, successRoutes(rightKey))
					c := newTestClient(t, Options{})
					err := o.run(context.Background(), c, f.endpoint(t, kind, tc.key))
					if diff := cmp.Diff(tc.want, viewOf(err)); diff != "" {
						t.Errorf("Error mismatch (-want +got):\n%s\nerror: %v", diff, err)
					}
					if err != nil && tc.key != "" && strings.Contains(err.Error(), tc.key) {
						t.Errorf("Error %q contains the API key", err)
					}
					reqs := f.requests()
					if len(reqs) != 1 {
						t.Fatalf("Engine received %d requests, want 1: %+v", len(reqs), reqs)
					}
					if reqs[0].Auth != tc.wantAuth {
						t.Errorf("Authorization header = %q, want %q", reqs[0].Auth, tc.wantAuth)
					}
				})
			}
		}
	}
}

func TestTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	for _, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			release := make(chan struct{})
			slow := func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
				case <-release:
				}
			}
			f := newFakeEngine(t, map[string]http.HandlerFunc{
				"POST /v1/load_lora_adapter":   slow,
				"POST /v1/unload_lora_adapter": slow,
				"GET /v1/models":               slow,
			})
			// Registered after the server's Close, so it runs first and no
			// handler can hold Close up.
			t.Cleanup(func() { close(release) })
			var obs observations
			c := newTestClient(t, Options{Timeout: timeout, LoadTimeout: timeout, Observer: obs.observe})

			start := time.Now()
			err := o.run(context.Background(), c, f.endpoint(t, KindVLLM, ""))
			elapsed := time.Since(start)

			if diff := cmp.Diff(&errView{Reason: ReasonEngineTimeout, Retryable: true}, reasonView(err)); diff != "" {
				t.Errorf("Error mismatch (-want +got):\n%s\nerror: %v", diff, err)
			}
			if !Unanswered(err) {
				t.Errorf("Unanswered(%v) = false: a timed-out request may still take effect", err)
			}
			// Far below DefaultTimeout: the configured timeout applied.
			if elapsed < timeout || elapsed > timeout+2*time.Second {
				t.Errorf("Call returned after %v, want about %v", elapsed, timeout)
			}
			if got := obs.list(); len(got) != 1 || got[0].Code != CodeTimeout {
				t.Errorf("Observations = %+v, want one with code %q", got, CodeTimeout)
			}
		})
	}
}

func TestCallerCancel(t *testing.T) {
	arrived := make(chan struct{})
	f := newFakeEngine(t, map[string]http.HandlerFunc{
		"GET /v1/models": func(w http.ResponseWriter, r *http.Request) {
			close(arrived)
			<-r.Context().Done()
		},
	})
	c := newTestClient(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-arrived:
			cancel()
		case <-time.After(5 * time.Second):
		}
	}()
	_, err := c.ListAdapters(ctx, f.endpoint(t, KindVLLM, ""))
	if diff := cmp.Diff(&errView{Reason: ReasonEngineRequestCanceled, Retryable: true}, reasonView(err)); diff != "" {
		t.Errorf("Error mismatch (-want +got):\n%s\nerror: %v", diff, err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("errors.Is(%v, context.Canceled) = false, want true", err)
	}
}

// countingTransport counts the response body bytes the client reads.
type countingTransport struct {
	base http.RoundTripper
	read atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.read}
	return resp, nil
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func TestResponseTooLarge(t *testing.T) {
	const size = 10 << 20
	cases := map[string]struct {
		declareLength bool
		wantRead      int64
	}{
		// Content-Length over the limit: fail before reading anything.
		"declared length": {declareLength: true, wantRead: 0},
		// Chunked: read one byte past the limit, then stop.
		"chunked": {declareLength: false, wantRead: DefaultMaxResponseBytes + 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var written atomic.Int64
			f := newFakeEngine(t, map[string]http.HandlerFunc{
				"GET /v1/models": func(w http.ResponseWriter, r *http.Request) {
					if tc.declareLength {
						w.Header().Set("Content-Length", strconv.Itoa(size))
					}
					w.Header().Set("Content-Type", jsonType)
					w.WriteHeader(http.StatusOK)
					chunk := bytes.Repeat([]byte(" "), 32<<10)
					for written.Load() < size {
						n, err := w.Write(chunk)
						written.Add(int64(n))
						if err != nil {
							return
						}
					}
				},
			})
			base := &http.Transport{}
			t.Cleanup(base.CloseIdleConnections)
			ct := &countingTransport{base: base}
			var obs observations
			c := newTestClient(t, Options{HTTPClient: &http.Client{Transport: ct}, Observer: obs.observe})

			_, err := c.ListAdapters(context.Background(), f.endpoint(t, KindVLLM, ""))
			want := &errView{Reason: ReasonEngineResponseTooLarge, Status: 200, Message: "the response body is larger than 1048576 bytes"}
			if diff := cmp.Diff(want, viewOf(err)); diff != "" {
				t.Errorf("Error mismatch (-want +got):\n%s\nerror: %v", diff, err)
			}
			if got := ct.read.Load(); got != tc.wantRead {
				t.Errorf("Client read %d body bytes, want %d", got, tc.wantRead)
			}
			if got := obs.list(); len(got) != 1 || got[0].Code != "200" {
				t.Errorf("Observations = %+v, want one with code 200", got)
			}
		})
	}
}

func TestResponseSizeLimitBoundary(t *testing.T) {
	const limit = 64
	body := `{"data":[{"id":"a","parent":"b"}]}`
	cases := map[string]struct {
		size int
		want *errView
	}{
		"at the limit":     {size: limit},
		"one byte over it": {size: limit + 1, want: &errView{Reason: ReasonEngineResponseTooLarge, Status: 200, Message: "the response body is larger than 64 bytes"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			padded := body + strings.Repeat(" ", tc.size-len(body))
			f := newFakeEngine(t, map[string]http.HandlerFunc{"GET /v1/models": answer(200, jsonType, padded)})
			c := newTestClient(t, Options{MaxResponseBytes: limit})
			_, err := c.ListAdapters(context.Background(), f.endpoint(t, KindVLLM, ""))
			if diff := cmp.Diff(tc.want, viewOf(err)); diff != "" {
				t.Errorf("Error mismatch (-want +got):\n%s\nerror: %v", diff, err)
			}
		})
	}
}

func TestConnectionRefused(t *testing.T) {
	for _, kind := range []Kind{KindVLLM, KindSGLang, KindRuntime} {
		for _, o := range ops {
			t.Run(string(kind)+"/"+o.name, func(t *testing.T) {
				port := closedPort(t)
				var obs observations
				c := newTestClient(t, Options{Observer: obs.observe})
				ep := Endpoint{Kind: kind, Host: "127.0.0.1", Port: port, EnginePort: port}
				err := o.run(context.Background(), c, ep)
				want := &errView{Reason: ReasonEngineUnreachable, Message: "connection refused", Retryable: true}
				if diff := cmp.Diff(want, viewOf(err)); diff != "" {
					t.Errorf("Error mismatch (-want +got):\n%s\nerror: %v", diff, err)
				}
				if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("errors.Is(%v, ECONNREFUSED) = false, want true", err)
				}
				if Unanswered(err) {
					t.Errorf("Unanswered(%v) = true: a refused connection sent nothing", err)
				}
				if diff := cmp.Diff([]observation{{Engine: string(kind), Op: o.name, Code: CodeUnreachable}},
					obs.list(), cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".D" }, cmp.Ignore())); diff != "" {
					t.Errorf("Observations mismatch (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestConnectionClosedByEngine(t *testing.T) {
	f := newFakeEngine(t, map[string]http.HandlerFunc{
		"GET /v1/models": func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("Hijacking: %v", err)
				return
			}
			_ = conn.Close()
		},
	})
	c := newTestClient(t, Options{})
	_, err := c.ListAdapters(context.Background(), f.endpoint(t, KindVLLM, ""))
	want := &errView{Reason: ReasonEngineUnreachable, Message: "the engine closed the connection", Retryable: true}
	if diff := cmp.Diff(want, viewOf(err)); diff != "" {
		t.Errorf("Error mismatch (-want +got):\n%s\nerror: %v", diff, err)
	}
	if !Unanswered(err) {
		t.Errorf("Unanswered(%v) = false: the request was sent and not answered", err)
	}
}

// TestLoadTimeoutIsSeparate: loads wait up to LoadTimeout, everything else up to Timeout.
// (Before: one timeout for all, 10 s by default, which large loads exceed.)
func TestLoadTimeoutIsSeparate(t *testing.T) {
	slow := func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(400 * time.Millisecond)
		answer(200, textType, "Success")(w, r)
	}
	f := newFakeEngine(t, map[string]http.HandlerFunc{
		"POST /v1/load_lora_adapter": slow,
		"GET /v1/models": func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(400 * time.Millisecond)
			answer(200, jsonType, `{"data":[]}`)(w, r)
		},
	})
	c := newTestClient(t, Options{Timeout: 100 * time.Millisecond, LoadTimeout: 5 * time.Second})
	ep := f.endpoint(t, KindVLLM, "")
	if err := c.Load(context.Background(), ep, LoadRequest{Name: "sql-lora", ArtifactURL: "hf://org/sql-lora"}); err != nil {
		t.Errorf("a load of 400 ms with a 5 s load timeout: %v", err)
	}
	if _, err := c.ListAdapters(context.Background(), ep); ReasonOf(err) != ReasonEngineTimeout {
		t.Errorf("a listing of 400 ms with a 100 ms timeout: %v, want %s", err, ReasonEngineTimeout)
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	target := newFakeEngine(t, successRoutes(""))
	targetURL := target.srv.URL
	cases := map[string]struct {
		kind     Kind
		op       op
		status   int
		location string
		wantTo   string
	}{
		"list, 302":                 {kind: KindVLLM, op: ops[2], status: 302, location: targetURL + "/v1/models", wantTo: targetURL + "/v1/models"},
		"vllm load, 307":            {kind: KindVLLM, op: ops[0], status: 307, location: targetURL + "/v1/load_lora_adapter", wantTo: targetURL + "/v1/load_lora_adapter"},
		"sglang unload, 308":        {kind: KindSGLang, op: ops[1], status: 308, location: targetURL + "/unload_lora_adapter", wantTo: targetURL + "/unload_lora_adapter"},
		"runtime load, 301":         {kind: KindRuntime, op: ops[0], status: 301, location: targetURL + "/v1/lora_adapter/load", wantTo: targetURL + "/v1/lora_adapter/load"},
		"credentials are not shown": {kind: KindVLLM, op: ops[2], status: 302, location: "http://user:hunter2@127.0.0.1:1/v1/models?sig=s3cr3t", wantTo: "http://127.0.0.1:1/v1/models"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			redirect := func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Location", tc.location)
				w.WriteHeader(tc.status)
			}
			f := newFakeEngine(t, map[string]http.HandlerFunc{
				"GET /v1/models": redirect, "POST /v1/load_lora_adapter": redirect,
				"POST /unload_lora_adapter": redirect, "POST /v1/lora_adapter/load": redirect,
			})
			c := newTestClient(t, Options{})
			err := tc.op.run(context.Background(), c, f.endpoint(t, tc.kind, ""))
			want := &errView{
				Reason:  ReasonEngineBadResponse,
				Status:  tc.status,
				Message: "the engine answered with a redirect, which is not followed (to " + tc.wantTo + ")",
			}
			if diff := cmp.Diff(want, viewOf(err)); diff != "" {
				t.Errorf("Error mismatch (-want +got):\n%s\nerror: %v", diff, err)
			}
			if got := len(f.requests()); got != 1 {
				t.Errorf("Redirecting engine received %d requests, want 1", got)
			}
			if got := target.requests(); len(got) != 0 {
				t.Errorf("Redirect target received requests, want none: %+v", got)
			}
		})
	}
}

func TestConnectionReuse(t *testing.T) {
	f := newFakeEngine(t, map[string]http.HandlerFunc{
		"GET /v1/models":             answer(200, jsonType, `{"data":[]}`),
		"POST /v1/load_lora_adapter": answer(400, jsonType, `{"error":{"message":"The lora adapter 'sql-lora' has already been loaded."}}`),
	})
	c := newTestClient(t, Options{})
	ep := f.endpoint(t, KindVLLM, "")
	for i := range 3 {
		if _, err := c.ListAdapters(context.Background(), ep); err != nil {
			t.Fatalf("ListAdapters() #%d failed: %v", i, err)
		}
		if err := c.Load(context.Background(), ep, LoadRequest{Name: "sql-lora", ArtifactURL: "hf://org/sql-lora"}); err != nil {
			t.Fatalf("Load() #%d failed: %v", i, err)
		}
	}
	if got := len(f.requests()); got != 6 {
		t.Fatalf("Engine received %d requests, want 6", got)
	}
	if got := f.newConns.Load(); got != 1 {
		t.Errorf("Engine saw %d connections for 6 sequential requests, want 1", got)
	}
}

func TestObserver(t *testing.T) {
	f := newFakeEngine(t, map[string]http.HandlerFunc{
		"POST /load_lora_adapter":      answer(200, jsonType, `{"success":true}`),
		"POST /v1/lora_adapter/unload": answer(503, textType, "busy"),
		"GET /v1/models":               answer(200, jsonType, `{"data":[]}`),
	})
	var obs observations
	clock := &fakeClock{now: time.Unix(1000, 0), step: 50 * time.Millisecond}
	c := newTestClient(t, Options{Observer: obs.observe, Now: clock.Now})

	ctx := context.Background()
	_ = c.Load(ctx, f.endpoint(t, KindSGLang, ""), LoadRequest{Name: "a", ArtifactURL: "/m/a"})
	_ = c.Unload(ctx, f.endpoint(t, KindRuntime, ""), "a")
	_, _ = c.ListAdapters(ctx, f.endpoint(t, KindVLLM, ""))
	// Rejected before any request: not observed.
	_ = c.Load(ctx, f.endpoint(t, KindVLLM, ""), LoadRequest{Name: "a", ArtifactURL: "s3://b/a"})

	want := []observation{
		{Engine: "sglang", Op: "load", Code: "200", D: 50 * time.Millisecond},
		{Engine: "aibrix-runtime", Op: "unload", Code: "503", D: 50 * time.Millisecond},
		{Engine: "vllm", Op: "list", Code: "200", D: 50 * time.Millisecond},
	}
	if diff := cmp.Diff(want, obs.list()); diff != "" {
		t.Errorf("Observations mismatch (-want +got):\n%s", diff)
	}
}

// TestInvalidRequestsAreNotSent checks that nothing is dialled for an
// endpoint or request that fails validation.
func TestInvalidRequestsAreNotSent(t *testing.T) {
	f := newFakeEngine(t, successRoutes(""))
	good := f.endpoint(t, KindVLLM, "")
	withHost := func(h string) Endpoint { ep := good; ep.Host = h; return ep }
	cases := map[string]struct {
		ep   Endpoint
		req  LoadRequest
		want *errView
	}{
		"host name instead of pod IP": {
			ep: withHost("localhost"), req: LoadRequest{Name: "a", ArtifactURL: "/m"},
			want: &errView{Reason: ReasonInvalidEndpoint, Message: `pod IP "localhost" is not an IP address`},
		},
		"no host": {
			ep: withHost(""), req: LoadRequest{Name: "a", ArtifactURL: "/m"},
			want: &errView{Reason: ReasonInvalidEndpoint, Message: "pod has no IP address in its status yet"},
		},
		"port out of range": {
			ep: Endpoint{Host: good.Host, Port: 70000}, req: LoadRequest{Name: "a", ArtifactURL: "/m"},
			want: &errView{Reason: ReasonInvalidEndpoint, Message: "port 70000 or engine port 70000 is out of range 1-65535"},
		},
		"unknown kind": {
			ep: Endpoint{Kind: "tgi", Host: good.Host, Port: good.Port}, req: LoadRequest{Name: "a", ArtifactURL: "/m"},
			want: &errView{Reason: ReasonEngineUnsupported, Message: `unknown engine kind "tgi"`},
		},
		"API key with a newline": {
			ep: Endpoint{Host: good.Host, Port: good.Port, APIKey: "sk-secret\n"}, req: LoadRequest{Name: "a", ArtifactURL: "/m"},
			want: &errView{Reason: ReasonInvalidEndpoint, Message: "the API key contains characters that are not allowed in an HTTP header"},
		},
		"empty adapter name": {
			ep: good, req: LoadRequest{ArtifactURL: "/m"},
			want: &errView{Reason: ReasonInvalidRequest, Message: "the adapter name is empty"},
		},
		"empty artifact": {
			ep: good, req: LoadRequest{Name: "a"},
			want: &errView{Reason: ReasonArtifactUnsupported, Message: "the artifact URL is empty"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := newTestClient(t, Options{})
			err := c.Load(context.Background(), tc.ep, tc.req)
			if diff := cmp.Diff(tc.want, viewOf(err)); diff != "" {
				t.Errorf("Error mismatch (-want +got):\n%s\nerror: %v", diff, err)
			}
			if err != nil && strings.Contains(err.Error(), "sk-secret") {
				t.Errorf("Error %q contains the API key", err)
			}
		})
	}
	if got := f.requests(); len(got) != 0 {
		t.Errorf("Engine received requests, want none: %+v", got)
	}
}

func TestNewOptions(t *testing.T) {
	cases := map[string]struct {
		opts    Options
		wantErr bool
	}{
		"zero value":                          {},
		"all set":                             {opts: Options{Timeout: time.Second, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute, MaxResponseBytes: 10}},
		"own HTTP client":                     {opts: Options{HTTPClient: &http.Client{}}},
		"negative timeout":                    {opts: Options{Timeout: -1}, wantErr: true},
		"negative body limit":                 {opts: Options{MaxResponseBytes: -1}, wantErr: true},
		"negative idle connections":           {opts: Options{MaxIdleConnsPerHost: -1}, wantErr: true},
		"negative idle timeout":               {opts: Options{IdleConnTimeout: -1}, wantErr: true},
		"transport settings with HTTP client": {opts: Options{HTTPClient: &http.Client{}, MaxIdleConnsPerHost: 2}, wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := New(tc.opts)
			if gotErr := err != nil; gotErr != tc.wantErr {
				t.Fatalf("New() error = %v, want error: %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			t.Cleanup(c.CloseIdleConnections)
			if c.http.CheckRedirect == nil {
				t.Errorf("CheckRedirect is not set")
			}
			if tc.opts.HTTPClient != nil && tc.opts.HTTPClient.CheckRedirect != nil {
				t.Errorf("New() modified the caller's http.Client")
			}
		})
	}
}

func TestDefaultTransport(t *testing.T) {
	c := newTestClient(t, Options{MaxIdleConnsPerHost: 7})
	tr, ok := c.http.Transport.(*http.Transport)
	if !ok {
		t.Fatalf("Transport is %T, want *http.Transport", c.http.Transport)
	}
	if tr.Proxy != nil {
		t.Errorf("Default transport uses a proxy; engines must be dialled directly")
	}
	if tr.MaxIdleConnsPerHost != 7 || tr.IdleConnTimeout != DefaultIdleConnTimeout || tr.DisableKeepAlives {
		t.Errorf("Transport keep-alive settings = (%d, %v, disabled=%v), want (7, %v, false)",
			tr.MaxIdleConnsPerHost, tr.IdleConnTimeout, tr.DisableKeepAlives, DefaultIdleConnTimeout)
	}
}
