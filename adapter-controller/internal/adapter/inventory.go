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
// such recorded loads are ever unloaded by the sweep, and only where the engine lists them
// from the path this controller loaded (strays.go): adapters the engine was started with,
// or that anyone else loaded, were never recorded. The stray loads are kept in a ConfigMap
// of the controller's namespace, so that a restart or a failover does not forget them.
//
// While AIBrix's controllers run, the inventory makes no engine call of any kind.
type Inventory struct {
	engine   engine.Client
	reader   client.Reader
	period   time.Duration
	parallel int
	clock    clock.WithTicker
	apiKey   func(ctx context.Context, a *v1alpha1.ModelAdapter) (string, error)
	events   chan event.GenericEvent
	// aibrixRunning tells whether AIBrix's controllers run: then no engine is called.
	aibrixRunning func(ctx context.Context) bool
	store         *strayStore // nil: the stray loads are kept in memory only
	// podEndpoint is how a pod's engine is reached (through the runtime sidecar or not).
	podEndpoint func(pod *corev1.Pod, apiKey string) (engine.Endpoint, error)
	// acquire and release bound each unload with the reconciler's engine call slots,
	// acquireList and releaseList each listing with its listing slots.
	acquire, acquireList func(ctx context.Context) error
	release, releaseList func()
	listings             *listings

	// readMetrics reads an engine's metrics (nil: the engine client cannot), freed is told
	// of a pod an unload made room on, capacityChanged of a pod whose reported capacity
	// changed.
	readMetrics     func(ctx context.Context, ep engine.Endpoint) (engine.Metrics, error)
	freed           func(pod types.NamespacedName)
	capacityChanged func(pod types.NamespacedName)

	mu   sync.Mutex
	pods map[types.NamespacedName]*podInventory
	// reported is what each pod's engine metrics last said of its capacity (the pods the
	// poll lists), by pod incarnation.
	reported map[types.NamespacedName]reportedCapacity
	// learning is the first listing and metrics read of each pod incarnation (Learn), shared
	// by the reconciles that want it.
	learning map[types.NamespacedName]*learnCall
	// recorded is, as of the last poll, which adapters recorded each pod (scheduled-pods
	// annotation or status instances); strays are recorded loads whose adapter is gone.
	recorded map[types.NamespacedName]*recordedPod
	strays   map[types.NamespacedName]*strayPod
	// vacated are the addresses of pods forgotten while this process's verified loads were
	// on them, by IP (see handOverVacated).
	vacated map[string]*vacatedAddress
}

// recordedPod is a pod as the adapters recording it saw it at one poll.
type recordedPod struct {
	uid types.UID // the pod the poll read; "" when it was not found
	by  map[string]recordedBy
}

// recordedBy is an adapter recording a pod, by name.
type recordedBy struct {
	uid         types.UID
	secret      string // credentialsSecretRef
	artifactURL string
}

// vacatedAddress is what this process loaded at a pod address whose pod it stopped
// tracking: gone, or recorded by no adapter any more, with loads still listed there.
type vacatedAddress struct {
	pod    types.NamespacedName
	uid    types.UID
	apiKey string                // the key that listed the pod: only ever sent to it again
	loads  map[string]*strayLoad // by adapter name: its UID and the path the engine listed
	polls  int                   // polls that found no pod at the address
}

// reportedCapacity is vLLM's --max-loras as one pod's engine reported it.
type reportedCapacity struct {
	uid      types.UID
	maxLoras int
}

type podInventory struct {
	uid      types.UID
	ip       string            // the pod's address when it was listed
	ep       engine.Endpoint   // the endpoint of the last successful listing
	adapters map[string]string // name -> path the engine reports ("" if none)
	// artifacts are the loads this process made and verified, by adapter name, kept while
	// the engine lists the adapter.
	artifacts map[string]verifiedLoad
	// listedSeq is the sequence number of the listing recorded here (listings are numbered
	// as they start); changedAt the last number handed out when this process changed the
	// entry itself (an unload). A listing that started before either says less than the
	// entry already knows, and is not recorded.
	listedSeq, changedAt uint64
	// restarts is the pod's container restart count (podRestarts) when it was listed: an
	// engine that restarted since has lost its runtime adapters, and the listing says
	// nothing any more.
	restarts int32
}

// podRestarts is the sum of the restart counts of the pod's containers (native sidecars
// included): it changes whenever a container of the pod restarts.
func podRestarts(pod *corev1.Pod) int32 {
	var n int32
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for _, c := range statuses {
			n += c.RestartCount
		}
	}
	return n
}

// verifiedLoad is a load this process made and verified on a pod.
type verifiedLoad struct {
	artifact   string
	adapterUID types.UID
}

// inventoryHooks connect the inventory to the reconciler.
type inventoryHooks struct {
	apiKey               func(ctx context.Context, a *v1alpha1.ModelAdapter) (string, error)
	endpoint             func(pod *corev1.Pod, apiKey string) (engine.Endpoint, error) // nil: the runtime sidecar driven
	acquire, acquireList func(ctx context.Context) error
	release, releaseList func()
	aibrixRunning        func(ctx context.Context) bool // nil: never
	store                *strayStore                    // nil: memory only
	freed                func(pod types.NamespacedName) // nil: nobody is told
	capacityChanged      func(pod types.NamespacedName) // nil: nobody is told
}

// metricsReader is an engine client that also reads engines' metrics (engine.HTTPClient).
type metricsReader interface {
	ReadMetrics(ctx context.Context, ep engine.Endpoint) (engine.Metrics, error)
}

// NewInventory returns an inventory polling every period with at most parallel requests.
func NewInventory(c engine.Client, reader client.Reader, period time.Duration, parallel int, clk clock.WithTicker, hooks inventoryHooks) *Inventory {
	i := &Inventory{
		engine: c, reader: reader, period: period, parallel: max(parallel, 1), clock: clk,
		apiKey: hooks.apiKey, podEndpoint: hooks.endpoint, acquire: hooks.acquire, release: hooks.release,
		acquireList: hooks.acquireList, releaseList: hooks.releaseList,
		aibrixRunning: hooks.aibrixRunning, store: hooks.store,
		freed: hooks.freed, capacityChanged: hooks.capacityChanged,
		reported: map[types.NamespacedName]reportedCapacity{},
		learning: map[types.NamespacedName]*learnCall{},
		events:   make(chan event.GenericEvent, 1024),
		pods:     map[types.NamespacedName]*podInventory{},
		recorded: map[types.NamespacedName]*recordedPod{},
		strays:   map[types.NamespacedName]*strayPod{},
		vacated:  map[string]*vacatedAddress{},
	}
	if i.aibrixRunning == nil {
		i.aibrixRunning = func(context.Context) bool { return false }
	}
	if m, ok := c.(metricsReader); ok {
		i.readMetrics = m.ReadMetrics
	}
	for _, f := range []*func(types.NamespacedName){&i.freed, &i.capacityChanged} {
		if *f == nil {
			*f = func(types.NamespacedName) {}
		}
	}
	if i.podEndpoint == nil {
		i.podEndpoint = func(pod *corev1.Pod, apiKey string) (engine.Endpoint, error) {
			return engine.EndpointForPod(pod, apiKey, engine.EndpointOptions{RuntimeSidecar: true})
		}
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
	if !ok || p.uid != pod.UID || p.restarts != podRestarts(pod) {
		return "", false, false
	}
	path, loaded = p.adapters[adapter]
	return path, loaded, true
}

// RestartedSinceListed reports whether a container of the pod restarted after its last
// listing: what the engine held then may be gone.
func (i *Inventory) RestartedSinceListed(pod *corev1.Pod) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	p, ok := i.pods[client.ObjectKeyFromObject(pod)]
	return ok && p.uid == pod.UID && p.restarts != podRestarts(pod)
}

// PodsListing returns the names of the pods of the adapter's namespace whose last listing
// shows it from what it may have loaded there: a load of it this process verified there, or,
// on engines that list the path they loaded from, the path of its artifact (or of one its
// status records). A same-named adapter from elsewhere (the engine's --lora-modules, another
// client) is not the adapter's to unload.
func (i *Inventory) PodsListing(a *v1alpha1.ModelAdapter) []string {
	artifacts := []string{a.Spec.ArtifactURL}
	for _, ia := range a.Status.InstanceArtifacts {
		artifacts = append(artifacts, ia.ArtifactURL)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	var out []string
	for key, p := range i.pods {
		path, ok := p.adapters[a.Name]
		if key.Namespace != a.Namespace || !ok {
			continue
		}
		if load, verified := p.artifacts[a.Name]; verified && load.adapterUID == a.UID {
			out = append(out, key.Name)
			continue
		}
		if !engine.ListsLoadPath(p.ep.Kind) {
			continue
		}
		for _, artifact := range artifacts {
			if resolved, err := engine.ResolveArtifact(p.ep.Kind, artifact); path == "" || (err == nil && resolved == path) {
				out = append(out, key.Name)
				break
			}
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

// listedNames are the adapters the pod's engine last listed (none when unknown).
func (i *Inventory) listedNames(pod *corev1.Pod) []string {
	i.mu.Lock()
	defer i.mu.Unlock()
	p, ok := i.pods[client.ObjectKeyFromObject(pod)]
	if !ok || p.uid != pod.UID {
		return nil
	}
	names := make([]string, 0, len(p.adapters))
	for name := range p.adapters {
		names = append(names, name)
	}
	return names
}

// maxLoras is vLLM's --max-loras as the pod's engine last reported it (0: not reported).
func (i *Inventory) maxLoras(pod *corev1.Pod) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	if c, ok := i.reported[client.ObjectKeyFromObject(pod)]; ok && c.uid == pod.UID {
		return c.maxLoras
	}
	return 0
}

// readCapacity reads the engine's metrics, in a listing slot, for a pod whose capacity no
// annotation sets, and tells capacityChanged when the reported capacity changed. It is part
// of the inventory poll: one request per polled pod per period, never one per reconcile.
func (i *Inventory) readCapacity(ctx context.Context, pod *corev1.Pod, ep engine.Endpoint) {
	if i.readMetrics == nil || ep.Kind == engine.KindSGLang {
		return
	}
	if _, set := pod.Annotations[v1alpha1.AdapterCapacityAnnotation]; set {
		return
	}
	if err := i.acquireList(ctx); err != nil {
		return
	}
	m, err := i.readMetrics(ctx, ep)
	i.releaseList()
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Reading engine metrics failed", "pod", klog.KObj(pod), "err", err.Error())
		return // what the engine reported last stands
	}
	key := client.ObjectKeyFromObject(pod)
	i.mu.Lock()
	old := i.reported[key]
	i.reported[key] = reportedCapacity{uid: pod.UID, maxLoras: m.MaxLoras}
	i.mu.Unlock()
	if old.uid != pod.UID || old.maxLoras != m.MaxLoras {
		i.capacityChanged(key)
	}
}

// learnCall is one Learn of one pod incarnation; done is closed when it ends.
type learnCall struct {
	uid      types.UID
	restarts int32
	done     chan struct{}
}

// Learn lists the pod's engine and reads its metrics (readCapacity) once per pod incarnation
// and container restart: the reconciles that want to know a new pod before placing on it
// share one call, and wait for it. A failed listing is tried again by the next caller.
func (i *Inventory) Learn(ctx context.Context, pod *corev1.Pod, ep engine.Endpoint) {
	key := client.ObjectKeyFromObject(pod)
	restarts := podRestarts(pod)
	i.mu.Lock()
	if c, ok := i.learning[key]; ok && c.uid == pod.UID && c.restarts == restarts {
		i.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
		}
		return
	}
	c := &learnCall{uid: pod.UID, restarts: restarts, done: make(chan struct{})}
	i.learning[key] = c
	i.mu.Unlock()
	defer close(c.done)
	if _, err := i.Refresh(ctx, pod, ep); err != nil {
		klog.FromContext(ctx).V(4).Info("Listing a new pod before placing on it failed", "pod", klog.KObj(pod), "err", err.Error())
		i.mu.Lock()
		if i.learning[key] == c {
			delete(i.learning, key)
		}
		i.mu.Unlock()
		return
	}
	i.readCapacity(ctx, pod, ep)
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
	artifacts := map[string]verifiedLoad{}
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
	i.pods[key] = &podInventory{uid: pod.UID, ip: pod.Status.PodIP, ep: ep, adapters: m, artifacts: artifacts, listedSeq: seq, restarts: podRestarts(pod)}
}

// noteArtifact records the artifact a verified load of the adapter put on the pod.
func (i *Inventory) noteArtifact(pod *corev1.Pod, a *v1alpha1.ModelAdapter, artifact string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if p, ok := i.pods[client.ObjectKeyFromObject(pod)]; ok && p.uid == pod.UID {
		if _, listed := p.adapters[a.Name]; listed {
			p.artifacts[a.Name] = verifiedLoad{artifact: artifact, adapterUID: a.UID}
		}
	}
}

// Artifact returns the artifact this process loaded and verified on the pod, if the engine
// still lists the adapter.
func (i *Inventory) Artifact(pod *corev1.Pod, adapter string) (string, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if p, ok := i.pods[client.ObjectKeyFromObject(pod)]; ok && p.uid == pod.UID {
		load, ok := p.artifacts[adapter]
		return load.artifact, ok
	}
	return "", false
}

// lastKey returns the API key of the last successful listing of the pod (this incarnation):
// the last key that worked there.
func (i *Inventory) lastKey(pod *corev1.Pod) (string, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if p, ok := i.pods[client.ObjectKeyFromObject(pod)]; ok && p.uid == pod.UID && p.ep.Host != "" {
		return p.ep.APIKey, true
	}
	return "", false
}

// forgetAdapter records that the adapter was unloaded from the pod, and tells freed.
func (i *Inventory) forgetAdapter(pod *corev1.Pod, adapter string) {
	seq := i.listings.mark() // listings numbered up to seq started before the unload returned
	key := client.ObjectKeyFromObject(pod)
	i.mu.Lock()
	if p, ok := i.pods[key]; ok && p.uid == pod.UID {
		delete(p.adapters, adapter)
		delete(p.artifacts, adapter)
		p.changedAt = max(p.changedAt, seq)
	}
	i.mu.Unlock()
	i.freed(key)
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
	keysOf     []*v1alpha1.ModelAdapter // the adapters recording the pod: the first API key that reads lists it
	strays     bool                     // the pod may hold stray loads
}

// poll lists the adapters of every pod that some adapter records (as an instance or a
// scheduled pod), enqueues the adapters an engine no longer lists on their instances, and
// unloads stray loads. Pods whose engine cannot be reached are left for the adapters' own
// reconciles (their retries and backoff) to handle. While AIBrix's controllers run it calls
// no engine: AIBrix's model-adapter-controller loads and unloads the adapters then.
func (i *Inventory) poll(ctx context.Context) error {
	log := klog.FromContext(ctx)
	if i.aibrixRunning(ctx) {
		log.V(4).Info("Skipping the inventory poll: AIBrix's controllers are running")
		return nil
	}
	if err := i.syncStrays(ctx); err != nil {
		log.Error(err, "Reading the stray loads kept by earlier processes")
	}
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
				i.forgetStrays(key, "")
			}
			continue // the pod watch enqueues its adapters
		}
		i.notePod(key, pod.UID)
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
	if err := i.syncStrays(ctx); err != nil {
		log.Error(err, "Keeping the stray loads in their ConfigMap")
	}
	return nil
}

// notePod records which incarnation of a recorded pod this poll read, and forgets the stray
// loads of an earlier one.
func (i *Inventory) notePod(key types.NamespacedName, uid types.UID) {
	i.forgetStrays(key, uid)
	i.mu.Lock()
	defer i.mu.Unlock()
	if rec := i.recorded[key]; rec != nil {
		rec.uid = uid
	}
}

// pollTargets returns, from every adapter, the pods to list (with what to check there), the
// adapters that exist, and for each pod the adapters recording it.
func pollTargets(adapters []v1alpha1.ModelAdapter) (targets map[types.NamespacedName]*pollTarget, exists map[types.NamespacedName]*v1alpha1.ModelAdapter, recorded map[types.NamespacedName]*recordedPod) {
	targets = map[types.NamespacedName]*pollTarget{}
	target := func(key types.NamespacedName) *pollTarget {
		if targets[key] == nil {
			targets[key] = &pollTarget{}
		}
		return targets[key]
	}
	exists = map[types.NamespacedName]*v1alpha1.ModelAdapter{}
	recorded = map[types.NamespacedName]*recordedPod{}
	for idx := range adapters {
		a := &adapters[idx]
		exists[client.ObjectKeyFromObject(a)] = a
		by := recordedBy{uid: a.UID, artifactURL: a.Spec.ArtifactURL}
		if a.Spec.CredentialsSecretRef != nil {
			by.secret = a.Spec.CredentialsSecretRef.Name
		}
		for pod := range recordedPods(a) {
			key := types.NamespacedName{Namespace: a.Namespace, Name: pod}
			if recorded[key] == nil {
				recorded[key] = &recordedPod{by: map[string]recordedBy{}}
			}
			recorded[key].by[a.Name] = by
			t := target(key) // keep knowing what every recorded pod holds
			t.keysOf = append(t.keysOf, a)
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
// some as targets. The pods no adapter is on any more are forgotten, their addresses kept as
// vacated while loads of this process were listed there.
func (i *Inventory) noteStrays(targets map[types.NamespacedName]*pollTarget, exists map[types.NamespacedName]*v1alpha1.ModelAdapter, recorded map[types.NamespacedName]*recordedPod) {
	i.mu.Lock()
	defer i.mu.Unlock()
	now := i.clock.Now()
	// A load recorded at the last poll whose adapter (that UID) is gone now was never
	// unloaded by a finalizer (or it would not be recorded any more): it is a stray until a
	// listing shows it is not loaded. An adapter of the same name created since is another
	// adapter; the sweep leaves the load to it.
	for key, rec := range i.recorded {
		if rec.uid == "" {
			continue // the pod was gone at the last poll
		}
		for name, by := range rec.by {
			if a := exists[types.NamespacedName{Namespace: key.Namespace, Name: name}]; a != nil && a.UID == by.uid {
				continue
			}
			s := &strayLoad{adapterUID: by.uid, secret: by.secret, since: now}
			if p := i.pods[key]; p != nil && p.uid == rec.uid {
				s.apiKey = p.ep.APIKey
				if path, listed := p.adapters[name]; listed {
					s.path = path
				} else if engine.ListsLoadPath(p.ep.Kind) {
					s.path, _ = engine.ResolveArtifact(p.ep.Kind, by.artifactURL)
				}
			}
			i.addStray(key, rec.uid, name, s)
		}
	}
	i.recorded = recorded
	for key := range i.strays {
		t := targets[key]
		if t == nil {
			t = &pollTarget{}
			targets[key] = t
		}
		t.strays = true
	}
	for key, p := range i.pods {
		if _, ok := targets[key]; ok {
			continue
		}
		if len(p.artifacts) > 0 && p.ip != "" {
			v := &vacatedAddress{pod: key, uid: p.uid, apiKey: p.ep.APIKey, loads: map[string]*strayLoad{}}
			for name, load := range p.artifacts {
				v.loads[name] = &strayLoad{adapterUID: load.adapterUID, path: p.adapters[name], since: now}
			}
			i.vacated[p.ip] = v
		}
		delete(i.pods, key)
		delete(i.reported, key)
		delete(i.learning, key)
	}
}

// handOverVacated checks the vacated addresses. Pod addresses are reused: a pod that replaces
// another can get its IP, and a load sent to the old pod just before it went (from a cache
// that still showed it) reaches the new pod's engine, where no ModelAdapter records it. So
// the loads this process verified at an address it stopped tracking become strays of the
// pod of the same namespace that has the address now (the same pod too, if it is still
// there): the sweep unloads those whose ModelAdapter is gone and enqueues the others, and
// only where the engine lists them from the path this controller loaded. A pod of another
// namespace at the address is never looked at: no key, listing or unload of this
// controller's crosses a namespace. The key that listed the old pod goes to no other pod. An
// address no pod has is dropped after a few polls: nothing answers there.
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
	log := klog.FromContext(ctx)
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
		names := slices.Sorted(maps.Keys(v.loads))
		for _, pod := range holders {
			if pod.Namespace != v.pod.Namespace {
				log.V(2).Info("Leaving a pod of another namespace at the address of a pod this controller stopped tracking alone",
					"pod", klog.KObj(pod), "previousPod", v.pod, "address", ip)
				continue
			}
			log.V(2).Info("Checking the loads of a pod this controller stopped tracking on the pod at its address",
				"pod", klog.KObj(pod), "previousPod", v.pod, "address", ip, "adapters", names)
			same := pod.UID == v.uid
			for _, name := range names {
				load := *v.loads[name]
				if !same {
					if load.path == "" {
						continue // nothing would tell this controller's load from another's
					}
					load.handedOver = true
				} else {
					load.apiKey = v.apiKey
				}
				i.addStray(client.ObjectKeyFromObject(pod), pod.UID, name, &load)
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
	i.readCapacity(ctx, pod, ep)
	if t.strays {
		i.sweep(ctx, pod, ep, listed)
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

// endpoint is how the poll reaches the pod: with the API key of an adapter of its namespace
// recording it (the first whose key can be read: one adapter's missing Secret does not keep
// the pod from being listed for the others), else the key its stray loads were made with
// there (strayKey), else none. A pod it cannot address is skipped (and logged): the
// reconciles of its adapters report why.
func (i *Inventory) endpoint(ctx context.Context, pod *corev1.Pod, t *pollTarget, keys *apiKeys) (engine.Endpoint, bool) {
	apiKey := ""
	switch {
	case len(t.keysOf) > 0:
		// The first key that can be read and is not empty: an adapter without a key must not
		// leave a keyed engine unlisted on the polls that happen to try it first.
		var err error
		readable := false
		for _, a := range t.keysOf {
			key, kerr := keys.of(ctx, a)
			if kerr != nil {
				err = kerr
				continue
			}
			readable = true
			if key != "" {
				apiKey = key
				break
			}
		}
		if !readable {
			klog.FromContext(ctx).V(4).Info("Skipping a pod: no API key", "pod", klog.KObj(pod), "err", err.Error())
			return engine.Endpoint{}, false
		}
	case t.strays:
		apiKey = i.strayKey(ctx, pod, keys)
	}
	ep, err := i.podEndpoint(pod, apiKey)
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
