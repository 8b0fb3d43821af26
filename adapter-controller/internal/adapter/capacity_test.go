package adapter

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

func TestCapacityOf(t *testing.T) {
	vllm := corev1.Container{Name: "vllm", Command: []string{"vllm", "serve"}, Args: []string{"--enable-lora", "--max-loras", "2"}}
	tests := map[string]struct {
		annotation *string
		container  corev1.Container
		reported   int
		want       podCapacity
		wantErr    bool
	}{
		"annotation":                          {annotation: ptr.To("5"), container: vllm, reported: 8, want: podCapacity{slots: 5, known: true, source: CapacityFromAnnotation}},
		"annotation zero":                     {annotation: ptr.To(" 0 "), want: podCapacity{slots: 0, known: true, source: CapacityFromAnnotation}},
		"invalid annotation: unknown":         {annotation: ptr.To("many"), container: vllm, wantErr: true},
		"negative annotation: unknown":        {annotation: ptr.To("-1"), container: vllm, wantErr: true},
		"metrics over args":                   {container: vllm, reported: 8, want: podCapacity{slots: 8, known: true, source: CapacityFromMetrics}},
		"args":                                {container: vllm, want: podCapacity{slots: 2, known: true, source: CapacityFromArgs}},
		"unknown engine: unlimited":           {container: corev1.Container{Name: "engine", Image: "fake"}},
		"unknown engine, reported by metrics": {container: corev1.Container{Name: "engine", Image: "fake"}, reported: 3, want: podCapacity{slots: 3, known: true, source: CapacityFromMetrics}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{tc.container}}}
			if tc.annotation != nil {
				pod.Annotations = map[string]string{v1alpha1.AdapterCapacityAnnotation: *tc.annotation}
			}
			got := capacityOf(pod, tc.reported)
			if (got.err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %v", got.err, tc.wantErr)
			}
			got.err = nil
			if got != tc.want {
				t.Errorf("capacityOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestRankOf(t *testing.T) {
	for v, want := range map[string]int{"16": 16, "8\n": 8, "0": -1, "x": -1, "-4": -1} {
		a := &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{v1alpha1.LoRARankAnnotation: v}}}
		got, err := rankOf(a)
		if (want < 0) != (err != nil) || (want >= 0 && got != want) {
			t.Errorf("rankOf(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
}

// fleet is a placement test's world: pods with capacities, what their engines list, and the
// adapters placed so far.
type fleet struct {
	l        *ledger
	capacity map[string]int // pod -> slots; absent: unknown
	listed   map[string][]string
	pods     []*corev1.Pod
	woken    []string
	mu       sync.Mutex
	holds    map[string]map[string]bool // adapter -> pods placed on (as loaded)
}

func newFleet(capacity map[string]int, podNames ...string) *fleet {
	f := &fleet{capacity: capacity, listed: map[string][]string{}, holds: map[string]map[string]bool{}}
	f.l = newLedger(func(k types.NamespacedName) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.woken = append(f.woken, k.Name)
	})
	for _, n := range podNames {
		f.pods = append(f.pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: n, Labels: map[string]string{v1alpha1.ModelNameLabel: "m"}}})
	}
	return f
}

func fleetAdapter(name string, age int, replicas *int32) *v1alpha1.ModelAdapter {
	return &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name),
			CreationTimestamp: metav1.NewTime(time.Unix(1000, 0).Add(time.Duration(age) * time.Second))},
		Spec: v1alpha1.ModelAdapterSpec{Replicas: replicas},
	}
}

// reconcile places one adapter as choosePods does, with the least-adapters policy, and
// records where it is (as if loaded at once).
func (f *fleet) reconcile(a *v1alpha1.ModelAdapter) *pass {
	p := newPass(a)
	p.candidates = append(p.candidates, f.pods...)
	current := map[string]bool{}
	f.mu.Lock()
	for pod := range f.holds[a.Name] {
		current[pod] = true
	}
	f.mu.Unlock()
	capacity := func(pod *corev1.Pod) podCapacity {
		n, ok := f.capacity[pod.Name]
		return podCapacity{slots: n, known: ok}
	}
	listed := func(pod *corev1.Pod) []string { return f.listed[pod.Name] }
	chosen, plan := f.l.fit(p, current, capacity, listed, func(fits []*corev1.Pod) []*corev1.Pod {
		return place(fits, current, a.Spec.Replicas, PolicyLeastAdapters, func(name string) int { return len(f.l.onPod[types.NamespacedName{Namespace: "ns", Name: name}]) }, string(a.UID))
	})
	p.desired, p.full = chosen, plan.full
	f.mu.Lock()
	f.holds[a.Name] = map[string]bool{}
	for _, pod := range chosen {
		f.holds[a.Name][pod.Name] = true
	}
	f.mu.Unlock()
	return p
}

// perPod counts the adapters placed on each pod.
func (f *fleet) perPod() map[string]int {
	out := map[string]int{}
	for _, pods := range f.holds {
		for pod := range pods {
			out[pod]++
		}
	}
	return out
}

func (f *fleet) overCapacity(t *testing.T) {
	t.Helper()
	for pod, n := range f.perPod() {
		if c, ok := f.capacity[pod]; ok && n+len(f.listed[pod]) > c {
			t.Errorf("pod %s holds %d adapters (+%d listed), capacity %d", pod, n, len(f.listed[pod]), c)
		}
	}
}

func TestFitMixedCapacity(t *testing.T) {
	f := newFleet(map[string]int{"big": 4, "s1": 1, "s2": 1}, "big", "s1", "s2")
	for i := range 6 {
		p := f.reconcile(fleetAdapter(fmt.Sprintf("a%d", i), i, ptr.To[int32](1)))
		if len(p.desired) != 1 || p.waiting != 0 {
			t.Fatalf("adapter a%d: placed on %v, waiting %d; want one pod, none waiting", i, names(p.desired), p.waiting)
		}
	}
	f.overCapacity(t)
	if got := f.perPod(); got["big"] != 4 || got["s1"] != 1 || got["s2"] != 1 {
		t.Errorf("per pod %v, want big 4, s1 1, s2 1", got)
	}

	// A 7th waits, and says which pods are full.
	seventh := fleetAdapter("a6", 6, ptr.To[int32](1))
	p := f.reconcile(seventh)
	if len(p.desired) != 0 || p.waiting != 1 || len(p.full) != 3 {
		t.Fatalf("7th: placed on %v, waiting %d, full %v; want nowhere, 1, 3 pods", names(p.desired), p.waiting, p.full)
	}
	// Reconciling the placed ones again moves nothing (never evicted for the newer one).
	for i := range 6 {
		before := len(f.holds[fmt.Sprintf("a%d", i)])
		if p := f.reconcile(fleetAdapter(fmt.Sprintf("a%d", i), i, ptr.To[int32](1))); len(p.desired) != before {
			t.Errorf("a%d re-placed on %v", i, names(p.desired))
		}
	}
	// Deleting one wakes the 7th, which then fits.
	f.l.forget(types.NamespacedName{Namespace: "ns", Name: "a0"})
	delete(f.holds, "a0")
	if !slices.Contains(f.woken, "a6") {
		t.Errorf("woken %v, want a6", f.woken)
	}
	if p := f.reconcile(seventh); len(p.desired) != 1 || p.waiting != 0 {
		t.Errorf("7th after a deletion: placed on %v, waiting %d", names(p.desired), p.waiting)
	}
	f.overCapacity(t)
}

func TestFitOldestFirst(t *testing.T) {
	f := newFleet(map[string]int{"p": 1}, "p")
	f.reconcile(fleetAdapter("holder", 0, ptr.To[int32](1)))
	old := fleetAdapter("old", 1, ptr.To[int32](1))
	young := fleetAdapter("young", 2, ptr.To[int32](1))
	f.reconcile(old)
	f.reconcile(young)
	f.l.forget(types.NamespacedName{Namespace: "ns", Name: "holder"})
	delete(f.holds, "holder")
	// The young one reconciles first, but the older waiter gets the slot.
	if p := f.reconcile(young); len(p.desired) != 0 || p.waiting != 1 {
		t.Errorf("young: placed on %v, waiting %d; want it to wait for the older one", names(p.desired), p.waiting)
	}
	if p := f.reconcile(old); len(p.desired) != 1 {
		t.Errorf("old: placed on %v, want p", names(p.desired))
	}
}

// TestFitOldestFirstOnAPodAdded: a pod added while two adapters wait goes to the older one
// even when the younger one reconciles first, before the older one has seen the new pod.
func TestFitOldestFirstOnAPodAdded(t *testing.T) {
	f := newFleet(map[string]int{"p": 1, "new": 1}, "p")
	f.reconcile(fleetAdapter("holder", 0, ptr.To[int32](1)))
	old := fleetAdapter("old", 1, ptr.To[int32](1))
	young := fleetAdapter("young", 2, ptr.To[int32](1))
	f.reconcile(old)
	f.reconcile(young)
	f.pods = append(f.pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "new", Labels: map[string]string{v1alpha1.ModelNameLabel: "m"}}})
	if p := f.reconcile(young); len(p.desired) != 0 || p.waiting != 1 {
		t.Errorf("young: placed on %v, waiting %d; want it to wait for the older one", names(p.desired), p.waiting)
	}
	if p := f.reconcile(old); len(p.desired) != 1 || p.desired[0].Name != "new" {
		t.Errorf("old: placed on %v, want new", names(p.desired))
	}
}

func TestFitCountsListedAdapters(t *testing.T) {
	f := newFleet(map[string]int{"p": 2}, "p")
	f.listed["p"] = []string{"static-lora"} // the engine's own --lora-modules
	if p := f.reconcile(fleetAdapter("a", 0, ptr.To[int32](1))); len(p.desired) != 1 {
		t.Fatalf("a: placed on %v", names(p.desired))
	}
	if p := f.reconcile(fleetAdapter("b", 1, ptr.To[int32](1))); len(p.desired) != 0 || p.waiting != 1 {
		t.Errorf("b: placed on %v, waiting %d; want it to wait (static-lora and a fill p)", names(p.desired), p.waiting)
	}
}

func TestFitAllPodsWithRoom(t *testing.T) {
	f := newFleet(map[string]int{"full": 0, "free": 3}, "free", "full", "unknown")
	p := f.reconcile(fleetAdapter("a", 0, nil))
	if got := names(p.desired); !slices.Equal(got, []string{"free", "unknown"}) || p.waiting != 1 {
		t.Errorf("replicas unset: placed on %v, waiting %d; want free and unknown, 1 waiting", got, p.waiting)
	}
}

func TestFitUnknownCapacityIsUnlimited(t *testing.T) {
	f := newFleet(nil, "p", "q")
	for i := range 20 {
		if p := f.reconcile(fleetAdapter(fmt.Sprintf("a%d", i), i, ptr.To[int32](2))); len(p.desired) != 2 || p.waiting != 0 {
			t.Fatalf("a%d: placed on %v, waiting %d", i, names(p.desired), p.waiting)
		}
	}
}

func TestFitConcurrentReconcilesNeverOversubscribe(t *testing.T) {
	f := newFleet(map[string]int{"p": 3, "q": 2}, "p", "q")
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() { f.reconcile(fleetAdapter(fmt.Sprintf("a%d", i), i, ptr.To[int32](1))) })
	}
	wg.Wait()
	f.overCapacity(t)
	if got := f.perPod(); got["p"] != 3 || got["q"] != 2 {
		t.Errorf("per pod %v, want p 3, q 2", got)
	}
}

func TestFitWakesYoungerWaitersWhenAnOlderOneIsPlaced(t *testing.T) {
	f := newFleet(map[string]int{"p": 1, "q": 1}, "p", "q")
	f.reconcile(fleetAdapter("x", 0, ptr.To[int32](1)))
	f.reconcile(fleetAdapter("y", 1, ptr.To[int32](1)))
	old := fleetAdapter("old", 2, ptr.To[int32](1))
	young := fleetAdapter("young", 3, ptr.To[int32](1))
	f.reconcile(old)
	f.reconcile(young)
	for _, name := range []string{"x", "y"} {
		f.l.forget(types.NamespacedName{Namespace: "ns", Name: name})
		delete(f.holds, name)
	}
	// Both pods are free, but "old" wants both: "young" yields until "old" is placed.
	if p := f.reconcile(young); len(p.desired) != 0 {
		t.Fatalf("young placed on %v before the older waiter", names(p.desired))
	}
	f.woken = nil
	if p := f.reconcile(old); len(p.desired) != 1 {
		t.Fatalf("old: placed on %v", names(p.desired))
	}
	if !slices.Contains(f.woken, "young") {
		t.Errorf("woken %v: the younger waiter is not told that the older one no longer waits", f.woken)
	}
	if p := f.reconcile(young); len(p.desired) != 1 || p.waiting != 0 {
		t.Errorf("young: placed on %v, waiting %d; want the other pod", names(p.desired), p.waiting)
	}
	f.overCapacity(t)
}

func TestPodCapacityAnnotationChangeEnqueues(t *testing.T) {
	pred := podServingChanged()
	o := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{v1alpha1.AdapterCapacityAnnotation: "1"}}}
	n := o.DeepCopy()
	n.Annotations[v1alpha1.AdapterCapacityAnnotation] = "4"
	if !pred.Update(event.UpdateEvent{ObjectOld: o, ObjectNew: n}) {
		t.Error("raising the capacity annotation does not reach the adapters")
	}
	n = o.DeepCopy()
	n.Annotations["other"] = "x"
	if pred.Update(event.UpdateEvent{ObjectOld: o, ObjectNew: n}) {
		t.Error("an unrelated annotation reaches the adapters")
	}
}

// metricsEngine is a fake engine that also exports its capacity metrics.
type metricsEngine struct {
	*fakeEngine
	mu       sync.Mutex
	maxLoras map[string]int // by pod IP
	reads    map[string]int
}

func (m *metricsEngine) ReadMetrics(_ context.Context, ep engine.Endpoint) (engine.Metrics, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads[ep.Host]++
	return engine.Metrics{MaxLoras: m.maxLoras[ep.Host]}, nil
}

// TestPollReadsCapacityMetrics: the inventory poll reads each polled pod's metrics once per
// poll (none for a pod whose annotation sets its capacity), keeps what they report for
// placement, and tells when a pod's reported capacity changed.
func TestPollReadsCapacityMetrics(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	var pods []*corev1.Pod
	objs := []client.Object{}
	for i := range 3 {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p%d", i), UID: types.UID(fmt.Sprint(i))},
			Status: corev1.PodStatus{PodIP: fmt.Sprintf("127.0.41.%d", i+1),
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
		pods = append(pods, pod)
		objs = append(objs, pod)
	}
	pods[2].Annotations = map[string]string{v1alpha1.AdapterCapacityAnnotation: "9"}
	objs = append(objs, &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"},
		Status:     v1alpha1.ModelAdapterStatus{Instances: []string{"p0", "p1", "p2"}},
	})
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	eng := &metricsEngine{fakeEngine: newFakeEngine(), maxLoras: map[string]int{"127.0.41.1": 4, "127.0.41.2": 2, "127.0.41.3": 1}, reads: map[string]int{}}
	var changed []string
	var mu sync.Mutex
	hooks := unboundedHooks()
	hooks.apiKey = func(context.Context, *v1alpha1.ModelAdapter) (string, error) { return "", nil }
	hooks.capacityChanged = func(pod types.NamespacedName) {
		mu.Lock()
		defer mu.Unlock()
		changed = append(changed, pod.Name)
	}
	inv := NewInventory(eng, reader, time.Minute, 4, clock.RealClock{}, hooks)
	for range 2 {
		if err := inv.poll(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if got := eng.reads; got["127.0.41.1"] != 2 || got["127.0.41.2"] != 2 || got["127.0.41.3"] != 0 {
		t.Errorf("metrics reads by pod IP %v; want 2 each for p0 and p1 (one per poll), none for the annotated p2", got)
	}
	if c := inv.maxLoras(pods[0]); c != 4 {
		t.Errorf("p0's reported max_loras %d, want 4", c)
	}
	if c := (&Reconciler{inventory: inv}).capacityOf(pods[1]); !c.known || c.slots != 2 || c.source != CapacityFromMetrics {
		t.Errorf("p1's capacity %+v, want 2 from metrics", c)
	}
	slices.Sort(changed)
	if !slices.Equal(changed, []string{"p0", "p1"}) {
		t.Errorf("capacity changes told %v, want p0 and p1 once (the second poll read the same)", changed)
	}
}

// TestLearnIsSharedPerPod: the reconciles that want to know a new pod before placing on it
// share one listing and one metrics read of it, however many ask at once; a pod that is
// learned already is not listed or read again by Learn (the poll keeps it current).
func TestLearnIsSharedPerPod(t *testing.T) {
	eng := &metricsEngine{fakeEngine: newFakeEngine(), maxLoras: map[string]int{"127.0.42.1": 3}, reads: map[string]int{}}
	hooks := unboundedHooks()
	inv := NewInventory(eng, nil, time.Minute, 4, clock.RealClock{}, hooks)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u1"},
		Status:     corev1.PodStatus{PodIP: "127.0.42.1"},
	}
	ep := engine.Endpoint{Host: "127.0.42.1", Port: 8000}
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() { inv.Learn(t.Context(), pod, ep) })
	}
	wg.Wait()
	inv.Learn(t.Context(), pod, ep)
	if _, known := inv.Loaded(pod, ""); !known {
		t.Error("the pod is not known after Learn")
	}
	eng.mu.Lock()
	reads := eng.reads["127.0.42.1"]
	eng.mu.Unlock()
	if reads != 1 {
		t.Errorf("33 Learns of one pod read its metrics %d times, want 1", reads)
	}
	if lists := eng.count(&eng.lists); lists != 1 {
		t.Errorf("33 Learns of one pod listed it %d times, want 1", lists)
	}
	if c := inv.maxLoras(pod); c != 3 {
		t.Errorf("reported max_loras %d, want 3", c)
	}
}
