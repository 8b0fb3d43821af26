package fakeengine

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFaults(t *testing.T) {
	const (
		vLoad, vUnload = "/v1/load_lora_adapter", "/v1/unload_lora_adapter"
		sLoad, sUnload = "/load_lora_adapter", "/unload_lora_adapter"
		loadA          = `{"lora_name":"a","lora_path":"/p/a"}`
		nameA          = `{"lora_name":"a"}`
		vOK            = "Success: LoRA adapter 'a' added successfully."
		sOK            = `{"success":true,"error_message":""}`
	)
	for _, tc := range []struct {
		name   string
		kind   Kind
		faults []Fault
		steps  []step
	}{
		{"vllm load 500 default body", VLLM, []Fault{{Op: OpLoad, Status: 500}}, []step{
			{"load fails", "POST", vLoad, loadA, 500, `{"error":{"message":"injected fault: Internal Server Error","type":"InternalServerError","code":500}}`, true, nil, []string{}},
			{"list unaffected", "GET", "/v1/models", "", 200, "", true, []string{"base"}, nil},
			{"unload unaffected", "POST", vUnload, nameA, 404, "", true, nil, nil},
		}},
		{"vllm runtime LoRA updating disabled", VLLM, []Fault{{Op: OpLoad, Status: 404, Body: `{"detail":"Not Found"}`}}, []step{
			{"load 404", "POST", vLoad, loadA, 404, `{"detail":"Not Found"}`, true, nil, []string{}},
			{"still 404", "POST", vLoad, loadA, 404, `{"detail":"Not Found"}`, true, nil, []string{}},
		}},
		{"fail next load only", VLLM, []Fault{{Op: OpLoad, Status: 503, Body: "busy", Times: 1}}, []step{
			{"first fails", "POST", vLoad, loadA, 503, "busy", false, nil, []string{}},
			{"second succeeds", "POST", vLoad, loadA, 200, vOK, false, nil, []string{"a"}},
		}},
		{"fail next two", SGLang, []Fault{{Op: OpLoad, Status: 500, Times: 2}}, []step{
			{"first fails", "POST", sLoad, loadA, 500, "", true, nil, []string{}},
			{"second fails", "POST", sLoad, loadA, 500, "", true, nil, []string{}},
			{"third succeeds", "POST", sLoad, loadA, 200, sOK, true, nil, []string{"a"}},
		}},
		{"sglang load 500 default body", SGLang, []Fault{{Op: OpLoad, Status: 500}}, []step{
			{"load fails", "POST", sLoad, loadA, 500, `{"success":false,"error_message":"injected fault: Internal Server Error"}`, true, nil, []string{}},
		}},
		{"sglang unload fault", SGLang, []Fault{{Op: OpUnload, Status: 400, Body: `{"success":false,"error_message":"busy"}`}}, []step{
			{"load ok", "POST", sLoad, loadA, 200, sOK, true, nil, []string{"a"}},
			{"unload fails", "POST", sUnload, nameA, 400, `{"success":false,"error_message":"busy"}`, true, nil, []string{"a"}},
		}},
		{"all ops", VLLM, []Fault{{Status: 502, Body: "bad gateway"}}, []step{
			{"list", "GET", "/v1/models", "", 502, "bad gateway", false, nil, nil},
			{"load", "POST", vLoad, loadA, 502, "bad gateway", false, nil, []string{}},
			{"unload", "POST", vUnload, nameA, 502, "bad gateway", false, nil, nil},
			{"health unaffected", "GET", "/health", "", 200, "", false, nil, nil},
			{"404 unaffected", "GET", "/nope", "", 404, "", true, nil, nil},
		}},
		{"specific op beats all", SGLang, []Fault{{Op: OpList, Status: 503, Body: "[]"}, {Status: 500, Body: "x"}}, []step{
			{"list", "GET", "/v1/models", "", 503, "[]", true, nil, nil},
			{"load", "POST", sLoad, loadA, 500, "x", false, nil, nil},
		}},
		{"set fault replaces same op", VLLM, []Fault{{Op: OpLoad, Status: 500}, {Op: OpLoad, Status: 429, Body: "slow down"}}, []step{
			{"load", "POST", vLoad, loadA, 429, "slow down", false, nil, nil},
		}},
		{"lie on vllm load", VLLM, []Fault{{Op: OpLoad, Lie: true}}, []step{
			{"load says yes", "POST", vLoad, loadA, 200, vOK, false, nil, []string{}},
			{"not listed", "GET", "/v1/models", "", 200, "", true, []string{"base"}, nil},
			{"says yes again", "POST", vLoad, loadA, 200, vOK, false, nil, []string{}},
			{"lie still validates", "POST", vLoad, `{}`, 400, "", true, nil, nil},
		}},
		{"lie on sglang load", SGLang, []Fault{{Op: OpLoad, Lie: true, Times: 1}}, []step{
			{"load says yes", "POST", sLoad, loadA, 200, sOK, true, nil, []string{}},
			{"not listed", "GET", "/v1/models", "", 200, "", true, []string{"base"}, nil},
			{"next load real", "POST", sLoad, loadA, 200, sOK, true, []string(nil), []string{"a"}},
		}},
		{"lie on unload", SGLang, []Fault{{Op: OpUnload, Lie: true}}, []step{
			{"load", "POST", sLoad, loadA, 200, sOK, true, nil, []string{"a"}},
			{"unload says yes", "POST", sUnload, nameA, 200, sOK, true, nil, []string{"a"}},
			{"still listed", "GET", "/v1/models", "", 200, "", true, []string{"base", "a<base>/p/a"}, nil},
		}},
		{"lie on list", VLLM, []Fault{{Op: OpList, Lie: true}}, []step{
			{"load", "POST", vLoad, loadA, 200, vOK, false, nil, []string{"a"}},
			{"list hides it", "GET", "/v1/models", "", 200, "", true, []string{"base"}, nil},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, Options{Kind: tc.kind, BaseModel: "base"})
			for _, f := range tc.faults {
				e.SetFault(f)
			}
			runSteps(t, e, url, tc.steps)
		})
	}
}

func TestClearFault(t *testing.T) {
	e := start(t, Options{})
	e.SetFault(Fault{Status: 500})
	e.SetFault(Fault{Op: OpList, Status: 500})
	if a := must(t, "GET", url(e, "/v1/models"), ""); a.status != 500 {
		t.Fatalf("fault not applied: %d", a.status)
	}
	e.ClearFault()
	if a := must(t, "GET", url(e, "/v1/models"), ""); a.status != 200 {
		t.Errorf("after ClearFault: %d %s", a.status, a.body)
	}
	if e.Lists() != 2 {
		t.Errorf("Lists() = %d, want 2 (faulted requests count)", e.Lists())
	}
}

func TestSetFaultPanics(t *testing.T) {
	e := start(t, Options{})
	for _, f := range []Fault{{Op: "lsit"}, {Times: -1}, {HugeBody: -1}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("SetFault(%+v) did not panic", f)
				}
			}()
			e.SetFault(f)
		}()
	}
}

func TestFaultMalformed(t *testing.T) {
	for _, kind := range []Kind{VLLM, SGLang} {
		t.Run(string(kind), func(t *testing.T) {
			e := start(t, Options{Kind: kind})
			e.SetFault(Fault{Op: OpList, Malformed: true})
			a := must(t, "GET", url(e, "/v1/models"), "")
			var v any
			if a.status != 200 || json.Unmarshal([]byte(a.body), &v) == nil {
				t.Errorf("malformed list: status %d, body %q parses", a.status, a.body)
			}
			if !strings.HasPrefix(a.body, `{"object":"list"`) {
				t.Errorf("body %q is not a cut list", a.body)
			}
		})
	}
	// On a load the state still changes: only the answer is broken.
	e := start(t, Options{Kind: SGLang})
	e.SetFault(Fault{Op: OpLoad, Malformed: true})
	a := must(t, "POST", url(e, "/load_lora_adapter"), `{"lora_name":"a","lora_path":"/p"}`)
	var v any
	if a.status != 200 || json.Unmarshal([]byte(a.body), &v) == nil || len(e.Loaded()) != 1 {
		t.Errorf("malformed load: %d %q, loaded %v", a.status, a.body, e.Loaded())
	}
}

func TestFaultHugeBody(t *testing.T) {
	const huge = 4 << 20
	e := start(t, Options{BaseModel: "base"})
	e.SetFault(Fault{Op: OpList, HugeBody: huge})
	resp, err := http.Get(url(e, "/v1/models"))
	if err != nil {
		t.Fatal(err)
	}
	// A client that limits what it reads rejects the answer...
	limited, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var v any
	if json.Unmarshal(limited, &v) == nil {
		t.Error("first MiB of a huge body parses")
	}
	// ...one that reads everything gets a valid list.
	rest, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	body := append(append([]byte{}, limited...), rest...)
	if len(body) <= huge || resp.ContentLength != int64(len(body)) {
		t.Errorf("body is %d bytes, Content-Length %d, want > %d", len(body), resp.ContentLength, huge)
	}
	if got := models(t, string(body)); len(got) != 1 || got[0] != "base" {
		t.Errorf("models = %v", got)
	}

	// Combined with a status.
	e.SetFault(Fault{Op: OpLoad, Status: 500, Body: `{"detail":"x"}`, HugeBody: huge})
	a := must(t, "POST", url(e, "/v1/load_lora_adapter"), `{"lora_name":"a","lora_path":"/p"}`)
	if a.status != 500 || len(a.body) != huge+len(`{"detail":"x"}`) || !strings.HasSuffix(a.body, `{"detail":"x"}`) {
		t.Errorf("huge 500: status %d, %d bytes", a.status, len(a.body))
	}
}

func TestFaultHang(t *testing.T) {
	e := start(t, Options{})
	e.SetFault(Fault{Op: OpLoad, Hang: 200 * time.Millisecond, Times: 1})
	t0 := time.Now()
	a := must(t, "POST", url(e, "/v1/load_lora_adapter"), `{"lora_name":"a","lora_path":"/p"}`)
	if d := time.Since(t0); d < 200*time.Millisecond || a.status != 200 {
		t.Errorf("hung load: %v, status %d", d, a.status)
	}
	t0 = time.Now()
	must(t, "POST", url(e, "/v1/unload_lora_adapter"), `{"lora_name":"a"}`)
	if d := time.Since(t0); d > 150*time.Millisecond {
		t.Errorf("unload hung too (%v)", d)
	}

	// Hang plus status: the status comes after the hang.
	e.SetFault(Fault{Op: OpList, Hang: 50 * time.Millisecond, Status: 500, Times: 1})
	if a := must(t, "GET", url(e, "/v1/models"), ""); a.status != 500 {
		t.Errorf("hang+status: %d", a.status)
	}
}

// TestFaultHangClientGone checks a hang ends when the client goes away.
func TestFaultHangClientGone(t *testing.T) {
	e := start(t, Options{})
	e.SetFault(Fault{Op: OpLoad, Hang: time.Hour})
	hc := &http.Client{Timeout: 100 * time.Millisecond}
	defer hc.CloseIdleConnections()
	if _, err := call(t, hc, "POST", url(e, "/v1/load_lora_adapter"), `{"lora_name":"a","lora_path":"/p"}`); err == nil {
		t.Fatal("hung load answered")
	}
	eventually(t, "the hanging handler to return", func() bool { return e.inFlight.Load() == 0 })
	if len(e.Loaded()) != 0 {
		t.Errorf("abandoned hung load was applied: %v", e.Loaded())
	}
}

// TestFaultHangClose checks Close ends hanging requests and drops their connections.
func TestFaultHangClose(t *testing.T) {
	e, err := Start(nextIP(), 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.SetFault(Fault{Op: OpList, Hang: time.Hour})
	errc := make(chan error, 1)
	go func() {
		_, err := call(t, http.DefaultClient, "GET", url(e, "/v1/models"), "")
		errc <- err
	}()
	eventually(t, "the request to hang", func() bool { return e.inFlight.Load() == 1 })
	t0 := time.Now()
	e.Close()
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := <-errc; err == nil {
		t.Error("hanging request got an answer after Close")
	}
	e.Close() // idempotent
}

// TestFaultTimesConcurrent checks Times is exact under concurrent requests.
func TestFaultTimesConcurrent(t *testing.T) {
	e := start(t, Options{})
	e.SetFault(Fault{Op: OpList, Status: 500, Times: 7})
	codes := make(chan int, 40)
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 10 {
				a, err := call(t, http.DefaultClient, "GET", url(e, "/v1/models"), "")
				if err != nil {
					t.Error(err)
					return
				}
				codes <- a.status
			}
		}()
	}
	for range 4 {
		<-done
	}
	close(codes)
	failed := 0
	for c := range codes {
		if c == 500 {
			failed++
		}
	}
	if failed != 7 {
		t.Errorf("%d requests failed, want 7", failed)
	}
}

// TestFaultStall checks a stalled request takes effect at once and that its answer is held
// until the client goes away, which never learns of it.
func TestFaultStall(t *testing.T) {
	e := start(t, Options{})
	e.SetFault(Fault{Op: OpLoad, Stall: time.Hour})
	hc := &http.Client{Timeout: 200 * time.Millisecond}
	defer hc.CloseIdleConnections()
	if _, err := call(t, hc, "POST", url(e, "/v1/load_lora_adapter"), `{"lora_name":"a","lora_path":"/p"}`); err == nil {
		t.Fatal("stalled load answered")
	}
	if got := e.Loaded(); len(got) != 1 || got[0] != "a" {
		t.Errorf("stalled load not applied: %v", got)
	}
	eventually(t, "the stalled handler to return", func() bool { return e.inFlight.Load() == 0 })
}

// TestLoadInplace: vLLM replaces the weights of a loaded adapter when asked to load it in
// place; an engine without load_inplace answers "already loaded" and keeps the old ones.
func TestLoadInplace(t *testing.T) {
	for name, tc := range map[string]struct {
		opts       Options
		wantStatus int
		wantPath   string
	}{
		"supported":     {Options{}, 200, "/v2"},
		"older vLLM":    {Options{NoLoadInplace: true}, 400, "/v1"},
		"without field": {Options{}, 400, "/v1"},
	} {
		t.Run(name, func(t *testing.T) {
			e := start(t, tc.opts)
			must(t, "POST", url(e, "/v1/load_lora_adapter"), `{"lora_name":"a","lora_path":"/v1"}`)
			body := `{"lora_name":"a","lora_path":"/v2","load_inplace":true}`
			if name == "without field" {
				body = `{"lora_name":"a","lora_path":"/v2"}`
			}
			if a := must(t, "POST", url(e, "/v1/load_lora_adapter"), body); a.status != tc.wantStatus {
				t.Errorf("status %d, want %d (%s)", a.status, tc.wantStatus, a.body)
			}
			if got := e.Adapters()["a"]; got != tc.wantPath {
				t.Errorf("path %q, want %q", got, tc.wantPath)
			}
		})
	}
}

// TestPreload: adapters given at start are listed with their paths, as --lora-modules are.
func TestPreload(t *testing.T) {
	e := start(t, Options{Preload: map[string]string{"static": "/models/static"}})
	if got := e.Adapters(); len(got) != 1 || got["static"] != "/models/static" {
		t.Errorf("adapters %v, want static from /models/static", got)
	}
	if got := models(t, must(t, "GET", url(e, "/v1/models"), "").body); len(got) != 2 || got[1] != "static<fake-base-model>/models/static" {
		t.Errorf("/v1/models lists %v, want the base model and static", got)
	}
}

// TestForeignUnloads: an unload request naming an adapter the engine holds from Preload is
// counted, on every unload endpoint and whatever its outcome; unloads of adapters loaded
// through the API, or of names not held, are not. A load in place keeps the adapter foreign.
func TestForeignUnloads(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   Options
		unload func(e *Engine) string
	}{
		{"vllm", Options{}, func(e *Engine) string { return url(e, "/v1/unload_lora_adapter") }},
		{"sglang", Options{Kind: SGLang}, func(e *Engine) string { return url(e, "/unload_lora_adapter") }},
		{"sidecar", Options{Runtime: true, RuntimePort: 18081}, func(e *Engine) string { return runtimeURL(e, "/v1/lora_adapter/unload") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Preload = map[string]string{"static": "/models/static", "other": "/models/other"}
			e := start(t, tc.opts)
			load := url(e, "/v1/load_lora_adapter")
			if tc.opts.Kind == SGLang {
				load = url(e, "/load_lora_adapter")
			}
			if a := must(t, "POST", load, `{"lora_name":"ours","lora_path":"/p/ours"}`); a.status != 200 {
				t.Fatalf("load ours: %d %s", a.status, a.body)
			}
			for _, name := range []string{"ours", "ours", "never-loaded"} { // not foreign: ours, or not held
				must(t, "POST", tc.unload(e), `{"lora_name":"`+name+`"}`)
			}
			if n := e.ForeignUnloads(); n != 0 {
				t.Fatalf("ForeignUnloads() = %d after unloads of our own and unknown adapters, want 0", n)
			}
			if got := e.Preloaded(); len(got) != 2 || got["static"] != "/models/static" {
				t.Fatalf("Preloaded() = %v", got)
			}

			e.SetFault(Fault{Op: OpUnload, Status: 500, Times: 1}) // a failed attempt counts too
			if a := must(t, "POST", tc.unload(e), `{"lora_name":"static"}`); a.status != 500 {
				t.Fatalf("faulted unload: %d %s", a.status, a.body)
			}
			if n := e.ForeignUnloads(); n != 1 {
				t.Fatalf("ForeignUnloads() = %d after a failed unload of static, want 1", n)
			}
			if a := must(t, "POST", tc.unload(e), `{"lora_name":"static"}`); a.status != 200 {
				t.Fatalf("unload static: %d %s", a.status, a.body)
			}
			if n, held := e.ForeignUnloads(), e.Loaded(); n != 2 || !slices.Equal(held, []string{"other"}) {
				t.Fatalf("after unloading static: ForeignUnloads() %d (want 2), holds %v (want [other])", n, held)
			}
			// Gone now: a second unload of the name is not counted (nothing of anyone's is held).
			must(t, "POST", tc.unload(e), `{"lora_name":"static"}`)
			if c := e.Counts(); c.ForeignUnloads != 2 || c.Unloads != 6 {
				t.Fatalf("counts %+v, want 2 foreign of 6 unloads", c)
			}
		})
	}
	t.Run("load in place keeps it foreign", func(t *testing.T) {
		e := start(t, Options{Preload: map[string]string{"static": "/models/static"}})
		if a := must(t, "POST", url(e, "/v1/load_lora_adapter"), `{"lora_name":"static","lora_path":"/p/mine","load_inplace":true}`); a.status != 200 {
			t.Fatalf("load in place: %d %s", a.status, a.body)
		}
		if got := e.Preloaded(); got["static"] != "/p/mine" {
			t.Fatalf("Preloaded() = %v, want static from /p/mine", got)
		}
		must(t, "POST", url(e, "/v1/unload_lora_adapter"), `{"lora_name":"static"}`)
		if n := e.ForeignUnloads(); n != 1 {
			t.Fatalf("ForeignUnloads() = %d, want 1", n)
		}
	})
}

// TestRestartReloadsPreload: a restart forgets what the API loaded and holds the preloaded
// adapters again, as vLLM loads its --lora-modules at every start.
func TestRestartReloadsPreload(t *testing.T) {
	e := start(t, Options{Preload: map[string]string{"static": "/models/static"}})
	must(t, "POST", url(e, "/v1/unload_lora_adapter"), `{"lora_name":"static"}`)
	must(t, "POST", url(e, "/v1/load_lora_adapter"), `{"lora_name":"ours","lora_path":"/p"}`)
	e.Restart()
	if got := e.Adapters(); len(got) != 1 || got["static"] != "/models/static" {
		t.Fatalf("Adapters() after Restart = %v, want only static from /models/static", got)
	}
	if n := e.ForeignUnloads(); n != 1 {
		t.Fatalf("ForeignUnloads() = %d, want 1 (counters are kept)", n)
	}
}
