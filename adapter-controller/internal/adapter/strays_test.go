package adapter

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// Unit tests of the stray loads: what the sweep may unload, with which key, and that the
// unloads deletion gave up on outlive the process.

// keyedAdapter is testAdapter in namespace ns, with UID uid and the credentials Secret creds.
func keyedAdapter(ns string, uid types.UID) *v1alpha1.ModelAdapter {
	a := testAdapter()
	a.Namespace, a.UID = ns, uid
	a.Spec.CredentialsSecretRef = &corev1.LocalObjectReference{Name: "creds"}
	return a
}

func credsSecret(ns, key string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds"}, Data: map[string][]byte{APIKeySecretKey: []byte(key)}}
}

func reconcileKey(t *testing.T, r *Reconciler, ns, name string) reconcile.Result {
	t.Helper()
	res, err := r.Reconcile(t.Context(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// deleteUntilGone deletes the adapter and reconciles it, stepping the fake clock to each
// requeue, until its finalizer is released.
func deleteUntilGone(t *testing.T, r *Reconciler, c client.Client, clk *clocktesting.FakeClock, a *v1alpha1.ModelAdapter) {
	t.Helper()
	if err := c.Delete(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	start := clk.Now()
	for {
		res := reconcileKey(t, r, a.Namespace, a.Name)
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(a), &v1alpha1.ModelAdapter{}); apierrors.IsNotFound(err) {
			return
		}
		if res.RequeueAfter <= 0 || clk.Since(start) > time.Hour {
			t.Fatalf("no requeue (%v) while the finalizer is held, %s after the deletion", res, clk.Since(start))
		}
		clk.Step(res.RequeueAfter)
	}
}

func poll(t *testing.T, r *Reconciler, n int) {
	t.Helper()
	for range n {
		if err := r.inventory.poll(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestVacatedAddressStaysInItsNamespace: team-a's pod, holding team-a's adapter loaded with
// team-a's engine key, goes; a pod of team-b takes its address, its engine started with an
// adapter of the same name (from its own path) and no key required. The inventory forgets
// team-a's pod and keeps its address as vacated; the address is never handed to team-b's
// pod: after several polls team-b's engine still holds its adapter and was sent no request
// at all, so never team-a's key. (Before: the hand-over listed team-b's pod with team-a's
// key on every poll and unloaded team-b's adapter by name.)
func TestVacatedAddressStaysInItsNamespace(t *testing.T) {
	eng := newFakeEngine()
	const ip = "127.0.50.1"
	eng.keys[ip] = "key-a"
	a := keyedAdapter("team-a", "uid-a")
	podA := readyPods(1)[0].(*corev1.Pod)
	podA.Namespace = "team-a"
	r, c, _ := testReconciler(t, eng, clock.RealClock{}, DefaultOptions(), interceptor.Funcs{}, podA, a, credsSecret("team-a", "key-a"))
	reconcileKey(t, r, "team-a", "lora")
	if got := eng.holds(ip); !slices.Contains(got, "lora") {
		t.Fatalf("team-a's engine holds %v after the first pass", got)
	}
	poll(t, r, 1)

	// team-a's pod goes; team-b's takes its address, with its engine.
	if err := c.Delete(t.Context(), podA); err != nil {
		t.Fatal(err)
	}
	reconcileKey(t, r, "team-a", "lora")
	podB := readyPods(1)[0].(*corev1.Pod)
	podB.Namespace, podB.Name, podB.UID = "team-b", "b0", "uid-b0"
	if err := c.Create(t.Context(), podB); err != nil {
		t.Fatal(err)
	}
	eng.mu.Lock()
	eng.loaded[ip] = []string{"lora"}
	eng.paths[ip] = map[string]string{"lora": "/models/team-b-lora"}
	eng.keys[ip] = ""
	delete(eng.keysSeen, ip)
	eng.mu.Unlock()

	poll(t, r, 4) // forgotten at one poll, vacated at the next, then dropped or handed over
	if got := eng.holds(ip); !slices.Contains(got, "lora") {
		t.Errorf("team-b's engine holds %v: its own adapter lora was unloaded", got)
	}
	if got := eng.seen(ip); slices.Contains(got, "key-a") || len(got) > 0 {
		t.Errorf("team-b's engine was sent the API keys %q; want no request at all (and never team-a's key)", got)
	}
}

// TestStraySweepLeavesAnAdapterCreatedAgain: an adapter is deleted (and unloaded) and created
// again under the same name within one inventory period; the poll read the adapters while
// neither existed, and its listing of the pod comes after the new adapter loaded there. The
// sweep reads the adapter again before unloading: the new adapter keeps its load. (Before:
// the sweep went by the poll's snapshot and the name, and unloaded the new adapter while its
// status said Running.)
func TestStraySweepLeavesAnAdapterCreatedAgain(t *testing.T) {
	eng := newFakeEngine()
	const ip = "127.0.50.1"
	a := testAdapter()
	a.UID = "uid-1"
	var r *Reconciler
	recreate := false
	funcs := interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		if _, isPod := obj.(*corev1.Pod); isPod && recreate {
			// The poll reads the pod to list it: the adapter is created again and loaded
			// meanwhile.
			recreate = false
			again := testAdapter()
			again.UID = "uid-2"
			if err := c.Create(ctx, again); err != nil {
				return err
			}
			reconcileKey(t, r, "ns", "lora")
		}
		return c.Get(ctx, key, obj, opts...)
	}}
	r, c, _ := testReconciler(t, eng, clock.RealClock{}, DefaultOptions(), funcs, append(readyPods(1), a)...)
	reconcileKey(t, r, "ns", "lora")
	poll(t, r, 1) // the pod is recorded by lora (uid-1)
	if err := c.Delete(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	reconcileKey(t, r, "ns", "lora")
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(a), &v1alpha1.ModelAdapter{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the deleted adapter: %v", err)
	}
	recreate = true
	poll(t, r, 1)
	if recreate {
		t.Fatal("the poll did not read the pod: the test proves nothing")
	}
	if got := eng.holds(ip); !slices.Contains(got, "lora") {
		t.Fatalf("the engine holds %v: the sweep unloaded the adapter created again", got)
	}
	cur := &v1alpha1.ModelAdapter{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(a), cur); err != nil || cur.UID != "uid-2" || !slices.Contains(cur.Status.Instances, "p0") {
		t.Fatalf("the adapter created again: %v, UID %s, instances %v", err, cur.UID, cur.Status.Instances)
	}
	poll(t, r, 2)
	if got := eng.holds(ip); !slices.Contains(got, "lora") {
		t.Fatalf("the engine holds %v after two more polls", got)
	}
}

// TestNoEngineCallWhileAIBrixRuns: while AIBrix's controllers run, a poll calls no engine —
// no listing of the adapters' instances, no unload of a stray load; once they stop, the next
// poll does both.
func TestNoEngineCallWhileAIBrixRuns(t *testing.T) {
	eng := newFakeEngine()
	const ip = "127.0.50.1"
	pods := readyPods(1)
	r, _, _ := testReconciler(t, eng, clock.RealClock{}, DefaultOptions(), interceptor.Funcs{}, append(pods, testAdapter())...)
	reconcileKey(t, r, "ns", "lora")
	gone := testAdapter()
	gone.Name, gone.UID = "gone", "uid-gone"
	eng.load(ip, "gone")
	r.inventory.abandon(pods[0].(*corev1.Pod), gone, "", "/models/gone")

	running := true
	r.inventory.aibrixRunning = func(context.Context) bool { return running }
	calls := func() int { return eng.count(&eng.lists) + eng.count(&eng.unloads) + eng.count(&eng.loads) }
	before := calls()
	poll(t, r, 3)
	if got := calls() - before; got != 0 {
		t.Fatalf("%d engine calls while AIBrix's controllers run, want none", got)
	}
	running = false
	poll(t, r, 1)
	if eng.count(&eng.lists) == 0 || slices.Contains(eng.holds(ip), "gone") {
		t.Fatalf("after AIBrix stopped: %d listings, the engine holds %v (want the stray unloaded)", eng.count(&eng.lists), eng.holds(ip))
	}
}

// TestAbandonedUnloadSurvivesARestart: deletion gives up on a pod whose engine does not
// answer and releases the adapter; the process goes, and a new one (a new reconciler and
// inventory on the same API server, as after a restart or a failover) starts. Once the
// engine answers again the new process unloads the adapter, with the key of the adapter's
// credentials Secret, read by the reference kept; the ConfigMap keeping the unload holds no
// key. (Before: the abandoned unload lived in the old process's memory only, and the adapter
// stayed loaded for good.)
func TestAbandonedUnloadSurvivesARestart(t *testing.T) {
	clk, eng, opts, _ := unreachableAdapter()
	opts.StrayNamespace = "loraplane-system"
	const ip = "127.0.50.1"
	eng.keys[ip] = "team-key"
	eng.load(ip, "lora")
	eng.setPath(ip, "lora", "org/lora")
	a := keyedAdapter("ns", "uid-lora")
	a.Finalizers = []string{Finalizer}
	a.Annotations = map[string]string{v1alpha1.ScheduledPodsAnnotation: "p0"}
	a.Status.Instances = []string{"p0"}
	r, c, _ := testReconciler(t, eng, clk, opts, interceptor.Funcs{}, append(readyPods(1), a, credsSecret("ns", "team-key"))...)
	deleteUntilGone(t, r, c, clk, a)
	if got := eng.holds(ip); !slices.Contains(got, "lora") {
		t.Fatalf("the engine holds %v; the test needs the abandoned adapter left on it", got)
	}
	cm := &corev1.ConfigMap{}
	cmKey := types.NamespacedName{Namespace: "loraplane-system", Name: StrayConfigMapName}
	if err := c.Get(t.Context(), cmKey, cm); err != nil {
		t.Errorf("the abandoned unload was not kept: %v", err)
	} else if data := cm.Data[strayConfigMapKey]; !strings.Contains(data, `"adapter":"lora"`) || strings.Contains(data, "team-key") {
		t.Errorf("the ConfigMap holds %s: want the abandoned unload, without the key", data)
	}

	// A new process; the engine answers again.
	r2 := NewReconciler(c, c, eng, events.NewFakeRecorder(100), clk, opts)
	eng.mu.Lock()
	eng.unloadErr = nil
	eng.mu.Unlock()
	poll(t, r2, 1)
	if got := eng.holds(ip); slices.Contains(got, "lora") {
		t.Fatalf("after the restart the engine still holds %v", got)
	}
	if err := c.Get(t.Context(), cmKey, cm); err != nil || cm.Data[strayConfigMapKey] != "[]" {
		t.Errorf("the ConfigMap after the unload: %v, %q (want no stray load left)", err, cm.Data[strayConfigMapKey])
	}
}

// TestDeletionWithoutItsSecretUsesTheLastKey: an adapter and its credentials Secret are
// deleted together (`kubectl delete -f` of a bundle); the engine requires the key. Deletion
// unloads with the last key that worked on the pod (its listing's) and releases the adapter.
// (Before: every unload went without a key, was refused, and deletion gave up and left the
// adapter loaded.)
func TestDeletionWithoutItsSecretUsesTheLastKey(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	eng := newFakeEngine()
	const ip = "127.0.50.1"
	eng.keys[ip] = "team-key"
	a := keyedAdapter("ns", "uid-lora")
	secret := credsSecret("ns", "team-key")
	r, c, _ := testReconciler(t, eng, clk, DefaultOptions(), interceptor.Funcs{}, append(readyPods(1), a, secret)...)
	reconcileKey(t, r, "ns", "lora")
	if got := eng.holds(ip); !slices.Contains(got, "lora") {
		t.Fatalf("the engine holds %v after the first pass", got)
	}
	if err := c.Delete(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	deleteUntilGone(t, r, c, clk, a)
	if got := eng.holds(ip); slices.Contains(got, "lora") {
		t.Fatalf("the adapter was released while the engine still holds it: %v (keys sent: %q)", got, eng.seen(ip))
	}
}

// TestSameNamedAdapterOnAnotherPodLeftAlone: a pod of the adapter's namespace that it does not
// select holds an adapter of the same name from elsewhere (its engine's --lora-modules); the
// inventory lists that pod for another adapter recording it. Reconciles of the adapter never
// unload the other one: it is not loaded from anything the adapter loads. (Before: the
// reconcile took every pod whose listing showed the name as holding it, and unloaded it.)
func TestSameNamedAdapterOnAnotherPodLeftAlone(t *testing.T) {
	eng := newFakeEngine()
	pods := readyPods(2)
	other := pods[1].(*corev1.Pod)
	other.Labels[v1alpha1.ModelNameLabel] = "other"
	otherIP := other.Status.PodIP
	eng.load(otherIP, "lora") // from /models/lora
	x := testAdapter()
	x.Name, x.UID = "x", "uid-x"
	x.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.ModelNameLabel: "other"}}
	r, _, _ := testReconciler(t, eng, clock.RealClock{}, DefaultOptions(), interceptor.Funcs{}, append(pods, testAdapter(), x)...)
	reconcileKey(t, r, "ns", "x") // its verification lists p1: it shows the other lora
	for range 2 {
		reconcileKey(t, r, "ns", "lora")
		poll(t, r, 1) // lists p1 for x
	}
	reconcileKey(t, r, "ns", "lora")
	if got := eng.holds(otherIP); !slices.Contains(got, "lora") {
		t.Fatalf("p1's engine holds %v: its own lora was unloaded", got)
	}
	if _, loaded, known := r.inventory.Served(other, "lora"); !known || !loaded {
		t.Fatal("the inventory's listing of p1 does not show its lora: the test proves nothing")
	}
}
