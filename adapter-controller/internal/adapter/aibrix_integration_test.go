package adapter_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/adapter"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/aibrixfixture"
	"github.com/loraplane/loraplane/test/fakeengine"
	"github.com/loraplane/loraplane/test/testenv"
)

// The tests of the switch-over from AIBrix: ModelAdapters, Services and EndpointSlices as
// AIBrix's model-adapter-controller writes them (package aibrixfixture), engines already
// holding the adapters (loaded at start, as vLLM's --lora-modules, not through the API).

// aibrixLeaseKey is the Lease the test controller reads as AIBrix's (testOptions).
var aibrixLeaseKey = client.ObjectKey{Namespace: "aibrix-lease-test", Name: "aibrix-controller-manager"}

// fromFixture converts a rendered object into out.
func fromFixture(t *testing.T, u *unstructured.Unstructured, err error, out client.Object) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if err := aibrixfixture.To(u, out); err != nil {
		t.Fatal(err)
	}
}

// createAIBrixAdapter creates the adapter and writes its status as AIBrix does (a status
// update after the create), then its Service and EndpointSlice; it returns the adapter.
// Call it while AIBrix's Lease is held (holdAIBrixLease), as AIBrix writes these objects
// while it runs: otherwise the controller may see the adapter before its status and
// schedule it anew (CI saw a take-over test load adapters the engines already held).
func createAIBrixAdapter(t *testing.T, spec aibrixfixture.Adapter, addresses []string) *v1alpha1.ModelAdapter {
	t.Helper()
	ctx := ctxFor(t)
	u, err := aibrixfixture.ModelAdapter(spec)
	a := &v1alpha1.ModelAdapter{}
	fromFixture(t, u, err, a)
	status := *a.Status.DeepCopy()
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	a.Status = status
	for i := range a.Status.Conditions {
		a.Status.Conditions[i].LastTransitionTime = metav1.Now()
	}
	if err := k8s.Status().Update(ctx, a); err != nil {
		t.Fatalf("writing the status as AIBrix does: %v", err)
	}
	objs := aibrixfixture.AdapterObjects{Name: a.Name, Namespace: a.Namespace, BaseModel: spec.BaseModel, UID: string(a.UID), Addresses: addresses}
	svc, slice := &corev1.Service{}, &discoveryv1.EndpointSlice{}
	u, err = aibrixfixture.Service(objs)
	fromFixture(t, u, err, svc)
	u, err = aibrixfixture.EndpointSlice(objs)
	fromFixture(t, u, err, slice)
	for _, o := range []client.Object{svc, slice} {
		if err := k8s.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %T: %v", o, err)
		}
	}
	return a
}

// holdingEngines starts one Ready pod per name with a fake engine already holding adapter
// (from path), and returns the engines by pod.
func holdingEngines(t *testing.T, ns, model, adapterName, path string, names ...string) map[string]*fakeengine.Engine {
	t.Helper()
	out := map[string]*fakeengine.Engine{}
	for _, name := range names {
		ip := newIP()
		opts := fakeengine.Options{BaseModel: model}
		if adapterName != "" {
			opts.Preload = map[string]string{adapterName: path}
		}
		out[name] = engine(t, ip, 8000, opts)
		modelPod(t, ns, name, ip, modelLabels(model))
	}
	return out
}

// addressesOf returns the pod IPs the engines listen on.
func addressesOf(es ...*fakeengine.Engine) []string {
	var out []string
	for _, e := range es {
		host, _, _ := strings.Cut(e.Addr(), ":")
		out = append(out, host)
	}
	return out
}

func calls(es map[string]*fakeengine.Engine) string {
	var out []string
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range es {
			if !yield(n) {
				return
			}
		}
	}) {
		out = append(out, fmt.Sprintf("%s: %d loads, %d unloads, holds %v", name, es[name].Loads(), es[name].Unloads(), es[name].Loaded()))
	}
	return strings.Join(out, "; ")
}

// TestAIBrixAdapterTakenOver: an adapter AIBrix loaded on two pods (its status listing them
// out of order, its per-pod retry annotations present) is taken over with no engine load or
// unload: Running on the same pods, our finalizer beside AIBrix's, the Service and
// EndpointSlice AIBrix made adopted in place. Deleting it unloads it from both pods and
// releases both finalizers.
func TestAIBrixAdapterTakenOver(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	es := holdingEngines(t, ns, "qwen", "qwen-lora", "org/qwen-lora", "qwen-a", "qwen-b")
	released := metricValue(t, "loraplane_aibrix_takeovers_total", map[string]string{"object": "finalizer"})
	stopAIBrix := holdAIBrixLease(t)
	a := createAIBrixAdapter(t, aibrixfixture.Adapter{Name: "qwen-lora", Namespace: ns, BaseModel: "qwen",
		ArtifactURL: "huggingface://org/qwen-lora", Instances: []string{"qwen-b", "qwen-a"}, Candidates: 2,
		RetryPods: []string{"qwen-a", "qwen-gone"}}, addressesOf(es["qwen-b"], es["qwen-a"]))
	stopAIBrix()
	key := client.ObjectKeyFromObject(a)

	got := waitAdapter(t, key, 30*time.Second, "Running on both pods with our finalizer", func(a *v1alpha1.ModelAdapter) bool {
		return running(2)(a) && slices.Contains(a.Finalizers, adapter.Finalizer) && a.Status.Conditions[0].ObservedGeneration == a.Generation
	})
	if !slices.Contains(got.Finalizers, v1alpha1.AIBrixFinalizer) {
		t.Errorf("AIBrix's finalizer dropped from a live adapter: %v", got.Finalizers)
	}
	if joined(got.Status.Instances) != "qwen-a,qwen-b" {
		t.Errorf("instances %v", got.Status.Instances)
	}
	for name, e := range es {
		if e.Loads() != 0 || e.Unloads() != 0 {
			t.Errorf("engine of %s: %d loads, %d unloads; the adapter it held was not left in place", name, e.Loads(), e.Unloads())
		}
	}
	svc, slice := &corev1.Service{}, &discoveryv1.EndpointSlice{}
	testenv.Eventually(t, 20*time.Second, 100*time.Millisecond, "the Service and EndpointSlice adopted", func() (bool, string) {
		if err := k8s.Get(context.Background(), key, svc); err != nil {
			return false, err.Error()
		}
		if err := k8s.Get(context.Background(), key, slice); err != nil {
			return false, err.Error()
		}
		return svc.Labels[adapter.ManagedByLabel] == adapter.ManagedByValue && slice.Labels[adapter.ManagedByLabel] == adapter.ManagedByValue && len(slice.Endpoints) == 2,
			fmt.Sprintf("service labels %v, slice labels %v, %d endpoints", svc.Labels, slice.Labels, len(slice.Endpoints))
	})

	if err := k8s.Delete(ctxFor(t), got); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, "the adapter gone, both finalizers released", func() (bool, string) {
		err := k8s.Get(context.Background(), key, &v1alpha1.ModelAdapter{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	for name, e := range es {
		if len(e.Loaded()) != 0 || e.Unloads() != 1 {
			t.Errorf("engine of %s after the deletion: %d unloads, holds %v", name, e.Unloads(), e.Loaded())
		}
	}
	if n := metricValue(t, "loraplane_aibrix_takeovers_total", map[string]string{"object": "finalizer"}) - released; n != 1 {
		t.Errorf("loraplane_aibrix_takeovers_total{object=finalizer} grew by %v, want 1", n)
	}
}

// holdAIBrixLease plays AIBrix's controller-manager: it holds aibrixLeaseKey and renews it
// every 300 ms until the returned release is called, which clears the holder.
func holdAIBrixLease(t *testing.T) (release func()) {
	t.Helper()
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: aibrixLeaseKey.Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	u, err := aibrixfixture.ControllerManagerLease(aibrixfixture.Lease{Namespace: aibrixLeaseKey.Namespace, Holder: "aibrix-controller-manager-5c7d9-k2x8v_77aa", Renewed: time.Now()})
	lease := &coordinationv1.Lease{}
	fromFixture(t, u, err, lease)
	if err := k8s.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	update := func(f func(*coordinationv1.Lease)) error {
		cur := &coordinationv1.Lease{}
		if err := k8s.Get(ctx, aibrixLeaseKey, cur); err != nil {
			return err
		}
		f(cur)
		return k8s.Update(ctx, cur)
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				_ = update(func(l *coordinationv1.Lease) { l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()} })
			}
		}
	}()
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		close(stop)
		<-stopped
		if err := k8s.Delete(ctx, lease); err != nil {
			t.Errorf("removing the AIBrix Lease: %v", err)
		}
	}
	t.Cleanup(release)
	// The detector reuses a reading for one AIBrixCheckPeriod (its contract): a reading made
	// just before the Lease existed, by another test's reconcile, says "not running" until
	// then. Past that period every reading sees the Lease (CI failed once without this wait:
	// the adapter was acted on while the Lease was held).
	time.Sleep(2 * testOptions().AIBrixCheckPeriod)
	return release
}

// TestAIBrixRunningRefusedThenDeletionCompletes: while AIBrix's controller-manager renews its
// Lease, an adapter AIBrix made is not acted on — not even deleted: a Warning event
// AIBrixRunning says why and no engine is called. Once the Lease is released, the deletion
// completes: the adapter is unloaded from its instance and from the pod of AIBrix's
// scheduled-pods annotation (a load AIBrix sent there), not from the pod its retry
// annotations name, and AIBrix's finalizer — the only one, ours was never added — is
// released.
func TestAIBrixRunningRefusedThenDeletionCompletes(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	release := holdAIBrixLease(t)
	holding := holdingEngines(t, ns, "qwen", "qwen-lora", "org/qwen-lora", "qwen-a", "qwen-b")
	retried := holdingEngines(t, ns, "qwen", "", "", "qwen-c")
	a := createAIBrixAdapter(t, aibrixfixture.Adapter{Name: "qwen-lora", Namespace: ns, BaseModel: "qwen", Replicas: 1,
		ArtifactURL: "huggingface://org/qwen-lora", Instances: []string{"qwen-a"}, Candidates: 3,
		ScheduledPods: []string{"qwen-a", "qwen-b"}, RetryPods: []string{"qwen-c"}}, nil)
	key := client.ObjectKeyFromObject(a)

	e := waitEvent(t, ns, a.Name, adapter.ReasonAIBrixRunning)
	if e.Type != corev1.EventTypeWarning || !strings.Contains(e.Note, aibrixLeaseKey.String()+" is held by") {
		t.Errorf("AIBrixRunning event: %s %q", e.Type, e.Note)
	}
	if v := metricValue(t, "loraplane_aibrix_controller_running", map[string]string{"controller": "adapter-controller"}); v != 1 {
		t.Errorf("loraplane_aibrix_controller_running = %v, want 1", v)
	}
	if err := k8s.Delete(ctxFor(t), a); err != nil {
		t.Fatal(err)
	}
	// The deletion is seen (the adapter's events say it was looked at again) and refused.
	reconciles := testenv.ReconcileCount("modeladapter")
	waitFor(t, 10*time.Second, "a reconcile of the deleted adapter", func() bool { return testenv.ReconcileCount("modeladapter") > reconciles })
	cur := &v1alpha1.ModelAdapter{}
	if err := k8s.Get(context.Background(), key, cur); err != nil || cur.DeletionTimestamp == nil {
		t.Fatalf("the adapter while AIBrix runs: %v, %+v", err, cur.ObjectMeta)
	}
	if slices.Contains(cur.Finalizers, adapter.Finalizer) || cur.Annotations[v1alpha1.ScheduledPodsAnnotation] != "qwen-a,qwen-b" {
		t.Errorf("the adapter was written while AIBrix runs: finalizers %v, annotations %v", cur.Finalizers, cur.Annotations)
	}
	if c := calls(holding) + "; " + calls(retried); strings.Contains(c, "1 unloads") || strings.Contains(c, "1 loads") {
		t.Fatalf("engines called while AIBrix runs: %s", c)
	}

	release()
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, "the adapter gone once AIBrix stopped", func() (bool, string) {
		err := k8s.Get(context.Background(), key, &v1alpha1.ModelAdapter{})
		return apierrors.IsNotFound(err), fmt.Sprintf("%v; engines: %s", err, calls(holding))
	})
	for name, e := range holding {
		if len(e.Loaded()) != 0 {
			t.Errorf("%s still holds %v after the deletion", name, e.Loaded())
		}
	}
	if n := retried["qwen-c"].Unloads() + retried["qwen-c"].Loads(); n != 0 {
		t.Errorf("the pod of the retry annotations got %d load or unload calls: the annotation was misread as a record", n)
	}
	if v := metricValue(t, "loraplane_aibrix_controller_running", map[string]string{"controller": "adapter-controller"}); v != 0 {
		t.Errorf("loraplane_aibrix_controller_running = %v after the release, want 0", v)
	}
}

// waitEvent waits for an event with reason regarding the object named name in ns.
func waitEvent(t *testing.T, ns, name, reason string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	testenv.Eventually(t, 20*time.Second, 100*time.Millisecond, fmt.Sprintf("event %s on %s/%s", reason, ns, name), func() (bool, string) {
		var list eventsv1.EventList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Name == name && e.Reason == reason {
				found = e
				return true, ""
			}
			seen = append(seen, e.Reason+"@"+e.Regarding.Name)
		}
		return false, fmt.Sprint(seen)
	})
	return found
}
