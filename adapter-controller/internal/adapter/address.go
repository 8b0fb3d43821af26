package adapter

// Pod addresses are reused: kubelet (and kwok) gives a new pod the IP of one just deleted,
// and the new pod may be another namespace's. An engine call addressed by a pod read from
// the cache some time earlier — at the start of the pass, before the listings that precede
// a load and the wait for an engine call slot — can reach the engine of the pod that holds
// the address now: a load (with the adapter's API key) lands on another pod, possibly
// another team's, where no ModelAdapter records it and where it may evict an adapter of a
// capacity-limited engine. So the cache is read again immediately before each load and
// unload request is sent (addressCheck).

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
)

// ReasonPodAddressMoved is the reason of an engine call not sent because the pod may no
// longer be at the address the call would go to.
const ReasonPodAddressMoved = "PodAddressMoved"

// addressCheck reads the pod from the cache just before an engine call to pod (as the pass
// read it) and returns a PodAddressMoved error when the call could reach another pod's
// engine: the cache has the pod's name for another pod (UID) or at another address. A pod
// keeps its address until its containers are gone, and only then can another pod get it:
// so a load also goes only to a pod still in the cache, not terminating and not finished.
// An unload may still go to a pod missing from the cache (one that stopped carrying the
// model label leaves the label-scoped cache; finalize and findHolders confirm it with an
// uncached read) or terminating (it may still hold the adapter until it stops). One cached
// read, no API request.
func (r *Reconciler) addressCheck(ctx context.Context, pod *corev1.Pod, op engine.Op, forLoad bool) error {
	ip := pod.Status.PodIP
	moved := func(format string, args ...any) error {
		return &engine.Error{Reason: ReasonPodAddressMoved, Op: op, Retryable: true,
			Message: fmt.Sprintf("pod %s/%s (UID %s) at %s: %s; not sent", pod.Namespace, pod.Name, pod.UID, ip, fmt.Sprintf(format, args...))}
	}
	now := &corev1.Pod{}
	switch err := r.client.Get(ctx, client.ObjectKeyFromObject(pod), now); {
	case apierrors.IsNotFound(err):
		if forLoad {
			return moved("the pod is gone")
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading pod %s/%s before an engine call: %w", pod.Namespace, pod.Name, err)
	case now.UID != pod.UID:
		return moved("the pod was replaced by another of its name (UID %s)", now.UID)
	case now.Status.PodIP != ip:
		return moved("the pod's address is %q now", now.Status.PodIP)
	case forLoad && now.DeletionTimestamp != nil:
		return moved("the pod is terminating")
	case forLoad && (now.Status.Phase == corev1.PodSucceeded || now.Status.Phase == corev1.PodFailed):
		return moved("the pod's containers are done (phase %s)", now.Status.Phase)
	}
	return nil
}

// notSent reports whether err is a load not sent because the pod is no longer at its address
// (addressCheck) or its engine listed no free slot just before (lookBeforeLoad).
func notSent(err error) bool {
	reason := engine.ReasonOf(err)
	return reason == ReasonPodAddressMoved || reason == ReasonNoFreeSlot
}
