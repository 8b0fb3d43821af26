package adapter

// Engine calls of a pass: loads, reloads, unloads, bounded by the engine call slots.

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/shared/text"
)

// syncEngines loads the adapter where it should be and is not, reloads it where it serves
// an earlier artifact, and unloads it where it may be and should not be, in parallel within
// the global bound, honouring the per-pod backoff.
//
// A changed artifactURL is rolled out one pod at a time, so that the adapter stays served:
// an outdated instance first leaves the EndpointSlice (it is "parked" in one pass, whose
// EndpointSlice write drops it), and is reloaded in the next pass, which also parks the
// next one. A failed reload stops the rollout: the other pods keep serving the earlier
// artifact while the failed one is retried with backoff.
func (r *Reconciler) syncEngines(ctx context.Context, p *pass) {
	if !p.specOK() {
		return
	}
	c := &engineCalls{serving: map[string]bool{}}
	for _, name := range p.adapter.Status.Instances {
		c.serving[name] = true
	}
	for _, pod := range p.desired {
		r.planLoad(ctx, p, c, pod)
	}
	if len(p.toUnload) > 0 {
		published := r.published(ctx, p.adapter)
		for _, pod := range p.toUnload {
			r.planUnload(ctx, p, c, pod, published)
		}
	}
	runBounded(c.jobs, r.opts.MaxParallelEngineCalls)

	r.advanceRollout(ctx, p, c.outdated)
	for _, pod := range p.desired {
		if _, ok := p.artifacts[pod.Name]; ok {
			p.instances = append(p.instances, pod)
		}
	}
	r.reportLoads(p.adapter, c)
	r.reportUnloads(p.adapter, p.unloaded, c.unloadFailed)
}

// engineCalls collects the engine calls of one pass and what they did.
type engineCalls struct {
	mu                    sync.Mutex // guards the pass and the lists below while jobs run
	jobs                  []func()   // run on at most MaxParallelEngineCalls goroutines
	newlyLoaded, reloaded []string
	// loadFailed, reloadFailed and unloadFailed are the failures to report: a load's first
	// and its RetryLimit-th (not every retry), and every unload's.
	loadFailed, reloadFailed, unloadFailed []podFailure
	outdated                               []*corev1.Pod   // instances serving an earlier artifact, kept serving for now
	serving                                map[string]bool // in the EndpointSlice, as of the last pass
}

// findHolders finds the live pods that may hold the adapter and are not desired (to unload
// this pass) and the recorded pods that provably do not hold it (to drop from the record).
// Backoff entries of pods that are gone or no longer chosen are dropped.
func (r *Reconciler) findHolders(ctx context.Context, p *pass) error {
	if !p.specOK() {
		return nil
	}
	a := p.adapter
	desired := map[string]bool{}
	for _, pod := range p.desired {
		desired[pod.Name] = true
	}
	kept := map[string]bool{}
	for _, pod := range p.kept {
		kept[pod.Name] = true
	}
	holding, notHolding, err := r.holders(ctx, a, p.scheduled, false)
	if err != nil {
		return err
	}
	unloadable := map[string]bool{}
	for _, pod := range holding {
		if !desired[pod.Name] && !kept[pod.Name] {
			p.toUnload = append(p.toUnload, pod)
			unloadable[pod.Name] = true
		}
	}
	r.backoff.retain(a.Namespace, a.Name, "load", desired)
	r.backoff.retain(a.Namespace, a.Name, "unload", unloadable)
	for _, name := range notHolding {
		if !desired[name] && !kept[name] {
			p.notHolding = append(p.notHolding, name)
		}
	}
	return nil
}

// planLoad decides what one desired pod needs: nothing (it serves the current artifact), to
// wait for its turn in a rollout (it serves an earlier one from the EndpointSlice), or a load
// or reload once its backoff has expired.
func (r *Reconciler) planLoad(ctx context.Context, p *pass, c *engineCalls, pod *corev1.Pod) {
	a := p.adapter
	replace := false
	if r.loadConfirmed(pod, a) {
		artifact, current := r.servedArtifact(pod, a)
		switch {
		case current:
			p.artifacts[pod.Name] = artifact
			return
		case c.serving[pod.Name]:
			// Serves an earlier artifact and is in the EndpointSlice: it keeps serving until
			// its turn.
			p.artifacts[pod.Name] = artifact
			c.outdated = append(c.outdated, pod)
			return
		}
		replace = true // out of the EndpointSlice: reload now
	}
	k := backoffKey{a.Namespace, a.Name, pod.Name, "load"}
	if wait, n, lastErr := r.backoff.wait(k, r.clock.Now()); wait > 0 {
		r.noteLoadFailure(p, pod, lastErr, n, wait, replace)
		return
	}
	c.jobs = append(c.jobs, func() {
		err := r.load(ctx, a, pod, p, replace)
		c.mu.Lock()
		defer c.mu.Unlock()
		if err == nil {
			r.backoff.succeeded(k)
			p.artifacts[pod.Name] = a.Spec.ArtifactURL
			if replace {
				c.reloaded = append(c.reloaded, pod.Name)
			} else {
				c.newlyLoaded = append(c.newlyLoaded, pod.Name)
			}
			return
		}
		if notSent(err) {
			// The pod left its address after the pass read it, or the engine listed no free
			// slot just before the load: not a failure of the load. The next pass no longer
			// places on the pod, or counts what its engine listed.
			klog.FromContext(ctx).V(2).Info("Not loading", "pod", klog.KObj(pod), "reason", err.Error())
			p.requeueAfter(depublishedRecheck)
			return
		}
		r.forgetCredentials(a, err)
		n, wait := r.backoff.failed(k, r.clock.Now(), err)
		r.noteLoadFailure(p, pod, err, n, wait, replace)
		if n == 1 || n == r.opts.RetryLimit {
			f := podFailure{pod: pod.Name, attempt: n, err: err}
			if replace {
				c.reloadFailed = append(c.reloadFailed, f)
			} else {
				c.loadFailed = append(c.loadFailed, f)
			}
		}
	})
}

// noteLoadFailure records in the pass the n-th failure of a load (or reload) on pod, whose
// next attempt is due in wait.
func (r *Reconciler) noteLoadFailure(p *pass, pod *corev1.Pod, err error, n int, wait time.Duration, replace bool) {
	p.failures[pod.Name] = podError{err: err, failures: n}
	p.failedHard = p.failedHard || r.givesUp(err, n)
	p.requeueAfter(wait)
	if replace {
		p.rollout.failed = append(p.rollout.failed, pod.Name)
		p.rollout.err = err
	}
}

// planUnload unloads the adapter from a pod that may hold it and should not, once the
// unload's backoff has expired. Removal is make-before-break: a pod still published (in
// status.instances, or in the adapter's EndpointSlice as the cache has it) is only
// de-published by this pass (its status and EndpointSlice writes leave it out) and unloaded
// by a later one, so that no request routed by either reaches a pod that just lost the
// adapter.
func (r *Reconciler) planUnload(ctx context.Context, p *pass, c *engineCalls, pod *corev1.Pod, published map[string]bool) {
	a := p.adapter
	if published[pod.Name] {
		p.depublished = append(p.depublished, pod.Name)
		p.requeueAfter(depublishedRecheck)
		return
	}
	k := backoffKey{a.Namespace, a.Name, pod.Name, "unload"}
	if wait, _, _ := r.backoff.wait(k, r.clock.Now()); wait > 0 {
		p.requeueAfter(wait)
		return
	}
	c.jobs = append(c.jobs, func() {
		sentAt := r.clock.Now()
		err := r.unload(ctx, a, pod, p.apiKey)
		c.mu.Lock()
		defer c.mu.Unlock()
		if err == nil {
			r.backoff.succeeded(k)
			if left, settled := r.unanswered.settledBy(keyOfLoad(a, pod), sentAt, r.clock.Now()); !settled {
				// An unanswered load may still land: the pod stays recorded, unloaded again
				// once the load's horizon has passed.
				p.requeueAfter(left)
				return
			}
			p.unloaded = append(p.unloaded, pod.Name)
			return
		}
		n, wait := r.backoff.failed(k, r.clock.Now(), err)
		c.unloadFailed = append(c.unloadFailed, podFailure{pod: pod.Name, attempt: n, err: err})
		p.requeueAfter(wait)
	})
}

// depublishedRecheck bounds the wait before a de-published pod is looked at again (the
// watch events of the status and EndpointSlice writes usually come first).
const depublishedRecheck = time.Second

// published returns the pods the adapter is published on: its status instances and the
// pods of its EndpointSlices (as the cache has them, by targetRef).
func (r *Reconciler) published(ctx context.Context, a *v1alpha1.ModelAdapter) map[string]bool {
	out := map[string]bool{}
	for _, name := range a.Status.Instances {
		out[name] = true
	}
	for _, name := range []string{a.Name, a.Name + IPv6SliceSuffix} {
		eps := &discoveryv1.EndpointSlice{}
		if err := r.client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: name}, eps); err != nil {
			continue // none (or unreadable: the status instances still say what is served)
		}
		for _, e := range eps.Endpoints {
			if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
				out[e.TargetRef.Name] = true
			}
		}
	}
	return out
}

// advanceRollout takes the next outdated instance out of the EndpointSlice, unless a reload
// is failing: it is reloaded in the next pass.
func (r *Reconciler) advanceRollout(ctx context.Context, p *pass, outdated []*corev1.Pod) {
	slices.SortFunc(outdated, func(x, y *corev1.Pod) int { return cmp.Compare(x.Name, y.Name) })
	for _, pod := range outdated {
		p.rollout.outdated = append(p.rollout.outdated, pod.Name)
	}
	if len(p.rollout.failed) > 0 || len(outdated) == 0 {
		return
	}
	p.rollout.parked = outdated[0].Name
	klog.FromContext(ctx).V(2).Info("Taking an outdated instance out of the EndpointSlice to reload it",
		"pod", klog.KObj(outdated[0]), "artifact", p.adapter.Spec.ArtifactURL)
	p.rollout.outdated = p.rollout.outdated[1:]
	delete(p.artifacts, p.rollout.parked)
	p.requeueAfter(time.Second) // the status write enqueues it sooner; this is the bound
}

// reportLoads writes one event per pass and reason for the loads, the reloads and their
// failures, not one per pod: loading on N pods costs one API write, not N. An adapter's
// first placement that goes as planned gets no event: the status says it (Bound, with its
// transition time), and an event would be a fifth API write on the way to Running
// (docs/performance.md). Loads after that (scale-out, a lost instance replaced, success
// after failures) are events.
func (r *Reconciler) reportLoads(a *v1alpha1.ModelAdapter, c *engineCalls) {
	if len(c.newlyLoaded) > 0 && !firstPlacement(a) {
		slices.Sort(c.newlyLoaded)
		r.event(a, corev1.EventTypeNormal, ReasonLoaded, "Load", fmt.Sprintf("Loaded and verified on %d pods: %s",
			len(c.newlyLoaded), summarize(c.newlyLoaded)))
	}
	if len(c.reloaded) > 0 {
		slices.Sort(c.reloaded)
		r.event(a, corev1.EventTypeNormal, ReasonReloaded, "Load", fmt.Sprintf("Reloaded %s and verified on %d pods: %s",
			a.Spec.ArtifactURL, len(c.reloaded), summarize(c.reloaded)))
	}
	r.reportFailures(a, ReasonLoadFailed, "Load", "Loading "+a.Spec.ArtifactURL, c.loadFailed)
	r.reportFailures(a, ReasonReloadFailed, "Load", "Reloading "+a.Spec.ArtifactURL, c.reloadFailed)
}

// reportUnloads writes one event for the unloads of a pass and one for its failed unloads,
// naming the pods.
func (r *Reconciler) reportUnloads(a *v1alpha1.ModelAdapter, unloaded []string, failed []podFailure) {
	if len(unloaded) > 0 {
		names := slices.Sorted(slices.Values(unloaded))
		r.event(a, corev1.EventTypeNormal, ReasonUnloaded, "Unload", fmt.Sprintf("Unloaded from %d pods: %s", len(names), summarize(names)))
	}
	r.reportFailures(a, ReasonUnloadFailed, "Unload", "Unloading", failed)
}

// podFailure is a failed engine call on a pod, the attempt-th in a row.
type podFailure struct {
	pod     string
	attempt int
	err     error
}

// reportFailures writes one Warning event for the failures of one reason in a pass: how
// many pods, and the first few with their errors.
func (r *Reconciler) reportFailures(a *v1alpha1.ModelAdapter, reason, action, what string, failed []podFailure) {
	if len(failed) == 0 {
		return
	}
	slices.SortFunc(failed, func(x, y podFailure) int { return cmp.Compare(x.pod, y.pod) })
	parts := make([]string, len(failed))
	for i, f := range failed {
		parts[i] = fmt.Sprintf("pod %s (attempt %d): %v", f.pod, f.attempt, f.err)
	}
	r.event(a, corev1.EventTypeWarning, reason, action, fmt.Sprintf("%s failed on %d pods: %s", what, len(failed), summarizeSep(parts, 3, "; ")))
}

// maxEventNote is the longest event message the API server accepts (the events.k8s.io/v1
// note): a longer one is refused, and the event lost.
const maxEventNote = 1024

// event records an event on the adapter, its message cut to what the API server accepts.
func (r *Reconciler) event(a *v1alpha1.ModelAdapter, eventType, reason, action, msg string) {
	r.recorder.Eventf(a, nil, eventType, reason, action, "%s", text.Truncate(msg, maxEventNote-len("…")))
}

// firstPlacement reports whether the adapter, as read at the start of the pass, has never
// been loaded and no load of it has failed: its status has no instance and its Bound
// condition, if any, says only that loading has not happened yet.
func firstPlacement(a *v1alpha1.ModelAdapter) bool {
	if len(a.Status.Instances) > 0 {
		return false
	}
	c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionBound)
	return c == nil || c.Reason == ReasonLoading
}

// givesUp reports whether a load failure makes the adapter Failed: the engine's answer says
// repeating the same request cannot succeed without a change (a 400 for a bad artifact,
// runtime LoRA updating disabled, a wrong API key, an artifact the engine cannot fetch), or
// the retry limit is reached. Retries go on with backoff either way, so a fixed engine or
// artifact is picked up.
func (r *Reconciler) givesUp(err error, failures int) bool {
	return failures >= r.opts.RetryLimit || !engine.IsRetryable(err)
}

// summarize lists at most summarizedPods names and says how many more there are.
func summarize(names []string) string { return summarizeSep(names, summarizedPods, ", ") }

// summarizedPods is how many pods an event or message names before "and N more".
const summarizedPods = 10

// summarizeSep is summarize with items joined by sep.
func summarizeSep(items []string, n int, sep string) string {
	if len(items) <= n {
		return strings.Join(items, sep)
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], sep), len(items)-n)
}

// runBounded runs the jobs on at most limit goroutines and returns when all are done. The
// engine calls inside them still take a global engine call slot each; the bound keeps an
// adapter on thousands of pods from starting a goroutine per pod that then only waits.
func runBounded(jobs []func(), limit int) {
	work := make(chan func())
	var wg sync.WaitGroup
	for range min(max(limit, 1), len(jobs)) {
		wg.Go(func() {
			for job := range work {
				job()
			}
		})
	}
	for _, job := range jobs {
		work <- job
	}
	close(work)
	wg.Wait()
}

// endpoint is how the pod's engine is reached, with apiKey (--enable-runtime-sidecar says
// whether through the AIBrix runtime sidecar).
func (r *Reconciler) endpoint(pod *corev1.Pod, apiKey string) (engine.Endpoint, error) {
	return engine.EndpointForPod(pod, apiKey, engine.EndpointOptions{RuntimeSidecar: r.opts.RuntimeSidecar})
}

// acquire takes one of the global engine call slots (loads and unloads).
func (r *Reconciler) acquire(ctx context.Context) error { return r.slots.Acquire(ctx, 1) }

func (r *Reconciler) release() { r.slots.Release(1) }

// inventoryHooks connect the inventory to the reconciler's credentials, slots, AIBrix
// detector and clients.
func (r *Reconciler) inventoryHooks() inventoryHooks {
	return inventoryHooks{
		apiKey: func(ctx context.Context, a *v1alpha1.ModelAdapter) (string, error) {
			key, _, err := r.credentials(ctx, a)
			return key, err
		},
		endpoint: r.endpoint,
		acquire:  r.acquire, release: r.release,
		acquireList:   func(ctx context.Context) error { return r.listSlots.Acquire(ctx, 1) },
		releaseList:   func() { r.listSlots.Release(1) },
		aibrixRunning: func(ctx context.Context) bool { return r.opts.AIBrix.Check(ctx).Running },
		store:         newStrayStore(r.apiReader, r.client, r.opts.StrayNamespace),
		// An unload or a grown capacity makes room for the adapters waiting for it.
		freed:           func(pod types.NamespacedName) { r.ledger.wakeWaitersOf(pod) },
		capacityChanged: func(pod types.NamespacedName) { r.ledger.wakeWaitersOf(pod) },
	}
}

// load loads the adapter on one pod and verifies that the engine lists it. With replace, an
// earlier artifact is loaded there: vLLM replaces it in place (load_inplace); other engines,
// and vLLM versions without load_inplace, unload it first. The verification then also
// checks the path the engine lists, where it lists one.
//
// Each engine call holds an engine call slot; the verification waits without one for a
// listing of the pod that starts after the load returned, shared with the other loads onto
// the pod meanwhile (the listing takes a slot of its own).
func (r *Reconciler) load(ctx context.Context, a *v1alpha1.ModelAdapter, pod *corev1.Pod, p *pass, replace bool) error {
	ep, err := r.endpoint(pod, p.apiKey)
	if err != nil {
		return err
	}
	wantPath, err := engine.ResolveArtifact(ep.Kind, a.Spec.ArtifactURL)
	if err != nil {
		method := ReloadMethod("")
		if replace {
			method = ReloadUnloadLoad
		}
		recordLoad(ep.Kind, method, err)
		return err
	}
	req := engine.LoadRequest{
		Name: a.Name, ArtifactURL: a.Spec.ArtifactURL,
		Credentials: p.credentials, AdditionalConfig: engineConfig(a.Spec.AdditionalConfig),
	}
	if !replace {
		if replace, err = r.lookBeforeLoad(ctx, a, pod, ep, wantPath); err != nil {
			if !notSent(err) { // a load not sent is no load attempt (loraplane_adapter_loads_total)
				recordLoad(ep.Kind, "", err)
			}
			return err
		}
	}
	start := r.clock.Now()
	method, err := r.sendLoad(ctx, a, pod, ep, req, replace)
	loadedAt := r.inventory.listings.mark() // listings after this one may show the adapter
	switch {
	case err == nil:
		r.unanswered.answered(keyOfLoad(a, pod))
	case engine.Unanswered(err):
		r.unanswered.note(keyOfLoad(a, pod), r.clock.Now().Add(r.opts.EngineLoadTimeout))
	}
	if err == nil {
		err = r.verify(ctx, a, pod, ep, loadedAt, replace, wantPath)
	}
	if !notSent(err) {
		loadDuration.WithLabelValues().Observe(r.clock.Since(start).Seconds())
		recordLoad(ep.Kind, method, err)
	}
	if err != nil {
		return err
	}
	r.inventory.noteArtifact(pod, a, a.Spec.ArtifactURL)
	klog.FromContext(ctx).V(2).Info("Loaded adapter", "pod", klog.KObj(pod), "artifact", a.Spec.ArtifactURL, "reload", replace)
	return nil
}

// lookBeforeLoad lists the pod's engine before a plain load when what is known of it does not
// suffice, and reports whether a reload is needed instead:
//
//   - this process has not listed the pod yet (a new leader, or a first listing that failed):
//     the engine may hold the adapter from an unverified artifact (heldFromUnverified) or
//     adapters that take its slots;
//   - the pod's capacity is known and the load would take its last free slot by what the
//     ledger and the last listing know: an adapter the engine holds that neither knows (its
//     --lora-modules when its first listing failed, another client's load since) would be
//     evicted by the load.
//
// With a capacity known, the load is not sent (NoFreeSlot) when the listing leaves no slot for
// it; the listing is recorded, so the next pass counts what it showed and the adapter waits
// for room or goes elsewhere.
func (r *Reconciler) lookBeforeLoad(ctx context.Context, a *v1alpha1.ModelAdapter, pod *corev1.Pod, ep engine.Endpoint, wantPath string) (bool, error) {
	_, known := r.inventory.Loaded(pod, a.Name)
	c := r.capacityOf(pod)
	if known && (!c.known || r.ledger.free(pod, a.Name, r.inventory.listedNames(pod), c.slots) > 1) {
		return false, nil
	}
	l, err := r.inventory.listings.get(ctx, pod, ep, r.inventory.listings.mark())
	if err != nil {
		return false, err
	}
	if !known {
		r.inventory.readCapacity(ctx, pod, ep) // as Learn would have: the capacity may be in its metrics only
		c = r.capacityOf(pod)
		if r.heldFromUnverified(ctx, a, pod, ep, l, wantPath) {
			return true, nil // a reload takes no new slot
		}
	}
	if c.known {
		names := slices.Collect(maps.Keys(l))
		if free := r.ledger.free(pod, a.Name, names, c.slots); free < 1 {
			slices.Sort(names)
			return false, &engine.Error{Reason: ReasonNoFreeSlot, Engine: ep.Kind, Op: engine.OpLoad, Retryable: true,
				Message: fmt.Sprintf("pod %s has no free adapter slot (capacity %d from %s; the engine lists %s); not sent",
					pod.Name, c.slots, c.source, summarize(names))}
		}
	}
	return false, nil
}

// ReasonNoFreeSlot is the reason of a load not sent because the engine's listing just before
// it showed no free slot for the adapter.
const ReasonNoFreeSlot = "NoFreeSlot"

// heldFromUnverified reports, for a pod this process had not listed before (as on a new
// leader), whether its engine lists the adapter from an artifact other than wantPath: one
// taken out of the EndpointSlice for its reload when the previous leader stopped. A plain
// load would be answered "already loaded" and leave that artifact in place, so a reload is
// needed.
func (r *Reconciler) heldFromUnverified(ctx context.Context, a *v1alpha1.ModelAdapter, pod *corev1.Pod, ep engine.Endpoint, l listed, wantPath string) bool {
	path, ok := l[a.Name]
	if !ok || (engine.ListsLoadPath(ep.Kind) && path == wantPath) {
		return false
	}
	klog.FromContext(ctx).V(2).Info("The engine holds the adapter from an unverified artifact; reloading it",
		"pod", klog.KObj(pod), "listedPath", path, "artifact", a.Spec.ArtifactURL)
	return true
}

// sendLoad makes the engine calls of a load, or of a reload with replace: in place where
// the engine can (vLLM's load_inplace), else unload then load. Each call holds an engine
// call slot, and goes out only if the pod is still at its address (addressCheck).
func (r *Reconciler) sendLoad(ctx context.Context, a *v1alpha1.ModelAdapter, pod *corev1.Pod, ep engine.Endpoint, req engine.LoadRequest, replace bool) (ReloadMethod, error) {
	call := func(op engine.Op, f func() error) error {
		if err := r.acquire(ctx); err != nil {
			return err
		}
		defer r.release()
		if err := r.addressCheck(ctx, pod, op, true); err != nil {
			return err
		}
		return f()
	}
	if !replace {
		return "", call(engine.OpLoad, func() error { return r.engine.Load(ctx, ep, req) })
	}
	if ep.Kind == "" || ep.Kind == engine.KindVLLM {
		inPlace := req
		inPlace.Replace = true
		err := call(engine.OpLoad, func() error { return r.engine.Load(ctx, ep, inPlace) })
		if engine.ReasonOf(err) != engine.ReasonReloadUnsupported {
			return ReloadInPlace, err
		}
	}
	if err := call(engine.OpUnload, func() error { return r.engine.Unload(ctx, ep, a.Name) }); err != nil {
		return ReloadUnloadLoad, err
	}
	r.inventory.forgetAdapter(pod, a.Name)
	return ReloadUnloadLoad, call(engine.OpLoad, func() error { return r.engine.Load(ctx, ep, req) })
}

// verify waits for a listing of the pod that started after the load (loadedAt) and checks
// that it shows the adapter, and after a reload that it shows it from wantPath (where the
// engine lists load paths).
func (r *Reconciler) verify(ctx context.Context, a *v1alpha1.ModelAdapter, pod *corev1.Pod, ep engine.Endpoint, loadedAt uint64, replace bool, wantPath string) error {
	l, err := r.inventory.listings.get(ctx, pod, ep, loadedAt)
	if err != nil {
		return err
	}
	path, ok := l[a.Name]
	switch {
	case !ok:
		return &engine.Error{Reason: ReasonNotVerified, Engine: ep.Kind, Op: engine.OpList, Retryable: true,
			Message: "the engine answered the load with success but does not list the adapter"}
	case replace && engine.ListsLoadPath(ep.Kind) && path != "" && path != wantPath:
		return &engine.Error{Reason: ReasonNotVerified, Engine: ep.Kind, Op: engine.OpList, Retryable: true,
			Message: fmt.Sprintf("the engine answered the reload with success but lists the adapter from %q, not %q", path, wantPath)}
	}
	return nil
}

// unload removes the adapter from one pod; "not loaded" counts as success. The caller
// reports the outcome (one event per pass, reportUnloads).
func (r *Reconciler) unload(ctx context.Context, a *v1alpha1.ModelAdapter, pod *corev1.Pod, apiKey string) error {
	ep, err := r.endpoint(pod, apiKey)
	if err != nil {
		return err
	}
	if err := r.acquire(ctx); err != nil {
		return err
	}
	defer r.release()
	if err := r.addressCheck(ctx, pod, engine.OpUnload, false); err != nil {
		recordUnload(err)
		return err
	}
	if err := r.engine.Unload(ctx, ep, a.Name); err != nil {
		recordUnload(err)
		return err
	}
	recordUnload(nil)
	r.inventory.forgetAdapter(pod, a.Name)
	klog.FromContext(ctx).V(2).Info("Unloaded adapter", "pod", klog.KObj(pod))
	return nil
}
