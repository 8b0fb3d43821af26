package adapter_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/fakeengine"
	"github.com/loraplane/loraplane/test/testenv"
)

// publishedAt records, at every unload an engine receives, whether its pod was still
// published: in the adapter's EndpointSlice or in its status.instances, as the API server has
// them at that moment.
type publishedAt struct {
	mu       sync.Mutex
	unloads  int
	violated []string
}

func (w *publishedAt) hook(t *testing.T, key client.ObjectKey, pod string) func(string) {
	return func(string) {
		eps := &discoveryv1.EndpointSlice{}
		a := &v1alpha1.ModelAdapter{}
		var in []string
		if err := k8s.Get(t.Context(), key, eps); err == nil {
			for _, e := range eps.Endpoints {
				if e.TargetRef != nil && e.TargetRef.Name == pod {
					in = append(in, "EndpointSlice")
				}
			}
		}
		if err := k8s.Get(t.Context(), key, a); err == nil && slices.Contains(a.Status.Instances, pod) {
			in = append(in, "status.instances")
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.unloads++
		if len(in) > 0 {
			w.violated = append(w.violated, fmt.Sprintf("unload on %s while it was in %v", pod, in))
		}
	}
}

func (w *publishedAt) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.unloads == 0 {
		t.Fatal("no unload reached the engine")
	}
	for _, v := range w.violated {
		t.Error(v)
	}
}

// TestRemovalIsMakeBeforeBreak: a pod that should lose the adapter (scale-down, stops
// matching) leaves the EndpointSlice and status.instances before the unload reaches its
// engine. (Before: the unload was sent in the pass that still had it in both, so requests
// routed by either reached a pod without the adapter.)
func TestRemovalIsMakeBeforeBreak(t *testing.T) {
	needEnv(t)
	for name, remove := range map[string]func(t *testing.T, a *v1alpha1.ModelAdapter, pod *corev1.Pod){
		"scale-down": func(t *testing.T, a *v1alpha1.ModelAdapter, _ *corev1.Pod) {
			patch := client.MergeFrom(a.DeepCopy())
			a.Spec.Replicas = ptr.To[int32](1)
			if err := k8s.Patch(t.Context(), a, patch); err != nil {
				t.Fatal(err)
			}
		},
		"stops matching": func(t *testing.T, _ *v1alpha1.ModelAdapter, pod *corev1.Pod) {
			patch := client.MergeFrom(pod.DeepCopy())
			pod.Labels[v1alpha1.AdapterEnabledLabel] = "false"
			if err := k8s.Patch(t.Context(), pod, patch); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			ns := newNamespace(t)
			a := newAdapter(ns, "mbb", "mbb", func(a *v1alpha1.ModelAdapter) {
				a.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: modelLabels("mbb")}
				a.Spec.Replicas = ptr.To[int32](2)
			})
			key := client.ObjectKeyFromObject(a)
			var w publishedAt
			var engines []*fakeengine.Engine
			var pods []*corev1.Pod
			for _, name := range []string{"mbb-0", "mbb-1"} {
				ip := newIP()
				engines = append(engines, engine(t, ip, 8000, fakeengine.Options{OnUnload: w.hook(t, key, name)}))
				pods = append(pods, modelPod(t, ns, name, ip, modelLabels("mbb")))
			}
			if err := k8s.Create(t.Context(), a); err != nil {
				t.Fatal(err)
			}
			waitAdapter(t, key, 30*time.Second, "Running on 2", running(2))
			remove(t, a, pods[1])
			// Which pod a scale-down keeps is the policy's: wait for either to be unloaded.
			waitFor(t, 30*time.Second, "one engine to be unloaded", func() bool {
				return len(engines[0].Loaded()) == 0 || len(engines[1].Loaded()) == 0
			})
			waitAdapter(t, key, 30*time.Second, "Running on 1", running(1))
			w.check(t)
		})
	}
}

// TestReadinessFlapKeepsTheAdapter: a pod not Ready for a second keeps its adapter (no
// unload, no reload), and is out of the EndpointSlice while not Ready. (Before: the adapter
// was unloaded from it at once and loaded again when it was Ready.)
func TestReadinessFlapKeepsTheAdapter(t *testing.T) {
	needEnv(t)
	ns := newNamespace(t)
	ip0, ip1 := newIP(), newIP()
	e0 := engine(t, ip0, 8000, fakeengine.Options{})
	e1 := engine(t, ip1, 8000, fakeengine.Options{})
	modelPod(t, ns, "flap-0", ip0, modelLabels("flap"))
	p1 := modelPod(t, ns, "flap-1", ip1, modelLabels("flap"))
	a := newAdapter(ns, "flap", "flap")
	if err := k8s.Create(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(a)
	waitAdapter(t, key, 30*time.Second, "Running on 2", running(2))
	loads := e1.Loads()

	if err := testenv.SetPodReady(t.Context(), k8s, p1, false); err != nil {
		t.Fatal(err)
	}
	waitAdapter(t, key, 30*time.Second, "flap-1 out of status.instances while not Ready", func(a *v1alpha1.ModelAdapter) bool {
		return slices.Equal(a.Status.Instances, []string{"flap-0"})
	})
	time.Sleep(time.Second) // the flap
	if err := testenv.SetPodReady(t.Context(), k8s, p1, true); err != nil {
		t.Fatal(err)
	}
	waitAdapter(t, key, 30*time.Second, "Running on 2 again", running(2))
	if n := e1.Unloads(); n != 0 {
		t.Errorf("flap-1's engine got %d unloads, want 0", n)
	}
	if n := e1.Loads() - loads; n != 0 {
		t.Errorf("flap-1's engine got %d more loads, want 0", n)
	}
	if joined(e0.Loaded()) != "flap" || joined(e1.Loaded()) != "flap" {
		t.Errorf("engines hold %v and %v", e0.Loaded(), e1.Loaded())
	}
}
