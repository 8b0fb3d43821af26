package adapter_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/fakeengine"
	"github.com/loraplane/loraplane/test/testenv"
)

// TestEngineFaultsClassified: every way an engine can fail ends in a bounded time with the
// Ready condition False and a reason that names the failure.
func TestEngineFaultsClassified(t *testing.T) {
	needEnv(t)
	cases := []struct {
		name   string
		fault  *fakeengine.Fault // nil: no engine at all (connection refused)
		reason string
	}{
		{"server error", &fakeengine.Fault{Op: fakeengine.OpLoad, Status: 500}, "EngineServerError"},
		{"runtime updating disabled", &fakeengine.Fault{Op: fakeengine.OpLoad, Status: 404, Body: `{"detail":"Not Found"}`}, "LoRAUpdatingDisabled"},
		{"unauthorized", &fakeengine.Fault{Op: fakeengine.OpLoad, Status: 401}, "EngineUnauthorized"},
		{"hang past the timeout", &fakeengine.Fault{Op: fakeengine.OpLoad, Hang: time.Minute}, "EngineTimeout"},
		{"connection refused", nil, "EngineUnreachable"},
		// Lie: the engine answers without loading, so that the answer is the only thing the
		// controller learns. A load that takes effect behind an oversized answer ends Running
		// once a listing shows it (TestOversizedAnswerToALoadThatTookEffect).
		{"10 MB body", &fakeengine.Fault{Op: fakeengine.OpLoad, HugeBody: 10 << 20, Lie: true}, "EngineResponseTooLarge"},
		{"malformed list", &fakeengine.Fault{Op: fakeengine.OpList, Malformed: true}, "EngineBadResponse"},
		{"lying engine", &fakeengine.Fault{Op: fakeengine.OpLoad, Lie: true}, "NotVerified"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxFor(t)
			ns := newNamespace(t)
			ip := newIP()
			if tc.fault != nil {
				e := engine(t, ip, 8000, fakeengine.Options{})
				e.SetFault(*tc.fault)
			}
			model := fmt.Sprintf("fault%d", i)
			modelPod(t, ns, model+"-0", ip, modelLabels(model))
			a := newAdapter(ns, "a", model)
			start := time.Now()
			if err := k8s.Create(ctx, a); err != nil {
				t.Fatal(err)
			}
			got := waitAdapter(t, client.ObjectKeyFromObject(a), 45*time.Second, "Ready False/"+tc.reason, func(a *v1alpha1.ModelAdapter) bool {
				c := readyCondition(a)
				return c != nil && c.Status == "False" && c.Reason == tc.reason
			})
			c := readyCondition(got)
			if !strings.Contains(c.Message, model+"-0") {
				t.Errorf("Ready message %q does not name the pod %s-0", c.Message, model)
			}
			t.Logf("%s: Ready False/%s after %s, phase %s: %s", tc.name, c.Reason, time.Since(start).Round(10*time.Millisecond), got.Status.Phase, c.Message)
		})
	}
}

// TestOversizedAnswerToALoadThatTookEffect: the engine loads the adapter but answers with a
// 10 MB body, which the client refuses. The engine's listing is what counts: the adapter ends
// Running on that pod, not Failed.
func TestOversizedAnswerToALoadThatTookEffect(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	ip := newIP()
	e := engine(t, ip, 8000, fakeengine.Options{})
	e.SetFault(fakeengine.Fault{Op: fakeengine.OpLoad, HugeBody: 10 << 20})
	modelPod(t, ns, "big-0", ip, modelLabels("big"))
	a := newAdapter(ns, "big", "big")
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	got := waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "Running on big-0", running(1))
	loads := e.Loads()
	if _, held := e.Adapters()["big"]; loads < 1 || !held {
		t.Fatalf("Running with %d load(s) sent and the engine holding %v", loads, e.Adapters())
	}
	t.Logf("Running after %d load(s): %s", loads, readyCondition(got).Message)
}

// TestFailingLoadsBackOffWithoutLeaking: a load that keeps failing is retried with growing
// gaps (base 200ms doubling to 1s in the suite), and ~100 failing loads across adapters
// leave the goroutine count where it was.
func TestFailingLoadsBackOffWithoutLeaking(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)

	// Backoff: one adapter, one pod, every load fails.
	ip := newIP()
	e := engine(t, ip, 8000, fakeengine.Options{})
	e.SetFault(fakeengine.Fault{Op: fakeengine.OpLoad, Status: 500})
	modelPod(t, ns, "b-0", ip, modelLabels("b"))
	a := newAdapter(ns, "backoff", "b")
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	const window = 6 * time.Second
	var at []time.Duration
	var start time.Time
	seen := 0
	// Sampled every 10 ms: the attempts' times from the first one, over the window.
	testenv.Eventually(t, 30*time.Second+window, 10*time.Millisecond, "load attempts over the window", func() (bool, string) {
		if n := e.Loads(); n > seen {
			if start.IsZero() {
				start = time.Now()
			}
			for ; seen < n; seen++ {
				at = append(at, time.Since(start))
			}
		}
		return !start.IsZero() && time.Since(start) >= window, fmt.Sprintf("%d attempts", len(at))
	})
	var gaps []time.Duration
	for i := 1; i < len(at); i++ {
		gaps = append(gaps, (at[i] - at[i-1]).Round(10*time.Millisecond))
	}
	firstHalf := 0
	for _, d := range at {
		if d < window/2 {
			firstHalf++
		}
	}
	t.Logf("backoff: %d loads in %s (%d in the first half, %d in the second), gaps %v", len(at), window, firstHalf, len(at)-firstHalf, gaps)
	// Without backoff (a fixed 200ms) there would be ~30 attempts; with doubling to 1s ~9.
	if len(at) > 14 {
		t.Errorf("%d load attempts in %s, want at most 14 (retries do not back off)", len(at), window)
	}
	if len(at)-firstHalf > firstHalf {
		t.Errorf("more loads in the second half of the window (%d) than in the first (%d): retries do not slow down", len(at)-firstHalf, firstHalf)
	}
	if len(gaps) >= 3 && gaps[len(gaps)-1] < 3*gaps[0] {
		t.Errorf("last gap %s is not at least 3x the first %s", gaps[len(gaps)-1], gaps[0])
	}

	// Leaks: 40 adapters on a pod whose engine answers 503, ~120 failing loads in all; the
	// goroutine count is measured once failures are steady (40 loads) and again after 80
	// more.
	ip2 := newIP()
	e2 := engine(t, ip2, 8000, fakeengine.Options{})
	e2.SetFault(fakeengine.Fault{Op: fakeengine.OpLoad, Status: 503})
	modelPod(t, ns, "l-0", ip2, modelLabels("l"))
	for i := range 40 {
		if err := k8s.Create(ctx, newAdapter(ns, fmt.Sprintf("leak-%d", i), "l")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "40 failing loads", func() bool { return e2.Loads() >= 40 })
	runtime.GC()
	before, loadsBefore := runtime.NumGoroutine(), e2.Loads()
	waitFor(t, 60*time.Second, "80 more failing loads", func() bool { return e2.Loads() >= loadsBefore+80 })
	runtime.GC()
	after, loadsAfter := runtime.NumGoroutine(), e2.Loads()
	t.Logf("goroutines: %d before and %d after %d failing loads (delta %d)", before, after, loadsAfter-loadsBefore, after-before)
	if after-before > 25 {
		t.Errorf("goroutines grew by %d (from %d to %d) over %d failing loads", after-before, before, after, loadsAfter-loadsBefore)
	}
}

// TestNonRetryableAnswerFailsAtOnce: an engine answer that retrying cannot change (400 for a
// bad artifact) makes the adapter Failed after the first attempt, while a retryable one (503)
// is retried up to the retry limit before the adapter is Failed.
func TestNonRetryableAnswerFailsAtOnce(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	for name, tc := range map[string]struct {
		fault        fakeengine.Fault
		wantAttempts int
		wantReason   string
	}{
		"400 bad artifact": {fakeengine.Fault{Op: fakeengine.OpLoad, Status: 400,
			Body: `{"error":{"message":"No adapter found for org/bad","type":"NotFoundError","code":400}}`}, 1, "EngineRejected"},
		"503 retryable": {fakeengine.Fault{Op: fakeengine.OpLoad, Status: 503}, testOptions().Adapter.RetryLimit, "EngineServerError"},
	} {
		t.Run(name, func(t *testing.T) {
			ns := newNamespace(t)
			ip := newIP()
			e := engine(t, ip, 8000, fakeengine.Options{})
			e.SetFault(tc.fault)
			modelPod(t, ns, "nr-0", ip, modelLabels("nr"))
			a := newAdapter(ns, "nr", "nr")
			// Every status write is seen (a watch, not polling): the first one that says
			// Failed tells after how many attempts the adapter failed.
			wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: k8s.Scheme()})
			if err != nil {
				t.Fatal(err)
			}
			w, err := wc.Watch(ctx, &v1alpha1.ModelAdapterList{}, client.InNamespace(ns))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			if err := k8s.Create(ctx, a); err != nil {
				t.Fatal(err)
			}
			var failed *v1alpha1.ModelAdapter
			for failed == nil {
				select {
				case ev := <-w.ResultChan():
					if got, ok := ev.Object.(*v1alpha1.ModelAdapter); ok && got.Status.Phase == v1alpha1.ModelAdapterFailed {
						failed = got
					}
				case <-time.After(30 * time.Second):
					t.Fatal("timed out after 30s waiting for the adapter to be Failed")
				}
			}
			c := readyCondition(failed)
			t.Logf("Failed: %s", c.Message)
			if c.Reason != tc.wantReason || !strings.Contains(c.Message, fmt.Sprintf("(%d attempts)", tc.wantAttempts)) || e.Loads() < tc.wantAttempts {
				t.Errorf("Ready condition %s: %s; want reason %s after %d attempts", c.Reason, c.Message, tc.wantReason, tc.wantAttempts)
			}
		})
	}
}
