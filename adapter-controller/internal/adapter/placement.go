package adapter

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// Policy names accepted in spec.schedulerName.
const (
	PolicyDefault       = "default"
	PolicyLeastAdapters = "least-adapters"
	PolicyRandom        = "random"
	PolicyBinPack       = "bin-pack"
)

// AIBrix's names of the same policies (its --model-adapter-scheduler-policy values).
const (
	aibrixLeastAdapters = "leastAdapters"
	aibrixBinPack       = "binPack"
)

// policyFor maps spec.schedulerName to a policy; known is false for an unknown name, which
// falls back to the default policy.
func policyFor(name string) (policy string, known bool) {
	switch name {
	case "", PolicyDefault, PolicyLeastAdapters, aibrixLeastAdapters:
		return PolicyLeastAdapters, true
	case PolicyBinPack, aibrixBinPack:
		return PolicyBinPack, true
	case PolicyRandom:
		return name, true
	default:
		return PolicyLeastAdapters, false
	}
}

// place chooses the pods the adapter should be on. With replicas nil, every candidate.
// Otherwise pods that already hold the adapter and are still candidates keep it (stable
// assignment); the remaining slots are filled by the policy. load reports how many adapters
// a pod holds. seed makes "random" deterministic per adapter, so repeated reconciles agree.
func place(candidates []*corev1.Pod, current map[string]bool, replicas *int32, policy string, load func(pod string) int, seed string) []*corev1.Pod {
	if replicas == nil {
		return candidates
	}
	want := int(*replicas)
	if want >= len(candidates) {
		return candidates
	}
	chosen := make([]*corev1.Pod, 0, want)
	var rest []*corev1.Pod
	for _, p := range candidates {
		if current[p.Name] && len(chosen) < want {
			chosen = append(chosen, p)
		} else {
			rest = append(rest, p)
		}
	}
	switch policy {
	case PolicyBinPack:
		slices.SortStableFunc(rest, func(a, b *corev1.Pod) int {
			return cmp.Or(cmp.Compare(load(b.Name), load(a.Name)), cmp.Compare(a.Name, b.Name))
		})
	case PolicyRandom:
		slices.SortStableFunc(rest, func(a, b *corev1.Pod) int {
			return cmp.Or(cmp.Compare(hash(seed, a.Name), hash(seed, b.Name)), cmp.Compare(a.Name, b.Name))
		})
	default:
		slices.SortStableFunc(rest, func(a, b *corev1.Pod) int {
			return cmp.Or(cmp.Compare(load(a.Name), load(b.Name)), cmp.Compare(a.Name, b.Name))
		})
	}
	for _, p := range rest {
		if len(chosen) == want {
			break
		}
		chosen = append(chosen, p)
	}
	slices.SortFunc(chosen, func(a, b *corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
	return chosen
}

// notReadyGraceLeft reports whether a live pod that is not Ready (not terminating, with an
// IP) turned NotReady less than NotReadyGracePeriod ago, and how much of the period is left.
// Such a pod keeps the adapter it holds: a readiness flap (a slow health check under load)
// must not unload and reload adapters. It is not published meanwhile (not Ready).
func (r *Reconciler) notReadyGraceLeft(pod *corev1.Pod) (time.Duration, bool) {
	if r.opts.NotReadyGracePeriod <= 0 || pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
		return 0, false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
			left := r.opts.NotReadyGracePeriod - r.clock.Since(c.LastTransitionTime.Time)
			return left, left > 0
		}
	}
	return 0, false
}

func hash(seed, name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(seed))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(name))
	return h.Sum64()
}

// choosePods computes the candidates and the pods the adapter should be on. A failed pod
// list is returned (retried by the workqueue), never reported as the adapter's state.
func (r *Reconciler) choosePods(ctx context.Context, p *pass) error {
	a := p.adapter
	if !p.specOK() {
		r.ledger.forget(client.ObjectKeyFromObject(a)) // waits for nothing: holds no younger adapter back
		return nil
	}
	sel, _ := selectorOf(a)
	opts := []client.ListOption{client.InNamespace(a.Namespace), client.MatchingLabelsSelector{Selector: sel}}
	if model, ok := sel.RequiresExactMatch(v1alpha1.ModelNameLabel); ok {
		// The usual selector names the model: only its pods are read (podModelIndex), not
		// every model pod of the namespace.
		opts = append(opts, client.MatchingFields{podModelIndex: model})
	}
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, opts...); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if a.Spec.BaseModel != nil && *a.Spec.BaseModel != "" {
			if m, ok := pod.Labels[v1alpha1.ModelNameLabel]; ok && m != *a.Spec.BaseModel {
				if podServes(pod) {
					p.excluded++
				}
				continue
			}
		}
		if podServes(pod) {
			p.candidates = append(p.candidates, pod)
		} else if left, ok := r.notReadyGraceLeft(pod); ok && r.loadConfirmed(pod, a) {
			p.kept = append(p.kept, pod)
			p.requeueAfter(left)
		}
	}
	slices.SortFunc(p.candidates, func(x, y *corev1.Pod) int { return cmp.Compare(x.Name, y.Name) })
	preflight(p, p.rank)

	current := map[string]bool{}
	for _, pod := range p.candidates {
		if r.loadConfirmed(pod, a) {
			current[pod.Name] = true
		}
	}
	var known bool
	p.policy, known = policyFor(a.Spec.SchedulerName)
	p.unknownPolicy = !known
	replicas := a.Spec.Replicas
	if replicas != nil && len(p.kept) > 0 {
		// Pods kept through a readiness flap keep the replicas that the Ready holders leave
		// free: loading elsewhere now would unload somewhere when they are Ready again, and a
		// Ready holder never gives its place to a pod that is not Ready.
		free := max(0, int(*replicas)-len(current))
		replicas = ptr.To(*replicas - int32(min(len(p.kept), free)))
	}
	if err := r.ledger.seed(ctx, r.client); err != nil {
		return err
	}
	r.learnPods(ctx, p, current)
	chosen, plan := r.ledger.fit(p, current, r.capacityOf, r.inventory.listedNames, func(fits []*corev1.Pod) []*corev1.Pod {
		return place(fits, current, replicas, p.policy, func(name string) int {
			for _, pod := range fits {
				if pod.Name == name {
					return r.inventory.Count(pod)
				}
			}
			return 0
		}, string(a.UID))
	})
	p.desired, p.full, p.capacityErrs = chosen, plan.full, plan.invalid
	for _, err := range plan.invalid {
		klog.FromContext(ctx).Error(err, "Reading a pod's adapter capacity")
	}
	r.reportWaiting(ctx, p, plan.full)
	return nil
}
