//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/testenv"
)

// The user-visible checks of AIBrix's newest ModelAdapter e2e suite
// (test/e2e/controller/modeladapter/model_adapter_test.go; docs/compatibility.md lists each
// of its tests and what stands for it here), written from the behaviour. Its inference
// through AIBrix's Envoy gateway cannot run here: what that gateway reads is checked instead,
// the adapter's status (phase, conditions, instances, readyReplicas) and its Service and
// EndpointSlice, and on the local cluster the engines themselves.

// aibrixStyleAdapter is a ModelAdapter as AIBrix's suite writes it: labelled with its own name
// and the engine port, for a base model, selecting that model's adapter-enabled pods, with the
// engine key in additionalConfig.
func aibrixStyleAdapter(ns, name, model string, replicas *int32) *v1alpha1.ModelAdapter {
	return &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
			v1alpha1.ModelNameLabel: name, v1alpha1.ModelPortLabel: "8000",
		}},
		Spec: v1alpha1.ModelAdapterSpec{
			BaseModel: ptr.To(model),
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
				v1alpha1.ModelNameLabel: model, v1alpha1.AdapterEnabledLabel: "true",
			}},
			ArtifactURL:      "huggingface://yard1/llama-2-7b-sql-lora-test",
			AdditionalConfig: map[string]string{"api-key": "test-key-1234567890"},
			Replicas:         replicas,
		},
	}
}

// adapterRunning waits until the adapter is Running on n distinct Ready pods of the model (on
// the local cluster: loaded in each of their engines) and returns it.
func adapterRunning(t *testing.T, timeout time.Duration, ns, name, model string, n int) *v1alpha1.ModelAdapter {
	t.Helper()
	var got *v1alpha1.ModelAdapter
	waitFor(t, timeout, fmt.Sprintf("adapter %s Running on %d distinct Ready pods", name, n), func() (bool, string) {
		var err error
		if got, err = adapterStatus(ns, name); err != nil {
			return false, err.Error()
		}
		ready := readyPods(t, ns, model)
		var on []corev1.Pod
		for _, p := range ready {
			if slices.Contains(got.Status.Instances, p.Name) {
				on = append(on, p)
			}
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
		if got.Status.Phase != v1alpha1.ModelAdapterRunning || len(got.Status.Instances) != n || len(on) != n ||
			got.Status.ReadyReplicas != int32(n) || c == nil || c.Status != metav1.ConditionTrue {
			return false, fmt.Sprintf("phase %s, instances %v (%d of them Ready pods of %s), readyReplicas %d, Ready %+v",
				got.Status.Phase, got.Status.Instances, len(on), model, got.Status.ReadyReplicas, c)
		}
		return adapterOn(t, ns, on, name)
	})
	return got
}

// deleteAdapter deletes the adapter and waits until it is gone (its finalizer released).
func deleteAdapter(ctx context.Context, t *testing.T, ns, name string) {
	t.Helper()
	if err := k8s.Delete(ctx, &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "adapter "+name+" gone", func() (bool, string) {
		_, err := adapterStatus(ns, name)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// adapterWatch records every version of one ModelAdapter the API server sends after it
// starts: a state that lasts less than a poll interval is still seen.
type adapterWatch struct {
	mu    sync.Mutex
	start time.Time
	seen  []observed
}

type observed struct {
	at time.Duration
	a  *v1alpha1.ModelAdapter
}

func watchAdapter(ctx context.Context, t *testing.T, ns, name string) *adapterWatch {
	t.Helper()
	w, err := k8s.Watch(ctx, &v1alpha1.ModelAdapterList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": name})
	if err != nil {
		t.Fatalf("watching adapter %s: %v", name, err)
	}
	aw := &adapterWatch{start: time.Now()}
	t.Cleanup(w.Stop)
	go func() {
		for ev := range w.ResultChan() {
			if a, ok := ev.Object.(*v1alpha1.ModelAdapter); ok {
				aw.mu.Lock()
				aw.seen = append(aw.seen, observed{time.Since(aw.start), a})
				aw.mu.Unlock()
			}
		}
	}()
	return aw
}

// first returns when a version satisfying cond was first seen, and whether one was.
func (aw *adapterWatch) first(cond func(*v1alpha1.ModelAdapter) bool) (time.Duration, *v1alpha1.ModelAdapter, bool) {
	aw.mu.Lock()
	defer aw.mu.Unlock()
	for _, o := range aw.seen {
		if cond(o.a) {
			return o.at, o.a, true
		}
	}
	return 0, nil, false
}

func readyFalseWithoutReplicas(a *v1alpha1.ModelAdapter) bool {
	c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReady)
	return a.Status.ReadyReplicas == 0 && len(a.Status.Instances) == 0 && c != nil && c.Status == metav1.ConditionFalse
}

func scaleModel(ctx context.Context, t *testing.T, ns, model string, n int32) {
	t.Helper()
	dep := &appsv1.Deployment{}
	if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: model}, dep); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(dep.DeepCopy())
	dep.Spec.Replicas = ptr.To(n)
	if err := k8s.Patch(ctx, dep, patch); err != nil {
		t.Fatal(err)
	}
}

// TestAIBrixModelAdapterSuite: AIBrix's ModelAdapter suite, on one model of 3 pods as there:
// an adapter on every pod leaves a deleted pod for its replacement; when every pod goes it is
// Ready=False with readyReplicas 0 within 60 s and recovers; created while no pod is Ready it
// says NoReadyPods and converges; its Service and EndpointSlice are named after it, on port
// 8000, with exactly the scheduled pod; replicas 1 → unset grows to every pod; two adapters
// share the pods; deletion unloads and garbage-collects the Service and EndpointSlice within
// 30 s.
func TestAIBrixModelAdapterSuite(t *testing.T) {
	ctx := ctxFor(t, 12*time.Minute)
	ns := namespace(t)
	model := "e2e-llama-" + suffix()
	startModel(ctx, t, 90*time.Second, ns, model, 3)

	t.Run("on every pod, moved off a deleted pod", func(t *testing.T) {
		name := "text2sql-lora-" + suffix()
		if err := k8s.Create(ctx, aibrixStyleAdapter(ns, name, model, nil)); err != nil {
			t.Fatal(err)
		}
		defer deleteAdapter(ctx, t, ns, name)
		got := adapterRunning(t, 120*time.Second, ns, name, model, 3)
		old := got.Status.Instances[0]
		if err := k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: old}}); err != nil {
			t.Fatal(err)
		}
		waitModelPods(t, 120*time.Second, ns, model, 3)
		got = adapterRunning(t, 120*time.Second, ns, name, model, 3)
		if slices.Contains(got.Status.Instances, old) {
			t.Errorf("instances %v still name the deleted pod %s", got.Status.Instances, old)
		}
	})

	t.Run("every pod removed, then back", func(t *testing.T) {
		name := "all-pods-removed-" + suffix()
		if err := k8s.Create(ctx, aibrixStyleAdapter(ns, name, model, nil)); err != nil {
			t.Fatal(err)
		}
		defer deleteAdapter(ctx, t, ns, name)
		adapterRunning(t, 120*time.Second, ns, name, model, 3)
		aw := watchAdapter(ctx, t, ns, name)
		if err := k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.MatchingLabels{v1alpha1.ModelNameLabel: model}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "Ready=False with readyReplicas 0 after every pod went", func() (bool, string) {
			_, _, ok := aw.first(readyFalseWithoutReplicas)
			return ok, ""
		})
		at, a, _ := aw.first(readyFalseWithoutReplicas)
		t.Logf("Ready=False (%s) with readyReplicas 0 %s after the pods were deleted",
			meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReady).Reason, at.Round(10*time.Millisecond))
		waitModelPods(t, 120*time.Second, ns, model, 3)
		adapterRunning(t, 120*time.Second, ns, name, model, 3)
	})

	t.Run("created while no pod is Ready", func(t *testing.T) {
		scaleModel(ctx, t, ns, model, 0)
		// Back to 3 pods whatever happens here: the next subtest needs them.
		defer func() {
			scaleModel(ctx, t, ns, model, 3)
			waitModelPods(t, 120*time.Second, ns, model, 3)
		}()
		waitFor(t, 120*time.Second, "no pod of the model left", func() (bool, string) {
			var pods corev1.PodList
			if err := k8s.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{v1alpha1.ModelNameLabel: model}); err != nil {
				return false, err.Error()
			}
			return len(pods.Items) == 0, fmt.Sprintf("%d pods", len(pods.Items))
		})
		name := "no-ready-pods-" + suffix()
		if err := k8s.Create(ctx, aibrixStyleAdapter(ns, name, model, ptr.To[int32](1))); err != nil {
			t.Fatal(err)
		}
		defer deleteAdapter(ctx, t, ns, name)
		waitFor(t, 30*time.Second, "Scheduled=False with reason NoReadyPods", func() (bool, string) {
			a, err := adapterStatus(ns, name)
			if err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionScheduled)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "NoReadyPods" && c.ObservedGeneration == a.Generation, fmt.Sprintf("Scheduled %+v", c)
		})
		scaleModel(ctx, t, ns, model, 3)
		adapterRunning(t, 120*time.Second, ns, name, model, 1)
	})

	t.Run("Service and EndpointSlice, replicas 1 then unset, shared, deleted", func(t *testing.T) {
		one := "service-endpointslice-" + suffix()
		if err := k8s.Create(ctx, aibrixStyleAdapter(ns, one, model, ptr.To[int32](1))); err != nil {
			t.Fatal(err)
		}
		defer deleteAdapter(ctx, t, ns, one)
		got := adapterRunning(t, 120*time.Second, ns, one, model, 1)
		checkPublished(ctx, t, ns, one, got.Status.Instances)

		if err := k8s.Patch(ctx, got, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":null}}`))); err != nil {
			t.Fatal(err)
		}
		got = adapterRunning(t, 120*time.Second, ns, one, model, 3)
		checkPublished(ctx, t, ns, one, got.Status.Instances)

		other := "concurrent-lora-b-" + suffix()
		if err := k8s.Create(ctx, aibrixStyleAdapter(ns, other, model, nil)); err != nil {
			t.Fatal(err)
		}
		defer deleteAdapter(ctx, t, ns, other)
		adapterRunning(t, 120*time.Second, ns, other, model, 3)
		adapterRunning(t, 10*time.Second, ns, one, model, 3)

		deleteAdapter(ctx, t, ns, one)
		waitFor(t, 30*time.Second, "the Service and EndpointSlice of "+one+" garbage-collected", func() (bool, string) {
			svcErr := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: one}, &corev1.Service{})
			epsErr := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: one}, &discoveryv1.EndpointSlice{})
			return apierrors.IsNotFound(svcErr) && apierrors.IsNotFound(epsErr), fmt.Sprintf("Service: %v, EndpointSlice: %v", svcErr, epsErr)
		})
		if haveEngineAdmin() {
			es := engines(t)
			for _, p := range readyPods(t, ns, model) {
				if loaded := es[ns+"/"+p.Name].Loaded; slices.Contains(loaded, one) || !slices.Contains(loaded, other) {
					t.Errorf("the engine of %s holds %v after %s was deleted; want %s only", p.Name, loaded, one, other)
				}
			}
		}
		adapterRunning(t, 10*time.Second, ns, other, model, 3)
	})
}

// checkPublished checks the adapter's Service and EndpointSlice as AIBrix's gateway reaches
// the adapter through them: named after the adapter, port 8000, the Service labelled with the
// adapter's name as AIBrix labels it, the slice listing exactly the instances' pod addresses
// (as the test clusters store them: testenv.TestAddress).
func checkPublished(ctx context.Context, t *testing.T, ns, name string, instances []string) {
	t.Helper()
	waitFor(t, 30*time.Second, "Service and EndpointSlice "+name+" with exactly the instances "+fmt.Sprint(instances), func() (bool, string) {
		svc := &corev1.Service{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, svc); err != nil {
			return false, "Service: " + err.Error()
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8000 || svc.Labels[v1alpha1.AdapterNameLabel] != name {
			return false, fmt.Sprintf("Service ports %+v, labels %v", svc.Spec.Ports, svc.Labels)
		}
		eps := &discoveryv1.EndpointSlice{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, eps); err != nil {
			return false, "EndpointSlice: " + err.Error()
		}
		var want, have []string
		for _, pod := range instances {
			p := &corev1.Pod{}
			if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: pod}, p); err != nil {
				return false, err.Error()
			}
			want = append(want, testenv.TestAddress(p.Status.PodIP))
		}
		for _, e := range eps.Endpoints {
			have = append(have, e.Addresses...)
		}
		slices.Sort(want)
		slices.Sort(have)
		if !slices.Equal(have, want) || len(eps.Ports) != 1 || ptr.Deref(eps.Ports[0].Port, 0) != 8000 {
			return false, fmt.Sprintf("EndpointSlice addresses %v (want %v), ports %+v", have, want, eps.Ports)
		}
		return true, ""
	})
}
