package syncgate_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/loraplane/loraplane/shared/app"
	"github.com/loraplane/loraplane/shared/syncgate"
	"github.com/loraplane/loraplane/test/testenv"
)

// newApp builds an app through the shared bootstrap with a probe server on a free port.
func newApp(t *testing.T, name string, cfg *rest.Config, timeout time.Duration, mutate ...func(*app.Options)) (*app.App, string) {
	t.Helper()
	o := app.NewOptions(name)
	o.MetricsBindAddress = "0"
	o.HealthProbeBindAddress = testenv.FreeAddr()
	o.CacheSyncTimeout = timeout
	o.GracefulShutdownTimeout = 5 * time.Second
	for _, m := range mutate {
		m(o)
	}
	a, err := app.New(o, app.Config{Controller: name, Scheme: scheme, RESTConfig: cfg})
	if err != nil {
		t.Fatalf("building the app: %v", err)
	}
	return a, o.HealthProbeBindAddress
}

// recorder is a reconciler that records each call and whether the pod cache had synced.
type recorder struct {
	cache    cache.Cache
	mu       sync.Mutex
	calls    []time.Time
	unsynced int
}

func (r *recorder) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	inf, err := r.cache.GetInformer(ctx, &corev1.Pod{}, cache.BlockUntilSynced(false))
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil || !inf.HasSynced() {
		r.unsynced++
	}
	r.calls = append(r.calls, time.Now())
	return reconcile.Result{}, nil
}

func (r *recorder) first() (time.Time, int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 {
		return time.Time{}, 0, r.unsynced
	}
	return r.calls[0], len(r.calls), r.unsynced
}

// setupRecorder builds a ConfigMap controller that also watches Pods, on the gated manager,
// synchronously and before Start - the pattern that deadlocked with a naive cache wait.
func setupRecorder(t *testing.T, a *app.App, name string) *recorder {
	t.Helper()
	r := &recorder{cache: a.Manager.GetCache()}
	err := ctrl.NewControllerManagedBy(a.Manager).Named(name).
		For(&corev1.ConfigMap{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request { return nil })).
		Complete(r)
	if err != nil {
		t.Fatalf("setting up the controller: %v", err)
	}
	return r
}

func seedConfigMap(t *testing.T, name string) {
	t.Helper()
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	if err := c.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), cm) })
}

// TestGateHoldsUntilSlowResourceSyncs delays the initial list of Pods by 3s and checks that
// nothing reconciles, /readyz fails and /readyz/pod says why until Pods are synced, and that
// the metrics record the delay on Pods only.
func TestGateHoldsUntilSlowResourceSyncs(t *testing.T) {
	needEnv(t)
	const delay = 3 * time.Second
	const name = "gate-holds"
	seedConfigMap(t, "gate-holds")
	proxy := newSlowProxy(t, env.Config)
	proxy.Delay("/api/v1/pods", delay)

	a, addr := newApp(t, name, proxy.Config(), 30*time.Second)
	if err := a.Gate.Register(context.Background(), syncgate.Typed(&corev1.ConfigMap{}), syncgate.Typed(&corev1.Pod{})); err != nil {
		t.Fatal(err)
	}
	rec := setupRecorder(t, a, name)

	ctx, cancel := background(t)
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	// During the delay: the probe server answers, readiness fails and names Pods.
	waitFor(t, 2*time.Second, "the probe server to answer", func() bool { code, _ := probe(addr, "/healthz"); return code == 200 })
	waitFor(t, 2*time.Second, "the Pod list to be asked for (and held)", func() bool { return proxy.Held() > 0 })
	waitFor(t, 2*time.Second, "the ConfigMap cache to sync", func() bool { code, _ := probe(addr, "/readyz/configmap"); return code == 200 })
	if code, body := probe(addr, "/readyz"); code < 500 {
		t.Errorf("/readyz during the delay: got %d %q, want 5xx", code, body)
	}
	if code, body := probe(addr, "/readyz/pod"); code < 500 || !strings.Contains(body, "v1/Pod pending") {
		t.Errorf("/readyz/pod during the delay: got %d %q, want 5xx naming the pending Pod cache", code, body)
	}
	if code, body := probe(addr, "/readyz/configmap"); code != 200 {
		t.Errorf("/readyz/configmap during the delay: got %d %q, want 200", code, body)
	}
	if at, _, _ := rec.first(); !at.IsZero() {
		t.Fatalf("reconciled %s after start, before the Pod cache synced", at.Sub(start))
	}

	var readyAt time.Time
	waitFor(t, 20*time.Second, "/readyz to turn 200", func() bool {
		code, _ := probe(addr, "/readyz")
		readyAt = time.Now()
		return code == 200
	})
	waitFor(t, 10*time.Second, "the first reconcile", func() bool { at, _, _ := rec.first(); return !at.IsZero() })
	first, _, unsynced := rec.first()
	if unsynced > 0 {
		t.Errorf("%d reconciles ran with the Pod cache not synced", unsynced)
	}
	if got := first.Sub(start); got < delay {
		t.Errorf("first reconcile %s after start, before the %s delay ended", got, delay)
	}
	if got := readyAt.Sub(start); got < delay {
		t.Errorf("/readyz 200 %s after start, before the %s delay ended", got, delay)
	}

	pod := metric(t, "loraplane_cache_sync_duration_seconds", labels(name, "Pod"))
	cm := metric(t, "loraplane_cache_sync_duration_seconds", labels(name, "ConfigMap"))
	if pod == nil || pod.GetHistogram().GetSampleCount() != 1 || pod.GetHistogram().GetSampleSum() < delay.Seconds() {
		t.Errorf("Pod sync duration: want one sample >= %v, got %s", delay.Seconds(), describe(pod))
	}
	if cm == nil || cm.GetHistogram().GetSampleCount() != 1 || cm.GetHistogram().GetSampleSum() > delay.Seconds()/2 {
		t.Errorf("ConfigMap sync duration: want one sample well below %v, got %s", delay.Seconds(), describe(cm))
	}
	if m := metric(t, "loraplane_startup_duration_seconds", map[string]string{"controller": name}); m == nil || m.GetGauge().GetValue() < delay.Seconds() {
		t.Errorf("startup duration: want >= %v, got %s", delay.Seconds(), describe(m))
	}
	for _, kind := range []string{"Pod", "ConfigMap"} {
		if m := metric(t, "loraplane_cache_synced", labels(name, kind)); m == nil || m.GetGauge().GetValue() != 1 {
			t.Errorf("cache_synced for %s: want 1, got %s", kind, describe(m))
		}
	}
	if m := metric(t, "loraplane_cache_objects", labels(name, "ConfigMap")); m == nil || m.GetGauge().GetValue() < 1 {
		t.Errorf("cache_objects for ConfigMap: want >= 1 (the seeded ConfigMap), got %s", describe(m))
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel: %v", err)
	}
}

// TestSetupBeforeStartDoesNotDeadlock sets controllers up synchronously before Start and asks
// the gate to wait before Start: nothing blocks, and the controller reconciles after Start.
func TestSetupBeforeStartDoesNotDeadlock(t *testing.T) {
	needEnv(t)
	const name = "no-deadlock"
	seedConfigMap(t, name)
	a, _ := newApp(t, name, env.Config, 30*time.Second)
	if err := a.Gate.Register(context.Background(), syncgate.Typed(&corev1.ConfigMap{}), syncgate.Typed(&corev1.Pod{})); err != nil {
		t.Fatal(err)
	}
	rec := setupRecorder(t, a, name)

	waitCtx, waitCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer waitCancel()
	if err := a.Gate.WaitOpen(waitCtx); !errors.Is(err, syncgate.ErrNotStarted) {
		t.Fatalf("WaitOpen before Start: got %v, want ErrNotStarted at once", err)
	}

	ctx, cancel := background(t)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitOpen(t, a.Gate)
	if err := a.Gate.WaitOpen(ctx); err != nil {
		t.Fatalf("WaitOpen after the gate opened: %v", err)
	}
	waitFor(t, 10*time.Second, "the controller to reconcile", func() bool { _, n, _ := rec.first(); return n > 0 })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestUndeclaredInformerIsRefused: a controller watching a kind nobody declared cannot start
// an informer the gate never waited for.
func TestUndeclaredInformerIsRefused(t *testing.T) {
	needEnv(t)
	a, _ := newApp(t, "undeclared", env.Config, 30*time.Second)
	if err := a.Gate.Register(context.Background(), syncgate.Typed(&corev1.ConfigMap{})); err != nil {
		t.Fatal(err)
	}
	_, err := a.Manager.GetCache().GetInformer(context.Background(), &corev1.Secret{})
	if err == nil || !strings.Contains(err.Error(), "v1/Secret was not declared") {
		t.Fatalf("informer for an undeclared kind: got %v, want an error naming v1/Secret", err)
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if _, err := a.Manager.GetCache().GetInformer(context.Background(), meta); err == nil || !strings.Contains(err.Error(), "declared typed but requested metadata-only") {
		t.Fatalf("informer in another form: got %v, want a form mismatch error", err)
	}
}

// TestMissingCRD: a required resource whose API is not served fails registration naming its
// group/version/kind; an optional one is skipped and the manager runs.
func TestMissingCRD(t *testing.T) {
	needEnv(t)
	widget := schema.GroupVersionKind{Group: "example.loraplane.io", Version: "v1", Kind: "Widget"}

	a, _ := newApp(t, "crd-missing-required", env.Config, 30*time.Second)
	start := time.Now()
	err := a.Gate.Register(context.Background(), syncgate.Typed(&corev1.ConfigMap{}), syncgate.Metadata(widget))
	if err == nil || !strings.Contains(err.Error(), "example.loraplane.io/v1/Widget") || !strings.Contains(err.Error(), "not served") {
		t.Fatalf("required missing CRD: got %v, want an error naming example.loraplane.io/v1/Widget", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("failing took %s, want seconds", took)
	}

	const name = "crd-missing-optional"
	b, addr := newApp(t, name, env.Config, 30*time.Second)
	if err := b.Gate.Register(context.Background(), syncgate.Typed(&corev1.ConfigMap{}), syncgate.Metadata(widget).AsOptional()); err != nil {
		t.Fatalf("optional missing CRD: %v", err)
	}
	ctx, cancel := background(t)
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	waitOpen(t, b.Gate)
	waitFor(t, 5*time.Second, "/readyz to turn 200", func() bool { code, _ := probe(addr, "/readyz"); return code == 200 })
	if m := metric(t, "loraplane_cache_resource_skipped", labels(name, "Widget")); m == nil || m.GetGauge().GetValue() != 1 {
		t.Errorf("skipped gauge for Widget: want 1, got %s", describe(m))
	}
	if m := metric(t, "loraplane_cache_synced", labels(name, "Widget")); m == nil || m.GetGauge().GetValue() != 0 {
		t.Errorf("cache_synced for Widget: want 0, got %s", describe(m))
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestForbiddenResourceFailsNamingIt runs as a user that may list ConfigMaps but not Pods:
// startup fails within the timeout naming Pods and "forbidden", and counts the errors.
func TestForbiddenResourceFailsNamingIt(t *testing.T) {
	needEnv(t)
	const name = "forbidden"
	admin, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, _ := background(t)
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "syncgate-configmaps-only"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "syncgate-configmaps-only"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "limited"}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(context.Background(), obj) })
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "limited"}

	const timeout = 3 * time.Second
	a, addr := newApp(t, name, cfg, timeout)
	if err := a.Gate.Register(ctx, syncgate.Typed(&corev1.ConfigMap{}), syncgate.Typed(&corev1.Pod{})); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitFor(t, 2*time.Second, "the probe server to answer", func() bool { code, _ := probe(addr, "/healthz"); return code == 200 })
	waitFor(t, timeout, "/readyz/pod to name the forbidden error while pending", func() bool {
		code, body := probe(addr, "/readyz/pod")
		return code >= 500 && strings.Contains(body, "pending") && strings.Contains(body, "forbidden")
	})

	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(timeout + 30*time.Second):
		t.Fatalf("Run did not return within the %s timeout (+30s)", timeout)
	}
	took := time.Since(start)
	var syncErr *syncgate.SyncError
	if !errors.As(runErr, &syncErr) {
		t.Fatalf("Run: got %v, want a *SyncError", runErr)
	}
	if len(syncErr.Pending) != 1 || syncErr.Pending[0].GVK.Kind != "Pod" || syncErr.Pending[0].Reason != syncgate.ReasonForbidden {
		t.Fatalf("pending: got %v, want only Pod, forbidden", syncErr)
	}
	if took < timeout || took > timeout+15*time.Second {
		t.Errorf("Run returned after %s, want about the %s timeout", took, timeout)
	}
	m := metric(t, "loraplane_cache_watch_errors_total", map[string]string{"controller": name, "kind": "Pod", "reason": "forbidden"})
	if m == nil || m.GetCounter().GetValue() < 1 {
		t.Errorf("watch errors for Pod: want forbidden > 0, got %s", describe(m))
	}
}

// TestUnreachableAPIServerFailsClassified points the controller at a port nobody listens on:
// startup fails within the timeout with the cause "unreachable".
func TestUnreachableAPIServerFailsClassified(t *testing.T) {
	needEnv(t)
	cfg := rest.CopyConfig(env.Config)
	cfg.Host = "https://" + testenv.FreeAddr() // closed again: connections are refused
	const timeout = 2 * time.Second
	a, _ := newApp(t, "unreachable", cfg, timeout)
	ctx, _ := background(t)
	if err := a.Gate.Register(ctx, syncgate.Typed(&corev1.ConfigMap{})); err != nil {
		t.Fatalf("register must not fail on an unreachable server (it retries after start): %v", err)
	}
	start := time.Now()
	err := a.Run(ctx)
	var syncErr *syncgate.SyncError
	if !errors.As(err, &syncErr) || len(syncErr.Pending) != 1 || syncErr.Pending[0].Reason != syncgate.ReasonUnreachable {
		t.Fatalf("Run: got %v, want a *SyncError with ConfigMap unreachable", err)
	}
	if took := time.Since(start); took > timeout+15*time.Second {
		t.Errorf("Run returned after %s, want about the %s timeout", took, timeout)
	}
}

// TestStandbyReplicaSyncsAndIsReady runs two replicas with leader election: both become
// ready with synced caches, only the leader reconciles.
func TestStandbyReplicaSyncsAndIsReady(t *testing.T) {
	needEnv(t)
	seedConfigMap(t, "standby")
	elect := func(o *app.Options) {
		o.LeaderElect = true
		o.LeaderElectionID = "standby-test"
		o.LeaderElectionNamespace = "default"
	}
	var leaders atomic.Int32
	start := func(name string) (*recorder, string, context.CancelFunc, chan error) {
		a, addr := newApp(t, name, env.Config, 30*time.Second, elect)
		if err := a.Gate.Register(context.Background(), syncgate.Typed(&corev1.ConfigMap{}), syncgate.Typed(&corev1.Pod{})); err != nil {
			t.Fatal(err)
		}
		rec := setupRecorder(t, a, name)
		if err := a.Manager.Add(manager.RunnableFunc(func(ctx context.Context) error {
			leaders.Add(1)
			<-ctx.Done()
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		return rec, addr, cancel, done
	}
	leaderRec, leaderAddr, stopLeader, leaderDone := start("standby-a")
	waitFor(t, 30*time.Second, "replica a to lead and reconcile", func() bool { _, n, _ := leaderRec.first(); return n > 0 })
	standbyRec, standbyAddr, stopStandby, standbyDone := start("standby-b")
	waitFor(t, 20*time.Second, "the standby to report ready", func() bool { code, _ := probe(standbyAddr, "/readyz"); return code == 200 })
	if code, _ := probe(leaderAddr, "/readyz"); code != 200 {
		t.Errorf("leader /readyz: got %d, want 200", code)
	}
	// A new ConfigMap: the leader reconciles it; the standby, with the same synced cache,
	// must not.
	_, before, _ := leaderRec.first()
	seedConfigMap(t, "standby-new")
	waitFor(t, 10*time.Second, "the leader to reconcile the new ConfigMap", func() bool { _, n, _ := leaderRec.first(); return n > before })
	if _, n, _ := standbyRec.first(); n != 0 {
		t.Errorf("the standby reconciled %d times, want 0", n)
	}
	if got := leaders.Load(); got != 1 {
		t.Errorf("leader-only runnables started %d times, want 1", got)
	}
	stopStandby()
	stopLeader()
	for _, d := range []chan error{standbyDone, leaderDone} {
		if err := <-d; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}
