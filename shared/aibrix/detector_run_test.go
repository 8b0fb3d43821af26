package aibrix

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// TestDetectorEpisodes: an episode runs from a reading that says running to one that says
// not running; a failing read within the staleness bound neither ends nor starts one.
// Readings every 10 s.
func TestDetectorEpisodes(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	api := newLeaseAPI()
	d := NewDetector(api, []types.NamespacedName{cmLease}, "test-episodes", clk, 10*time.Second)
	type step struct {
		name string
		do   func()
	}
	held := lease(cmLease, "cm-0_1", t0)
	steps := []step{
		{"no Lease", func() {}},
		{"AIBrix starts", func() {
			if err := api.raw.Create(t.Context(), held); err != nil {
				t.Fatal(err)
			}
		}},
		{"renewed", func() { api.renew(t, cmLease, clk.Now()) }},
		{"a blip", func() { api.failWith(apierrors.NewServiceUnavailable("etcd")) }},
		{"renewed after the blip", func() { api.failWith(nil); api.renew(t, cmLease, clk.Now()) }},
		{"released", func() {
			api.update(t, cmLease, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") })
		}},
		{"a blip while not running", func() { api.failWith(apierrors.NewTimeoutError("slow", 1)) }},
		{"acquired again", func() {
			api.failWith(nil)
			api.update(t, cmLease, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("cm-1_2") })
		}},
	}
	want := []uint64{0, 1, 1, 1, 1, 0, 0, 2}
	var got []uint64
	for i, s := range steps {
		if i > 0 {
			clk.Step(10 * time.Second)
		}
		s.do()
		st := d.Check(t.Context())
		if st.Running != (st.Episode > 0) {
			t.Errorf("%s: %+v: running without an episode, or an episode while not running", s.name, st)
		}
		got = append(got, st.Episode)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("episodes of readings %v (-want +got):\n%s", want, diff)
	}
}

// TestDetectorStartKeepsGaugeCurrent: started as a manager runnable, the detector reads the
// Leases once per period by itself, so the gauge follows AIBrix with no reconcile asking;
// it stops when its context ends.
func TestDetectorStartKeepsGaugeCurrent(t *testing.T) {
	const within = 5 * time.Second
	clk := clocktesting.NewFakeClock(t0)
	held := lease(cmLease, "cm-0_1", t0)
	api := newLeaseAPI(held)
	d := NewDetector(api, []types.NamespacedName{cmLease}, "test-start", clk, 10*time.Second)
	if d.NeedLeaderElection() {
		t.Error("the detector waits for leader election: standbys' gauges would stay at 0")
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Start(ctx) }()
	waitFor(t, within, "the gauge at 1 from the first reading of the held Lease", func() bool { return gauge(d) == 1 })

	api.update(t, cmLease, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = ptr.To("") })
	clk.Step(10 * time.Second)
	waitFor(t, within, "the gauge at 0 one period after AIBrix released its Lease", func() bool { return gauge(d) == 0 })
	if n := api.getCount(); n != 2 {
		t.Errorf("%d GETs in one period and a tick, want 2", n)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start: %v", err)
		}
	case <-time.After(within):
		t.Fatalf("Start did not return within %s of its context ending", within)
	}
}

// waitFor polls cond every 5 ms until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
