package fakeengine

import (
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loraplane/loraplane/test/testenv"
)

func TestFleet(t *testing.T) {
	var f Fleet
	defer f.Close()
	ip1, ip2 := nextIP(), nextIP()
	e1, err := f.Add(ip1, 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(e1.Addr())
	p, _ := strconv.Atoi(port)
	e2, err := f.Add(ip2, p, Options{Kind: SGLang})
	if err != nil {
		t.Fatalf("second pod on the same port: %v", err)
	}
	if _, err := f.Add(ip1, 0, Options{}); err == nil {
		t.Error("Add twice on one IP succeeded")
	}
	if _, err := f.Add("203.0.113.1", 0, Options{}); err == nil {
		t.Error("Add on 203.0.113.1 succeeded")
	}
	if f.Get(ip1) != e1 || f.Get(ip2) != e2 || f.Get("127.0.0.99") != nil {
		t.Error("Get returns the wrong engines")
	}
	if d := cmp.Diff([]string{ip1, ip2}, f.IPs()); d != "" {
		t.Errorf("IPs() (-want +got):\n%s", d)
	}

	must(t, "POST", url(e1, "/v1/load_lora_adapter"), `{"lora_name":"a","lora_path":"/p"}`)
	must(t, "POST", url(e2, "/load_lora_adapter"), `{"lora_name":"a","lora_path":"/p"}`)
	must(t, "GET", url(e2, "/v1/models"), "")
	want := Counts{
		Requests: map[string]int{"POST /v1/load_lora_adapter": 1, "POST /load_lora_adapter": 1, "GET /v1/models": 1},
		Loads:    2, Lists: 1,
	}
	if d := cmp.Diff(want, f.Totals()); d != "" {
		t.Errorf("Totals() (-want +got):\n%s", d)
	}

	addr1 := e1.Addr()
	f.Remove(ip1)
	f.Remove(ip1) // no-op
	if f.Get(ip1) != nil {
		t.Error("removed engine still in the fleet")
	}
	if _, err := call(t, http.DefaultClient, "GET", "http://"+addr1+"/health", ""); err == nil {
		t.Error("removed engine still answers")
	}
	// A pod can come back on the same IP.
	e1b, err := f.Add(ip1, p, Options{})
	if err != nil {
		t.Fatalf("re-Add: %v", err)
	}
	must(t, "GET", url(e1b, "/v1/models"), "")
	want.Requests["GET /v1/models"]++
	want.Lists++
	if d := cmp.Diff(want, f.Totals()); d != "" {
		t.Errorf("Totals() after Remove (-want +got):\n%s", d)
	}

	f.Close()
	if len(f.IPs()) != 0 || f.Get(ip2) != nil {
		t.Error("Close left engines in the fleet")
	}
	if d := cmp.Diff(want, f.Totals()); d != "" {
		t.Errorf("Totals() after Close (-want +got):\n%s", d)
	}
}

// TestCloseNoGoroutineLeak checks engines leave no goroutines behind, whatever was in
// flight when they were closed.
func TestCloseNoGoroutineLeak(t *testing.T) {
	http.DefaultClient.CloseIdleConnections()
	before := stableGoroutines()

	hc := &http.Client{Transport: &http.Transport{}}
	var f Fleet
	for i := range 3 {
		e, err := f.Add(nextIP(), 0, Options{Kind: []Kind{VLLM, SGLang}[i%2], Runtime: true, Latency: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := call(t, hc, "GET", url(e, "/v1/models"), ""); err != nil {
				t.Fatal(err)
			}
			if _, err := call(t, hc, "POST", runtimeURL(e, "/v1/lora_adapter/unload"), `{"lora_name":"x"}`); err != nil {
				t.Fatal(err)
			}
		}
		e.SetFault(Fault{Op: OpLoad, Hang: time.Hour})
	}
	// One hanging request per engine, and idle keep-alive connections to each.
	var wg sync.WaitGroup
	for _, ip := range f.IPs() {
		e := f.Get(ip)
		wg.Go(func() {
			if _, err := call(t, hc, "POST", runtimeURL(e, "/v1/lora_adapter/load"), `{"lora_name":"a","artifact_url":"u"}`); err == nil {
				t.Error("hanging load answered")
			}
		})
	}
	for _, ip := range f.IPs() {
		e := f.Get(ip)
		eventually(t, "loads to hang", func() bool { return e.inFlight.Load() == 1 })
	}
	if runtime.NumGoroutine() <= before {
		t.Fatal("engines run no goroutines?")
	}
	f.Close()
	wg.Wait()
	hc.CloseIdleConnections()

	var after int
	testenv.Poll(5*time.Second, 20*time.Millisecond, func() bool {
		after = runtime.NumGoroutine()
		return after <= before+1
	})
	if after > before+1 {
		buf := make([]byte, 1<<20)
		t.Errorf("goroutines: %d before, %d after Close\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}

// stableGoroutines waits for the goroutine count to settle and returns it.
func stableGoroutines() int {
	n := runtime.NumGoroutine()
	testenv.Poll(time.Second, 20*time.Millisecond, func() bool {
		m := runtime.NumGoroutine()
		stable := m == n
		n = m
		return stable
	})
	return n
}
