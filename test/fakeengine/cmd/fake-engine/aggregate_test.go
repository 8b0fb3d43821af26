package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/loraplane/loraplane/test/fakeengine"
)

// podAdmin serves, like `fake-engine --serve-pod --pod-admin-address`, one engine for pod
// ns/name on ip:8000 and its admin API on ip:port (port 0 picks one), and returns the port.
func podAdmin(t *testing.T, name, ip string, port int) int {
	t.Helper()
	e, err := fakeengine.Start(ip, 8000, fakeengine.Options{BaseModel: "llama"})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := newTestManager(t, fakeengine.Options{})
	m.add(engineSpec{Namespace: "ns", Pod: name, IP: ip, Port: 8000, Kind: e.Kind(), BaseModel: "llama"}, e)
	ln, err := net.Listen("tcp4", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	ln.Close() // serveAdmin listens itself; the port is free again
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	addr := ln.Addr().String()
	go func() { done <- serveAdmin(ctx, addr, adminHandler(m)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("admin API of %s: %v", name, err)
		}
	})
	waitListening(t, addr)
	return ln.Addr().(*net.TCPAddr).Port
}

func waitListening(t *testing.T, addr string) {
	t.Helper()
	eventually(t, "something listening on "+addr, func() bool { return listening(addr) })
}

// TestAggregator: GET /engines joins the in-pod admin APIs of the running pods (a pod without
// an IP, or whose admin API does not answer, is left out); per-engine calls reach that pod's
// admin API and its answer comes back unchanged; an unknown pod is a 404.
func TestAggregator(t *testing.T) {
	port := podAdmin(t, "a", "127.0.19.80", 0)
	podAdmin(t, "b", "127.0.19.81", port)
	client := fake.NewClientset(
		pod("a", "127.0.19.80"), pod("b", "127.0.19.81"),
		pod("c", "127.0.19.82"), // running, but no admin API answers there
		pod("d", ""),            // no IP yet
	)
	a := &aggregator{client: client, selector: labelName, port: port, http: &http.Client{Timeout: 5 * time.Second}}
	srv := httptest.NewServer(a.handler())
	t.Cleanup(srv.Close)

	must(t, "POST", "http://127.0.19.80:8000/v1/load_lora_adapter", `{"lora_name":"x","lora_path":"/p"}`)
	got := must(t, "GET", srv.URL+"/engines", "")
	var views []engineView
	if err := json.Unmarshal([]byte(got.body), &views); err != nil || got.status != 200 {
		t.Fatalf("GET /engines = %+v (%v)", got, err)
	}
	if len(views) != 2 || views[0].Pod != "a" || views[1].Pod != "b" || len(views[0].Loaded) != 1 || len(views[1].Loaded) != 0 {
		t.Fatalf("engines = %+v", views)
	}

	if got := must(t, "POST", srv.URL+"/engines/ns/a/restart", ""); got.status != 204 {
		t.Fatalf("restart = %+v", got)
	}
	if got := must(t, "GET", srv.URL+"/engines", ""); !json.Valid([]byte(got.body)) {
		t.Fatalf("GET /engines = %+v", got)
	} else if err := json.Unmarshal([]byte(got.body), &views); err != nil || len(views[0].Loaded) != 0 {
		t.Fatalf("after the restart a holds %v (%v)", views[0].Loaded, err)
	}
	if got := must(t, "POST", srv.URL+"/engines/ns/b/fault", `{"op":"load","status":503}`); got.status != 204 {
		t.Fatalf("fault = %+v", got)
	}
	if got := must(t, "POST", "http://127.0.19.81:8000/v1/load_lora_adapter", `{"lora_name":"y","lora_path":"/p"}`); got.status != 503 {
		t.Fatalf("load on b with the fault = %+v", got)
	}
	if got := must(t, "POST", srv.URL+"/engines/ns/b/fault", `{"op":"nope"}`); got.status != 400 {
		t.Fatalf("invalid fault = %+v, want the pod's 400", got)
	}
	if got := must(t, "DELETE", srv.URL+"/engines/ns/gone/fault", ""); got.status != 404 {
		t.Fatalf("unknown pod = %+v", got)
	}
	if got := must(t, "DELETE", srv.URL+"/engines/ns/d/fault", ""); got.status != 404 {
		t.Fatalf("pod without IP = %+v", got)
	}
	if got := must(t, "DELETE", srv.URL+"/engines/ns/c/fault", ""); got.status != 502 {
		t.Fatalf("pod whose admin API is down = %+v", got)
	}
}
