package adapter

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// Inventory is what each engine pod last reported loaded (GET /v1/models). One periodic
// poll per engine pod serves every adapter on it, so engine traffic per period is O(pods),
// not O(adapters × pods). Adapters missing from a pod they are instances of are enqueued.
//
// The poll also sweeps strays: adapters this controller loaded (a ModelAdapter recorded the
// pod in its scheduled-pods annotation) whose ModelAdapter is gone while the engine still
// lists them — a deletion whose unloads were abandoned, or a finalizer removed by hand. Only
// such recorded loads are ever unloaded by the sweep: adapters the engine was started with,
// or that anyone else loaded, were never recorded.
type Inventory struct {
	engine   engine.Client
	reader   client.Reader
	period   time.Duration
	parallel int
	clock    clock.WithTicker
	apiKey   func(ctx context.Context, a *v1alpha1.ModelAdapter) (string, error)
	events   chan event.GenericEvent
	// acquire and release bound each unload with the reconciler's engine call slots,
	// acquireList and releaseList each listing with its listing slots.
	acquire, acquireList func(ctx context.Context) error
	release, releaseList func()
	listings             *listings

	mu   sync.Mutex
	pods map[types.NamespacedName]*podInventory
	// recorded is, as of the last poll, which adapters recorded each pod (scheduled-pods
	// annotation or status instances); strays are recorded loads whose adapter is gone.
	recorded map[types.NamespacedName]map[string]bool
	strays   map[types.NamespacedName]*strayLoads
	// vacated are the addresses of pods forgotten while this process's verified loads were
	// on them, by IP (see handOverVacated).
	vacated map[string]*vacatedAddress
}

// vacatedAddress is what this process loaded at a pod address whose pod it stopped
// tracking: gone, or recorded by no adapter any more, with loads still listed there.
type vacatedAddress struct {
	pod    types.NamespacedName
	apiKey string
	names  map[string]bool
	polls  int // polls that found no pod at the address
}

type podInventory struct {
	uid      types.UID
	ip       string            // the pod's address when it was listed
	ep       engine.Endpoint   // the endpoint of the last successful listing
	adapters map[string]string // name -> path the engine reports ("" if none)
	// artifacts are the artifact URLs this process loaded and verified, by adapter name,
	// kept while the engine lists the adapter.
	artifacts map[string]string
	// listedSeq is the sequence number of the listing recorded here (listings are numbered
	// as they start); changedAt the last number handed out when this process changed the
	// entry itself (an unload). A listing that started before either says less than the
	// entry already knows, and is not recorded.
	listedSeq, changedAt uint64
}

// strayLoads are adapters this controller loaded on one pod that no ModelAdapter records.
type strayLoads struct {
	ep    engine.Endpoint // how to reach the pod (API key of the adapter that loaded them)
	names map[string]bool
}

// inventoryHooks connect the inventory to the reconciler.
type inventoryHooks struct {
	apiKey               func(ctx context.Context, a *v1alpha1.ModelAdapter) (string, error)
	acquire, acquireList func(ctx context.Context) error
	release, releaseList func()
}

// NewInventory returns an inventory polling every period with at most parallel requests.
func NewInventory(c engine.Client, reader client.Reader, period time.Duration, parallel int, clk clock.WithTicker, hooks inventoryHooks) *Inventory {
	i := &Inventory{
		engine: c, reader: reader, period: period, parallel: max(parallel, 1), clock: clk,
		apiKey: hooks.apiKey, acquire: hooks.acquire, release: hooks.release,
		acquireList: hooks.acquireList, releaseList: hooks.releaseList,
		events:   make(chan event.GenericEvent, 1024),
		pods:     map[types.NamespacedName]*podInventory{},
		recorded: map[types.NamespacedName]map[string]bool{},
		strays:   map[types.NamespacedName]*strayLoads{},
		vacated:  map[string]*vacatedAddress{},
	}
	i.listings = newListings(i.list, func(pod *corev1.Pod, ep engine.Endpoint, adapters []engine.Adapter, seq uint64) {
		i.recordListing(pod, ep, adapters, seq, false)
	})
	return i
}

// Loaded reports whether the engine of pod last listed the adapter; known is false when the
// pod (this incarnation of it) has not been listed yet.
func (i *Inventory) Loaded(pod *corev1.Pod, adapter string) (loaded, known bool) {
	_, loaded, known = i.Served(pod, adapter)
	return loaded, known
}

// Served is Loaded with the path the engine reported for the adapter ("" when none).
func (i *Inventory) Served(pod *corev1.Pod, adapter string) (path string, loaded, known bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	p, ok := i.pods[client.ObjectKeyFromObject(pod)]
	if !ok || p.uid != pod.UID {
		return "", false, false
	}
	path, loaded = p.adapters[adapter]
	return path, loaded, true
}

// PodsListing returns the names of the pods of namespace whose last listing showed the
// adapter.
func (i *Inventory) PodsListing(namespace, adapter string) []string {
	i.mu.Lock()
	defer i.mu.Unlock()
	var out []string
	for key, p := range i.pods {
		if _, ok := p.adapters[adapter]; key.Namespace == namespace && ok {
			out = append(out, key.Name)
		}
	}
	return out
}

// Count is the number of adapters the pod last listed (0 when unknown).
func (i *Inventory) Count(pod *corev1.Pod) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	if p, ok := i.pods[client.ObjectKeyFromObject(pod)]; ok && p.uid == pod.UID {
		return len(p.adapters)
	}
	return 0
}

// record stores what the pod lists now, as the newest knowledge of it (tests, and callers
// outside the listings).
func (i *Inventory) record(pod *corev1.Pod, adapters []engine.Adapter) {
	i.recordListing(pod, engine.Endpoint{}, adapters, i.listings.mark(), true)
}

// recordListing stores a successful listing of the pod made through ep, numbered seq when it
// started, unless it started before the listing already recorded or before a change this
// process made since (force skips that check): two listings of one pod can be in flight at
// once (different API keys are not shared), and the one that answers last is not always
// the one that saw the engine last.
func (i *Inventory) recordListing(pod *corev1.Pod, ep engine.Endpoint, adapters []engine.Adapter, seq uint64, force bool) {
	m := make(map[string]string, len(adapters))
	for _, a := range adapters {
		m[a.Name] = a.Path
	}
	key := client.ObjectKeyFromObject(pod)
	i.mu.Lock()
	defer i.mu.Unlock()
	artifacts := map[string]string{}
	if old := i.pods[key]; old != nil && old.uid == pod.UID {
		if !force && (seq <= old.listedSeq || seq <= old.changedAt) {
			return // its waiters still get its answer; the inventory keeps what is newer
		}
		for name, artifact := range old.artifacts {
			if _, ok := m[name]; ok {
				artifacts[name] = artifact
			}
		}
	}
	i.pods[key] = &podInventory{uid: pod.UID, ip: pod.Status.PodIP, ep: ep, adapters: m, artifacts: artifacts, listedSeq: seq}
}

// noteArtifact records the artifact a verified load put on the pod.
func (i *Inventory) noteArtifact(pod *corev1.Pod, adapter, artifact string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if p, ok := i.pods[client.ObjectKeyFromObject(pod)]; ok && p.uid == pod.UID {
		if _, listed := p.adapters[adapter]; listed {
			p.artifacts[adapter] = artifact
		}
	}
}

// Artifact returns the artifact this process loaded and verified on the pod, if the engine
// still lists the adapter.
func (i *Inventory) Artifact(pod *corev1.Pod, adapter string) (string, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if p, ok := i.pods[client.ObjectKeyFromObject(pod)]; ok && p.uid == pod.UID {
		artifact, ok := p.artifacts[adapter]
		return artifact, ok
	}
	return "", false
}

// forgetAdapter records that the adapter was unloaded from the pod.
func (i *Inventory) forgetAdapter(pod *corev1.Pod, adapter string) {
	seq := i.listings.mark() // listings numbered up to seq started before the unload returned
	i.mu.Lock()
	defer i.mu.Unlock()
	if p, ok := i.pods[client.ObjectKeyFromObject(pod)]; ok && p.uid == pod.UID {
		delete(p.adapters, adapter)
		delete(p.artifacts, adapter)
		p.changedAt = max(p.changedAt, seq)
	}
}

// rememberStray hands the sweep an adapter that may still be loaded on the pod while its
// ModelAdapter goes away (its unload was abandoned).
func (i *Inventory) rememberStray(pod *corev1.Pod, ep engine.Endpoint, adapter string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.addStray(client.ObjectKeyFromObject(pod), ep, adapter)
}

// addStray records a stray load; i.mu is held.
func (i *Inventory) addStray(key types.NamespacedName, ep engine.Endpoint, adapter string) {
	s := i.strays[key]
	if s == nil {
		s = &strayLoads{ep: ep, names: map[string]bool{}}
		i.strays[key] = s
	}
	if ep.Host != "" {
		s.ep = ep
	}
	s.names[adapter] = true
}

// Refresh returns the adapters of one pod from a listing that starts after the call, and
// records the answer. Callers that refresh the same pod at the same time share the listing.
func (i *Inventory) Refresh(ctx context.Context, pod *corev1.Pod, ep engine.Endpoint) (listed, error) {
	return i.listings.get(ctx, pod, ep, i.listings.mark())
}

// list makes one engine call within a listing slot.
func (i *Inventory) list(ctx context.Context, ep engine.Endpoint) ([]engine.Adapter, error) {
	if err := i.acquireList(ctx); err != nil {
		return nil, err
	}
	defer i.releaseList()
	return i.engine.ListAdapters(ctx, ep)
}

// Start polls every period until ctx ends. It is added to the gated manager, so it starts
// after the caches have synced, and only on the leader.
func (i *Inventory) Start(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("inventory")
	ticker := i.clock.NewTicker(i.period)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
		if err := i.poll(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "Polling engine inventories")
		}
	}
}

// pollTarget is one pod the poll lists, and why.
type pollTarget struct {
	instanceOf []*v1alpha1.ModelAdapter // adapters expecting to be loaded there
	keyOf      *v1alpha1.ModelAdapter   // an adapter recording the pod: its API key lists it
	strays     bool                     // the pod may hold stray loads
	// misplaced are the adapters with a load of this process on the pod that they do not
	// record (the pod took the address of one they were loaded on): enqueued when the pod
	// lists them, their reconcile unloads them.
	misplaced map[string]*v1alpha1.ModelAdapter
}

// poll lists the adapters of every pod that some adapter records (as an instance or a
// scheduled pod), enqueues the adapters an engine no longer lists on their instances, and
// unloads stray loads. Pods whose engine cannot be reached are left for the adapters' own
// reconciles (their retries and backoff) to handle.
func (i *Inventory) poll(ctx context.Context) error {
	var adapters v1alpha1.ModelAdapterList
	if err := i.reader.List(ctx, &adapters); err != nil {
		return err
	}
	targets, exists, recorded := pollTargets(adapters.Items)
	if err := i.handOverVacated(ctx); err != nil {
		return err
	}
	i.noteStrays(targets, exists, recorded)

	sem := semaphore.NewWeighted(int64(i.parallel))
	var wg sync.WaitGroup
	keys := apiKeys{get: i.apiKey, byRef: map[apiKeyRef]apiKeyResult{}}
	for key, t := range targets {
		pod := &corev1.Pod{}
		if err := i.reader.Get(ctx, key, pod); err != nil {
			if apierrors.IsNotFound(err) {
				i.forgetStrays(key)
			}
			continue // the pod watch enqueues its adapters
		}
		if !podServes(pod) {
			continue
		}
		ep, ok := i.endpoint(ctx, pod, t, &keys)
		if !ok {
			continue
		}
		if err := sem.Acquire(ctx, 1); err != nil {
			wg.Wait()
			return err // ctx ended
		}
		wg.Go(func() {
			defer sem.Release(1)
			i.pollPod(ctx, pod, ep, t)
		})
	}
	wg.Wait()
	return nil
}

// pollTargets returns, from every adapter, the pods to list (with what to check there), the
// adapters that exist, and for each pod the adapters recording it.
func pollTargets(adapters []v1alpha1.ModelAdapter) (targets map[types.NamespacedName]*pollTarget, exists map[types.NamespacedName]*v1alpha1.ModelAdapter, recorded map[types.NamespacedName]map[string]bool) {
	targets = map[types.NamespacedName]*pollTarget{}
	target := func(key types.NamespacedName) *pollTarget {
		if targets[key] == nil {
			targets[key] = &pollTarget{}
		}
		return targets[key]
	}
	exists = map[types.NamespacedName]*v1alpha1.ModelAdapter{}
	recorded = map[types.NamespacedName]map[string]bool{}
	for idx := range adapters {
		a := &adapters[idx]
		exists[client.ObjectKeyFromObject(a)] = a
		for pod := range recordedPods(a) {
			key := types.NamespacedName{Namespace: a.Namespace, Name: pod}
			if recorded[key] == nil {
				recorded[key] = map[string]bool{}
			}
			recorded[key][a.Name] = true
			if t := target(key); t.keyOf == nil { // keep knowing what every recorded pod holds
				t.keyOf = a
			}
		}
		if a.DeletionTimestamp != nil {
			continue
		}
		for _, pod := range a.Status.Instances {
			t := target(types.NamespacedName{Namespace: a.Namespace, Name: pod})
			t.instanceOf = append(t.instanceOf, a)
		}
	}
	return targets, exists, recorded
}

// noteStrays updates the stray loads from this poll's adapters and marks the pods holding
// some as targets. A stray whose ModelAdapter exists is left to it: forgotten when the
// adapter records the pod, else marked misplaced (its adapter is enqueued when the pod lists
// it). The pods no adapter is on any more are forgotten, their addresses kept as vacated
// while loads of this process were listed there.
func (i *Inventory) noteStrays(targets map[types.NamespacedName]*pollTarget, exists map[types.NamespacedName]*v1alpha1.ModelAdapter, recorded map[types.NamespacedName]map[string]bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	// A load recorded at the last poll whose adapter is gone now was never unloaded by a
	// finalizer (or it would not be recorded any more): it is a stray until a listing shows
	// it is not loaded.
	for key, names := range i.recorded {
		for name := range names {
			if exists[types.NamespacedName{Namespace: key.Namespace, Name: name}] == nil {
				ep := engine.Endpoint{}
				if p := i.pods[key]; p != nil {
					ep = p.ep
				}
				i.addStray(key, ep, name)
			}
		}
	}
	i.recorded = recorded
	for key, s := range i.strays {
		t := targets[key]
		if t == nil {
			t = &pollTarget{}
		}
		for name := range s.names {
			a := exists[types.NamespacedName{Namespace: key.Namespace, Name: name}]
			switch {
			case a == nil:
			case recorded[key][name]:
				delete(s.names, name) // its ModelAdapter records the pod and decides
			default:
				if t.misplaced == nil {
					t.misplaced = map[string]*v1alpha1.ModelAdapter{}
				}
				t.misplaced[name] = a
			}
		}
		if len(s.names) == 0 {
			delete(i.strays, key)
			continue
		}
		t.strays = true
		targets[key] = t
	}
	for key, p := range i.pods {
		if _, ok := targets[key]; ok {
			continue
		}
		if len(p.artifacts) > 0 && p.ip != "" {
			v := &vacatedAddress{pod: key, apiKey: p.ep.APIKey, names: map[string]bool{}}
			for name := range p.artifacts {
				v.names[name] = true
			}
			i.vacated[p.ip] = v
		}
		delete(i.pods, key)
	}
}

// handOverVacated checks the vacated addresses. Pod addresses are reused: a pod that replaces
// another can get its IP, and a load sent to the old pod just before it went (from a cache
// that still showed it) reaches the new pod's engine, where no ModelAdapter records it. So
// the loads this process verified at an address it stopped tracking become strays of the
// pod that has the address now (the same pod too, if it is still there): the sweep unloads
// those whose ModelAdapter is gone, the others are misplaced (noteStrays). An address no pod
// has is dropped after a few polls: nothing answers there.
func (i *Inventory) handOverVacated(ctx context.Context) error {
	i.mu.Lock()
	n := len(i.vacated)
	i.mu.Unlock()
	if n == 0 {
		return nil
	}
	var pods corev1.PodList // the cache's objects, read only
	if err := i.reader.List(ctx, &pods, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	byIP := map[string][]*corev1.Pod{}
	for idx := range pods.Items {
		if pod := &pods.Items[idx]; pod.Status.PodIP != "" && pod.DeletionTimestamp == nil {
			byIP[pod.Status.PodIP] = append(byIP[pod.Status.PodIP], pod)
		}
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	for ip, v := range i.vacated {
		holders := byIP[ip]
		if len(holders) == 0 {
			if v.polls++; v.polls >= vacatedPolls {
				delete(i.vacated, ip)
			}
			continue
		}
		for _, pod := range holders {
			ep, err := engine.EndpointForPod(pod, v.apiKey)
			if err != nil {
				continue
			}
			names := slices.Sorted(maps.Keys(v.names))
			klog.FromContext(ctx).V(2).Info("Checking the loads of a pod this controller stopped tracking on the pod at its address",
				"pod", klog.KObj(pod), "previousPod", v.pod, "address", ip, "adapters", names)
			for _, name := range names {
				i.addStray(client.ObjectKeyFromObject(pod), ep, name)
			}
		}
		delete(i.vacated, ip)
	}
	return nil
}

// vacatedPolls is how many polls an address no pod has is kept as vacated: long enough for
// a replacement pod to reach the cache.
const vacatedPolls = 3

// pollPod lists one pod's engine, sweeps its stray loads, and enqueues the adapters whose
// instance it is that it no longer lists.
func (i *Inventory) pollPod(ctx context.Context, pod *corev1.Pod, ep engine.Endpoint, t *pollTarget) {
	listed, err := i.Refresh(ctx, pod, ep)
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Listing engine adapters failed", "pod", klog.KObj(pod), "err", err.Error())
		return
	}
	if t.strays {
		i.sweep(ctx, pod, ep, listed, t.misplaced)
	}
	for _, a := range t.instanceOf {
		if !listed.has(a.Name) {
			select {
			case i.events <- event.GenericEvent{Object: a}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// endpoint is how the poll reaches the pod: with the API key of an adapter recording it,
// else the one that stray loads were made with. A pod it cannot address is skipped (and
// logged): the reconciles of its adapters report why.
func (i *Inventory) endpoint(ctx context.Context, pod *corev1.Pod, t *pollTarget, keys *apiKeys) (engine.Endpoint, bool) {
	apiKey := ""
	if t.keyOf != nil {
		key, err := keys.of(ctx, t.keyOf)
		if err != nil {
			klog.FromContext(ctx).V(4).Info("Skipping a pod: no API key", "pod", klog.KObj(pod), "err", err.Error())
			return engine.Endpoint{}, false
		}
		apiKey = key
	} else {
		i.mu.Lock()
		if s := i.strays[client.ObjectKeyFromObject(pod)]; s != nil {
			apiKey = s.ep.APIKey
		}
		i.mu.Unlock()
	}
	ep, err := engine.EndpointForPod(pod, apiKey)
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Skipping a pod that cannot be addressed", "pod", klog.KObj(pod), "err", err.Error())
		return engine.Endpoint{}, false
	}
	return ep, true
}

// apiKeys reads the engine API keys of one poll: one read per credentials Secret (or
// additionalConfig key) per poll, however many pods it serves. A Secret watch would save
// even that, but needs list and watch on Secrets, which the controller's RBAC does not
// grant: it may only get the Secrets adapters name.
type apiKeys struct {
	get   func(ctx context.Context, a *v1alpha1.ModelAdapter) (string, error)
	byRef map[apiKeyRef]apiKeyResult
}

// apiKeyRef is where an adapter's API key comes from.
type apiKeyRef struct {
	namespace, secret, inline string
}

type apiKeyResult struct {
	key string
	err error
}

func (k *apiKeys) of(ctx context.Context, a *v1alpha1.ModelAdapter) (string, error) {
	ref := apiKeyRef{namespace: a.Namespace, inline: a.Spec.AdditionalConfig[APIKeySecretKey]}
	if a.Spec.CredentialsSecretRef != nil {
		ref.secret = a.Spec.CredentialsSecretRef.Name
	}
	r, ok := k.byRef[ref]
	if !ok {
		r.key, r.err = k.get(ctx, a)
		k.byRef[ref] = r
	}
	return r.key, r.err
}

// forgetStrays drops the stray loads of a pod that is gone.
func (i *Inventory) forgetStrays(key types.NamespacedName) {
	i.mu.Lock()
	defer i.mu.Unlock()
	delete(i.strays, key)
}

// sweep unloads, through ep (which just listed the pod), the stray loads of a pod that its
// listing still shows, and forgets those it does not show. A misplaced load (its ModelAdapter
// exists) is not unloaded here: its adapter is enqueued, and its reconcile, which sees the
// pod listing it, unloads it with its own retries and events.
func (i *Inventory) sweep(ctx context.Context, pod *corev1.Pod, ep engine.Endpoint, l listed, misplaced map[string]*v1alpha1.ModelAdapter) {
	key := client.ObjectKeyFromObject(pod)
	i.mu.Lock()
	s := i.strays[key]
	var names []string
	var enqueue []*v1alpha1.ModelAdapter
	if s != nil {
		for name := range s.names {
			switch {
			case !l.has(name):
				delete(s.names, name)
			case misplaced[name] != nil:
				enqueue = append(enqueue, misplaced[name])
			default:
				names = append(names, name)
			}
		}
		if len(s.names) == 0 {
			delete(i.strays, key)
		}
	}
	i.mu.Unlock()
	log := klog.FromContext(ctx)
	for _, a := range enqueue {
		log.Info("An adapter this controller loaded is on a pod its ModelAdapter does not record (the pod took the address of one it was loaded on): enqueued to unload it",
			"pod", klog.KObj(pod), "modeladapter", klog.KObj(a))
		select {
		case i.events <- event.GenericEvent{Object: a}:
		case <-ctx.Done():
			return
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if err := i.unloadStray(ctx, ep, name); err != nil {
			recordStrayUnload(err)
			log.Error(err, "Unloading a stray adapter failed", "pod", klog.KObj(pod), "adapter", name)
			continue
		}
		recordStrayUnload(nil)
		log.Info("Unloaded a stray adapter: loaded by this controller, wanted by no ModelAdapter", "pod", klog.KObj(pod), "adapter", name)
		i.forgetAdapter(pod, name)
		i.mu.Lock()
		delete(s.names, name)
		if len(s.names) == 0 {
			delete(i.strays, key)
		}
		i.mu.Unlock()
	}
}

func (i *Inventory) unloadStray(ctx context.Context, ep engine.Endpoint, name string) error {
	if err := i.acquire(ctx); err != nil {
		return err
	}
	defer i.release()
	return i.engine.Unload(ctx, ep, name)
}

// podServes reports whether a pod can take adapters: Ready, not terminating, with an IP.
func podServes(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
