package adapter

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/modelplane/modelplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/modelplane/modelplane/shared/api/model/v1alpha1"
)

// Inventory is what each engine pod last reported loaded (GET /v1/models). One periodic
// poll per engine pod serves every adapter on it, so engine traffic per period is O(pods),
// not O(adapters × pods). Adapters missing from a pod they are instances of are enqueued.
type Inventory struct {
	engine   engine.Client
	reader   client.Reader
	period   time.Duration
	parallel int
	clock    clock.WithTicker
	apiKey   func(ctx context.Context, a *v1alpha1.ModelAdapter) string
	events   chan event.GenericEvent
	// acquire and release, when set, bound each engine call with the reconciler's slots.
	acquire  func(ctx context.Context) error
	release  func()
	listings *listings

	mu   sync.Mutex
	pods map[types.NamespacedName]*podInventory
}

type podInventory struct {
	uid      types.UID
	adapters map[string]bool
}

// NewInventory returns an inventory polling every period with at most parallel requests.
func NewInventory(c engine.Client, reader client.Reader, period time.Duration, parallel int, clk clock.WithTicker) *Inventory {
	i := &Inventory{
		engine: c, reader: reader, period: period, parallel: max(parallel, 1), clock: clk,
		events: make(chan event.GenericEvent, 1024),
		pods:   map[types.NamespacedName]*podInventory{},
	}
	i.listings = newListings(i.list, i.record)
	return i
}

// Events carries the adapters to reconcile because an engine no longer lists them.
func (i *Inventory) Events() <-chan event.GenericEvent { return i.events }

// Loaded reports whether the engine of pod last listed the adapter; known is false when the
// pod (this incarnation of it) has not been listed yet.
func (i *Inventory) Loaded(pod *corev1.Pod, adapter string) (loaded, known bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	p, ok := i.pods[client.ObjectKeyFromObject(pod)]
	if !ok || p.uid != pod.UID {
		return false, false
	}
	return p.adapters[adapter], true
}

// PodsListing returns the names of the pods of namespace whose last listing showed the
// adapter.
func (i *Inventory) PodsListing(namespace, adapter string) []string {
	i.mu.Lock()
	defer i.mu.Unlock()
	var out []string
	for key, p := range i.pods {
		if key.Namespace == namespace && p.adapters[adapter] {
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

// record stores a listing and returns the adapters that were listed before and are not now.
func (i *Inventory) record(pod *corev1.Pod, names []string) {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.pods[client.ObjectKeyFromObject(pod)] = &podInventory{uid: pod.UID, adapters: set}
}

// forgetAdapter records that the adapter was unloaded from the pod.
func (i *Inventory) forgetAdapter(pod *corev1.Pod, adapter string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if p, ok := i.pods[client.ObjectKeyFromObject(pod)]; ok && p.uid == pod.UID {
		delete(p.adapters, adapter)
	}
}

// Refresh returns the adapters of one pod from a listing that starts after the call, and
// records the answer. Callers that refresh the same pod at the same time share the listing.
func (i *Inventory) Refresh(ctx context.Context, pod *corev1.Pod, ep engine.Endpoint) (map[string]bool, error) {
	return i.listings.get(ctx, pod, ep, i.listings.mark())
}

// list makes one engine call within an engine call slot.
func (i *Inventory) list(ctx context.Context, ep engine.Endpoint) ([]string, error) {
	if i.acquire != nil {
		if err := i.acquire(ctx); err != nil {
			return nil, err
		}
		defer i.release()
	}
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
		if err := i.poll(ctx); err != nil {
			log.Error(err, "Polling engine inventories")
		}
	}
}

// poll lists the adapters of every pod that is an instance of some adapter and enqueues the
// adapters an engine no longer lists. Pods whose engine cannot be reached are left for the
// adapters' own reconciles (their retries and backoff) to handle.
func (i *Inventory) poll(ctx context.Context) error {
	var adapters v1alpha1.ModelAdapterList
	if err := i.reader.List(ctx, &adapters); err != nil {
		return err
	}
	expected := map[types.NamespacedName][]*v1alpha1.ModelAdapter{}
	for idx := range adapters.Items {
		a := &adapters.Items[idx]
		if a.DeletionTimestamp != nil {
			continue
		}
		for _, pod := range a.Status.Instances {
			key := types.NamespacedName{Namespace: a.Namespace, Name: pod}
			expected[key] = append(expected[key], a)
		}
	}
	// Forget pods that no adapter is on any more.
	i.mu.Lock()
	for key := range i.pods {
		if _, ok := expected[key]; !ok {
			delete(i.pods, key)
		}
	}
	i.mu.Unlock()

	sem := make(chan struct{}, i.parallel)
	var wg sync.WaitGroup
	for key, onPod := range expected {
		pod := &corev1.Pod{}
		if err := i.reader.Get(ctx, key, pod); err != nil || !podServes(pod) {
			continue // gone or not serving: the pod watch enqueues its adapters
		}
		apiKey := ""
		if i.apiKey != nil {
			apiKey = i.apiKey(ctx, onPod[0])
		}
		ep, err := engine.EndpointForPod(pod, apiKey)
		if err != nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			listed, err := i.Refresh(ctx, pod, ep)
			if err != nil {
				klog.FromContext(ctx).V(4).Info("Listing engine adapters failed", "pod", klog.KObj(pod), "err", err.Error())
				return
			}
			for _, a := range onPod {
				if !listed[a.Name] {
					select {
					case i.events <- event.GenericEvent{Object: a}:
					case <-ctx.Done():
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return nil
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
