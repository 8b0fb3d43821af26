package adapter

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/modelplane/modelplane/adapter-controller/internal/engine"
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
	inv.record(pod("a", "p0"), engine.Endpoint{}, adapters("lora", "other"))
	inv.record(pod("a", "p1"), engine.Endpoint{}, adapters("other"))
	inv.record(pod("a", "p2"), engine.Endpoint{}, adapters("lora"))
	inv.record(pod("b", "p3"), engine.Endpoint{}, adapters("lora"))
	inv.forgetAdapter(pod("a", "p2"), "lora")

	tests := map[string]struct {
		ns, adapter string
		want        []string
	}{
		"listed in one namespace only": {"a", "lora", []string{"p0"}},
		"other namespace":              {"b", "lora", []string{"p3"}},
		"adapter on several pods":      {"a", "other", []string{"p0", "p1"}},
		"unknown adapter":              {"a", "none", nil},
		"not after an unload":          {"a", "lora", []string{"p0"}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got := inv.PodsListing(tt.ns, tt.adapter)
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("PodsListing(%q, %q) = %v, want %v", tt.ns, tt.adapter, got, tt.want)
			}
		})
	}
}
