package adapter

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

func adapters(names ...string) []engine.Adapter {
	out := make([]engine.Adapter, len(names))
	for i, n := range names {
		out[i] = engine.Adapter{Name: n, Path: "org/" + n}
	}
	return out
}

func TestInventoryPodsListing(t *testing.T) {
	inv := NewInventory(nil, nil, time.Minute, 1, clock.RealClock{}, inventoryHooks{})
	pod := func(ns, name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)}}
	}
	inv.record(pod("a", "p0"), adapters("lora", "other"))
	inv.record(pod("a", "p1"), adapters("other"))
	inv.record(pod("a", "p2"), adapters("lora"))
	inv.record(pod("b", "p3"), adapters("lora"))
	inv.forgetAdapter(pod("a", "p2"), "lora")
	// p4 holds a lora of its own (the engine's --lora-modules), from another path.
	inv.record(pod("a", "p4"), []engine.Adapter{{Name: "lora", Path: "/models/lora"}})
	// p5 holds v1 of lora, which the status records for it, and p6 a lora whose path this
	// process loaded and verified (what the runtime sidecar lists is not the artifact).
	inv.record(pod("a", "p5"), []engine.Adapter{{Name: "lora", Path: "org/lora-v1"}})
	inv.record(pod("a", "p6"), []engine.Adapter{{Name: "lora", Path: "/var/lora/download"}})
	inv.noteArtifact(pod("a", "p6"), adapterNamed("a", "lora"), "s3://bucket/lora")

	tests := map[string]struct {
		ns, adapter string
		want        []string
	}{
		"listed in one namespace only, not another's from elsewhere": {"a", "lora", []string{"p0", "p5", "p6"}},
		"other namespace":         {"b", "lora", []string{"p3"}},
		"adapter on several pods": {"a", "other", []string{"p0", "p1"}},
		"unknown adapter":         {"a", "none", nil},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got := inv.PodsListing(adapterNamed(tt.ns, tt.adapter))
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("PodsListing(%s/%s) = %v, want %v", tt.ns, tt.adapter, got, tt.want)
			}
		})
	}
}

// adapterNamed is an adapter of the artifact org/<name>, whose status records org/<name>-v1 on p5.
func adapterNamed(ns, name string) *v1alpha1.ModelAdapter {
	return &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec:       v1alpha1.ModelAdapterSpec{ArtifactURL: "huggingface://org/" + name},
		Status:     v1alpha1.ModelAdapterStatus{InstanceArtifacts: []v1alpha1.InstanceArtifact{{Pod: "p5", ArtifactURL: "huggingface://org/" + name + "-v1"}}},
	}
}

// TestPollReadsEachAPIKeyOnce: a poll of 6 pods recorded by 3 adapters that share one
// credentials Secret reads the key once, not once per pod.
func TestPollReadsEachAPIKeyOnce(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var objs []client.Object
	var names []string
	for i := range 6 {
		name := fmt.Sprintf("p%d", i)
		names = append(names, name)
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)},
			Status: corev1.PodStatus{PodIP: fmt.Sprintf("127.0.40.%d", i+1),
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}
	for i := range 3 {
		objs = append(objs, &v1alpha1.ModelAdapter{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("a%d", i)},
			Spec:       v1alpha1.ModelAdapterSpec{CredentialsSecretRef: &corev1.LocalObjectReference{Name: "creds"}},
			Status:     v1alpha1.ModelAdapterStatus{Instances: names},
		})
	}
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	f := newFakeEngine()
	var reads atomic.Int32
	hooks := unboundedHooks()
	hooks.apiKey = func(context.Context, *v1alpha1.ModelAdapter) (string, error) {
		reads.Add(1)
		return "key", nil
	}
	inv := NewInventory(f, reader, time.Minute, 4, clock.RealClock{}, hooks)
	if err := inv.poll(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := f.count(&f.lists); got != 6 {
		t.Errorf("%d listings, want one per pod (6)", got)
	}
	if got := reads.Load(); got != 1 {
		t.Errorf("the API key was read %d times in one poll of 6 pods, want once", got)
	}
	if got := f.listsByKey["key"]; got != 6 {
		t.Errorf("%d listings with the API key, want 6", got)
	}
}

// TestPollListsPodDespiteOneMissingSecret: a pod recorded by two adapters, the first of which
// names a Secret that does not exist, is listed with the other's key. (Before: the first
// recording adapter's key was the only one tried, and the pod was not listed at all.)
func TestPollListsPodDespiteOneMissingSecret(t *testing.T) {
	// "gone": the other adapter's Secret is missing; "none": the other adapter has no key at
	// all (an empty key must not be taken for the pod's key: the engine needs one).
	for _, other := range []string{"gone", "none"} {
		t.Run(other, func(t *testing.T) {
			scheme := runtime.NewScheme()
			if err := clientgoscheme.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			if err := v1alpha1.AddToScheme(scheme); err != nil {
				t.Fatal(err)
			}
			objs := []client.Object{&corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p0", UID: "p0"},
				Status: corev1.PodStatus{PodIP: "127.0.40.1",
					Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
			}}
			for i, secret := range []string{other, "creds"} {
				objs = append(objs, &v1alpha1.ModelAdapter{
					ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("a%d-%s", i, secret)},
					Spec:       v1alpha1.ModelAdapterSpec{CredentialsSecretRef: &corev1.LocalObjectReference{Name: secret}},
					Status:     v1alpha1.ModelAdapterStatus{Instances: []string{"p0"}},
				})
			}
			reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
			f := newFakeEngine()
			hooks := unboundedHooks()
			hooks.apiKey = func(_ context.Context, a *v1alpha1.ModelAdapter) (string, error) {
				switch a.Spec.CredentialsSecretRef.Name {
				case "gone":
					return "", secretMissingError{"gone"}
				case "none":
					return "", nil
				}
				return "key", nil
			}
			inv := NewInventory(f, reader, time.Minute, 4, clock.RealClock{}, hooks)
			if err := inv.poll(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := f.listsByKey["key"]; got != 1 {
				t.Errorf("%d listings of p0 with the readable key, want 1 (listings by key: %v)", got, f.listsByKey)
			}
		})
	}
}
