package adapter

// The record of where the adapter may be loaded: the finalizer and the scheduled-pods
// annotation, written before any engine call (docs/reliability.md, crash consistency).

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// scheduledPods returns the pods of the adapter's scheduled-pods annotation, in either
// encoding (encodeScheduled).
func scheduledPods(a *v1alpha1.ModelAdapter) map[string]bool {
	out := map[string]bool{}
	for _, entry := range strings.Split(a.Annotations[v1alpha1.ScheduledPodsAnnotation], ",") {
		entry = strings.TrimSpace(entry)
		prefix, group, grouped := strings.Cut(entry, "{")
		if !grouped || !strings.HasSuffix(group, "}") {
			if entry != "" {
				out[entry] = true
			}
			continue
		}
		for _, suffix := range strings.Split(strings.TrimSuffix(group, "}"), "|") {
			out[prefix+suffix] = true
		}
	}
	return out
}

// The scheduled-pods annotation must fit in the 256 KiB the API server allows for all of an
// object's annotations together; a write past it is refused and the adapter could record no
// pod any more.
const (
	// plainScheduledLimit is the largest annotation written as AIBrix writes it: the pod names
	// comma-separated (about 2,500 pods with 25-character names).
	plainScheduledLimit = 64 << 10
	// maxScheduledBytes bounds the annotation, leaving room for the other annotations
	// (kubectl's last-applied-configuration among them).
	maxScheduledBytes = 128 << 10
)

// encodeScheduled encodes sorted pod names for the scheduled-pods annotation: comma-separated
// up to plainScheduledLimit, as AIBrix writes it; beyond it, the pods that share a prefix up
// to their last "-" (the pods of a ReplicaSet or a StatefulSet) are written once as
// prefix{suffix|suffix|...}, which is about 6 bytes per ReplicaSet pod. Pod names have no
// "{", "|" or "}", so the two cannot be confused; AIBrix, which splits the annotation at
// commas, reads pod names that do not exist from the compact form.
func encodeScheduled(pods []string) string {
	plain := strings.Join(pods, ",")
	if len(plain) <= plainScheduledLimit {
		return plain
	}
	var b strings.Builder
	for i := 0; i < len(pods); {
		prefix := pods[i][:strings.LastIndex(pods[i], "-")+1]
		j := i + 1
		for j < len(pods) && strings.HasPrefix(pods[j], prefix) && !strings.Contains(pods[j][len(prefix):], "-") {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j-i == 1 {
			b.WriteString(pods[i])
		} else {
			b.WriteString(prefix)
			b.WriteByte('{')
			for k := i; k < j; k++ {
				if k > i {
					b.WriteByte('|')
				}
				b.WriteString(pods[k][len(prefix):])
			}
			b.WriteByte('}')
		}
		i = j
	}
	return b.String()
}

// ReasonRecordFull: the scheduled-pods annotation has no room for another pod, so no load is
// sent to it (a load must be recorded before it is sent).
const ReasonRecordFull = "ScheduledPodsRecordFull"

// fitRecord returns want with only as many of the desired pods it adds as keep the
// annotation under maxScheduledBytes (the first, by name), and the pods left out. The pods
// recorded already stay: they may hold the adapter.
func fitRecord(want, recorded map[string]bool) (map[string]bool, []string) {
	if len(encodeScheduled(slices.Sorted(maps.Keys(want)))) <= maxScheduledBytes {
		return want, nil
	}
	var added []string
	for name := range want {
		if !recorded[name] {
			added = append(added, name)
		}
	}
	slices.Sort(added)
	with := func(n int) map[string]bool {
		out := map[string]bool{}
		for name := range want {
			if recorded[name] {
				out[name] = true
			}
		}
		for _, name := range added[:n] {
			out[name] = true
		}
		return out
	}
	fits := sort.Search(len(added)+1, func(n int) bool {
		return len(encodeScheduled(slices.Sorted(maps.Keys(with(n))))) > maxScheduledBytes
	}) - 1
	return with(max(fits, 0)), added[max(fits, 0):]
}

// recordedPods returns every pod the adapter records as possibly holding it: the
// scheduled-pods annotation and the status instances.
func recordedPods(a *v1alpha1.ModelAdapter) map[string]bool {
	out := scheduledPods(a)
	for _, name := range a.Status.Instances {
		out[name] = true
	}
	return out
}

// loadConfirmed reports whether the adapter is known to be loaded on the pod: the engine's
// last listing when there is one for this pod, else the adapter's status, whose instances
// were verified when it was written. Neither counts once a container of the pod restarted
// after the last listing (an engine restart loses its runtime adapters): the load is sent
// again ("already loaded" is a success) and verified.
func (r *Reconciler) loadConfirmed(pod *corev1.Pod, a *v1alpha1.ModelAdapter) bool {
	if loaded, listed := r.inventory.Loaded(pod, a.Name); listed {
		return loaded
	}
	if r.inventory.RestartedSinceListed(pod) {
		return false
	}
	return slices.Contains(a.Status.Instances, pod.Name)
}

// loadPossible is loadConfirmed, and also true for a pod not listed yet that the
// scheduled-pods annotation records (a load may have been sent there before a crash), and
// for a pod where a load that ended without an answer may still land (unansweredLoads).
func (r *Reconciler) loadPossible(pod *corev1.Pod, a *v1alpha1.ModelAdapter, scheduled map[string]bool) bool {
	if _, unanswered := r.unanswered.horizon(keyOfLoad(a, pod)); unanswered {
		return true // an unanswered load may have landed, or still land, there
	}
	if _, listed := r.inventory.Loaded(pod, a.Name); !listed && scheduled[pod.Name] {
		return true
	}
	return r.loadConfirmed(pod, a)
}

// holders returns the live pods (with an IP, not terminating) that may hold the adapter:
// those whose last inventory listing shows it from what it may have loaded there
// (Inventory.PodsListing), the status instances and the scheduled pods not listed yet. Only these pods are read from the cache, not every pod of the namespace:
// listing (and deep-copying) the whole namespace per reconcile is the controller's largest
// CPU cost at scale (docs/performance.md). It also returns the scheduled pods that provably
// do not hold the adapter: gone, or listed without it.
//
// With deleting, a pod the inventory last listed without the adapter counts as holding it:
// that listing may be older than a load made since (deletion can come right after a load,
// before the next poll), and an unload of an adapter that is not loaded is a success.
func (r *Reconciler) holders(ctx context.Context, a *v1alpha1.ModelAdapter, scheduled map[string]bool, deleting bool) (holding []*corev1.Pod, notHolding []string, err error) {
	names := maps.Clone(scheduled)
	for _, n := range a.Status.Instances {
		names[n] = true
	}
	for _, n := range r.inventory.PodsListing(a) {
		names[n] = true
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		pod, err := r.recordedPod(ctx, client.ObjectKey{Namespace: a.Namespace, Name: name})
		if err != nil {
			return nil, nil, fmt.Errorf("reading pod %s: %w", name, err)
		}
		if pod == nil {
			notHolding = append(notHolding, name)
			continue
		}
		switch {
		case !deleting && !r.loadPossible(pod, a, scheduled):
			notHolding = append(notHolding, name)
		case pod.Status.PodIP != "" && pod.DeletionTimestamp == nil:
			holding = append(holding, pod)
		}
	}
	return holding, notHolding, nil
}

// recordedPod reads a pod the adapter records, nil when it is gone. The pod cache holds only
// pods with a model label: a pod missing from it may have lost that label and still hold the
// adapter, so a miss is confirmed by a read from the API server (once: a gone pod leaves the
// record in this pass).
func (r *Reconciler) recordedPod(ctx context.Context, key client.ObjectKey) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := r.client.Get(ctx, key, pod)
	if apierrors.IsNotFound(err) {
		err = r.apiReader.Get(ctx, key, pod)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return pod, nil
}

// recordPods writes, before any engine call and in one write, the finalizer and the
// scheduled-pods annotation: every desired pod added, the pods that provably do not hold the
// adapter (listed without it, or gone) dropped. It writes only when something changes; the
// first reconcile of an adapter writes both at once, so recording costs no extra API write.
func (r *Reconciler) recordPods(ctx context.Context, p *pass) error {
	want := maps.Clone(p.scheduled)
	for _, name := range p.notHolding {
		delete(want, name)
	}
	for _, pod := range p.desired {
		want[pod.Name] = true
	}
	want, left := fitRecord(want, p.scheduled)
	if len(left) > 0 {
		p.leaveOut(left, &engine.Error{Reason: ReasonRecordFull, Retryable: true, Message: fmt.Sprintf(
			"the scheduled-pods annotation has no room for %d more pods (at most %d KiB)", len(left), maxScheduledBytes>>10)})
	}
	if controllerutil.ContainsFinalizer(p.adapter, Finalizer) && maps.Equal(want, p.scheduled) {
		return nil
	}
	if err := r.writeScheduled(ctx, p, want); err != nil {
		return fmt.Errorf("recording the pods to load on: %w", err)
	}
	return nil
}

// forgetUnloadedPods removes from the annotation the pods this pass unloaded the adapter
// from. It is the pass's second metadata write, and only passes that unload make it (a
// scale-down, a move): the record of a pod must outlive the load on it, so it cannot be
// dropped before the unload succeeded.
func (r *Reconciler) forgetUnloadedPods(ctx context.Context, p *pass) error {
	if len(p.unloaded) == 0 {
		return nil
	}
	want := maps.Clone(p.scheduled)
	for _, name := range p.unloaded {
		delete(want, name)
	}
	if maps.Equal(want, p.scheduled) {
		return nil
	}
	if err := r.writeScheduled(ctx, p, want); err != nil {
		return fmt.Errorf("forgetting unloaded pods: %w", err)
	}
	return nil
}

// writeScheduled writes the finalizer and the scheduled-pods annotation. The write is
// guarded by the resourceVersion read, so that an annotation read from a stale cache never
// overwrites a newer record; a conflict retries the reconcile.
func (r *Reconciler) writeScheduled(ctx context.Context, p *pass, pods map[string]bool) error {
	a := p.adapter
	patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(a, Finalizer)
	if len(pods) == 0 {
		delete(a.Annotations, v1alpha1.ScheduledPodsAnnotation)
	} else {
		if a.Annotations == nil {
			a.Annotations = map[string]string{}
		}
		a.Annotations[v1alpha1.ScheduledPodsAnnotation] = encodeScheduled(slices.Sorted(maps.Keys(pods)))
	}
	old := a.ResourceVersion
	if err := r.client.Patch(ctx, a, patch); err != nil {
		return err
	}
	r.superseded.wrote(client.ObjectKeyFromObject(a), old, a.ResourceVersion)
	p.scheduled = pods
	return nil
}
