package routes

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
)

func mustMatch(pattern, s string) bool {
	return regexp.MustCompile(pattern).MatchString(s)
}

func wantGrant(name string, services ...string) *gatewayv1beta1.ReferenceGrant {
	var to []gatewayv1beta1.ReferenceGrantTo
	for _, s := range services {
		to = append(to, gatewayv1beta1.ReferenceGrantTo{Group: "", Kind: "Service", Name: ptr.To(gatewayv1.ObjectName(s))})
	}
	return &gatewayv1beta1.ReferenceGrant{
		TypeMeta: metav1.TypeMeta{APIVersion: "gateway.networking.k8s.io/v1beta1", Kind: "ReferenceGrant"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: "team-a",
			Labels: map[string]string{
				"app.kubernetes.io/managed-by":   "loraplane-router-controller",
				"loraplane.io/gateway-namespace": "aibrix-system",
				"loraplane.io/install":           "default",
			},
		},
		Spec: gatewayv1beta1.ReferenceGrantSpec{
			From: []gatewayv1beta1.ReferenceGrantFrom{{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Namespace: "aibrix-system"}},
			To:   to,
		},
	}
}

// TestAssignReferenceGrantsFresh: grants for a namespace that has none yet.
func TestAssignReferenceGrantsFresh(t *testing.T) {
	var seventeen []string
	for i := 16; i >= 0; i-- { // reverse order: output must be sorted anyway
		seventeen = append(seventeen, fmt.Sprintf("svc-%02d", i))
	}
	cases := map[string]struct {
		namespace string
		services  []string
		want      []*gatewayv1beta1.ReferenceGrant
		wantErr   string
	}{
		"sorted and deduplicated": {
			namespace: "team-a", services: []string{"llama", "adapter", "llama"},
			want: []*gatewayv1beta1.ReferenceGrant{wantGrant("loraplane-router-aibrix-system", "adapter", "llama")},
		},
		"gateway namespace needs none": {namespace: "aibrix-system", services: []string{"llama"}},
		"no services needs none":       {namespace: "team-a"},
		"exactly 16": {
			namespace: "team-a", services: seventeen[1:],
			want: []*gatewayv1beta1.ReferenceGrant{wantGrant("loraplane-router-aibrix-system",
				"svc-00", "svc-01", "svc-02", "svc-03", "svc-04", "svc-05", "svc-06", "svc-07",
				"svc-08", "svc-09", "svc-10", "svc-11", "svc-12", "svc-13", "svc-14", "svc-15")},
		},
		"17 services split": {
			namespace: "team-a", services: seventeen,
			want: []*gatewayv1beta1.ReferenceGrant{
				wantGrant("loraplane-router-aibrix-system",
					"svc-00", "svc-01", "svc-02", "svc-03", "svc-04", "svc-05", "svc-06", "svc-07",
					"svc-08", "svc-09", "svc-10", "svc-11", "svc-12", "svc-13", "svc-14", "svc-15"),
				wantGrant("loraplane-router-aibrix-system-2", "svc-16"),
			},
		},
		"invalid service":   {namespace: "team-a", services: []string{"Llama"}, wantErr: `service "Llama" in namespace "team-a" is invalid`},
		"invalid namespace": {namespace: "Team", services: []string{"llama"}, wantErr: `namespace "Team" is invalid`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := AssignReferenceGrants(testConfig(), tc.namespace, tc.services, nil, nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("AssignReferenceGrants: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("AssignReferenceGrants mismatch (-want +got):\n%s", diff)
			}
			for _, g := range got {
				if !IsManaged(g) {
					t.Errorf("grant %s is not marked managed", g.Name)
				}
				if n := len(g.Spec.To); n < 1 || n > MaxReferenceGrantTo {
					t.Errorf("grant %s has %d to entries, want 1-%d", g.Name, n, MaxReferenceGrantTo)
				}
			}
		})
	}
}

// svcs returns the names prefix-00 … prefix-(n-1), every step'th.
func svcs(prefix string, n, step int) []string {
	var out []string
	for i := 0; i < n; i += step {
		out = append(out, fmt.Sprintf("%s-%02d", prefix, i))
	}
	return out
}

// grantWrites counts the writes that turn current into got: creates, updates (the spec
// differs) and deletes.
func grantWrites(current, got []*gatewayv1beta1.ReferenceGrant) (creates, updates, deletes int) {
	byName := map[string]*gatewayv1beta1.ReferenceGrant{}
	for _, g := range current {
		byName[g.Name] = g
	}
	kept := map[string]bool{}
	for _, g := range got {
		kept[g.Name] = true
		switch cur := byName[g.Name]; {
		case cur == nil:
			creates++
		case !cmp.Equal(cur.Spec, g.Spec):
			updates++
		}
	}
	for _, g := range current {
		if !kept[g.Name] {
			deletes++
		}
	}
	return creates, updates, deletes
}

func TestAssignReferenceGrants(t *testing.T) {
	const (
		first  = "loraplane-router-aibrix-system"
		second = "loraplane-router-aibrix-system-2"
		third  = "loraplane-router-aibrix-system-3"
	)
	evens := svcs("svc", 32, 2) // 16 Services: a full grant
	type writes struct{ creates, updates, deletes int }
	cases := map[string]struct {
		services []string
		current  []*gatewayv1beta1.ReferenceGrant
		reserved []string
		want     []*gatewayv1beta1.ReferenceGrant
		writes   writes
	}{
		"no grants yet: sorted groups of 16": {
			services: svcs("svc", 17, 1),
			want:     []*gatewayv1beta1.ReferenceGrant{wantGrant(first, svcs("svc", 16, 1)...), wantGrant(second, "svc-16")},
			writes:   writes{creates: 2},
		},
		"up to date: nothing to write": {
			services: []string{"b", "a"},
			current:  []*gatewayv1beta1.ReferenceGrant{wantGrant(first, "a", "b")},
			want:     []*gatewayv1beta1.ReferenceGrant{wantGrant(first, "a", "b")},
		},
		"existing assignments kept, not re-sorted across grants": {
			services: []string{"a", "b", "c", "d"},
			current:  []*gatewayv1beta1.ReferenceGrant{wantGrant(first, "d"), wantGrant(second, "a")},
			want:     []*gatewayv1beta1.ReferenceGrant{wantGrant(first, "b", "c", "d"), wantGrant(second, "a")},
			writes:   writes{updates: 1},
		},
		"insert in the middle: only the grant with room written": {
			services: append(slices.Clone(evens), "svc-01", "svc-zz"),
			current:  []*gatewayv1beta1.ReferenceGrant{wantGrant(first, evens...), wantGrant(second, "svc-zz")},
			want:     []*gatewayv1beta1.ReferenceGrant{wantGrant(first, evens...), wantGrant(second, "svc-01", "svc-zz")},
			writes:   writes{updates: 1},
		},
		"removal: only its grant written": {
			services: append(slices.Clone(evens[1:]), "svc-zz"),
			current:  []*gatewayv1beta1.ReferenceGrant{wantGrant(first, evens...), wantGrant(second, "svc-zz")},
			want:     []*gatewayv1beta1.ReferenceGrant{wantGrant(first, evens[1:]...), wantGrant(second, "svc-zz")},
			writes:   writes{updates: 1},
		},
		"removal frees room for an addition: one grant written": {
			services: append(slices.Clone(evens[1:]), "svc-zz", "svc-01"),
			current:  []*gatewayv1beta1.ReferenceGrant{wantGrant(first, evens...), wantGrant(second, "svc-zz")},
			want:     []*gatewayv1beta1.ReferenceGrant{wantGrant(first, slices.Sorted(slices.Values(append(slices.Clone(evens[1:]), "svc-01")))...), wantGrant(second, "svc-zz")},
			writes:   writes{updates: 1},
		},
		"overflow: a new grant": {
			services: append(slices.Clone(evens), "svc-01"),
			current:  []*gatewayv1beta1.ReferenceGrant{wantGrant(first, evens...)},
			want:     []*gatewayv1beta1.ReferenceGrant{wantGrant(first, evens...), wantGrant(second, "svc-01")},
			writes:   writes{creates: 1},
		},
		"overflow: reserved names skipped": {
			services: append(slices.Clone(evens), "svc-01"),
			current:  []*gatewayv1beta1.ReferenceGrant{wantGrant(first, evens...)},
			reserved: []string{second},
			want:     []*gatewayv1beta1.ReferenceGrant{wantGrant(first, evens...), wantGrant(third, "svc-01")},
			writes:   writes{creates: 1},
		},
		"first name reserved by a foreign grant": {
			services: []string{"a"},
			reserved: []string{first},
			want:     []*gatewayv1beta1.ReferenceGrant{wantGrant(second, "a")},
			writes:   writes{creates: 1},
		},
		"emptied grant: deleted": {
			services: []string{"a"},
			current:  []*gatewayv1beta1.ReferenceGrant{wantGrant(first, "a"), wantGrant(second, "b")},
			want:     []*gatewayv1beta1.ReferenceGrant{wantGrant(first, "a")},
			writes:   writes{deletes: 1},
		},
		"emptied grant reused for a new Service rather than deleted and created": {
			services: append(slices.Clone(evens), "svc-01"),
			current:  []*gatewayv1beta1.ReferenceGrant{wantGrant(first, evens...), wantGrant(second, "gone")},
			want:     []*gatewayv1beta1.ReferenceGrant{wantGrant(first, evens...), wantGrant(second, "svc-01")},
			writes:   writes{updates: 1},
		},
		"no Services left: every grant deleted": {
			current: []*gatewayv1beta1.ReferenceGrant{wantGrant(first, "a"), wantGrant(second, "b")},
			writes:  writes{deletes: 2},
		},
		"admitted twice: kept by the first grant only": {
			services: []string{"a", "b"},
			current:  []*gatewayv1beta1.ReferenceGrant{wantGrant(second, "a", "b"), wantGrant(first, "a")},
			want:     []*gatewayv1beta1.ReferenceGrant{wantGrant(first, "a"), wantGrant(second, "b")},
			writes:   writes{updates: 1},
		},
		"grants taken in index order, not lexical order": {
			services: []string{"a", "b"},
			current: []*gatewayv1beta1.ReferenceGrant{
				wantGrant("loraplane-router-aibrix-system-10", "a"), wantGrant(second, "x"),
			},
			want: []*gatewayv1beta1.ReferenceGrant{
				wantGrant(second, "b"), wantGrant("loraplane-router-aibrix-system-10", "a"),
			},
			writes: writes{updates: 1},
		},
		"foreign entries dropped: the grant is rewritten": {
			services: []string{"a"},
			current: []*gatewayv1beta1.ReferenceGrant{func() *gatewayv1beta1.ReferenceGrant {
				g := wantGrant(first, "a")
				g.Spec.To = append(g.Spec.To,
					gatewayv1beta1.ReferenceGrantTo{Kind: "Service"},
					gatewayv1beta1.ReferenceGrantTo{Kind: "Secret", Name: ptr.To(gatewayv1.ObjectName("b"))})
				return g
			}()},
			want:   []*gatewayv1beta1.ReferenceGrant{wantGrant(first, "a")},
			writes: writes{updates: 1},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := AssignReferenceGrants(testConfig(), "team-a", tc.services, tc.current, tc.reserved)
			if err != nil {
				t.Fatalf("AssignReferenceGrants: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("AssignReferenceGrants mismatch (-want +got):\n%s", diff)
			}
			var w writes
			w.creates, w.updates, w.deletes = grantWrites(tc.current, got)
			if w != tc.writes {
				t.Errorf("writes %+v, want %+v", w, tc.writes)
			}
			// Determinism: the order of the inputs does not matter.
			again, err := AssignReferenceGrants(testConfig(), "team-a",
				reversed(tc.services), reversed(tc.current), reversed(tc.reserved))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("result depends on the order of the inputs (-first +reversed):\n%s", diff)
			}
		})
	}
}

func reversed[T any](s []T) []T {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

// TestAssignReferenceGrantsRandomChurn applies random additions and removals, each round
// to the previous result, and checks the invariants: every Service admitted by exactly one
// grant, at most 16 per grant, no empty grant, reserved names unused, and a round that
// changes k Services writing at most k grants.
func TestAssignReferenceGrantsRandomChurn(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	reserved := []string{"loraplane-router-aibrix-system-3"}
	want := map[string]bool{}
	var current []*gatewayv1beta1.ReferenceGrant
	for round := range 300 {
		changed := 1 + rng.IntN(5)
		for range changed {
			svc := fmt.Sprintf("svc-%03d", rng.IntN(120))
			want[svc] = !want[svc]
		}
		var services []string
		for s, ok := range want {
			if ok {
				services = append(services, s)
			}
		}
		got, err := AssignReferenceGrants(testConfig(), "team-a", services, current, reserved)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]string{}
		for _, g := range got {
			if slices.Contains(reserved, g.Name) {
				t.Fatalf("round %d: reserved name %s used", round, g.Name)
			}
			if n := len(g.Spec.To); n < 1 || n > MaxReferenceGrantTo {
				t.Fatalf("round %d: grant %s has %d Services", round, g.Name, n)
			}
			for _, s := range AdmittedServices(g) {
				if other, ok := seen[s]; ok {
					t.Fatalf("round %d: %s admitted by %s and %s", round, s, other, g.Name)
				}
				seen[s] = g.Name
			}
		}
		if len(seen) != len(services) {
			t.Fatalf("round %d: %d Services admitted, want %d", round, len(seen), len(services))
		}
		if c, u, d := grantWrites(current, got); c+u+d > changed {
			t.Fatalf("round %d: %d Services changed but %d grants written", round, changed, c+u+d)
		}
		current = got
	}
}
