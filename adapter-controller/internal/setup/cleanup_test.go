package setup_test

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/setup"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/testenv"
)

// TestDeleteAllAdapters: `adapter-controller --delete-all-adapters`, the uninstall's first
// step, returns only once the running controller has unloaded every adapter from every
// engine and the adapters are gone; another namespace is left alone.
func TestDeleteAllAdapters(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := newCrashFleet(ctx, t, 2, 3)
	other := newCrashFleet(ctx, t, 1, 1)
	o := options()
	o.WatchNamespaces = []string{f.ns, other.ns}
	stop := start(t, o)
	defer stop()
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, "3 adapters loaded on 2 pods and 1 on the other namespace's pod", func() (bool, string) {
		return f.held() == 6 && other.held() == 1, ""
	})

	c := setup.NewOptions()
	c.DeleteAllAdapters = true
	c.WatchNamespaces = []string{f.ns}
	c.CleanupTimeout = time.Minute
	if err := setup.Run(ctx, c, env.Config); err != nil {
		t.Fatalf("adapter-controller --delete-all-adapters: %v", err)
	}
	var left v1alpha1.ModelAdapterList
	if err := f.k8s.List(ctx, &left, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 0 || f.held() != 0 {
		t.Errorf("after the cleanup returned: %d adapters left in %s, %d loads held by its engines; want none", len(left.Items), f.ns, f.held())
	}
	if err := other.k8s.List(ctx, &left, client.InNamespace(other.ns)); err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 1 || other.held() != 1 {
		t.Errorf("namespace %s outside the cleanup: %d adapters, %d loads; want 1 and 1", other.ns, len(left.Items), other.held())
	}
}
