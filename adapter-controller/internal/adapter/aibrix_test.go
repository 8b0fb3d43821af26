package adapter

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/loraplane/loraplane/shared/aibrix"
)

// TestAIBrixRunningReportedOncePerEpisode: an adapter gets one AIBrixRunning Warning event
// per episode of AIBrix's controllers running, however often it is reconciled meanwhile; a
// failing read of the Lease (an API server blip) neither starts an episode nor ends one, and
// an episode the detector saw end and start again while the adapter was not reconciled is
// reported again. Readings every 10 s.
func TestAIBrixRunningReportedOncePerEpisode(t *testing.T) {
	const period = 10 * time.Second
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	key := types.NamespacedName{Namespace: "aibrix-system", Name: "aibrix-controller-manager"}
	var getErr error
	leases := fake.NewClientBuilder().Build()
	reader := interceptor.NewClient(leases, interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if getErr != nil {
			return getErr
		}
		return c.Get(ctx, k, obj, opts...)
	}})
	setHolder := func(holder string) {
		l := &coordinationv1.Lease{}
		if err := leases.Get(t.Context(), key, l); err != nil {
			t.Fatal(err)
		}
		l.Spec.HolderIdentity = ptr.To(holder)
		if err := leases.Update(t.Context(), l); err != nil {
			t.Fatal(err)
		}
	}
	renew := func() {
		l := &coordinationv1.Lease{}
		if err := leases.Get(t.Context(), key, l); err != nil {
			t.Fatal(err)
		}
		l.Spec.RenewTime = &metav1.MicroTime{Time: clk.Now()}
		if err := leases.Update(t.Context(), l); err != nil {
			t.Fatal(err)
		}
	}
	blip := apierrors.NewServiceUnavailable("etcd leader changed")
	det := aibrix.NewDetector(reader, []types.NamespacedName{key}, "test-adapter-episodes", clk, period)
	opts := DefaultOptions()
	opts.AIBrix = det
	r, _, rec := testReconciler(t, newFakeEngine(), clk, opts, interceptor.Funcs{}, testAdapter())

	steps := []struct {
		name       string
		change     func()
		reconciles int
	}{
		{"AIBrix not installed", func() {}, 1},
		{"a blip", func() { getErr = blip }, 2},
		{"readable again", func() { getErr = nil }, 1},
		{"AIBrix starts", func() {
			l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("cm-0_1"), LeaseDurationSeconds: ptr.To[int32](15), RenewTime: &metav1.MicroTime{Time: clk.Now()}}}
			if err := leases.Create(t.Context(), l); err != nil {
				t.Fatal(err)
			}
		}, 3},
		{"renewed, then a blip", func() { renew(); getErr = blip }, 2},
		{"renewed", func() { getErr = nil; renew() }, 2},
		{"released, seen by the detector alone", func() { setHolder(""); det.Check(t.Context()) }, 0},
		{"AIBrix starts again", func() { setHolder("cm-1_2") }, 2},
	}
	want := []int{0, 0, 0, 1, 0, 0, 0, 1}
	var got []int
	for i, s := range steps {
		if i > 0 {
			clk.Step(period)
		}
		s.change()
		for range s.reconciles {
			if _, err := reconcileAdapter(t, r); err != nil {
				t.Fatalf("%s: Reconcile: %v", s.name, err)
			}
		}
		byReason, _ := drainEvents(rec)
		got = append(got, byReason[ReasonAIBrixRunning])
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("AIBrixRunning events per step (-want +got):\n%s", diff)
	}
}
