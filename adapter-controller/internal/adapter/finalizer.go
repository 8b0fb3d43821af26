package adapter

// Deletion: unloading a deleted adapter everywhere it may be, then releasing the finalizers.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

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
// sweep, which unloads them when the pod answers again; they are written to the stray loads'
// ConfigMap before the finalizer goes, so a restart or a failover does not lose them.
// AIBrix's finalizer, on adapters created under AIBrix, is handled like ours and released
// with it.
//
// Without the credentials Secret (deleted with the adapter, as `kubectl delete -f` of a
// bundle does) each pod gets the last key that worked there (its last listing's).
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
	apiKey, _, credErr := r.credentials(ctx, a)
	if credErr != nil {
		klog.FromContext(ctx).Error(credErr, "Reading the engine API key for unloading; using the last key that worked on each pod")
	}
	// keyFor is the key sent to pod: the adapter's, else the last key that worked there,
	// else none (engines that need one answer 401, retried and reported like any other
	// unload failure).
	keyFor := func(pod *corev1.Pod) string {
		if credErr == nil {
			return apiKey
		}
		key, _ := r.inventory.lastKey(pod)
		return key
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
	sentAt := r.clock.Now()
	unloaded, failed, left := r.unloadFrom(ctx, a, holding, keyFor)
	if len(failed) == 0 {
		if wait := r.unansweredWait(a, holding, sentAt); wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		r.reportUnloads(a, unloaded, nil)
	} else {
		slices.SortFunc(failed, func(x, y podFailure) int { return cmp.Compare(x.pod, y.pod) })
		each := make([]string, len(failed))
		for i, f := range failed {
			each[i] = fmt.Sprintf("%s (%v)", f.pod, f.err)
		}
		n, wait, since := r.deletions.failedSince(k, r.clock.Now(), errors.New(strings.Join(each, "; ")))
		for i := range failed {
			failed[i].attempt = n
		}
		r.reportUnloads(a, unloaded, failed)
		if n < r.opts.DeletionRetryLimit || since < r.opts.MinDeletionWait() {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		for _, pod := range left {
			r.inventory.abandon(pod, a, keyFor(pod), r.loadedPath(pod, a))
		}
		// Recorded before the finalizer goes: a restart or a new leader finishes them.
		var unusable errStrayStoreUnusable
		switch err := r.inventory.syncStrays(ctx); {
		case errors.As(err, &unusable):
			klog.FromContext(ctx).Error(err, "Releasing the adapter with its abandoned unloads kept in memory only")
		case err != nil:
			return reconcile.Result{}, fmt.Errorf("recording the abandoned unloads: %w", err)
		}
		r.event(a, corev1.EventTypeWarning, ReasonUnloadAbandoned, "Delete", fmt.Sprintf(
			"Releasing the adapter after %d attempts; it may still be loaded on %d pods (unloaded by the inventory sweep when they answer): %s",
			n, len(each), summarizeSep(each, 5, "; ")))
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

// loadedPath is what the engine of pod lists for the load of the adapter this controller made
// there: the path of the pod's last listing, else, for engines that list the path they
// loaded from, the path of the artifact the status records for the pod (spec.artifactURL
// without a record); "" when unknown (behind the runtime sidecar).
func (r *Reconciler) loadedPath(pod *corev1.Pod, a *v1alpha1.ModelAdapter) string {
	if path, loaded, known := r.inventory.Served(pod, a.Name); known && loaded && path != "" {
		return path
	}
	ep, err := r.endpoint(pod, "")
	if err != nil || !engine.ListsLoadPath(ep.Kind) {
		return ""
	}
	artifact := a.Spec.ArtifactURL
	for _, ia := range a.Status.InstanceArtifacts {
		if ia.Pod == pod.Name {
			artifact = ia.ArtifactURL
		}
	}
	path, err := engine.ResolveArtifact(ep.Kind, artifact)
	if err != nil {
		return ""
	}
	return path
}

// unansweredWait is how long deletion must wait before unloading again: an unload sent (at
// sentAt) before the horizon of a load that ended without an answer proves nothing, as that
// load may still land. 0 when every unload settled its pod.
func (r *Reconciler) unansweredWait(a *v1alpha1.ModelAdapter, holding []*corev1.Pod, sentAt time.Time) time.Duration {
	var wait time.Duration
	for _, pod := range holding {
		if left, settled := r.unanswered.settledBy(keyOfLoad(a, pod), sentAt, r.clock.Now()); !settled && left > wait {
			wait = left
		}
	}
	return wait
}

// unloadFrom unloads the adapter from every pod in holding (bounded in parallel), each with
// keyFor's key, and returns the pods unloaded and those that failed.
func (r *Reconciler) unloadFrom(ctx context.Context, a *v1alpha1.ModelAdapter, holding []*corev1.Pod, keyFor func(*corev1.Pod) string) (unloaded []string, failed []podFailure, left []*corev1.Pod) {
	var (
		mu   sync.Mutex
		jobs []func()
	)
	for _, pod := range holding {
		jobs = append(jobs, func() {
			err := r.unload(ctx, a, pod, keyFor(pod))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, podFailure{pod: pod.Name, err: err})
				left = append(left, pod)
				return
			}
			unloaded = append(unloaded, pod.Name)
		})
	}
	runBounded(jobs, r.opts.MaxParallelEngineCalls)
	return unloaded, failed, left
}
