package adapter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/modelplane/modelplane/adapter-controller/internal/engine"
	"github.com/modelplane/modelplane/shared/aibrix"
	v1alpha1 "github.com/modelplane/modelplane/shared/api/model/v1alpha1"
)

// pass is the state of one reconcile of one adapter, filled by the steps in order.
type pass struct {
	adapter *v1alpha1.ModelAdapter

	// resolveSpec
	specErr     error  // the spec cannot be acted on (reason in specReason)
	specReason  string // PascalCase condition reason
	apiKey      string
	credentials map[string]string

	// choosePods
	candidates    []*corev1.Pod
	excluded      int // matching pods of another base model
	desired       []*corev1.Pod
	policy        string
	unknownPolicy bool

	// recordPods: the pods of the scheduled-pods annotation (updated when it is written)
	scheduled map[string]bool

	// syncEngines
	instances   []*corev1.Pod       // desired pods with the adapter loaded and verified
	artifacts   map[string]string   // instance -> the artifact URL it serves
	failures    map[string]podError // pod -> last error of this pass or its backoff
	failedHard  bool                // some pod reached the retry limit
	notHolding  []string            // scheduled pods that provably do not hold the adapter
	rollout     rollout
	requeueIn   time.Duration
	resourceErr error

	// syncResources
	resourcesReady bool
	resourceReason string
	resourceMsg    string
}

type podError struct {
	err      error
	failures int
}

// rollout is the state of a changed artifactURL being rolled out, one pod at a time.
type rollout struct {
	outdated []string // instances still serving an earlier artifact
	parked   string   // the instance taken out of the EndpointSlice in this pass, to reload next
	failed   []string // pods whose reload failed (out of the EndpointSlice, retried with backoff)
	err      error    // the last reload failure
}

// pending reports whether some pod does not serve the current artifact yet.
func (ro *rollout) pending() bool {
	return len(ro.outdated) > 0 || ro.parked != "" || len(ro.failed) > 0
}

func newPass(a *v1alpha1.ModelAdapter) *pass {
	return &pass{adapter: a, failures: map[string]podError{}, artifacts: map[string]string{}, scheduled: scheduledPods(a)}
}

func (p *pass) requeueAfter(d time.Duration) {
	if d > 0 && (p.requeueIn == 0 || d < p.requeueIn) {
		p.requeueIn = d
	}
}

func (p *pass) result() reconcile.Result {
	return reconcile.Result{RequeueAfter: p.requeueIn}
}

func selectorOf(a *v1alpha1.ModelAdapter) (labels.Selector, error) {
	if a.Spec.PodSelector == nil {
		return nil, errors.New("spec.podSelector is required")
	}
	sel, err := metav1.LabelSelectorAsSelector(a.Spec.PodSelector)
	if err != nil {
		return nil, fmt.Errorf("spec.podSelector: %w", err)
	}
	if sel.Empty() {
		return nil, errors.New("spec.podSelector must select something")
	}
	return sel, nil
}

// resolveSpec checks what the API schema cannot (selector syntax, the credentials Secret)
// and reads the engine API key. A spec that cannot be acted on is reported in the status
// (p.specErr); an error that a retry may not meet (the API server unavailable, say) is
// returned, for the workqueue's rate-limited retry, and nothing is written.
func (r *Reconciler) resolveSpec(ctx context.Context, p *pass) error {
	if _, err := selectorOf(p.adapter); err != nil {
		p.specErr, p.specReason = err, ReasonInvalidSpec
		return nil
	}
	key, creds, err := r.credentials(ctx, p.adapter)
	var missing secretMissingError
	switch {
	case errors.As(err, &missing):
		p.specErr, p.specReason = err, ReasonSecretUnavailable
		p.requeueAfter(time.Minute) // Secrets are not watched: look again later
		return nil
	case err != nil:
		return err
	}
	p.apiKey, p.credentials = key, creds
	return nil
}

// secretMissingError is a credentials Secret that does not exist: a spec problem, reported.
type secretMissingError struct{ name string }

func (e secretMissingError) Error() string {
	return fmt.Sprintf("credentials Secret %s not found", e.name)
}

// credentials returns the engine API key and the artifact credentials of an adapter: from
// credentialsSecretRef (its "api-key" entry is the key; all entries are the credentials),
// else additionalConfig["api-key"] (AIBrix compatibility).
func (r *Reconciler) credentials(ctx context.Context, a *v1alpha1.ModelAdapter) (string, map[string]string, error) {
	key := strings.TrimSpace(a.Spec.AdditionalConfig[APIKeySecretKey])
	if a.Spec.CredentialsSecretRef == nil || a.Spec.CredentialsSecretRef.Name == "" {
		return key, nil, nil
	}
	secret := &corev1.Secret{}
	ref := client.ObjectKey{Namespace: a.Namespace, Name: a.Spec.CredentialsSecretRef.Name}
	if err := r.apiReader.Get(ctx, ref, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil, secretMissingError{ref.Name}
		}
		return "", nil, fmt.Errorf("reading credentials Secret %s: %w", ref.Name, err)
	}
	creds := make(map[string]string, len(secret.Data))
	for k, v := range secret.Data {
		creds[k] = string(v)
	}
	if v, ok := creds[APIKeySecretKey]; ok && strings.TrimSpace(v) != "" {
		key = strings.TrimSpace(v)
	}
	return key, creds, nil
}

// choosePods computes the candidates and the pods the adapter should be on. A failed pod
// list is returned (retried by the workqueue), never reported as the adapter's state.
func (r *Reconciler) choosePods(ctx context.Context, p *pass) error {
	if p.specErr != nil {
		return nil
	}
	a := p.adapter
	sel, _ := selectorOf(a)
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.InNamespace(a.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !podServes(pod) {
			continue
		}
		if a.Spec.BaseModel != nil && *a.Spec.BaseModel != "" {
			if m, ok := pod.Labels[v1alpha1.ModelNameLabel]; ok && m != *a.Spec.BaseModel {
				p.excluded++
				continue
			}
		}
		p.candidates = append(p.candidates, pod)
	}
	slices.SortFunc(p.candidates, func(x, y *corev1.Pod) int { return cmp.Compare(x.Name, y.Name) })

	current := map[string]bool{}
	for _, pod := range p.candidates {
		if r.verified(pod, a) {
			current[pod.Name] = true
		}
	}
	var known bool
	p.policy, known = policyFor(a.Spec.SchedulerName)
	p.unknownPolicy = !known
	p.desired = place(p.candidates, current, a.Spec.Replicas, p.policy, func(name string) int {
		for _, pod := range p.candidates {
			if pod.Name == name {
				return r.inventory.Count(pod)
			}
		}
		return 0
	}, string(a.UID))
	return nil
}

// scheduledPods returns the pods of the adapter's scheduled-pods annotation.
func scheduledPods(a *v1alpha1.ModelAdapter) map[string]bool {
	out := map[string]bool{}
	for _, name := range strings.Split(a.Annotations[v1alpha1.ScheduledPodsAnnotation], ",") {
		if name = strings.TrimSpace(name); name != "" {
			out[name] = true
		}
	}
	return out
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

// verified reports whether the adapter is loaded on the pod: the engine's last listing when
// there is one for this pod, else the adapter's own status (verified when it was written).
func (r *Reconciler) verified(pod *corev1.Pod, a *v1alpha1.ModelAdapter) bool {
	if loaded, known := r.inventory.Loaded(pod, a.Name); known {
		return loaded
	}
	return slices.Contains(a.Status.Instances, pod.Name)
}

// mayHold reports whether the adapter may be loaded on the pod: the engine's last listing
// when there is one, else whether the adapter records the pod (as an instance, or as a pod
// a load may have been sent to before a crash).
func (r *Reconciler) mayHold(pod *corev1.Pod, a *v1alpha1.ModelAdapter, scheduled map[string]bool) bool {
	if loaded, known := r.inventory.Loaded(pod, a.Name); known {
		return loaded
	}
	return scheduled[pod.Name] || slices.Contains(a.Status.Instances, pod.Name)
}

// holders returns the live pods (with an IP, not terminating) that may hold the adapter:
// those whose last inventory listing shows it, the status instances and the scheduled pods
// not listed yet. Only these pods are read from the cache, not every pod of the namespace:
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
	for _, n := range r.inventory.PodsListing(a.Namespace, a.Name) {
		names[n] = true
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		pod := &corev1.Pod{}
		if err := r.client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: name}, pod); err != nil {
			if apierrors.IsNotFound(err) {
				notHolding = append(notHolding, name)
				continue
			}
			return nil, nil, fmt.Errorf("reading pod %s: %w", name, err)
		}
		switch {
		case !deleting && !r.mayHold(pod, a, scheduled):
			notHolding = append(notHolding, name)
		case pod.Status.PodIP != "" && pod.DeletionTimestamp == nil:
			holding = append(holding, pod)
		}
	}
	return holding, notHolding, nil
}

// recordPods adds the finalizer and every desired pod to the scheduled-pods annotation
// before any engine call, in one write, and only when something is missing. The first
// reconcile of an adapter writes both at once, so recording costs no extra API write.
func (r *Reconciler) recordPods(ctx context.Context, p *pass) error {
	want := maps.Clone(p.scheduled)
	for _, pod := range p.desired {
		want[pod.Name] = true
	}
	if controllerutil.ContainsFinalizer(p.adapter, Finalizer) && len(want) == len(p.scheduled) {
		return nil
	}
	if err := r.writeScheduled(ctx, p, want); err != nil {
		return fmt.Errorf("recording the pods to load on: %w", err)
	}
	return nil
}

// forgetUnloadedPods removes from the annotation the scheduled pods that are not desired and
// provably do not hold the adapter (unloaded, listed without it, or gone).
func (r *Reconciler) forgetUnloadedPods(ctx context.Context, p *pass) error {
	want := maps.Clone(p.scheduled)
	for _, name := range p.notHolding {
		delete(want, name)
	}
	for _, pod := range p.desired {
		want[pod.Name] = true
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
		a.Annotations[v1alpha1.ScheduledPodsAnnotation] = strings.Join(slices.Sorted(maps.Keys(pods)), ",")
	}
	if err := r.client.Patch(ctx, a, patch); err != nil {
		return err
	}
	p.scheduled = pods
	return nil
}

// servedArtifact tells which artifact the adapter on pod (loaded and verified) serves, and
// whether it is spec.artifactURL. What this process loaded and verified there (while the
// engine still lists it, from that path where it lists paths) is known from memory.
// Otherwise vLLM and SGLang list the lora_path they loaded, which is compared with the path spec.artifactURL resolves to; behind the runtime sidecar (and for
// engines that report no path) the artifact recorded in the status when the load was
// verified is compared. An instance without a record (loaded before artifacts were recorded)
// is taken as current; any other pod without one is reloaded.
func (r *Reconciler) servedArtifact(pod *corev1.Pod, a *v1alpha1.ModelAdapter) (artifact string, current bool) {
	want := a.Spec.ArtifactURL
	recorded := ""
	for _, ia := range a.Status.InstanceArtifacts {
		if ia.Pod == pod.Name {
			recorded = ia.ArtifactURL
		}
	}
	ep, epErr := engine.EndpointForPod(pod, "")
	listsPath := epErr == nil && engine.ListsLoadPath(ep.Kind)
	if artifact, ok := r.inventory.Artifact(pod, a.Name); ok {
		// What this process verified holds while the engine lists the path it loaded; a
		// listing from another path (the engine was changed behind its back) decides below.
		path, loaded, known := r.inventory.Served(pod, a.Name)
		resolved, err := engine.ResolveArtifact(ep.Kind, artifact)
		if !listsPath || !known || !loaded || path == "" || err != nil || resolved == path {
			return artifact, artifact == want
		}
	}
	if listsPath {
		if path, loaded, known := r.inventory.Served(pod, a.Name); known && loaded && path != "" {
			if wantPath, err := engine.ResolveArtifact(ep.Kind, want); err == nil && wantPath == path {
				return want, true
			}
			if old, err := engine.ResolveArtifact(ep.Kind, recorded); recorded != "" && err == nil && old == path {
				return recorded, false
			}
			return path, false
		}
	}
	switch {
	case recorded == want:
		return want, true
	case recorded != "":
		return recorded, false
	case slices.Contains(a.Status.Instances, pod.Name):
		return want, true // an instance from before artifacts were recorded
	default:
		return "", false // unknown (e.g. taken out for its reload): load it again
	}
}

// syncEngines loads the adapter where it should be and is not, reloads it where it serves
// an earlier artifact, and unloads it where it may be and should not be, in parallel within
// the global bound, honouring the per-pod backoff.
//
// A changed artifactURL is rolled out one pod at a time, so that the adapter stays served:
// an outdated instance first leaves the EndpointSlice (it is "parked" in one pass, whose
// EndpointSlice write drops it), and is reloaded in the next pass, which also parks the
// next one. A failed reload stops the rollout: the other pods keep serving the earlier
// artifact while the failed one is retried with backoff.
func (r *Reconciler) syncEngines(ctx context.Context, p *pass) error {
	if p.specErr != nil {
		return nil
	}
	a := p.adapter
	desired := map[string]bool{}
	for _, pod := range p.desired {
		desired[pod.Name] = true
	}

	holding, notHolding, err := r.holders(ctx, a, p.scheduled, false)
	if err != nil {
		return err
	}
	var toUnload []*corev1.Pod
	unloadable := map[string]bool{}
	for _, pod := range holding {
		if !desired[pod.Name] {
			toUnload = append(toUnload, pod)
			unloadable[pod.Name] = true
		}
	}
	// Backoff entries of pods that are gone or no longer chosen are dropped.
	r.backoff.retain(a.Namespace, a.Name, "load", desired)
	r.backoff.retain(a.Namespace, a.Name, "unload", unloadable)
	for _, name := range notHolding {
		if !desired[name] {
			p.notHolding = append(p.notHolding, name)
		}
	}

	var (
		mu   sync.Mutex
		jobs []func() // engine calls, run on at most MaxParallelEngineCalls goroutines
	)
	serving := map[string]bool{} // in the EndpointSlice, as of the last pass
	for _, name := range a.Status.Instances {
		serving[name] = true
	}
	var newlyLoaded, reloaded []string
	var outdated []*corev1.Pod
	for _, pod := range p.desired {
		replace := false
		if r.verified(pod, a) {
			artifact, current := r.servedArtifact(pod, a)
			switch {
			case current:
				p.artifacts[pod.Name] = artifact
				continue
			case serving[pod.Name]:
				// Serves an earlier artifact and is in the EndpointSlice: it keeps serving
				// until its turn.
				p.artifacts[pod.Name] = artifact
				outdated = append(outdated, pod)
				continue
			}
			replace = true // out of the EndpointSlice: reload now
		}
		k := backoffKey{a.Namespace, a.Name, pod.Name, "load"}
		if wait, n, lastErr := r.backoff.wait(k, r.clock.Now()); wait > 0 {
			p.failures[pod.Name] = podError{err: lastErr, failures: n}
			p.failedHard = p.failedHard || r.hopeless(lastErr, n)
			p.requeueAfter(wait)
			if replace {
				p.rollout.failed = append(p.rollout.failed, pod.Name)
				p.rollout.err = lastErr
			}
			continue
		}
		jobs = append(jobs, func() {
			err := r.load(ctx, a, pod, p, replace)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				r.backoff.succeeded(k)
				p.artifacts[pod.Name] = a.Spec.ArtifactURL
				if replace {
					reloaded = append(reloaded, pod.Name)
				} else {
					newlyLoaded = append(newlyLoaded, pod.Name)
				}
				return
			}
			n, wait := r.backoff.failed(k, r.clock.Now(), err)
			p.failures[pod.Name] = podError{err: err, failures: n}
			p.failedHard = p.failedHard || r.hopeless(err, n)
			p.requeueAfter(wait)
			reason := ReasonLoadFailed
			if replace {
				reason = ReasonReloadFailed
				p.rollout.failed = append(p.rollout.failed, pod.Name)
				p.rollout.err = err
			}
			if n == 1 || n == r.opts.RetryLimit {
				r.recorder.Eventf(a, pod, corev1.EventTypeWarning, reason, "Load",
					"Loading %s on pod %s failed (attempt %d): %v", a.Spec.ArtifactURL, pod.Name, n, err)
			}
		})
	}
	for _, pod := range toUnload {
		k := backoffKey{a.Namespace, a.Name, pod.Name, "unload"}
		if wait, _, _ := r.backoff.wait(k, r.clock.Now()); wait > 0 {
			p.requeueAfter(wait)
			continue
		}
		jobs = append(jobs, func() {
			err := r.unload(ctx, a, pod, p.apiKey)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				r.backoff.succeeded(k)
				p.notHolding = append(p.notHolding, pod.Name)
				return
			}
			_, wait := r.backoff.failed(k, r.clock.Now(), err)
			p.requeueAfter(wait)
		})
	}
	runBounded(jobs, r.opts.MaxParallelEngineCalls)

	// The next outdated instance leaves the EndpointSlice, unless a reload is failing.
	slices.SortFunc(outdated, func(x, y *corev1.Pod) int { return cmp.Compare(x.Name, y.Name) })
	for _, pod := range outdated {
		p.rollout.outdated = append(p.rollout.outdated, pod.Name)
	}
	if len(p.rollout.failed) == 0 && len(outdated) > 0 {
		p.rollout.parked = outdated[0].Name
		klog.FromContext(ctx).V(2).Info("Taking an outdated instance out of the EndpointSlice to reload it", "pod", klog.KObj(outdated[0]), "artifact", a.Spec.ArtifactURL)
		p.rollout.outdated = p.rollout.outdated[1:]
		delete(p.artifacts, p.rollout.parked)
		p.requeueAfter(time.Second) // the status write enqueues it sooner; this is the bound
	}
	for _, pod := range p.desired {
		if _, ok := p.artifacts[pod.Name]; ok {
			p.instances = append(p.instances, pod)
		}
	}
	if len(newlyLoaded) > 0 {
		// One event per pass, not per pod: loading on N pods costs one API write, not N.
		slices.Sort(newlyLoaded)
		r.recorder.Eventf(a, nil, corev1.EventTypeNormal, ReasonLoaded, "Load", "Loaded and verified on %d pods: %s",
			len(newlyLoaded), summarize(newlyLoaded, 10))
	}
	if len(reloaded) > 0 {
		slices.Sort(reloaded)
		r.recorder.Eventf(a, nil, corev1.EventTypeNormal, ReasonReloaded, "Load", "Reloaded %s and verified on %d pods: %s",
			a.Spec.ArtifactURL, len(reloaded), summarize(reloaded, 10))
	}
	return nil
}

// hopeless reports whether a load failure makes the adapter Failed: the engine's answer says
// repeating the same request cannot succeed without a change (a 400 for a bad artifact,
// runtime LoRA updating disabled, a wrong API key, an artifact the engine cannot fetch), or
// the retry limit is reached. Retries go on with backoff either way, so a fixed engine or
// artifact is picked up.
func (r *Reconciler) hopeless(err error, failures int) bool {
	return failures >= r.opts.RetryLimit || !engine.IsRetryable(err)
}

// summarize lists at most n names and says how many more there are.
func summarize(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
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

// acquire takes one of the global engine call slots.
func (r *Reconciler) acquire(ctx context.Context) error { return r.slots.Acquire(ctx, 1) }

func (r *Reconciler) release() { r.slots.Release(1) }

// load loads the adapter on one pod and verifies that the engine lists it. With replace, an
// earlier artifact is loaded there: vLLM replaces it in place (load_inplace); other engines,
// and vLLM versions without load_inplace, unload it first. The verification then also
// checks the path the engine lists, where it lists one.
//
// Each engine call holds an engine call slot; the verification waits without one for a
// listing of the pod that starts after the load returned, shared with the other loads onto
// the pod meanwhile (the listing takes a slot of its own).
func (r *Reconciler) load(ctx context.Context, a *v1alpha1.ModelAdapter, pod *corev1.Pod, p *pass, replace bool) error {
	ep, err := engine.EndpointForPod(pod, p.apiKey)
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
	call := func(f func() error) error {
		if err := r.acquire(ctx); err != nil {
			return err
		}
		defer r.release()
		return f()
	}
	if !replace {
		// Nothing says what the engine holds (no listing of the pod yet, as on a new leader)
		// and the pod may hold an earlier artifact: one taken out of the EndpointSlice for its
		// reload when the previous leader stopped. A plain load would be answered "already
		// loaded" and leave that artifact in place, so look first.
		if _, known := r.inventory.Loaded(pod, a.Name); !known {
			l, err := r.inventory.listings.get(ctx, pod, ep, r.inventory.listings.mark())
			if err != nil {
				recordLoad(ep.Kind, "", err)
				return err
			}
			if path, ok := l[a.Name]; ok && (!engine.ListsLoadPath(ep.Kind) || path != wantPath) {
				klog.FromContext(ctx).V(2).Info("The engine holds the adapter from an unverified artifact; reloading it",
					"pod", klog.KObj(pod), "listedPath", path, "artifact", a.Spec.ArtifactURL)
				replace = true
			}
		}
	}
	start := r.clock.Now()
	method := ReloadMethod("")
	if replace {
		method = ReloadUnloadLoad
		if ep.Kind == "" || ep.Kind == engine.KindVLLM {
			method = ReloadInPlace
			inPlace := req
			inPlace.Replace = true
			err = call(func() error { return r.engine.Load(ctx, ep, inPlace) })
			if engine.ReasonOf(err) == engine.ReasonReloadUnsupported {
				method, err = ReloadUnloadLoad, nil
			}
		}
		if method == ReloadUnloadLoad {
			err = call(func() error { return r.engine.Unload(ctx, ep, a.Name) })
			if err == nil {
				r.inventory.forgetAdapter(pod, a.Name)
			}
		}
	}
	if err == nil && method != ReloadInPlace {
		err = call(func() error { return r.engine.Load(ctx, ep, req) })
	}
	loadedAt := r.inventory.listings.mark() // listings after this one may show the adapter
	if err == nil {
		err = r.verify(ctx, a, pod, ep, loadedAt, replace, wantPath)
	}
	loadDuration.WithLabelValues().Observe(r.clock.Since(start).Seconds())
	recordLoad(ep.Kind, method, err)
	if err != nil {
		return err
	}
	r.inventory.noteArtifact(pod, a.Name, a.Spec.ArtifactURL)
	klog.FromContext(ctx).V(2).Info("Loaded adapter", "pod", klog.KObj(pod), "artifact", a.Spec.ArtifactURL, "reload", replace)
	return nil
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

// engineConfig is additionalConfig without the API key, which travels as a bearer token.
func engineConfig(in map[string]string) map[string]string {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		if k != APIKeySecretKey {
			out[k] = v
		}
	}
	return out
}

// unload removes the adapter from one pod; "not loaded" counts as success.
func (r *Reconciler) unload(ctx context.Context, a *v1alpha1.ModelAdapter, pod *corev1.Pod, apiKey string) error {
	ep, err := engine.EndpointForPod(pod, apiKey)
	if err != nil {
		return err
	}
	if err := r.acquire(ctx); err != nil {
		return err
	}
	defer r.release()
	if err := r.engine.Unload(ctx, ep, a.Name); err != nil {
		recordUnload(err)
		r.recorder.Eventf(a, pod, corev1.EventTypeWarning, ReasonUnloadFailed, "Unload", "Unloading from pod %s failed: %v", pod.Name, err)
		return err
	}
	recordUnload(nil)
	r.inventory.forgetAdapter(pod, a.Name)
	klog.FromContext(ctx).V(2).Info("Unloaded adapter", "pod", klog.KObj(pod))
	r.recorder.Eventf(a, pod, corev1.EventTypeNormal, ReasonUnloaded, "Unload", "Unloaded from pod %s", pod.Name)
	return nil
}

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
