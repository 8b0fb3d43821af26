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

	// syncEngines
	instances   []*corev1.Pod       // desired pods with the adapter loaded and verified
	failures    map[string]podError // pod -> last error of this pass or its backoff
	failedHard  bool                // some pod reached the retry limit
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

func newPass(a *v1alpha1.ModelAdapter) *pass {
	return &pass{adapter: a, failures: map[string]podError{}}
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
// and reads the engine API key.
func (r *Reconciler) resolveSpec(ctx context.Context, p *pass) {
	if _, err := selectorOf(p.adapter); err != nil {
		p.specErr, p.specReason = err, ReasonInvalidSpec
		return
	}
	key, creds, err := r.credentials(ctx, p.adapter)
	if err != nil {
		p.specErr, p.specReason = err, ReasonSecretUnavailable
		p.requeueAfter(time.Minute) // Secrets are not watched: look again later
		return
	}
	p.apiKey, p.credentials = key, creds
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
			return "", nil, fmt.Errorf("credentials Secret %s not found", ref.Name)
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

// choosePods computes the candidates and the pods the adapter should be on.
func (r *Reconciler) choosePods(ctx context.Context, p *pass) {
	if p.specErr != nil {
		return
	}
	a := p.adapter
	sel, _ := selectorOf(a)
	var pods corev1.PodList
	if err := r.client.List(ctx, &pods, client.InNamespace(a.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		p.specErr, p.specReason = fmt.Errorf("listing pods: %w", err), ReasonInternalError
		return
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
		if r.isLoaded(pod, a) {
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
}

// isLoaded reports whether the adapter is on the pod: the engine's last listing when there
// is one for this pod, else the adapter's own status (verified when it was written).
func (r *Reconciler) isLoaded(pod *corev1.Pod, a *v1alpha1.ModelAdapter) bool {
	if loaded, known := r.inventory.Loaded(pod, a.Name); known {
		return loaded
	}
	return containsString(a.Status.Instances, pod.Name)
}

// holders returns the live pods (with an IP, not terminating) that hold the adapter as far
// as isLoaded knows: those whose last inventory listing shows it, and the status instances
// not listed yet. Only these pods are read from the cache, not every pod of the namespace:
// listing (and deep-copying) the whole namespace per reconcile took more than half of the
// controller's CPU with 2 000 pods in it (make bench, pprof).
func (r *Reconciler) holders(ctx context.Context, a *v1alpha1.ModelAdapter) ([]*corev1.Pod, error) {
	names := map[string]bool{}
	for _, n := range a.Status.Instances {
		names[n] = true
	}
	for _, n := range r.inventory.PodsListing(a.Namespace, a.Name) {
		names[n] = true
	}
	var out []*corev1.Pod
	for _, name := range slices.Sorted(maps.Keys(names)) {
		pod := &corev1.Pod{}
		if err := r.client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: name}, pod); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("reading pod %s: %w", name, err)
		}
		if pod.Status.PodIP != "" && pod.DeletionTimestamp == nil && r.isLoaded(pod, a) {
			out = append(out, pod)
		}
	}
	return out, nil
}

// syncEngines loads the adapter where it should be and is not, and unloads it where it is
// and should not be, in parallel within the global bound, honouring the per-pod backoff.
func (r *Reconciler) syncEngines(ctx context.Context, p *pass) {
	if p.specErr != nil {
		return
	}
	a := p.adapter
	desired := map[string]bool{}
	for _, pod := range p.desired {
		desired[pod.Name] = true
	}

	// Pods that hold the adapter but should not.
	holders, err := r.holders(ctx, a)
	if err != nil {
		p.specErr, p.specReason = err, ReasonInternalError
		return
	}
	var toUnload []*corev1.Pod
	for _, pod := range holders {
		if !desired[pod.Name] {
			toUnload = append(toUnload, pod)
		}
	}

	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	loaded := map[string]bool{}
	var newlyLoaded []string
	for _, pod := range p.desired {
		if r.isLoaded(pod, a) {
			loaded[pod.Name] = true
			continue
		}
		k := backoffKey{a.Namespace, a.Name, pod.Name, "load"}
		if wait, n, lastErr := r.backoff.wait(k, r.clock.Now()); wait > 0 {
			p.failures[pod.Name] = podError{err: lastErr, failures: n}
			p.failedHard = p.failedHard || n >= r.opts.RetryLimit
			p.requeueAfter(wait)
			continue
		}
		wg.Go(func() {
			err := r.load(ctx, a, pod, p)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				r.backoff.succeeded(k)
				loaded[pod.Name] = true
				newlyLoaded = append(newlyLoaded, pod.Name)
				return
			}
			n, wait := r.backoff.failed(k, r.clock.Now(), err)
			p.failures[pod.Name] = podError{err: err, failures: n}
			p.failedHard = p.failedHard || n >= r.opts.RetryLimit
			p.requeueAfter(wait)
			if n == 1 || n == r.opts.RetryLimit {
				r.recorder.Eventf(a, pod, corev1.EventTypeWarning, ReasonLoadFailed, "Load",
					"Loading on pod %s failed (attempt %d): %v", pod.Name, n, err)
			}
		})
	}
	for _, pod := range toUnload {
		k := backoffKey{a.Namespace, a.Name, pod.Name, "unload"}
		if wait, _, _ := r.backoff.wait(k, r.clock.Now()); wait > 0 {
			p.requeueAfter(wait)
			continue
		}
		wg.Go(func() {
			err := r.unload(ctx, a, pod, p.apiKey)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				r.backoff.succeeded(k)
				return
			}
			_, wait := r.backoff.failed(k, r.clock.Now(), err)
			p.requeueAfter(wait)
		})
	}
	wg.Wait()
	for _, pod := range p.desired {
		if loaded[pod.Name] {
			p.instances = append(p.instances, pod)
		}
	}
	if len(newlyLoaded) > 0 {
		// One event per pass, not per pod: loading on N pods costs one API write, not N.
		slices.Sort(newlyLoaded)
		r.recorder.Eventf(a, nil, corev1.EventTypeNormal, ReasonLoaded, "Load", "Loaded and verified on %d pods: %s",
			len(newlyLoaded), summarize(newlyLoaded, 10))
	}
}

// summarize lists at most n names and says how many more there are.
func summarize(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// acquire takes one of the global engine call slots.
func (r *Reconciler) acquire(ctx context.Context) error {
	select {
	case r.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Reconciler) release() { <-r.slots }

// load loads the adapter on one pod and verifies that the engine lists it. The load holds
// an engine call slot; the verification waits without one for a listing of the pod that
// starts after the load returned, shared with the other loads onto the pod meanwhile (the
// listing takes a slot of its own).
func (r *Reconciler) load(ctx context.Context, a *v1alpha1.ModelAdapter, pod *corev1.Pod, p *pass) error {
	ep, err := engine.EndpointForPod(pod, p.apiKey)
	if err != nil {
		return err
	}
	if _, err := engine.ResolveArtifact(ep.Kind, a.Spec.ArtifactURL); err != nil {
		loadsTotal.WithLabelValues(string(ep.Kind), string(engine.ReasonOf(err))).Inc()
		return err
	}
	if err := r.acquire(ctx); err != nil {
		return err
	}
	start := r.clock.Now()
	err = func() error {
		defer r.release()
		return r.engine.Load(ctx, ep, engine.LoadRequest{
			Name: a.Name, ArtifactURL: a.Spec.ArtifactURL,
			Credentials: p.credentials, AdditionalConfig: engineConfig(a.Spec.AdditionalConfig),
		})
	}()
	loadedAt := r.inventory.listings.mark() // listings after this one may show the adapter
	if err == nil {
		var listed map[string]bool
		if listed, err = r.inventory.listings.get(ctx, pod, ep, loadedAt); err == nil && !listed[a.Name] {
			err = &engine.Error{Reason: ReasonNotVerified, Engine: ep.Kind, Op: engine.OpList, Retryable: true,
				Message: "the engine answered the load with success but does not list the adapter"}
		}
	}
	loadDuration.Observe(r.clock.Since(start).Seconds())
	if err != nil {
		loadsTotal.WithLabelValues(string(ep.Kind), string(engine.ReasonOf(err))).Inc()
		return err
	}
	loadsTotal.WithLabelValues(string(ep.Kind), "success").Inc()
	klog.FromContext(ctx).V(2).Info("Loaded adapter", "pod", klog.KObj(pod))
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
		unloadsTotal.WithLabelValues(string(engine.ReasonOf(err))).Inc()
		r.recorder.Eventf(a, pod, corev1.EventTypeWarning, ReasonUnloadFailed, "Unload", "Unloading from pod %s failed: %v", pod.Name, err)
		return err
	}
	unloadsTotal.WithLabelValues("success").Inc()
	r.inventory.forgetAdapter(pod, a.Name)
	klog.FromContext(ctx).V(2).Info("Unloaded adapter", "pod", klog.KObj(pod))
	r.recorder.Eventf(a, pod, corev1.EventTypeNormal, ReasonUnloaded, "Unload", "Unloaded from pod %s", pod.Name)
	return nil
}

// finalize unloads a deleted adapter from every pod that may hold it, retrying with backoff,
// and releases the finalizer when done or when the retries are exhausted, so an unreachable
// or deleted pod never blocks deletion forever.
func (r *Reconciler) finalize(ctx context.Context, a *v1alpha1.ModelAdapter) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(a, Finalizer) {
		return reconcile.Result{}, nil
	}
	apiKey, _, _ := r.credentials(ctx, a)
	holders, err := r.holders(ctx, a)
	if err != nil {
		return reconcile.Result{}, err
	}
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		failed []string
	)
	for _, pod := range holders {
		wg.Go(func() {
			if err := r.unload(ctx, a, pod, apiKey); err != nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s (%v)", pod.Name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(failed) > 0 {
		slices.Sort(failed)
		k := backoffKey{a.Namespace, a.Name, "", "delete"}
		n, wait := r.deletions.failed(k, r.clock.Now(), errors.New(strings.Join(failed, "; ")))
		if n < r.opts.DeletionRetryLimit {
			return reconcile.Result{RequeueAfter: wait}, nil
		}
		r.recorder.Eventf(a, nil, corev1.EventTypeWarning, ReasonUnloadAbandoned, "Delete",
			"Releasing the adapter after %d attempts; it may still be loaded on: %s", n, strings.Join(failed, "; "))
	}
	patch := client.MergeFrom(a.DeepCopy())
	controllerutil.RemoveFinalizer(a, Finalizer)
	if err := r.client.Patch(ctx, a, patch); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("removing finalizer: %w", err)
	}
	r.backoff.forgetAdapter(a.Namespace, a.Name)
	r.deletions.forgetAdapter(a.Namespace, a.Name)
	return reconcile.Result{}, nil
}
