package main

import (
	"maps"
	"net"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/loraplane/loraplane/test/fakeengine"
)

func TestSpecFor(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	nativeSidecar := func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: runtimeContainer, RestartPolicy: &always}}
	}
	plainInit := func(p *corev1.Pod) { p.Spec.InitContainers = []corev1.Container{{Name: runtimeContainer}} }
	vllm := engineSpec{Namespace: "ns", Pod: "p", UID: "p-uid", IP: "127.0.19.1", Port: 8000, Kind: fakeengine.VLLM, BaseModel: "llama"}
	with := func(f func(*engineSpec)) engineSpec { s := vllm; f(&s); return s }

	tests := []struct {
		name    string
		pod     *corev1.Pod
		want    engineSpec
		ok      bool
		wantErr string
	}{
		{name: "defaults", pod: pod("p", "127.0.19.1"), want: vllm, ok: true},
		{name: "port label", pod: pod("p", "127.0.19.1", withLabel(labelPort, "9001")), want: with(func(s *engineSpec) { s.Port = 9001 }), ok: true},
		{name: "sglang", pod: pod("p", "127.0.19.1", withLabel(labelEngine, "sglang")), want: with(func(s *engineSpec) { s.Kind = fakeengine.SGLang }), ok: true},
		{name: "other engine label is vllm", pod: pod("p", "127.0.19.1", withLabel(labelEngine, "tgi")), want: vllm, ok: true},
		{name: "runtime container", pod: pod("p", "127.0.19.1", withRuntime()), want: with(func(s *engineSpec) { s.Runtime = true }), ok: true},
		{name: "runtime native sidecar", pod: pod("p", "127.0.19.1", nativeSidecar), want: with(func(s *engineSpec) { s.Runtime = true }), ok: true},
		{name: "runtime plain init container is not a sidecar", pod: pod("p", "127.0.19.1", plainInit), want: vllm, ok: true},
		{name: "no base model label", pod: pod("p", "127.0.19.1", func(p *corev1.Pod) { delete(p.Labels, labelName) }), want: with(func(s *engineSpec) { s.BaseModel = "" }), ok: true},
		{name: "api key annotation", pod: pod("p", "127.0.19.1", func(p *corev1.Pod) { p.Annotations = map[string]string{annotationAPIKey: "k"} }), want: with(func(s *engineSpec) { s.APIKey = "k" }), ok: true},
		{name: "preload annotation", pod: pod("p", "127.0.19.1", func(p *corev1.Pod) { p.Annotations = map[string]string{annotationPreload: "a=org/a, b=/models/b"} }),
			want: with(func(s *engineSpec) { s.Preload = "a=org/a, b=/models/b" }), ok: true},
		{name: "malformed preload annotation", pod: pod("p", "127.0.19.1", func(p *corev1.Pod) { p.Annotations = map[string]string{annotationPreload: "a=org/a,b"} }),
			wantErr: `annotation fake-engine.loraplane.dev/preload: "b" is not name=path`},
		{name: "pending", pod: pod("p", "127.0.19.1", withPhase(corev1.PodPending))},
		{name: "succeeded", pod: pod("p", "127.0.19.1", withPhase(corev1.PodSucceeded))},
		{name: "no IP yet", pod: pod("p", "")},
		{name: "pod network IP refused", pod: pod("p", "203.0.113.5"), wantErr: "not in 127.0.0.0/8"},
		{name: "IPv6 loopback refused", pod: pod("p", "::1"), wantErr: "not in 127.0.0.0/8"},
		{name: "IPv4-mapped loopback refused", pod: pod("p", "::ffff:127.0.19.1"), wantErr: "not in 127.0.0.0/8"},
		{name: "garbage IP refused", pod: pod("p", "nope"), wantErr: "invalid pod IP"},
		{name: "bad port", pod: pod("p", "127.0.19.1", withLabel(labelPort, "http")), wantErr: "invalid model.aibrix.ai/port"},
		{name: "port 0", pod: pod("p", "127.0.19.1", withLabel(labelPort, "0")), wantErr: "invalid model.aibrix.ai/port"},
		{name: "port too big", pod: pod("p", "127.0.19.1", withLabel(labelPort, "65536")), wantErr: "invalid model.aibrix.ai/port"},
		{name: "port is the sidecar's", pod: pod("p", "127.0.19.1", withLabel(labelPort, "8080"), withRuntime()), wantErr: "sidecar's port"},
		{name: "port 8080 without sidecar", pod: pod("p", "127.0.19.1", withLabel(labelPort, "8080")), want: with(func(s *engineSpec) { s.Port = 8080 }), ok: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := specFor(tc.pod)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				if ok {
					t.Fatal("ok with an error")
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if ok != tc.ok || got != tc.want {
				t.Fatalf("specFor = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestDesiredEngines(t *testing.T) {
	pods := []*corev1.Pod{
		pod("a", "127.0.19.1"),
		pod("b", "127.0.19.2", withLabel(labelEngine, "sglang"), withLabel(labelPort, "30000"), withRuntime()),
		pod("outside", "203.0.113.7"),
		pod("pending", "", withPhase(corev1.PodPending)),
		// A stale pod and its replacement on the same IP: the newer one wins.
		pod("old", "127.0.19.3", createdAt(100)),
		pod("new", "127.0.19.3", createdAt(200)),
		// Same IP, disjoint ports: both run.
		pod("c1", "127.0.19.4", withLabel(labelPort, "8001")),
		pod("c2", "127.0.19.4", withLabel(labelPort, "8002")),
		// The sidecar port of one clashes with the engine port of an older one.
		pod("d-old", "127.0.19.5", withLabel(labelPort, "8080"), createdAt(100)),
		pod("d-new", "127.0.19.5", withRuntime(), createdAt(200)),
	}
	for _, order := range [][]*corev1.Pod{pods, reversed(pods)} {
		desired, refused := desiredEngines(order)
		if got, want := slices.Sorted(maps.Keys(desired)), []string{"ns/a", "ns/b", "ns/c1", "ns/c2", "ns/d-new", "ns/new"}; !slices.Equal(got, want) {
			t.Fatalf("desired = %v, want %v", got, want)
		}
		if got, want := slices.Sorted(maps.Keys(refused)), []string{"ns/d-old", "ns/old", "ns/outside"}; !slices.Equal(got, want) {
			t.Fatalf("refused = %v, want %v", got, want)
		}
		if b := desired["ns/b"]; b.Kind != fakeengine.SGLang || b.Port != 30000 || !b.Runtime || b.IP != "127.0.19.2" {
			t.Errorf("ns/b = %+v", b)
		}
		if err := refused["ns/old"]; !strings.Contains(err.Error(), "127.0.19.3:8000 is taken by newer pod ns/new") {
			t.Errorf("ns/old refused: %v", err)
		}
		if err := refused["ns/d-old"]; !strings.Contains(err.Error(), "127.0.19.5:8080 is taken by newer pod ns/d-new") {
			t.Errorf("ns/d-old refused: %v", err)
		}
	}
}

func reversed[T any](s []T) []T {
	r := slices.Clone(s)
	slices.Reverse(r)
	return r
}

func TestSyncLifecycle(t *testing.T) {
	m, warns := newTestManager(t, fakeengine.Options{})
	a := pod("a", "127.0.19.10")
	b := pod("b", "127.0.19.11", withLabel(labelEngine, "sglang"), withLabel(labelPort, "30000"), withRuntime())
	outside := pod("outside", "203.0.113.9")

	if err := m.sync([]*corev1.Pod{a, b, outside}); err != nil {
		t.Fatal(err)
	}
	if got := must(t, "GET", "http://127.0.19.10:8000/v1/models", ""); got.status != 200 || !strings.Contains(got.body, `"llama"`) {
		t.Fatalf("engine a /v1/models = %+v", got)
	}
	if got := must(t, "POST", "http://127.0.19.11:30000/load_lora_adapter", `{"lora_name":"x","lora_path":"/p"}`); got.status != 200 {
		t.Fatalf("engine b (sglang) load = %+v", got)
	}
	if got := must(t, "POST", "http://127.0.19.11:8080/v1/lora_adapter/load", `{"lora_name":"y","artifact_url":"s3://b/y"}`); got.status != 200 {
		t.Fatalf("engine b sidecar load = %+v", got)
	}
	if got := m.get("ns", "b").engine.Loaded(); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("b loaded = %v", got)
	}
	if got := must(t, "POST", "http://127.0.19.10:8000/v1/load_lora_adapter", `{"lora_name":"z","lora_path":"/p"}`); got.status != 200 {
		t.Fatalf("engine a load = %+v", got)
	}
	if w := warns.list(); len(w) != 1 || !strings.Contains(w[0], "ns/outside") || !strings.Contains(w[0], "not in 127.0.0.0/8") {
		t.Fatalf("warnings = %q", w)
	}

	// The same pods again: the engines stay (adapters kept), and the refusal is not repeated.
	engA := m.get("ns", "a").engine
	if err := m.sync([]*corev1.Pod{a, b, outside}); err != nil {
		t.Fatal(err)
	}
	if m.get("ns", "a").engine != engA || !slices.Equal(engA.Loaded(), []string{"z"}) {
		t.Fatal("engine a was replaced by a no-op sync")
	}
	if w := warns.list(); len(w) != 1 {
		t.Fatalf("refusal repeated: %q", w)
	}

	// a is recreated (same name and IP, new UID): a fresh engine, with no adapters.
	a2 := pod("a", "127.0.19.10", withUID("a-uid-2"))
	// b moves to another IP: the old address is closed.
	b2 := pod("b", "127.0.19.12", withLabel(labelEngine, "sglang"), withLabel(labelPort, "30000"), withRuntime())
	if err := m.sync([]*corev1.Pod{a2, b2}); err != nil {
		t.Fatal(err)
	}
	if e := m.get("ns", "a").engine; e == engA || len(e.Loaded()) != 0 || e.Counts().Loads != 0 {
		t.Fatalf("engine a after recreate: same=%v loaded=%v", e == engA, e.Loaded())
	}
	if !listening("127.0.19.10:8000") {
		t.Fatal("recreated engine a not listening")
	}
	for _, addr := range []string{"127.0.19.11:30000", "127.0.19.11:8080"} {
		if listening(addr) {
			t.Errorf("old address of b %s still listening", addr)
		}
	}
	if got := must(t, "GET", "http://127.0.19.12:30000/v1/models", ""); got.status != 200 {
		t.Fatalf("b on its new IP = %+v", got)
	}

	// a is deleted, b stops running.
	if err := m.sync([]*corev1.Pod{pod("b", "127.0.19.12", withPhase(corev1.PodFailed))}); err != nil {
		t.Fatal(err)
	}
	if rs := m.list(); len(rs) != 0 {
		t.Fatalf("engines left: %d", len(rs))
	}
	for _, addr := range []string{"127.0.19.10:8000", "127.0.19.12:30000", "127.0.19.12:8080"} {
		if listening(addr) {
			t.Errorf("%s still listening", addr)
		}
	}

	// A pod refused again after it was gone is warned about again.
	if err := m.sync([]*corev1.Pod{outside}); err != nil {
		t.Fatal(err)
	}
	if w := warns.list(); len(w) != 2 {
		t.Fatalf("warnings = %q", w)
	}
}

func TestSyncOptions(t *testing.T) {
	m, _ := newTestManager(t, fakeengine.Options{APIKey: "secret"})
	if err := m.sync([]*corev1.Pod{pod("a", "127.0.19.20")}); err != nil {
		t.Fatal(err)
	}
	if got := must(t, "GET", "http://127.0.19.20:8000/v1/models", ""); got.status != 401 {
		t.Fatalf("without the API key: %+v", got)
	}
}

// TestSyncPodAPIKey: a pod's API key annotation overrides --api-key for its engine only.
func TestSyncPodAPIKey(t *testing.T) {
	m, _ := newTestManager(t, fakeengine.Options{})
	keyed := pod("k", "127.0.19.21", func(p *corev1.Pod) { p.Annotations = map[string]string{annotationAPIKey: "pod-key"} })
	if err := m.sync([]*corev1.Pod{keyed, pod("open", "127.0.19.22")}); err != nil {
		t.Fatal(err)
	}
	if got := must(t, "GET", "http://127.0.19.21:8000/v1/models", ""); got.status != 401 {
		t.Errorf("keyed engine without the key: %+v", got)
	}
	if got := must(t, "GET", "http://127.0.19.22:8000/v1/models", ""); got.status != 200 {
		t.Errorf("engine without a key: %+v", got)
	}
}

// TestSyncPreload: a pod's preload annotation gives its engine those adapters from the start,
// without a load call.
func TestSyncPreload(t *testing.T) {
	m, _ := newTestManager(t, fakeengine.Options{})
	p := pod("held", "127.0.19.23", func(p *corev1.Pod) { p.Annotations = map[string]string{annotationPreload: "lora-a=org/lora-a"} })
	if err := m.sync([]*corev1.Pod{p}); err != nil {
		t.Fatal(err)
	}
	e := m.get("ns", "held").engine
	if got := e.Adapters(); got["lora-a"] != "org/lora-a" || len(got) != 1 || e.Loads() != 0 {
		t.Fatalf("adapters %v after %d loads, want lora-a from org/lora-a and no load", got, e.Loads())
	}
}

func TestSyncReusesAddressOfGonePod(t *testing.T) {
	m, _ := newTestManager(t, fakeengine.Options{})
	if err := m.sync([]*corev1.Pod{pod("old", "127.0.19.30")}); err != nil {
		t.Fatal(err)
	}
	// In one sync, old is gone and new has its IP: old's engine is closed first.
	if err := m.sync([]*corev1.Pod{pod("new", "127.0.19.30", withLabel(labelEngine, "sglang"))}); err != nil {
		t.Fatal(err)
	}
	if r := m.get("ns", "new"); r == nil || r.engine.Kind() != fakeengine.SGLang {
		t.Fatalf("new = %+v", r)
	}
	if m.get("ns", "old") != nil {
		t.Fatal("old still has an engine")
	}
}

func TestSyncRetriesFailedStart(t *testing.T) {
	m, _ := newTestManager(t, fakeengine.Options{})
	ln, err := net.Listen("tcp4", "127.0.19.40:8000")
	if err != nil {
		t.Fatal(err)
	}
	pods := []*corev1.Pod{pod("busy", "127.0.19.40"), pod("free", "127.0.19.41")}
	err = m.sync(pods)
	if err == nil || !strings.Contains(err.Error(), "ns/busy") {
		t.Fatalf("sync with a busy address: %v", err)
	}
	if m.get("ns", "free") == nil || m.get("ns", "busy") != nil {
		t.Fatal("the free pod should have its engine, the busy one none")
	}
	_ = ln.Close()
	if err := m.sync(pods); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if m.get("ns", "busy") == nil {
		t.Fatal("busy pod has no engine after the retry")
	}
}

func TestCloseAll(t *testing.T) {
	m, _ := newTestManager(t, fakeengine.Options{})
	if err := m.sync([]*corev1.Pod{pod("a", "127.0.19.50"), pod("b", "127.0.19.51", withRuntime())}); err != nil {
		t.Fatal(err)
	}
	m.closeAll()
	for _, addr := range []string{"127.0.19.50:8000", "127.0.19.51:8000", "127.0.19.51:8080"} {
		if listening(addr) {
			t.Errorf("%s still listening after closeAll", addr)
		}
	}
	if len(m.list()) != 0 {
		t.Fatal("engines left after closeAll")
	}
}
