package aibrix

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

var (
	t0       = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	cmLease  = types.NamespacedName{Namespace: "aibrix-system", Name: "aibrix-controller-manager"}
	adLease  = types.NamespacedName{Namespace: "aibrix-system", Name: "aibrix-model-adapter-controller"}
	resource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
)

// lease is a Lease as controller-runtime's leader election writes it (AIBrix: 15 s).
func lease(key types.NamespacedName, holder string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime:          &metav1.MicroTime{Time: renewed.Add(-time.Hour)},
			RenewTime:            &metav1.MicroTime{Time: renewed},
		},
	}
}

// leaseAPI is an API server of Leases whose GETs can be made to fail or to hang.
type leaseAPI struct {
	client.WithWatch
	raw     client.WithWatch // the store, without the failures
	mu      sync.Mutex
	err     error         // returned by every GET while set
	hold    chan struct{} // while set, GETs wait until it is closed (or their context ends)
	held    chan struct{} // one value per GET that waits
	gets    int
	waiting int // GETs waiting now
	maxWait int // most GETs seen waiting at once
}

func newLeaseAPI(objs ...client.Object) *leaseAPI {
	a := &leaseAPI{held: make(chan struct{}, 100), raw: fake.NewClientBuilder().WithObjects(objs...).Build()}
	a.WithWatch = interceptor.NewClient(a.raw, interceptor.Funcs{Get: a.get})
	return a
}

func (a *leaseAPI) get(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	a.mu.Lock()
	a.gets++
	err, hold := a.err, a.hold
	if hold != nil {
		a.waiting++
		a.maxWait = max(a.maxWait, a.waiting)
	}
	a.mu.Unlock()
	if hold != nil {
		a.held <- struct{}{}
		select {
		case <-hold:
		case <-ctx.Done():
		}
		a.mu.Lock()
		a.waiting--
		a.mu.Unlock()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if err != nil {
		return err
	}
	return c.Get(ctx, key, obj, opts...)
}

func (a *leaseAPI) failWith(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.err = err
}

// update changes the Lease in the store, as its holder would.
func (a *leaseAPI) update(t *testing.T, key types.NamespacedName, change func(*coordinationv1.Lease)) {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := a.raw.Get(context.Background(), key, l); err != nil {
		t.Fatal(err)
	}
	change(l)
	if err := a.raw.Update(context.Background(), l); err != nil {
		t.Fatal(err)
	}
}

// renew writes a renewal of the Lease at the holder's time renewed.
func (a *leaseAPI) renew(t *testing.T, key types.NamespacedName, renewed time.Time) {
	t.Helper()
	a.update(t, key, func(l *coordinationv1.Lease) { l.Spec.RenewTime = &metav1.MicroTime{Time: renewed} })
}

// getCount is how many GETs were made.
func (a *leaseAPI) getCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gets
}

func gauge(d *Detector) float64 { return testutil.ToFloat64(running.WithLabelValues(d.controller)) }

// reading is what a test compares of a Status.
type reading struct {
	Running bool
	Gauge   float64
}

func readingOf(d *Detector, st Status) reading { return reading{Running: st.Running, Gauge: gauge(d)} }

// TestDetectorCheck: the first reading of the Leases, with the gauge.
func TestDetectorCheck(t *testing.T) {
	holder := "aibrix-controller-manager-6d8f9c7b5-x2x9q_5f1c6a0e-2b7d-4c3e-9a51-7d0c2e6f8b14"
	cases := map[string]struct {
		leases      []client.Object
		getErr      error
		wantRunning bool
		wantReason  string
	}{
		"no Lease":                {wantReason: "does not exist"},
		"held and renewed 3s ago": {leases: []client.Object{lease(cmLease, holder, t0.Add(-3*time.Second))}, wantRunning: true, wantReason: "is held by " + holder},
		"held, renewTime 16s old by our clock: taken as renewed until seen unchanged": {
			leases: []client.Object{lease(cmLease, holder, t0.Add(-16*time.Second))}, wantRunning: true, wantReason: "until seen unchanged for its duration 15s",
		},
		"released": {leases: []client.Object{lease(cmLease, "", t0.Add(-time.Second))}, wantReason: "has no holder"},
		// Issue 35 item 9: a refused read is not "not running" (no take-over on a guess).
		"forbidden: taken as running": {getErr: apierrors.NewForbidden(resource, cmLease.Name, nil), wantRunning: true, wantReason: "forbidden by RBAC"},
		"API server unavailable, nothing read before": {
			getErr: apierrors.NewServiceUnavailable("etcd"), wantRunning: true, wantReason: "may be running",
		},
		"standalone adapter controller renewing": {
			leases:      []client.Object{lease(cmLease, "", t0), lease(adLease, "lora-0_1", t0.Add(-time.Second))},
			wantRunning: true, wantReason: "aibrix-system/aibrix-model-adapter-controller is held by lora-0_1",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			api := newLeaseAPI(tc.leases...)
			api.failWith(tc.getErr)
			d := NewDetector(api, []types.NamespacedName{cmLease, adLease}, "test-"+strings.ReplaceAll(name, " ", "-"), clocktesting.NewFakeClock(t0), 0)
			st := d.Check(context.Background())
			want := reading{Running: tc.wantRunning}
			if tc.wantRunning {
				want.Gauge = 1
			}
			if diff := cmp.Diff(want, readingOf(d, st)); diff != "" {
				t.Errorf("Check() %q (-want +got):\n%s", st.Reason, diff)
			}
			if !strings.Contains(st.Reason, tc.wantReason) {
				t.Errorf("reason %q, want it to contain %q", st.Reason, tc.wantReason)
			}
		})
	}
}

// TestDetectorSkew: the holder's clock is off ours. A renewed Lease is running from the first
// reading on, however old its renewTime looks; a Lease no longer renewed stops counting one
// lease duration after the detector first saw it as it is, however new its renewTime looks.
// Readings every 5 s from t0; "renewing" renews before each reading.
func TestDetectorSkew(t *testing.T) {
	cases := map[string]struct {
		skew     time.Duration // the holder's clock minus ours
		renewing bool
		want     []bool // running, at t0, t0+5s, ...
	}{
		"holder 2 minutes behind, renewing": {skew: -2 * time.Minute, renewing: true, want: []bool{true, true, true, true, true, true}},
		"holder 2 minutes behind, stopped":  {skew: -2 * time.Minute, want: []bool{true, true, true, false, false}},
		"holder an hour ahead, renewing":    {skew: time.Hour, renewing: true, want: []bool{true, true, true, true, true, true}},
		"holder an hour ahead, stopped":     {skew: time.Hour, want: []bool{true, true, true, false, false}},
		// The price of not trusting renewTime: stopped 10 s before t0 (expired at t0+5s by the
		// holder's clock) is seen stopped at t0+15s, one lease duration after the first reading.
		"in step, stopped 10s before": {skew: -10 * time.Second, want: []bool{true, true, true, false}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(t0)
			api := newLeaseAPI(lease(cmLease, "cm-0_1", t0.Add(tc.skew)))
			d := NewDetector(api, []types.NamespacedName{cmLease}, "test-skew", clk, 5*time.Second)
			var got []bool
			for i := range tc.want {
				if i > 0 {
					clk.Step(5 * time.Second)
					if tc.renewing {
						api.renew(t, cmLease, clk.Now().Add(tc.skew))
					}
				}
				got = append(got, d.Check(context.Background()).Running)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("running at t0, t0+5s, ... (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDetectorTransientReadErrors: a Lease read once, then failing (5xx, timeouts,
// throttling, a refused connection), keeps its last good reading for StaleReadings periods
// (30 s), then counts as running; once readable again, it is judged afresh. Readings every
// 10 s from t0; the first succeeds, the next four fail, the last succeeds.
func TestDetectorTransientReadErrors(t *testing.T) {
	errs := map[string]error{
		"unavailable":        apierrors.NewServiceUnavailable("etcd"),
		"timeout":            apierrors.NewTimeoutError("request timed out", 1),
		"throttled":          apierrors.NewTooManyRequests("slow down", 1),
		"internal error":     apierrors.NewInternalError(fmt.Errorf("boom")),
		"connection refused": fmt.Errorf(`Get "https://127.0.0.1:6443/apis/coordination.k8s.io/v1": dial tcp 127.0.0.1:6443: connect: %w`, syscall.ECONNREFUSED),
		"deadline exceeded":  context.DeadlineExceeded,
	}
	before := map[string]struct {
		leases []client.Object
		want   []bool // running at t0 (good), t0+10s..t0+40s (failing), t0+50s (good)
	}{
		"not running before": {want: []bool{false, false, false, true, true, false}},
		"running before":     {leases: []client.Object{lease(cmLease, "cm-0_1", t0)}, want: []bool{true, true, true, true, true, true}},
	}
	for bname, bc := range before {
		for ename, err := range errs {
			t.Run(bname+", "+ename, func(t *testing.T) {
				clk := clocktesting.NewFakeClock(t0)
				api := newLeaseAPI(bc.leases...)
				d := NewDetector(api, []types.NamespacedName{cmLease}, "test-transient", clk, 10*time.Second)
				var got []reading
				for i := range bc.want {
					if i > 0 {
						clk.Step(10 * time.Second)
						if len(bc.leases) > 0 {
							api.renew(t, cmLease, clk.Now())
						}
					}
					switch i {
					case 1:
						api.failWith(err)
					case 5:
						api.failWith(nil)
					}
					got = append(got, readingOf(d, d.Check(context.Background())))
				}
				want := make([]reading, 0, len(bc.want))
				for _, r := range bc.want {
					w := reading{Running: r}
					if r {
						w.Gauge = 1
					}
					want = append(want, w)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("readings at t0, t0+10s, ... (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestDetectorReadsWithoutTheLock: while one caller reads the Leases (its GET hangs), the
// others get the last reading at once, or, with none yet, wait for it only as long as their
// context lets them; one GET is in flight at a time.
func TestDetectorReadsWithoutTheLock(t *testing.T) {
	const within = 5 * time.Second
	// checkWithin runs Check in a goroutine and returns its result, failing the test if it
	// takes longer than within.
	checkWithin := func(t *testing.T, ctx context.Context, d *Detector, what string) Status {
		t.Helper()
		got := make(chan Status, 1)
		go func() { got <- d.Check(ctx) }()
		select {
		case st := <-got:
			return st
		case <-time.After(within):
			t.Fatalf("%s: Check did not return within %s while another caller's GET hangs", what, within)
			return Status{}
		}
	}
	t.Run("a reading exists", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(t0)
		api := newLeaseAPI(lease(cmLease, "cm-0_1", t0))
		d := NewDetector(api, []types.NamespacedName{cmLease}, "test-lock", clk, 10*time.Second)
		if st := d.Check(t.Context()); !st.Running {
			t.Fatalf("first reading: %+v, want running", st)
		}
		hold := make(chan struct{})
		api.mu.Lock()
		api.hold = hold
		api.mu.Unlock()
		defer close(hold) // also when a check hangs: the test fails, without leaving the GET waiting
		clk.Step(10 * time.Second)
		slow := make(chan Status, 1)
		go func() { slow <- d.Check(t.Context()) }()
		select {
		case <-api.held:
		case <-time.After(within):
			t.Fatal("the stale reading was not read again")
		}
		for i := range 10 {
			if st := checkWithin(t, t.Context(), d, fmt.Sprintf("check %d", i)); !st.Running {
				t.Errorf("check %d during the slow read: %+v, want the last reading (running)", i, st)
			}
		}
		api.mu.Lock()
		gets, maxWait := api.gets, api.maxWait
		api.mu.Unlock()
		if gets != 2 || maxWait != 1 {
			t.Errorf("%d GETs, %d at once, want 2 and 1", gets, maxWait)
		}
	})
	t.Run("no reading yet", func(t *testing.T) {
		clk := clocktesting.NewFakeClock(t0)
		api := newLeaseAPI(lease(cmLease, "cm-0_1", t0))
		hold := make(chan struct{})
		release := sync.OnceFunc(func() { close(hold) })
		defer release() // also when a check hangs: the test fails, without leaving the GET waiting
		api.hold = hold
		d := NewDetector(api, []types.NamespacedName{cmLease}, "test-lock-first", clk, 10*time.Second)
		first := make(chan Status, 1)
		go func() { first <- d.Check(t.Context()) }()
		select {
		case <-api.held:
		case <-time.After(within):
			t.Fatal("the Leases were not read")
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if st := checkWithin(t, ctx, d, "a caller whose context ended"); !st.Running || !strings.Contains(st.Reason, "not read yet") {
			t.Errorf("a caller whose context ended, before the first reading: %+v, want running (not read yet)", st)
		}
		release()
		select {
		case st := <-first:
			if !st.Running || !strings.Contains(st.Reason, "is held by cm-0_1") {
				t.Errorf("first reading: %+v", st)
			}
		case <-time.After(within):
			t.Fatal("the first reading did not end once its GET answered")
		}
	})
}

// TestDetectorFirstReadingOnce: callers asking at once before any reading share one read.
func TestDetectorFirstReadingOnce(t *testing.T) {
	api := newLeaseAPI(lease(cmLease, "cm-0_1", t0))
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	defer release()
	api.hold = hold
	d := NewDetector(api, []types.NamespacedName{cmLease}, "test-first-once", clocktesting.NewFakeClock(t0), 10*time.Second)
	const callers = 20
	results := make(chan Status, callers)
	for range callers {
		go func() { results <- d.Check(t.Context()) }()
	}
	select {
	case <-api.held:
	case <-time.After(5 * time.Second):
		t.Fatal("the Leases were not read")
	}
	release()
	for i := range callers {
		select {
		case st := <-results:
			if !st.Running || !strings.Contains(st.Reason, "is held by cm-0_1") {
				t.Errorf("caller %d: %+v, want the first reading (held by cm-0_1)", i, st)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d callers still waiting for the first reading", callers-i, callers)
		}
	}
	if n := api.getCount(); n != 1 {
		t.Errorf("%d GETs for %d callers asking at once, want 1", n, callers)
	}
}

// TestDetectorReadsOncePerPeriod: checks within the period reuse the reading.
func TestDetectorReadsOncePerPeriod(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	api := newLeaseAPI(lease(cmLease, "cm-0_1", t0))
	d := NewDetector(api, []types.NamespacedName{cmLease}, "test-period", clk, 10*time.Second)
	for range 50 {
		d.Check(context.Background())
		clk.Step(time.Second)
	}
	if n := api.getCount(); n != 5 {
		t.Fatalf("%d GETs of the Lease in 50 checks over 50 s with a 10 s period, want 5", n)
	}
}

func TestNilDetector(t *testing.T) {
	var d *Detector
	if d := NewDetector(nil, nil, "x", nil, 0); d != nil {
		t.Fatal("NewDetector without Leases is not nil")
	}
	if st := d.Check(context.Background()); st.Running || !strings.Contains(st.Reason, "off") {
		t.Fatalf("nil detector: %+v", st)
	}
	if d.Period() != DefaultCheckPeriod {
		t.Fatalf("nil detector period %s", d.Period())
	}
}

func TestParseLeases(t *testing.T) {
	got, err := ParseLeases([]string{ControllerManagerLease, StandaloneAdapterLease})
	if err != nil || len(got) != 2 || got[0] != cmLease || got[1] != adLease {
		t.Fatalf("ParseLeases = %v, %v", got, err)
	}
	for _, bad := range []string{"nolash", "/x", "ns/", "Bad_NS/x", "ns/Bad_Name"} {
		if _, err := ParseLeases([]string{bad}); err == nil {
			t.Errorf("ParseLeases(%q) accepted", bad)
		}
	}
}
