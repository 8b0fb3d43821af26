package adapter

// Deletion: unloading a deleted adapter everywhere it may be, then releasing the finalizers.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	"github.com/loraplane/loraplane/shared/aibrix"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// finalize unloads a deleted adapter from every pod that may hold it — the scheduled pods
// included, so that loads a crashed process sent are undone too — retrying with backoff, and
// releases the finalizer when done or when the retries are exhausted, so an unreachable or
// deleted pod never blocks deletion forever. Abandoned unloads are handed to the inventory
// sweep, which unloads them when the pod answers again. AIBrix's finalizer, on adapters
// created under AIBrix, is handled like ours and released with it.
func (r *Reconciler) finalize(ctx context.Context, a *v1alpha1.ModelAdapter) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(a, Finalizer) && !controllerutil.ContainsFinalizer(a, v1alpha1.AIBrixFinalizer) {
		return reconcile.Result{}, nil
	}
	// An attempt only when the backoff since the previous one has expired, whatever enqueued
	// the adapter (pod events of recorded pods do): the retry limit counts attempts spaced by
	// the backoff, so the finalizer is held at least Options.MinDeletionWait.
	k := backoffKey{a.Namespace, a.Name, "", "delete"}
	if wait, _, _ := r.deletions.wait(k, r.clock.Now()); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	apiKey, _, err := r.credentials(ctx, a)
	if err != nil {
		// Unload without a key: engines that need one answer 401, which is retried and
		// reported like any other unload failure.
		klog.FromContext(ctx).Error(err, "Reading the engine API key for unloading")
	}
	holding, gone, err := r.holders(ctx, a, scheduledPods(a), true)
	if err != nil {
		return reconcile.Result{}, err
	}
	names := make([]string, 0, len(holding))
	for _, pod := range holding {
		names = append(names, pod.Name)
	}
	klog.FromContext(ctx).V(2).Info("Unloading a deleted adapter", "pods", names, "gonePods", gone)
	var (
		mu     sync.Mutex
		jobs   []func()
		failed []string
		left   []*corev1.Pod
	)
	for _, pod := range holding {
		jobs = append(jobs, func() {
			if err := r.unload(ctx, a, pod, apiKey); err != nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s (%v)", pod.Name, err))
				left = append(left, pod)
				mu.Unlock()
			}
		})
	}
	runBounded(jobs, r.opts.MaxParallelEngineCalls)
	if len(failed) > 0 {
		slices.Sort(failed)
		n, wait, since := r.deletions.failedSince(k, r.clock.Now(), errors.New(strings.Join(failed, "; ")))
		if n < r.opts.DeletionRetryLimit || since < r.opts.MinDeletionWait() {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		r.recorder.Eventf(a, nil, corev1.EventTypeWarning, ReasonUnloadAbandoned, "Delete",
			"Releasing the adapter after %d attempts; it may still be loaded on: %s (unloaded by the inventory sweep when they answer)", n, strings.Join(failed, "; "))
		for _, pod := range left {
			if ep, err := engine.EndpointForPod(pod, apiKey); err == nil {
				r.inventory.rememberStray(pod, ep, a.Name)
			}
		}
	}
	// Guarded by the resourceVersion read: the patch carries the whole finalizer list, and a
	// finalizer another controller added meanwhile must not be dropped.
	patch := client.MergeFromWithOptions(a.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(a, Finalizer)
	aibrixHeld := controllerutil.RemoveFinalizer(a, v1alpha1.AIBrixFinalizer)
	if err := r.client.Patch(ctx, a, patch); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("removing finalizer: %w", err)
	}
	if aibrixHeld {
		aibrix.RecordTakeOver(aibrix.ObjectFinalizer)
		klog.FromContext(ctx).V(2).Info("Released AIBrix's finalizer with ours", "finalizer", v1alpha1.AIBrixFinalizer)
	}
	r.backoff.forgetAdapter(a.Namespace, a.Name)
	r.deletions.forgetAdapter(a.Namespace, a.Name)
	return reconcile.Result{}, nil
}
