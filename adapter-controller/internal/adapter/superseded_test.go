package adapter

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestSupersededVersions(t *testing.T) {
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	tests := map[string]struct {
		old, new string
		stale    map[string]bool
	}{
		"a write that made a new version": {old: "5", new: "6", stale: map[string]bool{"5": true, "6": false}},
		"a write that changed nothing":    {old: "5", new: "5", stale: map[string]bool{"5": false}},
		"no version read":                 {old: "", new: "6", stale: map[string]bool{"": false, "6": false}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := newSupersededVersions()
			s.wrote(key, tc.old, tc.new)
			for v, want := range tc.stale {
				if got := s.stale(key, v); got != want {
					t.Errorf("stale(%q) = %v, want %v", v, got, want)
				}
			}
		})
	}
}
