package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/loraplane/loraplane/test/fakeengine"
)

// adminFixture runs two engines (ns/a vLLM on 127.0.19.60, ns/b SGLang with the sidecar on
// 127.0.19.61:30000) and the admin API on an httptest server (127.0.0.1).
func adminFixture(t *testing.T) (*manager, string) {
	t.Helper()
	m, _ := newTestManager(t, fakeengine.Options{})
	pods := []*corev1.Pod{
		pod("a", "127.0.19.60"),
		pod("b", "127.0.19.61", withLabel(labelEngine, "sglang"), withLabel(labelPort, "30000"), withRuntime()),
	}
	if err := m.sync(pods); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(adminHandler(m))
	t.Cleanup(srv.Close)
	return m, srv.URL
}

func TestAdminEngines(t *testing.T) {
	_, admin := adminFixture(t)
	must(t, "POST", "http://127.0.19.60:8000/v1/load_lora_adapter", `{"lora_name":"x","lora_path":"/p"}`)
	must(t, "GET", "http://127.0.19.60:8000/v1/models", "")
	must(t, "GET", "http://127.0.19.60:8000/v1/models", "")

	got := must(t, "GET", admin+"/engines", "")
	if got.status != 200 {
		t.Fatalf("GET /engines = %+v", got)
	}
	var views []engineView
	if err := json.Unmarshal([]byte(got.body), &views); err != nil {
		t.Fatalf("decode %s: %v", got.body, err)
	}
	if len(views) != 2 {
		t.Fatalf("got %d engines: %s", len(views), got.body)
	}
	a, b := views[0], views[1]
	if a.Pod != "a" || a.Namespace != "ns" || a.IP != "127.0.19.60" || a.Port != 8000 || a.Kind != fakeengine.VLLM ||
		a.BaseModel != "llama" || a.Runtime || a.UID != "a-uid" || !slices.Equal(a.Loaded, []string{"x"}) {
		t.Errorf("a = %+v", a)
	}
	if a.Counts.Requests != 3 || a.Counts.Loads != 1 || a.Counts.Lists != 2 || a.Counts.Unloads != 0 ||
		a.Counts.RequestsByPath["GET /v1/models"] != 2 {
		t.Errorf("a counts = %+v", a.Counts)
	}
	if b.Pod != "b" || b.Port != 30000 || b.Kind != fakeengine.SGLang || !b.Runtime || b.Loaded == nil || len(b.Loaded) != 0 {
		t.Errorf("b = %+v", b)
	}
	// The wire names are the documented ones.
	for _, field := range []string{`"pod"`, `"namespace"`, `"ip"`, `"port"`, `"kind"`, `"loaded"`, `"preloaded"`, `"keysSeen"`,
		`"counts"`, `"requests"`, `"loads"`, `"unloads"`, `"lists"`, `"foreignUnloads"`} {
		if !strings.Contains(got.body, field) {
			t.Errorf("GET /engines lacks %s: %s", field, got.body)
		}
	}
}

// TestAdminEnginesKeysAndForeignUnloads: GET /engines tells the keys each engine was sent and
// the unloads of adapters it was started with; with ?retired=true it also lists the engines
// stopped since, as they were, so that nothing an engine was sent is lost with its pod.
func TestAdminEnginesKeysAndForeignUnloads(t *testing.T) {
	m, _ := newTestManager(t, fakeengine.Options{})
	srv := httptest.NewServer(adminHandler(m))
	t.Cleanup(srv.Close)
	keyed := pod("keyed", "127.0.19.90", func(p *corev1.Pod) {
		p.Annotations = map[string]string{annotationAPIKey: "key-ns", annotationPreload: "static=/models/static"}
	})
	if err := m.sync([]*corev1.Pod{keyed}); err != nil {
		t.Fatal(err)
	}
	send := func(path, body, key string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://127.0.19.90:8000"+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if got := send("/v1/load_lora_adapter", `{"lora_name":"ours","lora_path":"/p"}`, "key-ns"); got != 200 {
		t.Fatalf("load with the pod's key: %d", got)
	}
	if got := send("/v1/unload_lora_adapter", `{"lora_name":"static"}`, "key-other"); got != 401 {
		t.Fatalf("unload with another key: %d, want 401", got)
	}
	if got := send("/v1/unload_lora_adapter", `{"lora_name":"static"}`, "key-ns"); got != 200 {
		t.Fatalf("unload of static with the pod's key: %d", got)
	}
	views := func(query string) []engineView {
		t.Helper()
		got := must(t, "GET", srv.URL+"/engines"+query, "")
		var vs []engineView
		if err := json.Unmarshal([]byte(got.body), &vs); got.status != 200 || err != nil {
			t.Fatalf("GET /engines%s = %+v (%v)", query, got, err)
		}
		return vs
	}
	want := engineView{Pod: "keyed", Namespace: "ns", UID: "keyed-uid", IP: "127.0.19.90", Port: 8000, Kind: fakeengine.VLLM,
		BaseModel: "llama", Loaded: []string{"ours"}, Adapters: map[string]string{"ours": "/p"}, Preloaded: map[string]string{},
		KeysSeen: []string{"key-ns", "key-other"}, Resident: []string{"ours"}, Evicted: []string{},
		Counts: countsView{Requests: 3, Loads: 1, Unloads: 1, ForeignUnloads: 1,
			RequestsByPath: map[string]int{"POST /v1/load_lora_adapter": 1, "POST /v1/unload_lora_adapter": 2}}}
	if diff := cmp.Diff([]engineView{want}, views("")); diff != "" {
		t.Fatalf("GET /engines (-want +got):\n%s", diff)
	}

	// The pod is recreated (a new UID): the new engine starts afresh, the old one is retired.
	if err := m.sync([]*corev1.Pod{pod("keyed", "127.0.19.90", withUID("keyed-uid-2"))}); err != nil {
		t.Fatal(err)
	}
	if vs := views("?retired=false"); len(vs) != 1 || vs[0].UID != "keyed-uid-2" || len(vs[0].KeysSeen) != 0 || vs[0].Retired {
		t.Fatalf("running engines after the pod's recreation: %+v", vs)
	}
	retired := want
	retired.Retired = true
	all := views("?retired=true")
	if len(all) != 2 || all[0].UID != "keyed-uid-2" {
		t.Fatalf("GET /engines?retired=true = %+v, want the new engine then the retired one", all)
	}
	if diff := cmp.Diff(retired, all[1]); diff != "" {
		t.Fatalf("retired engine (-want +got):\n%s", diff)
	}
	if got := must(t, "GET", srv.URL+"/engines?retired=maybe", ""); got.status != 400 {
		t.Fatalf("GET /engines?retired=maybe = %+v, want 400", got)
	}
}

func TestAdminEnginesEmpty(t *testing.T) {
	m, _ := newTestManager(t, fakeengine.Options{})
	srv := httptest.NewServer(adminHandler(m))
	defer srv.Close()
	if got := must(t, "GET", srv.URL+"/engines", ""); got.status != 200 || strings.TrimSpace(got.body) != "[]" {
		t.Fatalf("GET /engines = %+v", got)
	}
}

func TestAdminRestart(t *testing.T) {
	m, admin := adminFixture(t)
	must(t, "POST", "http://127.0.19.60:8000/v1/load_lora_adapter", `{"lora_name":"x","lora_path":"/p"}`)
	e := m.get("ns", "a").engine
	if got := must(t, "POST", admin+"/engines/ns/a/restart", ""); got.status != http.StatusNoContent {
		t.Fatalf("restart = %+v", got)
	}
	if len(e.Loaded()) != 0 {
		t.Fatalf("loaded after restart: %v", e.Loaded())
	}
	if e.Counts().Loads != 1 || m.get("ns", "a").engine != e {
		t.Fatal("restart should keep the engine and its counters")
	}
	if got := must(t, "POST", admin+"/engines/ns/nope/restart", ""); got.status != 404 || !strings.Contains(got.body, "ns/nope") {
		t.Fatalf("restart of an unknown pod = %+v", got)
	}
	if got := must(t, "GET", admin+"/engines/ns/a/restart", ""); got.status != http.StatusMethodNotAllowed {
		t.Fatalf("GET restart = %+v", got)
	}
}

// TestAdminComplete: a completion through the admin API reaches the engine's inference API
// (counted there, answered for a loaded adapter, 404 for one it does not hold).
func TestAdminComplete(t *testing.T) {
	m, admin := adminFixture(t)
	must(t, "POST", "http://127.0.19.60:8000/v1/load_lora_adapter", `{"lora_name":"x","lora_path":"/p"}`)
	got := must(t, "POST", admin+"/engines/ns/a/complete", `{"model":"x","prompt":"hi"}`)
	if got.status != http.StatusOK || !strings.Contains(got.body, `"model":"x"`) {
		t.Fatalf("complete x = %+v", got)
	}
	if n := m.get("ns", "a").engine.Counts().Requests["POST /v1/completions"]; n != 1 {
		t.Errorf("the engine counted %d completions, want 1", n)
	}
	if got := must(t, "POST", admin+"/engines/ns/a/complete", `{"model":"y","prompt":"hi"}`); got.status != http.StatusNotFound {
		t.Errorf("complete of an adapter the engine does not hold = %+v", got)
	}
	if got := must(t, "POST", admin+"/engines/ns/nope/complete", `{"model":"x"}`); got.status != http.StatusNotFound {
		t.Errorf("complete on an unknown pod = %+v", got)
	}
}

func TestAdminFault(t *testing.T) {
	_, admin := adminFixture(t)
	load := func() answer {
		return must(t, "POST", "http://127.0.19.60:8000/v1/load_lora_adapter", `{"lora_name":"x","lora_path":"/p"}`)
	}
	if got := must(t, "POST", admin+"/engines/ns/a/fault", `{"Op":"load","Status":503,"Body":"{\"detail\":\"busy\"}","Times":1}`); got.status != http.StatusNoContent {
		t.Fatalf("set fault = %+v", got)
	}
	if got := load(); got.status != 503 || got.body != `{"detail":"busy"}` {
		t.Fatalf("faulted load = %+v", got)
	}
	if got := load(); got.status != 200 {
		t.Fatalf("load after the fault's one time = %+v", got)
	}

	// A fault until cleared, with lower-case names.
	if got := must(t, "POST", admin+"/engines/ns/a/fault", `{"op":"list","status":500}`); got.status != http.StatusNoContent {
		t.Fatalf("set fault = %+v", got)
	}
	for range 2 {
		if got := must(t, "GET", "http://127.0.19.60:8000/v1/models", ""); got.status != 500 {
			t.Fatalf("faulted list = %+v", got)
		}
	}
	if got := must(t, "DELETE", admin+"/engines/ns/a/fault", ""); got.status != http.StatusNoContent {
		t.Fatalf("clear fault = %+v", got)
	}
	if got := must(t, "GET", "http://127.0.19.60:8000/v1/models", ""); got.status != 200 {
		t.Fatalf("list after clearing = %+v", got)
	}

	// Hang as a duration string or as nanoseconds (how a fakeengine.Fault marshals).
	for _, body := range []string{`{"op":"unload","hang":"50ms","times":1}`, `{"Op":"unload","Hang":50000000,"Times":1}`} {
		if got := must(t, "POST", admin+"/engines/ns/a/fault", body); got.status != http.StatusNoContent {
			t.Fatalf("set fault %s = %+v", body, got)
		}
		start := time.Now()
		must(t, "POST", "http://127.0.19.60:8000/v1/unload_lora_adapter", `{"lora_name":"nope"}`)
		if d := time.Since(start); d < 50*time.Millisecond {
			t.Fatalf("hang %s: answered after %v", body, d)
		}
	}

	for _, body := range []string{
		`{"op":"explode"}`,
		`{"op":"load","times":-1}`,
		`{"op":"load","hugeBody":-1}`,
		`{"op":"load","hang":"-1s"}`,
		`{"op":"load","hang":"soon"}`,
		`{"op":"load","status":42}`,
		`{"op":"load","stauts":503}`,
		`{"op":"load"} {}`,
		`not json`,
	} {
		if got := must(t, "POST", admin+"/engines/ns/a/fault", body); got.status != 400 || !strings.Contains(got.body, "invalid fault") {
			t.Errorf("fault %s = %+v, want 400", body, got)
		}
	}
	if got := load(); got.status != 400 { // already loaded: the invalid faults were not installed
		t.Fatalf("load after invalid faults = %+v", got)
	}
	if got := must(t, "POST", admin+"/engines/other/a/fault", `{"op":"load","status":500}`); got.status != 404 {
		t.Fatalf("fault of an unknown pod = %+v", got)
	}
	if got := must(t, "DELETE", admin+"/engines/other/a/fault", ""); got.status != 404 {
		t.Fatalf("clear fault of an unknown pod = %+v", got)
	}
}

func TestAdminMetrics(t *testing.T) {
	_, admin := adminFixture(t)
	must(t, "POST", "http://127.0.19.60:8000/v1/load_lora_adapter", `{"lora_name":"x","lora_path":"/p"}`)
	must(t, "GET", "http://127.0.19.60:8000/v1/models", "")
	must(t, "PUT", "http://127.0.19.60:8000/v1/models", "") // 405, still counted under its path
	must(t, "GET", "http://127.0.19.60:8000/whatever", "")
	must(t, "POST", "http://127.0.19.61:8080/v1/lora_adapter/load", `{"lora_name":"y","artifact_url":"s3://b/y"}`)

	got := must(t, "GET", admin+"/metrics", "")
	if got.status != 200 {
		t.Fatalf("GET /metrics = %+v", got)
	}
	for _, line := range []string{
		`fake_engine_requests_total{namespace="ns",path="/v1/load_lora_adapter",pod="a"} 1`,
		`fake_engine_requests_total{namespace="ns",path="/v1/models",pod="a"} 2`,
		`fake_engine_requests_total{namespace="ns",path="other",pod="a"} 1`,
		`fake_engine_requests_total{namespace="ns",path="/v1/lora_adapter/load",pod="b"} 1`,
		`fake_engine_loaded_adapters{namespace="ns",pod="a"} 1`,
		`fake_engine_loaded_adapters{namespace="ns",pod="b"} 1`,
		`# TYPE fake_engine_requests_total counter`,
		`# TYPE fake_engine_loaded_adapters gauge`,
	} {
		if !strings.Contains(got.body, line+"\n") {
			t.Errorf("metrics lack %q:\n%s", line, got.body)
		}
	}
	if strings.Contains(got.body, "go_goroutines") {
		t.Error("metrics include the default registry's collectors")
	}
}

func TestAdminHealthz(t *testing.T) {
	_, admin := adminFixture(t)
	if got := must(t, "GET", admin+"/healthz", ""); got.status != 200 || got.body != "ok\n" {
		t.Fatalf("GET /healthz = %+v", got)
	}
	if got := must(t, "GET", admin+"/nope", ""); got.status != 404 {
		t.Fatalf("GET /nope = %+v", got)
	}
}

func TestCheckLoopbackAddress(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:9400":   true,
		"127.0.19.7:9400":  true,
		"localhost:9400":   true,
		":9400":            false,
		"0.0.0.0:9400":     false,
		"203.0.113.1:9400": false,
		"[::1]:9400":       false,
		"127.0.0.1":        false,
	} {
		if err := checkLoopbackAddress(addr); (err == nil) != ok {
			t.Errorf("checkLoopbackAddress(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
}
