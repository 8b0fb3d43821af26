package adapter_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/fakeengine"
)

// TestLateLoadIsUndone: a load that ends without an answer (the engine takes longer than the
// load timeout) and lands after the adapter moved away is found and unloaded. (Before: a
// listing taken while the engine was still loading dropped the pod from the adapter's record,
// and the load that landed a second later stayed there for good.)
func TestLateLoadIsUndone(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	ip0, ip1 := newIP(), newIP()
	// Lands 3 s after the request: after the suite's 2 s load timeout, within its horizon.
	slow := engine(t, ip0, 8000, fakeengine.Options{LoadDelay: 3 * time.Second})
	fast := engine(t, ip1, 8000, fakeengine.Options{})
	p0 := modelPod(t, ns, "late-0", ip0, modelLabels("late"))
	a := newAdapter(ns, "late", "late", func(a *v1alpha1.ModelAdapter) {
		a.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: modelLabels("late")}
		a.Spec.Replicas = ptr.To[int32](1)
	})
	if err := k8s.Create(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the load request on late-0", func() bool { return slow.Loads() >= 1 })
	requested := time.Now()
	modelPod(t, ns, "late-1", ip1, modelLabels("late"))
	patch := client.MergeFrom(p0.DeepCopy())
	p0.Labels[v1alpha1.AdapterEnabledLabel] = "false"
	if err := k8s.Patch(t.Context(), p0, patch); err != nil {
		t.Fatal(err)
	}
	waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "Running on late-1", func(a *v1alpha1.ModelAdapter) bool {
		return running(1)(a) && a.Status.Instances[0] == "late-1"
	})
	// Looked at only after the late load has landed (3 s after its request).
	waitFor(t, 30*time.Second, "the late load on late-0 to be undone after it landed", func() bool {
		return time.Since(requested) > 4*time.Second && len(slow.Loaded()) == 0 && joined(fast.Loaded()) == "late"
	})
}
