package adapter

// Capacity-aware placement. An engine holds a bounded number of runtime-loaded adapters
// (vLLM's LRU cache of --max-cpu-loras entries, SGLang's --max-loaded-loras); a load beyond
// it silently evicts another adapter, which the next request reloads from disk. Where a
// pod's capacity is known, no adapter is placed on it beyond that capacity: the adapters
// this controller placed there and the ones its engine lists count against it. Adapters
// already placed keep their place; among the adapters waiting for room the oldest
// (creationTimestamp, then namespace/name) goes first. Where capacity is unknown, placement
// is AIBrix's: unlimited.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// Capacity sources, in the order they are believed (the source label of logs and docs).
const (
	CapacityFromAnnotation = "annotation"
	CapacityFromMetrics    = "metrics"
	CapacityFromArgs       = "args"
)

// podCapacity is what is known of one pod's adapter capacity.
type podCapacity struct {
	slots  int    // adapters the engine holds without evicting one
	known  bool   // false: unlimited (AIBrix's behaviour)
	source string // CapacityFrom*
	err    error  // an invalid annotation (capacity then unknown)
}

// capacityOf returns the pod's capacity: the pod annotation, else the engine's metrics as
// the inventory last read them together with its arguments, else its arguments alone, else
// unknown.
func (r *Reconciler) capacityOf(pod *corev1.Pod) podCapacity {
	return capacityOf(pod, r.inventory.maxLoras(pod))
}

func capacityOf(pod *corev1.Pod, reportedMaxLoras int) podCapacity {
	if v, ok := pod.Annotations[v1alpha1.AdapterCapacityAnnotation]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return podCapacity{err: fmt.Errorf("pod %s: annotation %s=%q is not a non-negative integer; its adapter capacity is taken as unknown",
				pod.Name, v1alpha1.AdapterCapacityAnnotation, v)}
		}
		return podCapacity{slots: n, known: true, source: CapacityFromAnnotation}
	}
	spec := engine.InspectPod(pod)
	if n, ok := spec.Capacity(reportedMaxLoras); ok {
		source := CapacityFromArgs
		if reportedMaxLoras > 0 {
			if _, cpu := spec.Flags[engine.FlagMaxCPULoras]; !cpu {
				source = CapacityFromMetrics
			}
		}
		return podCapacity{slots: n, known: true, source: source}
	}
	return podCapacity{}
}

// rankOf is the rank the adapter declares (LoRARankAnnotation); 0 when none.
func rankOf(a *v1alpha1.ModelAdapter) (int, error) {
	v, ok := a.Annotations[v1alpha1.LoRARankAnnotation]
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("annotation %s=%q is not a positive integer", v1alpha1.LoRARankAnnotation, v)
	}
	return n, nil
}

// unfitPod is a matching pod whose engine cannot take the adapter, and why.
type unfitPod struct {
	pod    string
	reason string
	msg    string
}

// preflight takes out of the candidates the pods whose spec shows their engine cannot take
// the adapter at runtime (no --enable-lora, runtime updating off, a rank limit below the
// adapter's): loads there would fail one by one.
func preflight(p *pass, rank int) {
	kept := p.candidates[:0]
	for _, pod := range p.candidates {
		if reason, msg := engine.InspectPod(pod).Unfit(rank); reason != "" {
			p.unfit = append(p.unfit, unfitPod{pod: pod.Name, reason: string(reason), msg: msg})
			continue
		}
		kept = append(kept, pod)
	}
	p.candidates = kept
}

// ledger is where this controller placed adapters, by pod, and which adapters wait for room:
// the one record all reconciles share, so that two adapters reconciled at once never take
// the same last slot.
type ledger struct {
	mu      sync.Mutex
	seeded  bool
	onPod   map[types.NamespacedName]map[string]bool // pod -> adapters of its namespace placed there
	placed  map[types.NamespacedName][]string        // adapter -> its pods
	waiting map[types.NamespacedName]*waiter
	wake    func(adapter types.NamespacedName)
}

// waiter is an adapter waiting for room.
type waiter struct {
	created metav1.Time
	model   string          // the model label of its candidates (metrics)
	wants   map[string]bool // the candidates it is not placed on
}

func newLedger(wake func(types.NamespacedName)) *ledger {
	return &ledger{
		onPod:   map[types.NamespacedName]map[string]bool{},
		placed:  map[types.NamespacedName][]string{},
		waiting: map[types.NamespacedName]*waiter{},
		wake:    wake,
	}
}

// older orders waiters: creationTimestamp, then namespace/name.
func older(at metav1.Time, key types.NamespacedName, than metav1.Time, thanKey types.NamespacedName) bool {
	if !at.Equal(&than) {
		return at.Before(&than)
	}
	return cmp.Or(cmp.Compare(key.Namespace, thanKey.Namespace), cmp.Compare(key.Name, thanKey.Name)) < 0
}

// seed records, once, the pods every adapter of the cache records (instances and
// scheduled pods): after a restart the engines hold what earlier processes placed before
// any reconcile has said so.
func (l *ledger) seed(ctx context.Context, reader client.Reader) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seeded {
		return nil
	}
	var list v1alpha1.ModelAdapterList
	if err := reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing adapters to seed the placement ledger: %w", err)
	}
	for i := range list.Items {
		a := &list.Items[i]
		key := client.ObjectKeyFromObject(a)
		if _, done := l.placed[key]; done {
			continue
		}
		var pods []string
		for pod := range recordedPods(a) {
			pods = append(pods, pod)
		}
		l.setLocked(key, pods)
	}
	l.seeded = true
	return nil
}

// setLocked records the adapter's pods and returns the pods it left.
func (l *ledger) setLocked(key types.NamespacedName, pods []string) (left []string) {
	now := map[string]bool{}
	for _, pod := range pods {
		now[pod] = true
		podKey := types.NamespacedName{Namespace: key.Namespace, Name: pod}
		if l.onPod[podKey] == nil {
			l.onPod[podKey] = map[string]bool{}
		}
		l.onPod[podKey][key.Name] = true
	}
	for _, pod := range l.placed[key] {
		if now[pod] {
			continue
		}
		podKey := types.NamespacedName{Namespace: key.Namespace, Name: pod}
		delete(l.onPod[podKey], key.Name)
		if len(l.onPod[podKey]) == 0 {
			delete(l.onPod, podKey)
		}
		left = append(left, pod)
	}
	if len(pods) == 0 {
		delete(l.placed, key)
	} else {
		l.placed[key] = pods
	}
	return left
}

// forget drops an adapter that is gone or being deleted, and wakes the adapters waiting
// for the room it leaves.
func (l *ledger) forget(key types.NamespacedName) {
	l.mu.Lock()
	left := l.setLocked(key, nil)
	delete(l.waiting, key)
	wake := l.waitersForLocked(key.Namespace, left)
	l.mu.Unlock()
	for _, w := range wake {
		l.wake(w)
	}
}

// waitersForLocked are the waiting adapters of the namespace that want one of the pods.
func (l *ledger) waitersForLocked(namespace string, pods []string) []types.NamespacedName {
	if len(pods) == 0 {
		return nil
	}
	var out []types.NamespacedName
	for key, w := range l.waiting {
		if key.Namespace != namespace {
			continue
		}
		for _, pod := range pods {
			if w.wants[pod] {
				out = append(out, key)
				break
			}
		}
	}
	return out
}

// wakeWaitersOf wakes the adapters waiting for room on the pod (its capacity grew).
func (l *ledger) wakeWaitersOf(pod types.NamespacedName) {
	l.mu.Lock()
	wake := l.waitersForLocked(pod.Namespace, []string{pod.Name})
	l.mu.Unlock()
	for _, w := range wake {
		l.wake(w)
	}
}

// occupiedLocked is how many adapters other than the named one are on the pod: placed there by
// this controller, or listed by its engine.
func (l *ledger) occupiedLocked(pod *corev1.Pod, adapter string, listed []string) int {
	podKey := client.ObjectKeyFromObject(pod)
	n := 0
	for name := range l.onPod[podKey] {
		if name != adapter {
			n++
		}
	}
	for _, name := range listed {
		if name != adapter && !l.onPod[podKey][name] {
			n++
		}
	}
	return n
}

// free is how many adapter slots of the pod's capacity (slots) are left for the named adapter:
// those neither placed there by this controller nor listed by its engine (listed).
func (l *ledger) free(pod *corev1.Pod, adapter string, listed []string, slots int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slots - l.occupiedLocked(pod, adapter, listed)
}

// olderWaitersLocked counts the adapters older than a that wait for room on the pod: those
// that wanted it at their last pass, and those of its model pool not on it yet (a pod added
// since an older waiter's last pass is its too: a younger adapter reconciled first must not
// take it).
func (l *ledger) olderWaitersLocked(a *v1alpha1.ModelAdapter, pod *corev1.Pod) int {
	key := client.ObjectKeyFromObject(a)
	on := l.onPod[client.ObjectKeyFromObject(pod)]
	model := pod.Labels[v1alpha1.ModelNameLabel]
	n := 0
	for wkey, w := range l.waiting {
		if wkey.Namespace != a.Namespace || wkey == key || !older(w.created, wkey, a.CreationTimestamp, key) {
			continue
		}
		if w.wants[pod.Name] || (model != "" && w.model == model && !on[wkey.Name]) {
			n++
		}
	}
	return n
}

// capacityPlan is the outcome of fitting one adapter into the pods' capacity.
type capacityPlan struct {
	fits    []*corev1.Pod // candidates the adapter may be placed on
	full    []string      // candidates without room for it (sorted)
	invalid []error       // invalid capacity annotations
}

// fit decides, under the ledger's lock, the candidates with room for the adapter (a pod it
// is on always has; a pod of unknown capacity too; another pod when its free slots outnumber
// the older adapters waiting for it), lets choose (the placement policy) pick among them,
// and records the result. It returns the chosen pods and the plan.
func (l *ledger) fit(p *pass, current map[string]bool, capacity func(*corev1.Pod) podCapacity, listed func(*corev1.Pod) []string,
	choose func(fits []*corev1.Pod) []*corev1.Pod) (chosen []*corev1.Pod, plan capacityPlan) {
	a := p.adapter
	l.mu.Lock()
	for _, pod := range p.candidates {
		c := capacity(pod)
		if c.err != nil {
			plan.invalid = append(plan.invalid, c.err)
		}
		if current[pod.Name] || !c.known {
			plan.fits = append(plan.fits, pod)
			continue
		}
		free := c.slots - l.occupiedLocked(pod, a.Name, listed(pod))
		if free > l.olderWaitersLocked(a, pod) {
			plan.fits = append(plan.fits, pod)
		} else {
			plan.full = append(plan.full, pod.Name)
		}
	}
	chosen = choose(plan.fits)
	wake := l.recordLocked(p, chosen, len(plan.full) > 0)
	l.mu.Unlock()
	for _, w := range wake {
		l.wake(w)
	}
	return chosen, plan
}

// recordLocked records where the adapter of the pass is placed (and may still be loaded)
// and whether it waits, setting p.waiting; it returns the waiters to wake: those wanting a
// pod the adapter left, or a pod it no longer waits for.
func (l *ledger) recordLocked(p *pass, chosen []*corev1.Pod, someFull bool) []types.NamespacedName {
	a := p.adapter
	key := client.ObjectKeyFromObject(a)
	want := len(p.candidates)
	if r := a.Spec.Replicas; r != nil {
		want = min(want, int(*r))
	}
	p.waiting = 0
	if someFull { // otherwise fewer pods than spec.replicas, none full: InsufficientReadyPods
		p.waiting = max(0, want-len(chosen)-len(p.kept))
	}
	pods := make([]string, 0, len(chosen))
	chosenSet := map[string]bool{}
	for _, pod := range chosen {
		pods = append(pods, pod.Name)
		chosenSet[pod.Name] = true
	}
	for pod := range recordedPods(a) {
		if !chosenSet[pod] {
			pods = append(pods, pod) // may still hold it until unloaded
		}
	}
	freed := l.setLocked(key, pods)
	if prev := l.waiting[key]; prev != nil && p.waiting == 0 {
		for pod := range prev.wants {
			freed = append(freed, pod) // younger waiters may take them now
		}
	}
	delete(l.waiting, key)
	if p.waiting > 0 {
		w := &waiter{created: a.CreationTimestamp, wants: map[string]bool{}}
		for _, pod := range p.candidates {
			if !chosenSet[pod.Name] {
				w.wants[pod.Name] = true
				w.model = cmp.Or(w.model, pod.Labels[v1alpha1.ModelNameLabel])
			}
		}
		l.waiting[key] = w
	}
	return slices.DeleteFunc(l.waitersForLocked(a.Namespace, freed), func(w types.NamespacedName) bool { return w == key })
}

// poolUsage is, per model pool (namespace and model label of the pods), the adapter slots of
// the pods whose capacity is known, those in use, and the adapters waiting for room.
type poolUsage struct {
	total, used, waiting int
}

type poolKey struct{ namespace, model string }

// usage computes the pools from the cached pods (read only) and the ledger.
func (r *Reconciler) usage(ctx context.Context) (map[poolKey]*poolUsage, error) {
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.HasLabels{v1alpha1.ModelNameLabel}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	out := map[poolKey]*poolUsage{}
	pool := func(k poolKey) *poolUsage {
		if out[k] == nil {
			out[k] = &poolUsage{}
		}
		return out[k]
	}
	l := r.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !podServes(pod) {
			continue
		}
		c := r.capacityOf(pod)
		if !c.known {
			continue
		}
		u := pool(poolKey{pod.Namespace, pod.Labels[v1alpha1.ModelNameLabel]})
		u.total += c.slots
		u.used += min(c.slots, l.occupiedLocked(pod, "", r.inventory.listedNames(pod)))
	}
	for key, w := range l.waiting {
		pool(poolKey{key.Namespace, w.model}).waiting++
	}
	return out, nil
}

// wakeAdapter enqueues an adapter waiting for room (without blocking: a full channel leaves
// it to its periodic requeue).
func (r *Reconciler) wakeAdapter(key types.NamespacedName) {
	a := &v1alpha1.ModelAdapter{}
	a.Namespace, a.Name = key.Namespace, key.Name
	select {
	case r.inventory.events <- event.GenericEvent{Object: a}:
	default:
	}
}

// waitingRequeue is how soon an adapter waiting for room looks again when nothing woke it
// (a pod's metrics-reported capacity grew on an engine this controller does not poll).
func (r *Reconciler) waitingRequeue() time.Duration { return r.opts.InventoryPeriod }

// reportWaiting says once per episode (the Scheduled condition turning InsufficientCapacity)
// that the adapter waits for room.
func (r *Reconciler) reportWaiting(ctx context.Context, p *pass, full []string) {
	if p.waiting == 0 {
		return
	}
	p.requeueAfter(r.waitingRequeue())
	for _, c := range p.adapter.Status.Conditions {
		if c.Type == v1alpha1.ConditionScheduled && c.Reason == ReasonInsufficientCapacity {
			return
		}
	}
	klog.FromContext(ctx).V(2).Info("Adapter waits for a free adapter slot", "waiting", p.waiting, "fullPods", summarize(full))
	r.event(p.adapter, corev1.EventTypeWarning, ReasonInsufficientCapacity, "Place",
		fmt.Sprintf("%d placements wait for a free adapter slot: the candidate pods are full (%s)", p.waiting, summarize(full)))
}

// learnPods has the inventory learn (Inventory.Learn: one listing and one metrics read per
// pod incarnation, shared by every reconcile wanting it) the candidates the adapter is not on
// and that this process has not listed yet (or not since a container restarted), before
// placing: adapters an engine was started with (--lora-modules) or another client loaded take
// slots too, and a capacity only the engine's metrics tell would otherwise be known only after
// a first placement there, from the inventory's poll. Once listed, the poll keeps the pod
// current. A pod whose engine does not answer is placed on by what is known, as before.
func (r *Reconciler) learnPods(ctx context.Context, p *pass, current map[string]bool) {
	var wg sync.WaitGroup
	for _, pod := range p.candidates {
		if current[pod.Name] {
			continue
		}
		if _, known := r.inventory.Loaded(pod, ""); known {
			continue
		}
		ep, err := r.endpoint(pod, p.apiKey)
		if err != nil {
			continue // the load would fail the same way, and says so
		}
		wg.Go(func() { r.inventory.Learn(ctx, pod, ep) })
	}
	wg.Wait()
}
