package adapter

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// TestCredentialsSecretReadOncePerTTL: 20 adapters naming one credentials Secret, each
// reconciled twice, read it from the API server once; it is read again after secretTTL, and
// at once after an engine refused its key. (Before: one GET per reconcile, 40.)
func TestCredentialsSecretReadOncePerTTL(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	eng := newFakeEngine()
	var gets atomic.Int32
	funcs := interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, ok := obj.(*corev1.Secret); ok {
			gets.Add(1)
		}
		return c.Get(ctx, key, obj, opts...)
	}}
	objs := append(readyPods(1), credsSecret("ns", "team-key"))
	var adapters []*v1alpha1.ModelAdapter
	for i := range 20 {
		a := keyedAdapter("ns", types.UID(fmt.Sprintf("uid-%d", i)))
		a.Name = fmt.Sprintf("lora-%d", i)
		adapters = append(adapters, a)
		objs = append(objs, a)
	}
	r, _, _ := testReconciler(t, eng, clk, DefaultOptions(), funcs, objs...)
	for range 2 {
		for _, a := range adapters {
			reconcileKey(t, r, "ns", a.Name)
		}
	}
	if n := gets.Load(); n != 1 {
		t.Errorf("%d Secret GETs for 40 reconciles of 20 adapters naming it, want 1", n)
	}
	clk.Step(secretTTL)
	reconcileKey(t, r, "ns", adapters[0].Name)
	reconcileKey(t, r, "ns", adapters[1].Name)
	if n := gets.Load(); n != 2 {
		t.Errorf("%d Secret GETs after secretTTL, want 2", n)
	}
	r.forgetCredentials(adapters[0], &engine.Error{Reason: engine.ReasonEngineUnauthorized})
	reconcileKey(t, r, "ns", adapters[0].Name)
	if n := gets.Load(); n != 3 {
		t.Errorf("%d Secret GETs after an engine refused the key, want 3", n)
	}
}
