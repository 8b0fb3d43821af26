package adapter

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

func pods(names ...string) []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(names))
	for _, n := range names {
		out = append(out, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	return out
}

func names(ps []*corev1.Pod) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func TestPlace(t *testing.T) {
	load := map[string]int{"a": 3, "b": 0, "c": 1, "d": 5}
	loadOf := func(n string) int { return load[n] }
	tests := map[string]struct {
		candidates []string
		current    []string
		replicas   *int32
		policy     string
		want       []string
	}{
		"nil replicas takes every candidate": {candidates: []string{"a", "b", "c"}, want: []string{"a", "b", "c"}},
		"more replicas than candidates":      {candidates: []string{"a", "b"}, replicas: ptr.To[int32](5), want: []string{"a", "b"}},
		"least-adapters picks the emptiest":  {candidates: []string{"a", "b", "c", "d"}, replicas: ptr.To[int32](2), policy: PolicyLeastAdapters, want: []string{"b", "c"}},
		"bin-pack picks the fullest":         {candidates: []string{"a", "b", "c", "d"}, replicas: ptr.To[int32](2), policy: PolicyBinPack, want: []string{"a", "d"}},
		"current pods stay (stable)":         {candidates: []string{"a", "b", "c", "d"}, current: []string{"d"}, replicas: ptr.To[int32](1), policy: PolicyLeastAdapters, want: []string{"d"}},
		"current kept, rest filled":          {candidates: []string{"a", "b", "c", "d"}, current: []string{"d"}, replicas: ptr.To[int32](2), policy: PolicyLeastAdapters, want: []string{"b", "d"}},
		"shrinking keeps a current pod":      {candidates: []string{"a", "b", "c"}, current: []string{"a", "c"}, replicas: ptr.To[int32](1), policy: PolicyLeastAdapters, want: []string{"a"}},
		"a current pod no longer candidate":  {candidates: []string{"b", "c"}, current: []string{"a"}, replicas: ptr.To[int32](1), policy: PolicyLeastAdapters, want: []string{"b"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			current := map[string]bool{}
			for _, c := range tc.current {
				current[c] = true
			}
			got := names(place(pods(tc.candidates...), current, tc.replicas, tc.policy, loadOf, "uid"))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("placement (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlaceRandomIsDeterministicPerAdapter(t *testing.T) {
	cands := pods("p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7")
	zero := func(string) int { return 0 }
	first := names(place(cands, nil, ptr.To[int32](3), PolicyRandom, zero, "uid-1"))
	for range 5 {
		if got := names(place(cands, nil, ptr.To[int32](3), PolicyRandom, zero, "uid-1")); !cmp.Equal(first, got) {
			t.Fatalf("random placement changed between passes: %v then %v", first, got)
		}
	}
	differs := false
	for _, seed := range []string{"uid-2", "uid-3", "uid-4", "uid-5"} {
		if !cmp.Equal(first, names(place(cands, nil, ptr.To[int32](3), PolicyRandom, zero, seed))) {
			differs = true
		}
	}
	if !differs {
		t.Error("random placement is the same for every adapter")
	}
}

func TestPolicyFor(t *testing.T) {
	for in, want := range map[string]struct {
		policy string
		known  bool
	}{"": {PolicyLeastAdapters, true}, "default": {PolicyLeastAdapters, true}, "least-adapters": {PolicyLeastAdapters, true},
		"random": {PolicyRandom, true}, "bin-pack": {PolicyBinPack, true}, "volcano": {PolicyLeastAdapters, false},
		// AIBrix's names of the same policies.
		"leastAdapters": {PolicyLeastAdapters, true}, "binPack": {PolicyBinPack, true}} {
		if p, k := policyFor(in); p != want.policy || k != want.known {
			t.Errorf("policyFor(%q) = %q, %v; want %q, %v", in, p, k, want.policy, want.known)
		}
	}
}

func TestBackoff(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newBackoffs(time.Second, 8*time.Second, clocktesting.NewFakeClock(now))
	k := backoffKey{"ns", "a", "p", "load"}
	if d, n, _ := b.wait(k, now); d != 0 || n != 0 {
		t.Fatalf("fresh key waits %s after %d failures", d, n)
	}
	var delays []time.Duration
	for range 5 {
		_, d := b.failed(k, now, errors.New("boom"))
		delays = append(delays, d)
	}
	if diff := cmp.Diff([]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}, delays); diff != "" {
		t.Errorf("delays (-want +got):\n%s", diff)
	}
	if d, n, err := b.wait(k, now.Add(3*time.Second)); d != 5*time.Second || n != 5 || err == nil {
		t.Errorf("wait = %s, %d, %v", d, n, err)
	}
	b.succeeded(k)
	if d, _, _ := b.wait(k, now); d != 0 {
		t.Error("success did not reset the backoff")
	}
	b.failed(k, now, errors.New("x"))
	b.forgetAdapter("ns", "a")
	if d, _, _ := b.wait(k, now); d != 0 {
		t.Error("forgetAdapter kept an entry")
	}

	// retain keeps the entries of the pods named, of that adapter and op only.
	for _, k := range []backoffKey{{"ns", "a", "gone", "load"}, {"ns", "a", "kept", "load"}, {"ns", "a", "gone", "unload"}, {"ns", "b", "gone", "load"}} {
		b.failed(k, now, errors.New("x"))
	}
	b.retain("ns", "a", "load", map[string]bool{"kept": true})
	for k, want := range map[backoffKey]bool{{"ns", "a", "gone", "load"}: false, {"ns", "a", "kept", "load"}: true, {"ns", "a", "gone", "unload"}: true, {"ns", "b", "gone", "load"}: true} {
		if d, _, _ := b.wait(k, now); (d > 0) != want {
			t.Errorf("after retain, entry %v kept = %v, want %v", k, d > 0, want)
		}
	}
}

func TestComputeStatus(t *testing.T) {
	adapter := func() *v1alpha1.ModelAdapter {
		return &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Name: "a", Generation: 3}, Spec: v1alpha1.ModelAdapterSpec{SchedulerName: "volcano"}}
	}
	disabled := &engine.Error{Reason: engine.ReasonLoRAUpdatingDisabled, Message: "runtime LoRA updating is disabled"}
	tests := map[string]struct {
		pass      func(p *pass)
		phase     v1alpha1.ModelAdapterPhase
		ready     metav1.ConditionStatus
		reason    string
		instances string
	}{
		"running everywhere": {pass: func(p *pass) {
			p.candidates, p.desired, p.instances, p.resourcesReady = pods("x", "y"), pods("x", "y"), pods("y", "x"), true
		}, phase: v1alpha1.ModelAdapterRunning, ready: metav1.ConditionTrue, reason: ReasonReady, instances: "x,y"},
		"partially loaded": {pass: func(p *pass) {
			p.candidates, p.desired, p.instances, p.resourcesReady = pods("x", "y"), pods("x", "y"), pods("x"), true
		}, phase: v1alpha1.ModelAdapterResourceCreated, ready: metav1.ConditionFalse, reason: ReasonPartiallyReady, instances: "x"},
		"no candidates": {pass: func(_ *pass) {}, phase: v1alpha1.ModelAdapterPending, ready: metav1.ConditionFalse, reason: ReasonNoReadyPods},
		"only holders kept while not Ready": {pass: func(p *pass) {
			p.candidates, p.kept = pods("x"), pods("y")
		}, phase: v1alpha1.ModelAdapterPending, ready: metav1.ConditionFalse, reason: ReasonPartiallyReady},
		"failed past the limit": {pass: func(p *pass) {
			p.candidates, p.desired = pods("x"), pods("x")
			p.failures["x"] = podError{err: disabled, failures: 5}
			p.failedHard = true
		}, phase: v1alpha1.ModelAdapterFailed, ready: metav1.ConditionFalse, reason: string(engine.ReasonLoRAUpdatingDisabled)},
		"still retrying": {pass: func(p *pass) {
			p.candidates, p.desired = pods("x"), pods("x")
			p.failures["x"] = podError{err: disabled, failures: 1}
		}, phase: v1alpha1.ModelAdapterScheduled, ready: metav1.ConditionFalse, reason: string(engine.ReasonLoRAUpdatingDisabled)},
		"invalid spec": {pass: func(p *pass) {
			p.specErr, p.specReason = errors.New("credentials Secret s not found"), ReasonSecretUnavailable
		}, phase: v1alpha1.ModelAdapterFailed, ready: metav1.ConditionFalse, reason: ReasonSecretUnavailable},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := newPass(adapter())
			p.policy, p.unknownPolicy = PolicyLeastAdapters, true
			tc.pass(p)
			st := computeStatus(p)
			if st.Phase != tc.phase {
				t.Errorf("phase = %s, want %s", st.Phase, tc.phase)
			}
			var ready *metav1.Condition
			for i := range st.Conditions {
				c := &st.Conditions[i]
				if c.ObservedGeneration != 3 {
					t.Errorf("condition %s has observedGeneration %d, want 3", c.Type, c.ObservedGeneration)
				}
				if c.Type == v1alpha1.ConditionReady {
					ready = c
				}
			}
			if ready == nil || ready.Status != tc.ready || ready.Reason != tc.reason {
				t.Fatalf("Ready = %+v, want %s/%s", ready, tc.ready, tc.reason)
			}
			if got := strings.Join(st.Instances, ","); got != tc.instances {
				t.Errorf("instances = %q, want %q", got, tc.instances)
			}
			if tc.reason == string(engine.ReasonLoRAUpdatingDisabled) && !strings.Contains(ready.Message, "runtime LoRA updating is disabled") {
				t.Errorf("message %q lacks the engine's message", ready.Message)
			}
		})
	}
	// An unknown scheduler name is reported and the default policy used.
	p := newPass(adapter())
	p.policy, p.unknownPolicy = PolicyLeastAdapters, true
	p.candidates, p.desired = pods("x"), pods("x")
	st := computeStatus(p)
	for _, c := range st.Conditions {
		if c.Type == v1alpha1.ConditionScheduled && (c.Reason != ReasonUnknownScheduler || !strings.Contains(c.Message, `"volcano"`)) {
			t.Errorf("Scheduled = %+v, want the unknown scheduler named", c)
		}
	}
}

// TestScheduledCondition: the Scheduled and Ready conditions while too few pods are Ready,
// with AIBrix's reasons: NoReadyPods without any, InsufficientReadyPods with fewer than
// spec.replicas (the adapter served by those meanwhile, so Ready may be True).
func TestScheduledCondition(t *testing.T) {
	tests := map[string]struct {
		replicas            *int32
		candidates, loaded  []string
		placed              []string // the desired pods; nil: every candidate
		full                []string
		waiting             int
		unfit               []unfitPod
		scheduled, ready    metav1.ConditionStatus
		scheduledReason     string
		readyReason, inText string
	}{
		"none ready, replicas 1": {replicas: ptr.To[int32](1),
			scheduled: metav1.ConditionFalse, scheduledReason: ReasonNoReadyPods, ready: metav1.ConditionFalse, readyReason: ReasonNoReadyPods,
			inText: "No ready backend pods available for scheduling"},
		"none ready, on every pod": {
			scheduled: metav1.ConditionFalse, scheduledReason: ReasonNoReadyPods, ready: metav1.ConditionFalse, readyReason: ReasonNoReadyPods,
			inText: "No ready backend pods available for scheduling"},
		"fewer ready than replicas": {replicas: ptr.To[int32](3), candidates: []string{"x"}, loaded: []string{"x"},
			scheduled: metav1.ConditionFalse, scheduledReason: ReasonInsufficientReadyPods, ready: metav1.ConditionTrue, readyReason: ReasonReady,
			inText: "1 ready backend pods, but spec.replicas needs 3"},
		"as many ready as replicas": {replicas: ptr.To[int32](2), candidates: []string{"x", "y"}, loaded: []string{"x", "y"},
			scheduled: metav1.ConditionTrue, scheduledReason: ReasonScheduled, ready: metav1.ConditionTrue, readyReason: ReasonReady,
			inText: "2 of 2 candidates chosen"},
		"on every pod": {candidates: []string{"x"},
			scheduled: metav1.ConditionTrue, scheduledReason: ReasonScheduled, ready: metav1.ConditionFalse, readyReason: ReasonPartiallyReady,
			inText: "1 of 1 candidates chosen"},
		"every candidate full": {replicas: ptr.To[int32](1), candidates: []string{"x"}, placed: []string{}, waiting: 1, full: []string{"x"},
			scheduled: metav1.ConditionFalse, scheduledReason: ReasonInsufficientCapacity, ready: metav1.ConditionFalse, readyReason: ReasonInsufficientCapacity,
			inText: "1 placements wait for a free adapter slot (full: x)"},
		"on every pod with room": {candidates: []string{"x", "y"}, placed: []string{"x"}, loaded: []string{"x"}, waiting: 1, full: []string{"y"},
			scheduled: metav1.ConditionFalse, scheduledReason: ReasonInsufficientCapacity, ready: metav1.ConditionTrue, readyReason: ReasonReady,
			inText: "Placed on 1 pods; 1 placements wait"},
		"no pod can take adapters": {unfit: []unfitPod{{pod: "x", reason: string(engine.ReasonLoRADisabled), msg: "container vllm runs vLLM without --enable-lora"}},
			scheduled: metav1.ConditionFalse, scheduledReason: string(engine.ReasonLoRADisabled), ready: metav1.ConditionFalse, readyReason: string(engine.ReasonLoRADisabled),
			inText: "pod x cannot take it (LoRADisabled): container vllm runs vLLM without --enable-lora"},
		"one pod cannot take adapters": {candidates: []string{"y"}, loaded: []string{"y"}, unfit: []unfitPod{{pod: "x", reason: string(engine.ReasonLoRAUpdatingDisabled), msg: "container vllm runs vLLM without VLLM_ALLOW_RUNTIME_LORA_UPDATING=true"}},
			scheduled: metav1.ConditionTrue, scheduledReason: ReasonScheduled, ready: metav1.ConditionTrue, readyReason: ReasonReady,
			inText: "1 of 1 candidates chosen (least-adapters); pod x cannot take it (LoRAUpdatingDisabled)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := newPass(&v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Name: "a", Generation: 2}, Spec: v1alpha1.ModelAdapterSpec{Replicas: tc.replicas}})
			p.policy = PolicyLeastAdapters
			p.candidates, p.desired, p.instances, p.resourcesReady = pods(tc.candidates...), pods(tc.candidates...), pods(tc.loaded...), true
			if tc.placed != nil {
				p.desired = pods(tc.placed...)
			}
			p.waiting, p.full, p.unfit = tc.waiting, tc.full, tc.unfit
			st := computeStatus(p)
			if st.WaitingReplicas != int32(tc.waiting) || st.DesiredReplicas != st.PlacedReplicas+st.WaitingReplicas {
				t.Errorf("desired %d, placed %d, waiting %d; want waiting %d and desired = placed + waiting", st.DesiredReplicas, st.PlacedReplicas, st.WaitingReplicas, tc.waiting)
			}
			got := map[string]metav1.Condition{}
			for _, c := range st.Conditions {
				got[c.Type] = c
			}
			s, r := got[v1alpha1.ConditionScheduled], got[v1alpha1.ConditionReady]
			if s.Status != tc.scheduled || s.Reason != tc.scheduledReason || !strings.Contains(s.Message, tc.inText) || s.ObservedGeneration != 2 {
				t.Errorf("Scheduled = %+v, want %s/%s with %q at generation 2", s, tc.scheduled, tc.scheduledReason, tc.inText)
			}
			if r.Status != tc.ready || r.Reason != tc.readyReason {
				t.Errorf("Ready = %+v, want %s/%s", r, tc.ready, tc.readyReason)
			}
		})
	}
}
