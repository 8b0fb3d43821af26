package fakeengine

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestStartValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		ip   string
		port int
		opts Options
	}{
		{"non-loopback IP", "203.0.113.1", 0, Options{}},
		{"unspecified", "0.0.0.0", 0, Options{}},
		{"public IP", "8.8.8.8", 0, Options{}},
		{"just outside /8", "128.0.0.1", 0, Options{}},
		{"IPv6 loopback", "::1", 0, Options{}},
		{"IPv4-mapped loopback", "::ffff:127.0.0.1", 0, Options{}},
		{"host name", "localhost", 0, Options{}},
		{"empty", "", 0, Options{}},
		{"not an IP", "127.0.0.256", 0, Options{}},
		{"negative port", "127.0.9.1", -1, Options{}},
		{"port too large", "127.0.9.1", 70000, Options{}},
		{"unknown kind", "127.0.9.1", 0, Options{Kind: "triton"}},
		{"runtime port is engine port", "127.0.9.1", 8080, Options{Runtime: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := Start(tc.ip, tc.port, tc.opts)
			if err == nil {
				e.Close()
				t.Fatalf("Start(%q, %d, %+v) succeeded, want error", tc.ip, tc.port, tc.opts)
			}
		})
	}
}

// step is one request of an endpoint table and what it must answer.
type step struct {
	name       string
	method     string
	path       string
	body       string
	wantStatus int
	wantBody   string   // exact, if set
	wantJSON   bool     // Content-Type application/json
	wantModels []string // for /v1/models: see models()
	wantLoaded []string // Loaded() after the step, if non-nil
}

func runSteps(t *testing.T, e *Engine, base func(*Engine, string) string, steps []step) {
	t.Helper()
	for i, s := range steps {
		a := must(t, s.method, base(e, s.path), s.body)
		where := fmt.Sprintf("step %d (%s): %s %s %s", i, s.name, s.method, s.path, s.body)
		if a.status != s.wantStatus {
			t.Errorf("%s: status %d, want %d (body %q)", where, a.status, s.wantStatus, a.body)
		}
		if s.wantBody != "" && a.body != s.wantBody {
			t.Errorf("%s: body\n  %s\nwant\n  %s", where, a.body, s.wantBody)
		}
		if isJSON := strings.HasPrefix(a.ctype, "application/json"); isJSON != s.wantJSON {
			t.Errorf("%s: Content-Type %q, want JSON=%v", where, a.ctype, s.wantJSON)
		}
		if s.wantModels != nil {
			if d := cmp.Diff(s.wantModels, models(t, a.body)); d != "" {
				t.Errorf("%s: models (-want +got):\n%s", where, d)
			}
		}
		if s.wantLoaded != nil {
			if d := cmp.Diff(s.wantLoaded, e.Loaded()); d != "" {
				t.Errorf("%s: Loaded() (-want +got):\n%s", where, d)
			}
		}
	}
}

func TestVLLMEndpoints(t *testing.T) {
	e := start(t, Options{BaseModel: "llama", Kind: VLLM})
	const load, unload = "/v1/load_lora_adapter", "/v1/unload_lora_adapter"
	runSteps(t, e, url, []step{
		{"empty list", "GET", "/v1/models", "", 200, "", true, []string{"llama"}, []string{}},
		{"load b", "POST", load, `{"lora_name":"b","lora_path":"/p/b"}`, 200, "Success: LoRA adapter 'b' added successfully.", false, nil, []string{"b"}},
		{"load a", "POST", load, `{"lora_name":"a","lora_path":"/p/a"}`, 200, "Success: LoRA adapter 'a' added successfully.", false, nil, []string{"a", "b"}},
		{"load again", "POST", load, `{"lora_name":"a","lora_path":"/p/other"}`, 400,
			`{"error":{"message":"The lora adapter 'a' has already been loaded.","type":"BadRequestError","code":400}}`, true, nil, []string{"a", "b"}},
		{"list in load order", "GET", "/v1/models", "", 200, "", true, []string{"llama", "b<llama>/p/b", "a<llama>/p/a"}, nil},
		{"unload b", "POST", unload, `{"lora_name":"b"}`, 200, "Success: LoRA adapter 'b' removed successfully.", false, nil, []string{"a"}},
		{"unload unknown", "POST", unload, `{"lora_name":"b"}`, 404,
			`{"error":{"message":"The lora adapter 'b' cannot be found.","type":"NotFoundError","code":404}}`, true, nil, []string{"a"}},
		{"list after unload", "GET", "/v1/models", "", 200, "", true, []string{"llama", "a<llama>/p/a"}, nil},
		{"load invalid JSON", "POST", load, `{"lora_name":`, 400, "", true, nil, []string{"a"}},
		{"load empty body", "POST", load, "", 400, "", true, nil, nil},
		{"load JSON array", "POST", load, `[1]`, 400, "", true, nil, nil},
		{"load without path", "POST", load, `{"lora_name":"c"}`, 400,
			`{"error":{"message":"Both 'lora_name' and 'lora_path' must be provided.","type":"BadRequestError","code":400}}`, true, nil, []string{"a"}},
		{"unload without name", "POST", unload, `{}`, 400, "", true, nil, nil},
		{"unload invalid JSON", "POST", unload, `nope`, 400, "", true, nil, nil},
		{"name with specials", "POST", load, `{"lora_name":"x<&>'y","lora_path":"/p"}`, 200, "Success: LoRA adapter 'x<&>'y' added successfully.", false, nil, nil},
		{"specials again", "POST", load, `{"lora_name":"x<&>'y","lora_path":"/p"}`, 400,
			`{"error":{"message":"The lora adapter 'x<&>'y' has already been loaded.","type":"BadRequestError","code":400}}`, true, nil, nil},
		{"wrong method", "GET", load, "", 405, `{"detail":"Method Not Allowed"}`, true, nil, nil},
		{"sglang path", "POST", "/load_lora_adapter", `{"lora_name":"c","lora_path":"/p/c"}`, 404, `{"detail":"Not Found"}`, true, nil, nil},
		{"sidecar path", "POST", "/v1/lora_adapter/load", `{}`, 404, `{"detail":"Not Found"}`, true, nil, nil},
		{"health", "GET", "/health", "", 200, "", false, nil, nil},
	})
	c := e.Counts()
	if c.Loads != 9 || c.Unloads != 4 || c.Lists != 3 {
		t.Errorf("counts = loads %d unloads %d lists %d, want 9 4 3", c.Loads, c.Unloads, c.Lists)
	}
	wantReq := map[string]int{
		"GET /v1/models": 3, "POST " + load: 9, "GET " + load: 1, "POST " + unload: 4,
		"POST /load_lora_adapter": 1, "POST /v1/lora_adapter/load": 1, "GET /health": 1,
	}
	if d := cmp.Diff(wantReq, e.Requests()); d != "" {
		t.Errorf("Requests() (-want +got):\n%s", d)
	}
}

func TestSGLangEndpoints(t *testing.T) {
	e := start(t, Options{BaseModel: "qwen", Kind: SGLang})
	const load, unload = "/load_lora_adapter", "/unload_lora_adapter"
	const ok = `{"success":true,"error_message":""}`
	runSteps(t, e, url, []step{
		{"empty list", "GET", "/v1/models", "", 200, "", true, []string{"qwen"}, []string{}},
		{"load a", "POST", load, `{"lora_name":"a","lora_path":"/p/a"}`, 200, ok, true, nil, []string{"a"}},
		{"load again", "POST", load, `{"lora_name":"a","lora_path":"/p/a"}`, 400,
			`{"success":false,"error_message":"The LoRA adapter a is already loaded"}`, true, nil, []string{"a"}},
		{"load b", "POST", load, `{"lora_name":"b","lora_path":"/p/b"}`, 200, ok, true, nil, []string{"a", "b"}},
		{"list", "GET", "/v1/models", "", 200, "", true, []string{"qwen", "a<qwen>/p/a", "b<qwen>/p/b"}, nil},
		{"unload a", "POST", unload, `{"lora_name":"a"}`, 200, ok, true, nil, []string{"b"}},
		{"unload unknown", "POST", unload, `{"lora_name":"a"}`, 400,
			`{"success":false,"error_message":"LoRA adapter a does not exist"}`, true, nil, []string{"b"}},
		{"load invalid JSON", "POST", load, `{`, 400, "", true, nil, []string{"b"}},
		{"load missing path", "POST", load, `{"lora_name":"c"}`, 400, "", true, nil, []string{"b"}},
		{"unload empty body", "POST", unload, ``, 400, "", true, nil, nil},
		{"vllm path", "POST", "/v1/load_lora_adapter", `{"lora_name":"c","lora_path":"/p/c"}`, 404, `{"detail":"Not Found"}`, true, nil, []string{"b"}},
		{"wrong method", "PUT", "/v1/models", "", 405, `{"detail":"Method Not Allowed"}`, true, nil, nil},
		{"health", "GET", "/health", "", 200, "", false, nil, nil},
	})
	if e.Loads() != 5 || e.Unloads() != 3 || e.Lists() != 2 {
		t.Errorf("counts = loads %d unloads %d lists %d, want 5 3 2", e.Loads(), e.Unloads(), e.Lists())
	}
}

func TestRuntimeSidecar(t *testing.T) {
	for _, kind := range []Kind{VLLM, SGLang} {
		t.Run(string(kind), func(t *testing.T) {
			ip := nextIP()
			e, err := Start(ip, 0, Options{Kind: kind, BaseModel: "base", Runtime: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(e.Close)
			if want := ip + ":8080"; e.RuntimeAddr() != want {
				t.Fatalf("RuntimeAddr() = %q, want %q", e.RuntimeAddr(), want)
			}
			const load, unload = "/v1/lora_adapter/load", "/v1/lora_adapter/unload"
			runSteps(t, e, runtimeURL, []step{
				{"load", "POST", load, `{"lora_name":"a","artifact_url":"s3://bucket/a","credentials":{"key":"v"},"additional_config":{"x":1}}`,
					200, "Success: LoRA adapter 'a' loaded successfully.", false, nil, []string{"a"}},
				{"load again", "POST", load, `{"lora_name":"a","artifact_url":"s3://bucket/a"}`, 400,
					`{"error":{"message":"The lora adapter 'a' has already been loaded.","type":"BadRequestError","code":400}}`, true, nil, []string{"a"}},
				{"load without URL", "POST", load, `{"lora_name":"b"}`, 400, "", true, nil, []string{"a"}},
				{"load invalid JSON", "POST", load, `{{`, 400, "", true, nil, nil},
				{"engine path", "GET", "/v1/models", "", 404, `{"detail":"Not Found"}`, true, nil, nil},
				{"health", "GET", "/health", "", 200, "", false, nil, nil},
			})
			// The engine sees what the sidecar loaded.
			runSteps(t, e, url, []step{
				{"engine lists it", "GET", "/v1/models", "", 200, "", true, []string{"base", "a<base>s3://bucket/a"}, nil},
				{"sidecar path on engine", "POST", load, `{}`, 404, `{"detail":"Not Found"}`, true, nil, nil},
			})
			runSteps(t, e, runtimeURL, []step{
				{"unload", "POST", unload, `{"lora_name":"a","cleanup_local":true}`, 200, "Success: LoRA adapter 'a' unloaded successfully.", false, nil, []string{}},
				{"unload again", "POST", unload, `{"lora_name":"a","cleanup_local":true}`, 404,
					`{"error":{"message":"The lora adapter 'a' cannot be found.","type":"NotFoundError","code":404}}`, true, nil, []string{}},
				{"unload without name", "POST", unload, `{"cleanup_local":true}`, 400, "", true, nil, nil},
			})
			if e.Loads() != 4 || e.Unloads() != 3 || e.Lists() != 1 {
				t.Errorf("counts = loads %d unloads %d lists %d, want 4 3 1", e.Loads(), e.Unloads(), e.Lists())
			}
		})
	}
	// Without Runtime nothing listens on 8080.
	e := start(t, Options{})
	if e.RuntimeAddr() != "" {
		t.Errorf("RuntimeAddr() = %q without Runtime", e.RuntimeAddr())
	}
	host, _, _ := net.SplitHostPort(e.Addr())
	if _, err := call(t, http.DefaultClient, "GET", "http://"+host+":8080/health", ""); err == nil {
		t.Error("sidecar port answers without Runtime")
	}
}

func TestAPIKey(t *testing.T) {
	const unauthorized = `{"error":{"message":"Unauthorized","type":"AuthenticationError","code":401}}`
	for _, kind := range []Kind{VLLM, SGLang} {
		t.Run(string(kind), func(t *testing.T) {
			e := start(t, Options{Kind: kind, APIKey: "s3cret", Runtime: true, RuntimePort: 18080})
			load := "/v1/load_lora_adapter"
			if kind == SGLang {
				load = "/load_lora_adapter"
			}
			body := `{"lora_name":"a","lora_path":"/p/a"}`
			for _, tc := range []struct {
				name       string
				url        string
				body       string
				hdr        []string
				wantStatus int
			}{
				{"list without key", url(e, "/v1/models"), "", nil, 401},
				{"load without key", url(e, load), body, nil, 401},
				{"wrong key", url(e, load), body, []string{"Authorization: Bearer nope"}, 401},
				{"no Bearer", url(e, load), body, []string{"Authorization: s3cret"}, 401},
				{"basic auth", url(e, load), body, []string{"Authorization: Basic s3cret"}, 401},
				{"unknown path without key", url(e, "/v1/nope"), "", nil, 401},
				{"sidecar without key", runtimeURL(e, "/v1/lora_adapter/unload"), `{"lora_name":"a"}`, nil, 401},
				{"health without key", url(e, "/health"), "", nil, 200},
				{"list with key", url(e, "/v1/models"), "", []string{"Authorization: Bearer s3cret"}, 200},
				{"load with key", url(e, load), body, []string{"Authorization: Bearer s3cret"}, 200},
				{"sidecar with key", runtimeURL(e, "/v1/lora_adapter/unload"), `{"lora_name":"a"}`, []string{"Authorization: Bearer s3cret"}, 200},
			} {
				method := "GET"
				if tc.body != "" {
					method = "POST"
				}
				a := must(t, method, tc.url, tc.body, tc.hdr...)
				if a.status != tc.wantStatus {
					t.Errorf("%s: status %d, want %d (%s)", tc.name, a.status, tc.wantStatus, a.body)
				}
				if tc.wantStatus == 401 && a.body != unauthorized {
					t.Errorf("%s: body %s, want %s", tc.name, a.body, unauthorized)
				}
			}
			if e.Loads() != 1 || e.Unloads() != 1 || e.Lists() != 1 {
				t.Errorf("unauthorized requests counted as operations: loads %d unloads %d lists %d", e.Loads(), e.Unloads(), e.Lists())
			}
			if got := e.Requests()["POST "+load]; got != 5 {
				t.Errorf("Requests()[POST %s] = %d, want 5", load, got)
			}
			// Every key presented is seen (health checks present none and are not counted).
			if got, want := strings.Join(e.KeysSeen(), ","), ",Basic s3cret,nope,s3cret"; got != want {
				t.Errorf("KeysSeen() = %q, want %q", got, want)
			}
		})
	}
}

// TestKeySeenOnADroppedRequest: a request dropped before any answer (the client gave up
// during the engine's latency) still presented its key.
func TestKeySeenOnADroppedRequest(t *testing.T) {
	e := start(t, Options{APIKey: "s3cret", Latency: time.Hour})
	hc := &http.Client{Timeout: 100 * time.Millisecond}
	defer hc.CloseIdleConnections()
	if _, err := call(t, hc, "GET", url(e, "/v1/models"), "", "Authorization: Bearer other-key"); err == nil {
		t.Fatal("a request during an hour of latency was answered")
	}
	eventually(t, "the dropped request's handler to return", func() bool { return e.inFlight.Load() == 0 })
	if got := e.KeysSeen(); !slices.Equal(got, []string{"other-key"}) {
		t.Errorf("KeysSeen() = %q, want [other-key]", got)
	}
}

func TestRestart(t *testing.T) {
	e := start(t, Options{BaseModel: "m"})
	for _, n := range []string{"a", "b"} {
		if a := must(t, "POST", url(e, "/v1/load_lora_adapter"), `{"lora_name":"`+n+`","lora_path":"/p"}`); a.status != 200 {
			t.Fatalf("load %s: %d %s", n, a.status, a.body)
		}
	}
	e.SetFault(Fault{Op: OpUnload, Status: 500})
	e.Restart()
	if got := e.Loaded(); len(got) != 0 {
		t.Errorf("Loaded() after Restart = %v", got)
	}
	if got := models(t, must(t, "GET", url(e, "/v1/models"), "").body); !cmp.Equal(got, []string{"m"}) {
		t.Errorf("models after Restart = %v", got)
	}
	if e.Loads() != 2 || e.Lists() != 1 {
		t.Errorf("counters not kept: loads %d lists %d", e.Loads(), e.Lists())
	}
	if a := must(t, "POST", url(e, "/v1/load_lora_adapter"), `{"lora_name":"a","lora_path":"/p"}`); a.status != 200 {
		t.Errorf("load after Restart: %d %s", a.status, a.body)
	}
	if a := must(t, "POST", url(e, "/v1/unload_lora_adapter"), `{"lora_name":"a"}`); a.status != 500 {
		t.Errorf("fault not kept across Restart: %d %s", a.status, a.body)
	}
	if got := e.Adapters(); !cmp.Equal(got, map[string]string{"a": "/p"}) {
		t.Errorf("Adapters() = %v", got)
	}
}

func TestCountersConcurrent(t *testing.T) {
	e := start(t, Options{Kind: SGLang})
	const workers, each = 8, 10
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				name := fmt.Sprintf("w%d-%02d", w, i)
				if a, err := call(t, http.DefaultClient, "POST", url(e, "/load_lora_adapter"), `{"lora_name":"`+name+`","lora_path":"/p"}`); err != nil || a.status != 200 {
					t.Errorf("load %s: %v %v", name, a, err)
				}
				if _, err := call(t, http.DefaultClient, "GET", url(e, "/v1/models"), ""); err != nil {
					t.Errorf("list: %v", err)
				}
				_ = e.Loaded()
				_ = e.Requests()
			}
		})
	}
	wg.Wait()
	n := workers * each
	if e.Loads() != n || e.Lists() != n || e.Unloads() != 0 {
		t.Errorf("loads %d lists %d unloads %d, want %d %d 0", e.Loads(), e.Lists(), e.Unloads(), n, n)
	}
	want := map[string]int{"POST /load_lora_adapter": n, "GET /v1/models": n}
	if d := cmp.Diff(want, e.Requests()); d != "" {
		t.Errorf("Requests() (-want +got):\n%s", d)
	}
	loaded := e.Loaded()
	if len(loaded) != n || loaded[0] != "w0-00" || loaded[n-1] != fmt.Sprintf("w%d-%02d", workers-1, each-1) {
		t.Errorf("Loaded() = %v, want %d sorted names", loaded, n)
	}
}

func TestLatency(t *testing.T) {
	e := start(t, Options{Latency: 100 * time.Millisecond})
	t0 := time.Now()
	if a := must(t, "GET", url(e, "/v1/models"), ""); a.status != 200 {
		t.Fatalf("status %d", a.status)
	}
	if d := time.Since(t0); d < 100*time.Millisecond {
		t.Errorf("request took %v, want >= 100ms", d)
	}
}

// TestSharedPort checks that engines on different 127/8 addresses share one port, as pods
// share the engine port, and keep separate state.
func TestSharedPort(t *testing.T) {
	e1, err := Start("127.0.9.1", 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e1.Close()
	_, port, _ := net.SplitHostPort(e1.Addr())
	p, _ := strconv.Atoi(port)
	e2, err := Start("127.0.9.2", p, Options{Kind: SGLang})
	if err != nil {
		t.Fatalf("second engine on 127.0.9.2:%d: %v", p, err)
	}
	defer e2.Close()
	if e2.Addr() != "127.0.9.2:"+port {
		t.Errorf("Addr() = %q", e2.Addr())
	}
	if e3, err := Start("127.0.9.1", p, Options{}); err == nil {
		e3.Close()
		t.Error("two engines listen on the same ip:port")
	}
	if a := must(t, "POST", url(e1, "/v1/load_lora_adapter"), `{"lora_name":"a","lora_path":"/p"}`); a.status != 200 {
		t.Fatalf("load on e1: %d", a.status)
	}
	if got := e2.Loaded(); len(got) != 0 {
		t.Errorf("e2 sees e1's adapters: %v", got)
	}
	if got := models(t, must(t, "GET", url(e2, "/v1/models"), "").body); len(got) != 1 {
		t.Errorf("e2 lists %v", got)
	}
	if e1.Lists() != 0 || e2.Lists() != 1 {
		t.Errorf("lists e1 %d e2 %d, want 0 1", e1.Lists(), e2.Lists())
	}
}
