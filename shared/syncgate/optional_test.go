package syncgate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/shared/app"
	"github.com/loraplane/loraplane/shared/syncgate"
	"github.com/loraplane/loraplane/test/testenv"
)

// lateCRD returns the metadata-only object of a test kind whose CRD the test installs after
// start, and removes the CRD when the test ends.
func lateCRD(t *testing.T, kind string) (schema.GroupVersionKind, *metav1.PartialObjectMetadata) {
	t.Helper()
	gvk := schema.GroupVersionKind{Group: "late.loraplane.io", Version: "v1", Kind: kind}
	t.Cleanup(func() {
		if err := env.UninstallCRD(context.Background(), strings.ToLower(kind)+"s."+gvk.Group, 30*time.Second); err != nil {
			t.Error(err)
		}
	})
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(gvk)
	return gvk, obj
}

func installLateCRD(t *testing.T, gvk schema.GroupVersionKind) {
	t.Helper()
	if err := env.InstallCRD(testenv.CRD(gvk.Group, gvk.Kind, gvk.Version)); err != nil {
		t.Fatal(err)
	}
}

func gauge(t *testing.T, family, controller, kind string) float64 {
	t.Helper()
	m := metric(t, family, labels(controller, kind))
	if m == nil {
		t.Fatalf("%s{controller=%q,kind=%q} is missing", family, controller, kind)
	}
	return m.GetGauge().GetValue()
}

// TestOptionalResourceActivatedAfterStart: an optional resource skipped at start because its
// CRD was missing is activated once the CRD is installed - prepared (a field index), synced
// and recorded like at startup, readable through the declared cache - and deactivated when
// the CRD is deleted. The replica stays ready throughout.
func TestOptionalResourceActivatedAfterStart(t *testing.T) {
	needEnv(t)
	const name = "late-optional"
	gvk, obj := lateCRD(t, "Sprocket")
	a, addr := newApp(t, name, env.Config, 30*time.Second)
	ctx, cancel := background(t)
	if err := a.Gate.Register(ctx, syncgate.Typed(&corev1.ConfigMap{}), syncgate.Metadata(gvk).AsOptional()); err != nil {
		t.Fatal(err)
	}
	if err := a.Gate.Activate(ctx, obj, nil); err == nil {
		t.Fatal("Activate before start: got nil, want an error")
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitOpen(t, a.Gate)
	if a.Gate.Synced(gvk) {
		t.Fatal("Synced before the CRD exists")
	}
	if err := a.Gate.Activate(ctx, obj, nil); !meta.IsNoMatchError(err) {
		t.Fatalf("Activate before the CRD exists: got %v, want a no-match error", err)
	}
	if v := gauge(t, "loraplane_cache_resource_skipped", name, gvk.Kind); v != 1 {
		t.Errorf("skipped gauge after a failed activation = %v, want 1", v)
	}

	installLateCRD(t, gvk)
	s := &unstructured.Unstructured{}
	s.SetGroupVersionKind(gvk)
	s.SetNamespace("default")
	s.SetName("s1")
	s.SetLabels(map[string]string{"team": "a"})
	admin, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	prepared := false
	err = a.Gate.Activate(ctx, obj, func(ctx context.Context) error {
		prepared = !a.Gate.Synced(gvk)
		return a.Manager.GetFieldIndexer().IndexField(ctx, obj, "team", func(o client.Object) []string { return []string{o.GetLabels()["team"]} })
	})
	if err != nil || !prepared || !a.Gate.Synced(gvk) {
		t.Fatalf("Activate after the CRD: err %v, prepared before sync %v, synced %v; want nil, true, true", err, prepared, a.Gate.Synced(gvk))
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := a.Manager.GetCache().List(ctx, list, client.MatchingFields{"team": "a"}); err != nil || len(list.Items) != 1 {
		t.Errorf("listing by the index: err %v, %d items; want the one Sprocket", err, len(list.Items))
	}
	if v := gauge(t, "loraplane_cache_synced", name, gvk.Kind); v != 1 {
		t.Errorf("synced gauge = %v, want 1", v)
	}
	if v := gauge(t, "loraplane_cache_resource_skipped", name, gvk.Kind); v != 0 {
		t.Errorf("skipped gauge = %v, want 0", v)
	}
	if m := metric(t, "loraplane_cache_sync_duration_seconds", labels(name, gvk.Kind)); m.GetHistogram().GetSampleCount() != 1 {
		t.Errorf("sync duration samples = %s, want 1", describe(m))
	}
	if err := a.Gate.Activate(ctx, obj, nil); err != nil {
		t.Errorf("Activate of a synced resource: %v, want nil", err)
	}

	if err := env.UninstallCRD(ctx, "sprockets."+gvk.Group, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := a.Gate.Deactivate(ctx, obj); err != nil {
		t.Fatalf("Deactivate: %v", err)
	}
	if a.Gate.Synced(gvk) {
		t.Error("Synced after Deactivate")
	}
	if _, err := a.Manager.GetCache().GetInformer(ctx, obj, cache.BlockUntilSynced(false)); err == nil || !strings.Contains(err.Error(), "skipped") {
		t.Errorf("informer after Deactivate: got %v, want refused as skipped", err)
	}
	if v := gauge(t, "loraplane_cache_resource_skipped", name, gvk.Kind); v != 1 {
		t.Errorf("skipped gauge after Deactivate = %v, want 1", v)
	}
	if v := gauge(t, "loraplane_cache_synced", name, gvk.Kind); v != 0 {
		t.Errorf("synced gauge after Deactivate = %v, want 0", v)
	}
	if code, body := probe(addr, "/readyz"); code != 200 {
		t.Errorf("/readyz after Deactivate: %d %s, want 200", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestOptionalResourceForbiddenAfterStart: an optional resource activated after start that
// the controller may not list fails within the gate's timeout with the cause "forbidden"
// (its informer, started at once, reports its errors to the resource), stays skipped, and
// the process keeps running, ready.
func TestOptionalResourceForbiddenAfterStart(t *testing.T) {
	needEnv(t)
	const name = "late-forbidden"
	gvk, obj := lateCRD(t, "Cog")
	admin, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := background(t)
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "syncgate-late-configmaps-only"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "syncgate-late-configmaps-only"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "late-limited"}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), obj) })
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "late-limited"}

	const timeout = 3 * time.Second
	a, addr := newApp(t, name, cfg, timeout, func(o *app.Options) { o.CacheSyncTimeout = timeout })
	if err := a.Gate.Register(ctx, syncgate.Typed(&corev1.ConfigMap{}), syncgate.Metadata(gvk).AsOptional()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitOpen(t, a.Gate)
	installLateCRD(t, gvk)

	start := time.Now()
	err = a.Gate.Activate(ctx, obj, nil)
	var syncErr *syncgate.SyncError
	if !errors.As(err, &syncErr) || len(syncErr.Pending) != 1 || syncErr.Pending[0].Reason != syncgate.ReasonForbidden {
		t.Fatalf("Activate of a forbidden resource: got %v, want a *SyncError naming %s forbidden", err, gvk.Kind)
	}
	if took := time.Since(start); took < timeout || took > timeout+10*time.Second {
		t.Errorf("Activate returned after %s, want about the %s timeout", took, timeout)
	}
	if a.Gate.Synced(gvk) {
		t.Error("Synced after a failed activation")
	}
	if v := gauge(t, "loraplane_cache_resource_skipped", name, gvk.Kind); v != 1 {
		t.Errorf("skipped gauge after a failed activation = %v, want 1", v)
	}
	m := metric(t, "loraplane_cache_watch_errors_total", map[string]string{"controller": name, "kind": gvk.Kind, "reason": "forbidden"})
	if m == nil || m.GetCounter().GetValue() < 1 {
		t.Errorf("watch errors for %s: want forbidden > 0, got %s", gvk.Kind, describe(m))
	}
	if code, body := probe(addr, "/readyz"); code != 200 {
		t.Errorf("/readyz after a failed activation: %d %s, want 200", code, body)
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned after a failed activation: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
