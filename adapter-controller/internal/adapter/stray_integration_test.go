package adapter_test

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/fakeengine"
)

// TestStraysSwept: adapters this controller loaded whose ModelAdapter went away without
// the unload — one whose unloads were abandoned after the deletion retries, one whose
// finalizer was removed by hand — are unloaded by the inventory sweep once the engine
// answers again. Adapters the engine was started with, or that another client loaded, and
// an adapter whose ModelAdapter still exists are never touched, by that sweep or by the
// inventory's later listings of the pod.
func TestStraysSwept(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	ip := newIP()
	e := engine(t, ip, 8000, fakeengine.Options{Preload: map[string]string{"static": "/models/static", "foreign": "/models/foreign"}})
	modelPod(t, ns, "sw-0", ip, modelLabels("sw"))
	abandoned, byHand, kept := newAdapter(ns, "abandoned", "sw"), newAdapter(ns, "by-hand", "sw"), newAdapter(ns, "kept", "sw")
	for _, a := range []*v1alpha1.ModelAdapter{abandoned, byHand, kept} {
		if err := k8s.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
		waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "Running", running(1))
	}
	// An inventory poll must see both recorded on the pod: the second listing from now is
	// made by a poll that read the adapters after both were Running (the first may belong to
	// a poll that read them before; no load is left to verify).
	listed := e.Lists()
	waitFor(t, 10*inventoryPeriod, "two more inventory listings of the pod", func() bool { return e.Lists() >= listed+2 })
	strays := metricValue(t, "loraplane_adapter_stray_unloads_total", map[string]string{"result": "success"})

	// Unloads hang past the engine timeout: deletion cannot unload.
	e.SetFault(fakeengine.Fault{Op: fakeengine.OpUnload, Hang: time.Minute})
	if err := k8s.Delete(ctx, byHand); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(byHand), byHand); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(byHand.DeepCopy())
	byHand.Finalizers = nil
	if err := k8s.Patch(ctx, byHand, patch); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, abandoned); err != nil {
		t.Fatal(err)
	}
	for _, a := range []*v1alpha1.ModelAdapter{abandoned, byHand} {
		waitFor(t, 30*time.Second, a.Name+" to be gone", func() bool {
			return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(a), &v1alpha1.ModelAdapter{}))
		})
	}
	if got := e.Loaded(); !slices.Contains(got, "abandoned") || !slices.Contains(got, "by-hand") {
		t.Fatalf("the engine holds %v; the test needs both deleted adapters left on it", got)
	}

	e.ClearFault()
	start := time.Now()
	waitFor(t, 3*inventoryPeriod+10*time.Second, "the sweep to unload both strays", func() bool {
		got := e.Loaded()
		return !slices.Contains(got, "abandoned") && !slices.Contains(got, "by-hand")
	})
	t.Logf("strays unloaded %s after the engine answered again (inventory period %s)", time.Since(start).Round(10*time.Millisecond), inventoryPeriod)
	// Proof that the inventory looked again before asserting that it left the rest alone: two
	// more listings of the pod (kept keeps it recorded, so every poll lists it).
	listed = e.Lists()
	waitFor(t, 10*inventoryPeriod, "two more inventory listings of the pod after the sweep", func() bool { return e.Lists() >= listed+2 })
	if got := e.Loaded(); joined(got) != "foreign,kept,static" {
		t.Errorf("the engine holds %v, want the adapters it was started with and the one whose ModelAdapter exists: foreign, kept, static", got)
	}
	if got := metricValue(t, "loraplane_adapter_stray_unloads_total", map[string]string{"result": "success"}) - strays; got != 2 {
		t.Errorf("loraplane_adapter_stray_unloads_total{result=success} grew by %v, want 2", got)
	}
}

// TestReusedAddressOfAnotherNamespace: team-a's adapter is loaded, with team-a's engine key
// from its credentials Secret, on two pods of team-a; one of them goes, and a pod of team-b
// takes its address, its engine started with an adapter of the same name (from its own path)
// and no key required. Team-b's engine must keep its adapter and never see team-a's key,
// however many polls pass: a vacated address is handed over within its namespace only.
// (Before: every poll listed team-b's engine with team-a's key, and the sweep unloaded
// team-b's adapter by name.)
func TestReusedAddressOfAnotherNamespace(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	nsA, nsB := newNamespace(t), newNamespace(t)
	ipReused, ipKept := newIP(), newIP()
	const keyA = "team-a-key"
	keyed := fakeengine.Options{BaseModel: "reuse-a", APIKey: keyA}
	eGoing := engine(t, ipReused, 8000, keyed)
	eKept := engine(t, ipKept, 8000, keyed)
	modelPod(t, nsA, "a-0", ipReused, modelLabels("reuse-a"))
	modelPod(t, nsA, "a-1", ipKept, modelLabels("reuse-a"))
	secret := &corev1.Secret{ObjectMeta: metav1ObjectMeta(nsA, "creds"), StringData: map[string]string{"api-key": keyA}}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	a := newAdapter(nsA, "lora", "reuse-a", func(a *v1alpha1.ModelAdapter) {
		a.Spec.CredentialsSecretRef = &corev1.LocalObjectReference{Name: "creds"}
	})
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "Running on a-0 and a-1", running(2))

	// a-0 goes; b-0 of team-b takes its address.
	if err := k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1ObjectMeta(nsA, "a-0")}, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	eGoing.Close()
	eB := engine(t, ipReused, 8000, fakeengine.Options{BaseModel: "reuse-b", Preload: map[string]string{"lora": "/models/team-b-lora"}})
	modelPod(t, nsB, "b-0", ipReused, modelLabels("reuse-b"))
	waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "Running on a-1 only", running(1))

	// Several polls (each lists a-1): the inventory forgets a-0, keeps its address as
	// vacated, and would hand it over.
	listed := eKept.Lists()
	waitFor(t, 10*inventoryPeriod, "five more inventory listings of a-1", func() bool { return eKept.Lists() >= listed+5 })
	if got := eB.Loaded(); !slices.Contains(got, "lora") {
		t.Errorf("team-b's engine holds %v: its own adapter lora was unloaded", got)
	}
	if got := eB.KeysSeen(); slices.Contains(got, keyA) {
		t.Errorf("team-b's engine was sent team-a's key (keys seen: %d distinct)", len(got))
	}
	t.Logf("team-b's engine: %v requests, holds %v", eB.Requests(), eB.Loaded())
}
