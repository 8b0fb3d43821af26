package aibrix

import (
	"context"
	"strings"
	"testing"
	"time"

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
		"renewed 16s ago":         {leases: []client.Object{lease(cmLease, holder, t0.Add(-16*time.Second))}, wantReason: "more than its duration"},
		"released":                {leases: []client.Object{lease(cmLease, "", t0.Add(-time.Second))}, wantReason: "has no holder"},
		"forbidden: not checked":  {getErr: apierrors.NewForbidden(resource, cmLease.Name, nil), wantReason: "forbidden by RBAC"},
		"API server unavailable":  {getErr: apierrors.NewServiceUnavailable("etcd"), wantRunning: true, wantReason: "may be running"},
		"standalone adapter controller renewing": {
			leases:      []client.Object{lease(cmLease, "", t0), lease(adLease, "lora-0_1", t0.Add(-time.Second))},
			wantRunning: true, wantReason: "aibrix-system/aibrix-model-adapter-controller is held by lora-0_1",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithObjects(tc.leases...)
			if tc.getErr != nil {
				b = b.WithInterceptorFuncs(interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
					return tc.getErr
				}})
			}
			d := NewDetector(b.Build(), []types.NamespacedName{cmLease, adLease}, "test-"+strings.ReplaceAll(name, " ", "-"), clocktesting.NewFakePassiveClock(t0), 0)
			st := d.Check(context.Background())
			if st.Running != tc.wantRunning || !strings.Contains(st.Reason, tc.wantReason) {
				t.Fatalf("Check() = %+v, want running=%v with a reason containing %q", st, tc.wantRunning, tc.wantReason)
			}
			want := 0.0
			if tc.wantRunning {
				want = 1
			}
			if got := testutil.ToFloat64(running.WithLabelValues(d.controller)); got != want {
				t.Errorf("loraplane_aibrix_controller_running = %v, want %v", got, want)
			}
		})
	}
}

// TestDetectorSeesRenewalsDespiteSkew: a holder whose clock is 2 minutes behind ours writes
// renewTimes that look stale; the detector still sees it running from renewTime changing
// between readings, and sees it stopped one lease duration after the changes stop.
func TestDetectorSeesRenewalsDespiteSkew(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	skew := -2 * time.Minute
	l := lease(cmLease, "cm-0_1", t0.Add(skew))
	c := fake.NewClientBuilder().WithObjects(l).Build()
	d := NewDetector(c, []types.NamespacedName{cmLease}, "test-skew", clk, 5*time.Second)
	ctx := context.Background()
	if st := d.Check(ctx); st.Running {
		t.Fatalf("first reading of a renewTime 2 minutes old: %+v, want not running (nothing seen change yet)", st)
	}
	renew := func() {
		l.Spec.RenewTime = &metav1.MicroTime{Time: clk.Now().Add(skew)}
		if err := c.Update(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		clk.SetTime(clk.Now().Add(5 * time.Second))
		renew()
		if st := d.Check(ctx); !st.Running {
			t.Fatalf("reading %d after a renewal: %+v, want running", i, st)
		}
	}
	// The holder stops renewing: running until one lease duration after the last change.
	clk.SetTime(clk.Now().Add(10 * time.Second))
	if st := d.Check(ctx); !st.Running {
		t.Fatalf("10s after the last renewal: %+v, want still running", st)
	}
	clk.SetTime(clk.Now().Add(6 * time.Second))
	if st := d.Check(ctx); st.Running {
		t.Fatalf("16s after the last renewal: %+v, want stopped", st)
	}
}

// TestDetectorReadsOncePerPeriod: checks within the period reuse the reading.
func TestDetectorReadsOncePerPeriod(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(t0)
	gets := 0
	c := fake.NewClientBuilder().WithObjects(lease(cmLease, "cm-0_1", t0)).
		WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			gets++
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
	d := NewDetector(c, []types.NamespacedName{cmLease}, "test-period", clk, 10*time.Second)
	for range 50 {
		d.Check(context.Background())
		clk.SetTime(clk.Now().Add(time.Second))
	}
	if gets != 5 {
		t.Fatalf("%d GETs of the Lease in 50 checks over 50 s with a 10 s period, want 5", gets)
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
