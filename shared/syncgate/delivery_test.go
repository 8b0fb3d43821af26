package syncgate_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/loraplane/loraplane/shared/app"
	"github.com/loraplane/loraplane/shared/syncgate"
	"github.com/loraplane/loraplane/test/testenv"
)

// The second stage of startup: once the informers have synced, each controller's event
// handlers receive every object of the initial list (controller-runtime waits for that
// before starting workers). These tests give a controller a deliberately slow mapping
// function - a sleep per event over a few hundred ConfigMaps - so that this stage lasts
// seconds.

const (
	// slowObjects ConfigMaps, each delivered with a perEvent sleep: the delivery of the
	// initial list takes at least slowObjects × perEvent.
	slowObjects = 300
	perEvent    = 10 * time.Millisecond
)

// seedConfigMaps creates n ConfigMaps labelled for the slow mapping function in a namespace
// of their own, and deletes the namespace when the test ends.
func seedConfigMaps(t *testing.T, ns string, n int) {
	t.Helper()
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	if err := c.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), nsObj) })
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%03d", i),
				Labels: map[string]string{"slow-delivery": ns}}}
			if err := c.Create(ctx, cm); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("seeding ConfigMaps: %v", err)
	}
}

// slowController is a controller whose only watch maps each ConfigMap of its namespace to a
// request after sleeping perEvent: a mapping function as slow as one that lists on every
// event in a large cluster.
type slowController struct {
	mu    sync.Mutex
	calls []time.Time
}

func (s *slowController) Reconcile(context.Context, reconcile.Request) (reconcile.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, time.Now())
	return reconcile.Result{}, nil
}

func (s *slowController) first() (time.Time, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.calls) == 0 {
		return time.Time{}, 0
	}
	return s.calls[0], len(s.calls)
}

func setupSlowController(t *testing.T, a *app.App, name, ns string) *slowController {
	t.Helper()
	s := &slowController{}
	slow := func(_ context.Context, obj client.Object) []reconcile.Request {
		if obj.GetLabels()["slow-delivery"] != ns {
			return nil
		}
		time.Sleep(perEvent)
		return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(obj)}}
	}
	err := ctrl.NewControllerManagedBy(a.Manager).Named(name).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(slow)).
		Complete(s)
	if err != nil {
		t.Fatalf("setting up the controller: %v", err)
	}
	return s
}

// TestSlowHandlerDeliveryHoldsReadiness: the informers sync at once, then the controller's
// handler needs slowObjects × perEvent for the initial list. Readiness stays false until it
// has all of them, /readyz/configmap names the controller still receiving them, and
// loraplane_handler_sync_duration_seconds records the delivery time.
func TestSlowHandlerDeliveryHoldsReadiness(t *testing.T) {
	needEnv(t)
	const name = "slow-delivery"
	const reconciler = "slow-delivery-ctrl"
	seedConfigMaps(t, name, slowObjects)
	a, addr := newApp(t, name, env.Config, 30*time.Second)
	if err := a.Gate.Register(context.Background(), syncgate.Typed(&corev1.ConfigMap{})); err != nil {
		t.Fatal(err)
	}
	rec := setupSlowController(t, a, reconciler, name)

	ctx, cancel := background(t)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitOpen(t, a.Gate)
	opened := time.Now()
	minDelivery := slowObjects * perEvent

	// The informer is synced; the handler is still receiving the initial list.
	if code, body := probe(addr, "/readyz"); code < 500 {
		t.Errorf("/readyz right after the gate opened: got %d %q, want 5xx while the handler receives the initial list", code, body)
	}
	waitFor(t, minDelivery/2, "/readyz/configmap to name the controller still receiving the initial list", func() bool {
		code, body := probe(addr, "/readyz/configmap")
		return code >= 500 && strings.Contains(body, reconciler)
	})

	var readyAt time.Time
	waitFor(t, 30*time.Second, "/readyz to turn 200 once the delivery ended", func() bool {
		code, _ := probe(addr, "/readyz")
		readyAt = time.Now()
		return code == 200
	})
	if got := readyAt.Sub(opened); got < minDelivery {
		t.Errorf("/readyz 200 %s after the gate opened, before the delivery of %d objects could end (%s)", got, slowObjects, minDelivery)
	}
	if code, body := probe(addr, "/readyz/configmap"); code != 200 {
		t.Errorf("/readyz/configmap after the delivery: got %d %q, want 200", code, body)
	}
	waitFor(t, 10*time.Second, "the first reconcile", func() bool { at, _ := rec.first(); return !at.IsZero() })
	if at, _ := rec.first(); at.Sub(opened) < minDelivery {
		t.Errorf("first reconcile %s after the gate opened, before the delivery ended", at.Sub(opened))
	}

	h := metric(t, "loraplane_handler_sync_duration_seconds", map[string]string{"controller": name, "reconciler": reconciler, "kind": "ConfigMap"})
	if h == nil || h.GetHistogram().GetSampleCount() != 1 || h.GetHistogram().GetSampleSum() < minDelivery.Seconds() {
		t.Errorf("handler sync duration of ConfigMap: want one sample >= %v, got %s", minDelivery.Seconds(), describe(h))
	}
	if m := metric(t, "loraplane_handler_synced", map[string]string{"controller": name, "reconciler": reconciler, "kind": "ConfigMap"}); m == nil || m.GetGauge().GetValue() != 1 {
		t.Errorf("handler_synced of ConfigMap: want 1, got %s", describe(m))
	}
	// The informer stage, under the names upstream client-go proposes.
	inf := metric(t, "loraplane_informer_initialization_duration_seconds", map[string]string{"name": name, "group": "", "version": "v1", "resource": "configmaps"})
	if inf == nil || inf.GetHistogram().GetSampleCount() != 1 || inf.GetHistogram().GetSampleSum() >= minDelivery.Seconds() {
		t.Errorf("informer initialization of configmaps: want one sample below the delivery time, got %s", describe(inf))
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel: %v", err)
	}
}

// TestWarmStandbyFailover: two replicas with leader election and the slow handler. The
// standby receives the initial list too (controller-runtime's warmup) and is ready only
// then, without ever leading; when the leader goes, the standby reconciles as soon as it
// holds the lease instead of receiving the whole initial list first.
func TestWarmStandbyFailover(t *testing.T) {
	needEnv(t)
	const ns = "warm-standby"
	seedConfigMaps(t, ns, slowObjects)
	elect := func(o *app.Options) {
		o.LeaderElect = true
		o.LeaderElectionID = "warm-standby-test"
		o.LeaderElectionNamespace = "default"
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 3*time.Second, 2*time.Second, 250*time.Millisecond
	}
	start := func(name string) (*slowController, string, context.CancelFunc, chan error) {
		a, addr := newApp(t, name, env.Config, 30*time.Second, elect)
		if err := a.Gate.Register(context.Background(), syncgate.Typed(&corev1.ConfigMap{})); err != nil {
			t.Fatal(err)
		}
		rec := setupSlowController(t, a, name, ns)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		return rec, addr, cancel, done
	}
	leader, _, stopLeader, leaderDone := start(ns + "-a")
	waitFor(t, 30*time.Second, "replica a to lead and reconcile", func() bool { _, n := leader.first(); return n > 0 })

	standby, standbyAddr, stopStandby, standbyDone := start(ns + "-b")
	t.Cleanup(stopStandby)
	standbyStart := time.Now()
	waitFor(t, 30*time.Second, "the standby to report ready", func() bool { code, _ := probe(standbyAddr, "/readyz"); return code == 200 })
	readyAfter := time.Since(standbyStart)
	if readyAfter < slowObjects*perEvent {
		t.Errorf("the standby was ready %s after its start, before its handler could have received the %d objects", readyAfter, slowObjects)
	}
	if _, n := standby.first(); n != 0 {
		t.Fatalf("the standby reconciled %d times before leading", n)
	}

	stopLeader()
	if err := <-leaderDone; err != nil {
		t.Errorf("leader Run: %v", err)
	}
	stopped := time.Now()
	waitFor(t, 30*time.Second, "the standby to take over and reconcile", func() bool { _, n := standby.first(); return n > 0 })
	first, _ := standby.first()
	failover := first.Sub(stopped)
	t.Logf("standby ready %s after its start; failover (leader stopped, lease released → first reconcile of the standby) %s; delivery of the initial list takes >= %s",
		readyAfter.Round(time.Millisecond), failover.Round(time.Millisecond), slowObjects*perEvent)
	if failover >= slowObjects*perEvent {
		t.Errorf("failover took %s: the new leader received the initial list after taking over (>= %s) instead of before", failover, slowObjects*perEvent)
	}
	stopStandby()
	if err := <-standbyDone; err != nil {
		t.Errorf("standby Run: %v", err)
	}
}

// TestControllerStartTimeoutNamesControllerAndKind: a controller whose handler needs
// slowObjects × perEvent for the initial list of metadata-only ConfigMaps, with a start
// timeout shorter than that. Past the slow threshold a log line and /readyz/configmap name
// the controller and kind; at the timeout the process fails with a *DeliveryError naming
// them, classified slow-handler, and one log line says so.
func TestControllerStartTimeoutNamesControllerAndKind(t *testing.T) {
	needEnv(t)
	const name = "start-timeout"
	const reconciler = "start-timeout-ctrl"
	const timeout = time.Second
	seedConfigMaps(t, name, slowObjects)
	logs := testenv.CaptureKlog(t)
	a, addr := newApp(t, name, env.Config, 30*time.Second, func(o *app.Options) {
		o.ControllerStartTimeout = timeout
		o.SlowHandlerSyncThreshold = 300 * time.Millisecond
	})
	configMaps := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	if err := a.Gate.Register(context.Background(), syncgate.Metadata(configMaps)); err != nil {
		t.Fatal(err)
	}
	slow := func(_ context.Context, obj client.Object) []reconcile.Request {
		if obj.GetLabels()["slow-delivery"] == name {
			time.Sleep(perEvent)
		}
		return nil
	}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(configMaps)
	err := ctrl.NewControllerManagedBy(a.Manager).Named(reconciler).
		WatchesMetadata(meta, handler.EnqueueRequestsFromMapFunc(slow)).
		Complete(reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil }))
	if err != nil {
		t.Fatal(err)
	}

	ctx, _ := background(t)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitOpen(t, a.Gate)
	opened := time.Now()
	waitFor(t, timeout, "/readyz/configmap to name the controller as slow", func() bool {
		code, body := probe(addr, "/readyz/configmap")
		return code >= 500 && strings.Contains(body, reconciler) && strings.Contains(body, "slow")
	})

	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(timeout + 30*time.Second):
		t.Fatalf("Run did not return within the %s start timeout (+30s)", timeout)
	}
	if took := time.Since(opened); took < timeout || took > timeout+15*time.Second {
		t.Errorf("Run returned %s after the gate opened, want about the %s start timeout", took, timeout)
	}
	var derr *syncgate.DeliveryError
	if !errors.As(runErr, &derr) {
		t.Fatalf("Run: got %v, want a *syncgate.DeliveryError", runErr)
	}
	if derr.Controller != name || derr.Reconciler != reconciler || derr.Timeout != timeout || len(derr.Pending) != 1 {
		t.Fatalf("delivery error: got %+v, want controller %s, reconciler %s, timeout %s, one pending kind", derr, name, reconciler, timeout)
	}
	p := derr.Pending[0]
	if p.GVK != configMaps || p.Reason != syncgate.ReasonSlowHandler || p.Objects < slowObjects || p.Delivered >= p.Objects {
		t.Errorf("pending: got %+v, want v1/ConfigMap, slow-handler, fewer than %d of at least %d delivered", p, p.Objects, slowObjects)
	}
	if msg := runErr.Error(); !strings.Contains(msg, reconciler) || !strings.Contains(msg, "v1/ConfigMap (slow-handler") {
		t.Errorf("error message %q names neither the controller nor the kind and cause", msg)
	}
	klog.Flush()
	for what, parts := range map[string][]string{
		"the slow log line":    {"Event handler still receiving its initial list", `reconciler="` + reconciler + `"`, `kind="ConfigMap"`},
		"the failure log line": {"Controller did not receive the initial list of a kind in time", `reconciler="` + reconciler + `"`, `kind="ConfigMap"`, `reason="slow-handler"`},
	} {
		if logs.Line(parts...) == "" {
			t.Errorf("no log line for %s (want one holding %q)", what, parts)
		}
	}
	if m := metric(t, "loraplane_handler_synced", map[string]string{"controller": name, "reconciler": reconciler, "kind": "ConfigMap"}); m == nil || m.GetGauge().GetValue() != 0 {
		t.Errorf("handler_synced of ConfigMap after the timeout: want 0, got %s", describe(m))
	}
}
