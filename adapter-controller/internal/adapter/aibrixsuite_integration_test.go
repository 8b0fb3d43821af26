package adapter_test

// The behaviours AIBrix's newest ModelAdapter e2e suite checks on the Kubernetes side
// (docs/compatibility.md), written from the behaviour: what an AIBrix user and AIBrix's
// gateway plugin read from a ModelAdapter, its Service and its EndpointSlice.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/adapter"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/fakeengine"
	"github.com/loraplane/loraplane/test/testenv"
)

// The reasons AIBrix's controller gives the Scheduled condition (and, for the first, the
// Ready condition) while no candidate pod, or too few, are Ready. Written out here rather
// than taken from the package: they are the contract, read by AIBrix users' tooling.
const (
	reasonNoReadyPods           = "NoReadyPods"
	reasonInsufficientReadyPods = "InsufficientReadyPods"
)

// condition returns the adapter's condition of that type, or nil.
func condition(a *v1alpha1.ModelAdapter, conditionType string) *metav1.Condition {
	return meta.FindStatusCondition(a.Status.Conditions, conditionType)
}

// conditionIs reports whether the adapter's condition has that status and reason for its
// current generation.
func conditionIs(a *v1alpha1.ModelAdapter, conditionType string, status metav1.ConditionStatus, reason string) bool {
	c := condition(a, conditionType)
	return c != nil && c.Status == status && c.Reason == reason && c.ObservedGeneration == a.Generation
}

// modelPods starts a fake engine and a Ready pod of the model for each name.
func modelPods(t *testing.T, ns, model string, names ...string) map[string]*fakeengine.Engine {
	t.Helper()
	engines := map[string]*fakeengine.Engine{}
	for _, name := range names {
		ip := newIP()
		engines[name] = engine(t, ip, 8000, fakeengine.Options{BaseModel: model})
		modelPod(t, ns, name, ip, modelLabels(model))
	}
	return engines
}

// sliceAddresses returns the sorted addresses of the adapter's EndpointSlice.
func sliceAddresses(t *testing.T, key types.NamespacedName) []string {
	t.Helper()
	eps := &discoveryv1.EndpointSlice{}
	if err := k8s.Get(context.Background(), key, eps); err != nil {
		t.Fatalf("EndpointSlice %s: %v", key, err)
	}
	var addrs []string
	for _, e := range eps.Endpoints {
		addrs = append(addrs, e.Addresses...)
	}
	slices.Sort(addrs)
	return addrs
}

// podAddresses returns the sorted EndpointSlice addresses of the named pods (their pod IPs
// as the test cluster's admission policy rewrites them).
func podAddresses(t *testing.T, ns string, names ...string) []string {
	t.Helper()
	var addrs []string
	for _, name := range names {
		pod := &corev1.Pod{}
		if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, pod); err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, testenv.TestAddress(pod.Status.PodIP))
	}
	slices.Sort(addrs)
	return addrs
}

// TestNoReadyPodsReasons: while no candidate pod is Ready the adapter says so as AIBrix does,
// Scheduled=False and Ready=False with reason NoReadyPods, phase Pending; once a pod is
// Ready it is scheduled there and Running. (Before: reason NoCandidates.)
func TestNoReadyPodsReasons(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	a := newAdapter(ns, "waiting", "w", func(a *v1alpha1.ModelAdapter) { a.Spec.Replicas = ptr.To[int32](1) })
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(a)
	got := waitAdapter(t, key, 30*time.Second, "Scheduled=False and Ready=False with reason NoReadyPods", func(a *v1alpha1.ModelAdapter) bool {
		return conditionIs(a, v1alpha1.ConditionScheduled, metav1.ConditionFalse, reasonNoReadyPods) &&
			conditionIs(a, v1alpha1.ConditionReady, metav1.ConditionFalse, reasonNoReadyPods)
	})
	if c := condition(got, v1alpha1.ConditionScheduled); !strings.Contains(strings.ToLower(c.Message), "no ready backend pods") {
		t.Errorf("Scheduled message %q does not say that no ready backend pod is available", c.Message)
	}
	if got.Status.Phase != v1alpha1.ModelAdapterPending || got.Status.ReadyReplicas != 0 || len(got.Status.Instances) != 0 {
		t.Errorf("status %+v, want Pending with no instance", got.Status)
	}

	engines := modelPods(t, ns, "w", "w-0")
	got = waitAdapter(t, key, 30*time.Second, "Running on w-0 with Scheduled=True", func(a *v1alpha1.ModelAdapter) bool {
		return running(1)(a) && conditionIs(a, v1alpha1.ConditionScheduled, metav1.ConditionTrue, adapter.ReasonScheduled)
	})
	if c := readyCondition(got); c.Status != metav1.ConditionTrue || joined(engines["w-0"].Loaded()) != "waiting" {
		t.Errorf("Ready = %+v, engine of w-0 holds %v; want True and the adapter loaded", c, engines["w-0"].Loaded())
	}
}

// TestInsufficientReadyPods: with fewer Ready pods than spec.replicas the adapter reports
// Scheduled=False with reason InsufficientReadyPods naming both numbers, and the pods there
// are serve it meanwhile; with enough pods, Scheduled=True. (Before: Scheduled=True "1 of 1
// candidates chosen".)
func TestInsufficientReadyPods(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	engines := modelPods(t, ns, "i", "i-0")
	a := newAdapter(ns, "wants-three", "i", func(a *v1alpha1.ModelAdapter) { a.Spec.Replicas = ptr.To[int32](3) })
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(a)
	got := waitAdapter(t, key, 30*time.Second, "Scheduled=False InsufficientReadyPods, serving on i-0", func(a *v1alpha1.ModelAdapter) bool {
		return conditionIs(a, v1alpha1.ConditionScheduled, metav1.ConditionFalse, reasonInsufficientReadyPods) &&
			joined(a.Status.Instances) == "i-0"
	})
	if c := condition(got, v1alpha1.ConditionScheduled); !strings.Contains(c.Message, "1 ready backend pods") || !strings.Contains(c.Message, "needs 3") {
		t.Errorf("Scheduled message %q does not name the 1 ready pod and the 3 wanted", c.Message)
	}
	if got.Status.ReadyReplicas != 1 || joined(engines["i-0"].Loaded()) != "wants-three" {
		t.Errorf("readyReplicas %d, engine of i-0 holds %v; want the adapter served on i-0", got.Status.ReadyReplicas, engines["i-0"].Loaded())
	}

	modelPods(t, ns, "i", "i-1", "i-2")
	got = waitAdapter(t, key, 30*time.Second, "Running on 3 pods with Scheduled=True", func(a *v1alpha1.ModelAdapter) bool {
		return running(3)(a) && conditionIs(a, v1alpha1.ConditionScheduled, metav1.ConditionTrue, adapter.ReasonScheduled)
	})
	if c := readyCondition(got); c.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %+v, want True", c)
	}
}

// TestAllBasePodsGoneAndBack: when every base model pod disappears, an adapter on all pods and
// one on a single pod both go Ready=False (NoReadyPods) with readyReplicas 0, no instance and
// an empty EndpointSlice within 60 s (AIBrix's bound); when pods come back (new pods, new
// addresses, fresh engines) both are loaded again and Running.
func TestAllBasePodsGoneAndBack(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	modelPods(t, ns, "g", "g-0", "g-1")
	all := newAdapter(ns, "on-all", "g")
	one := newAdapter(ns, "on-one", "g", func(a *v1alpha1.ModelAdapter) { a.Spec.Replicas = ptr.To[int32](1) })
	for _, a := range []*v1alpha1.ModelAdapter{all, one} {
		if err := k8s.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	waitAdapter(t, client.ObjectKeyFromObject(all), 30*time.Second, "on-all Running on 2", running(2))
	waitAdapter(t, client.ObjectKeyFromObject(one), 30*time.Second, "on-one Running on 1", running(1))

	start := time.Now()
	if err := k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.MatchingLabels(modelLabels("g")), client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	for _, a := range []*v1alpha1.ModelAdapter{all, one} {
		got := waitAdapter(t, client.ObjectKeyFromObject(a), 60*time.Second, a.Name+" Ready=False with readyReplicas 0", func(a *v1alpha1.ModelAdapter) bool {
			return a.Status.ReadyReplicas == 0 && conditionIs(a, v1alpha1.ConditionReady, metav1.ConditionFalse, reasonNoReadyPods)
		})
		if len(got.Status.Instances) != 0 || got.Status.Candidates != 0 || got.Status.Phase != v1alpha1.ModelAdapterPending {
			t.Errorf("%s: status %+v, want Pending without instances or candidates", a.Name, got.Status)
		}
		waitFor(t, 10*time.Second, a.Name+"'s EndpointSlice emptied", func() bool {
			return len(sliceAddresses(t, client.ObjectKeyFromObject(a))) == 0
		})
	}
	t.Logf("both adapters Ready=False with readyReplicas 0 %s after their pods were deleted", time.Since(start).Round(10*time.Millisecond))

	start = time.Now()
	modelPods(t, ns, "g", "g-2", "g-3")
	got := waitAdapter(t, client.ObjectKeyFromObject(all), 30*time.Second, "on-all Running on the new pods", running(2))
	if joined(got.Status.Instances) != "g-2,g-3" || !slices.Equal(sliceAddresses(t, client.ObjectKeyFromObject(all)), podAddresses(t, ns, "g-2", "g-3")) {
		t.Errorf("on-all: instances %v, EndpointSlice %v; want the new pods", got.Status.Instances, sliceAddresses(t, client.ObjectKeyFromObject(all)))
	}
	got = waitAdapter(t, client.ObjectKeyFromObject(one), 30*time.Second, "on-one Running on a new pod", running(1))
	if c := readyCondition(got); c.Status != metav1.ConditionTrue || !conditionIs(got, v1alpha1.ConditionScheduled, metav1.ConditionTrue, adapter.ReasonScheduled) {
		t.Errorf("on-one conditions %+v, want Ready and Scheduled True", got.Status.Conditions)
	}
	t.Logf("both adapters Running again %s after new pods were Ready", time.Since(start).Round(10*time.Millisecond))
}

// TestReplicasOneThenUnset: with replicas 1 the adapter's Service and EndpointSlice are named
// after it, on the engine port, owned by it (so the garbage collector deletes them with it),
// and the slice lists exactly the scheduled pod; removing spec.replicas loads it on every
// matching pod and the slice lists them all.
func TestReplicasOneThenUnset(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	engines := modelPods(t, ns, "r", "r-0", "r-1", "r-2")
	a := newAdapter(ns, "switch", "r", func(a *v1alpha1.ModelAdapter) { a.Spec.Replicas = ptr.To[int32](1) })
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(a)
	got := waitAdapter(t, key, 30*time.Second, "Running on 1 pod", running(1))
	scheduled := got.Status.Instances[0]

	svc := &corev1.Service{}
	if err := k8s.Get(ctx, key, svc); err != nil {
		t.Fatalf("a Service named after the adapter: %v", err)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8000 || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("Service ports %+v, clusterIP %q; want one port 8000, headless", svc.Spec.Ports, svc.Spec.ClusterIP)
	}
	// AIBrix labels the adapter's Service with the adapter's name under this key.
	if got := svc.Labels["adapter.model.aibrix.ai/name"]; got != a.Name {
		t.Errorf("Service label adapter.model.aibrix.ai/name = %q, want %q (labels %v)", got, a.Name, svc.Labels)
	}
	eps := &discoveryv1.EndpointSlice{}
	if err := k8s.Get(ctx, key, eps); err != nil {
		t.Fatalf("an EndpointSlice named after the adapter: %v", err)
	}
	if len(eps.Endpoints) != 1 || eps.Endpoints[0].TargetRef == nil || eps.Endpoints[0].TargetRef.Name != scheduled ||
		!slices.Equal(eps.Endpoints[0].Addresses, podAddresses(t, ns, scheduled)) || len(eps.Ports) != 1 || *eps.Ports[0].Port != 8000 {
		t.Errorf("EndpointSlice endpoints %+v, ports %+v; want exactly %s on port 8000", eps.Endpoints, eps.Ports, scheduled)
	}
	for _, obj := range []client.Object{svc, eps} {
		refs := obj.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != got.UID || !ptr.Deref(refs[0].Controller, false) || !ptr.Deref(refs[0].BlockOwnerDeletion, false) {
			t.Errorf("%T owner references %+v; want the adapter as controller, blocking owner deletion", obj, refs)
		}
	}

	// replicas 1 → unset (a JSON merge patch with null removes the field).
	if err := k8s.Patch(ctx, got, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":null}}`))); err != nil {
		t.Fatal(err)
	}
	got = waitAdapter(t, key, 30*time.Second, "Running on all 3 pods", running(3))
	if got.Spec.Replicas != nil || got.Status.DesiredReplicas != 3 || joined(got.Status.Instances) != "r-0,r-1,r-2" {
		t.Errorf("spec.replicas %v, status %+v; want unset and the adapter on r-0, r-1, r-2", got.Spec.Replicas, got.Status)
	}
	for name, e := range engines {
		if joined(e.Loaded()) != "switch" {
			t.Errorf("the engine of %s holds %v", name, e.Loaded())
		}
	}
	waitFor(t, 10*time.Second, "the EndpointSlice listing the 3 pods", func() bool {
		return slices.Equal(sliceAddresses(t, key), podAddresses(t, ns, "r-0", "r-1", "r-2"))
	})
}

// TestTwoAdaptersShareBasePods: two adapters selecting the same pods are each loaded on all of
// them, each behind its own Service and EndpointSlice; deleting one unloads only it.
func TestTwoAdaptersShareBasePods(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	engines := modelPods(t, ns, "s", "s-0", "s-1")
	a, b := newAdapter(ns, "lora-a", "s"), newAdapter(ns, "lora-b", "s")
	for _, x := range []*v1alpha1.ModelAdapter{a, b} {
		if err := k8s.Create(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range []*v1alpha1.ModelAdapter{a, b} {
		waitAdapter(t, client.ObjectKeyFromObject(x), 30*time.Second, x.Name+" Running on both pods", running(2))
		if got := sliceAddresses(t, client.ObjectKeyFromObject(x)); !slices.Equal(got, podAddresses(t, ns, "s-0", "s-1")) {
			t.Errorf("%s's EndpointSlice lists %v, want both pods", x.Name, got)
		}
	}
	for name, e := range engines {
		if got := joined(e.Loaded()); got != "lora-a,lora-b" {
			t.Errorf("the engine of %s holds %q, want both adapters", name, got)
		}
	}
	if err := k8s.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "lora-a unloaded from both engines", func() bool {
		for _, e := range engines {
			if joined(e.Loaded()) != "lora-b" {
				return false
			}
		}
		return true
	})
	got := waitAdapter(t, client.ObjectKeyFromObject(b), 10*time.Second, "lora-b still Running on both pods", running(2))
	if n := engines["s-0"].Unloads(); n != 1 {
		t.Errorf("the engine of s-0 got %d unloads, want 1 (lora-a's)", n)
	}
	if fmt.Sprint(got.Status.Instances) != "[s-0 s-1]" {
		t.Errorf("lora-b instances %v", got.Status.Instances)
	}
}
