package adapter

// Stray loads: adapters this controller loaded on a pod that no ModelAdapter records any
// more, what tells them from a load of the same name by anyone else, and the ConfigMap that
// keeps them across restarts and failovers.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// StrayConfigMapName names the ConfigMap, in the controller's own namespace, that keeps the
// stray loads (Options.StrayNamespace).
const StrayConfigMapName = "adapter-controller-stray-loads"

// strayConfigMapKey is the ConfigMap entry holding the stray loads, as JSON.
const strayConfigMapKey = "strays.json"

// maxStrays bounds the stray loads kept (a ConfigMap holds at most 1 MiB; a record is about
// 300 bytes). Beyond it the oldest are dropped, with an error log.
const maxStrays = 2000

// strayLoad is one adapter this controller loaded on one pod (incarnation) that no
// ModelAdapter records there any more. The sweep unloads it only while the engine lists the
// adapter's name from the path this controller loaded (where known), and no ModelAdapter of
// that name exists: a load of the same name by anyone else is never touched.
type strayLoad struct {
	// adapterUID is the ModelAdapter that loaded it.
	adapterUID types.UID
	// path is what the engine listed for this controller's load (the lora_path sent, for
	// vLLM and SGLang); "" when unknown (the runtime sidecar lists a download directory).
	path string
	// handedOver: the load was made on another pod, which had this pod's address (see
	// Inventory.handOverVacated). Only a known path that the engine lists identifies it.
	handedOver bool
	// secret is the credentials Secret of the adapter that loaded it (in the pod's
	// namespace), read for the key when apiKey is not known; "" when none or handedOver.
	secret string
	// apiKey is the last key that worked on this pod for the load (never persisted, never
	// sent to another pod); "" when not known.
	apiKey string
	since  time.Time
}

// ours reports whether an engine listing the adapter from listedPath may hold this load.
func (s *strayLoad) ours(listedPath string) bool {
	if s.path == "" || listedPath == "" {
		return !s.handedOver
	}
	return listedPath == s.path
}

// strayPod is the stray loads of one pod incarnation, by adapter name.
type strayPod struct {
	uid   types.UID
	loads map[string]*strayLoad
}

// addStray records a stray load on the pod incarnation uid; i.mu is held. A record of another
// incarnation of the pod is replaced (its engine is gone with it).
func (i *Inventory) addStray(key types.NamespacedName, uid types.UID, name string, s *strayLoad) {
	sp := i.strays[key]
	if sp == nil || sp.uid != uid {
		sp = &strayPod{uid: uid, loads: map[string]*strayLoad{}}
		i.strays[key] = sp
	}
	if old := sp.loads[name]; old != nil {
		// Keep what the earlier record knew that this one does not.
		s.since = old.since
		s.apiKey = cmp.Or(s.apiKey, old.apiKey)
		s.secret = cmp.Or(s.secret, old.secret)
		s.path = cmp.Or(s.path, old.path)
	}
	sp.loads[name] = s
	i.boundStrays()
}

// boundStrays drops the oldest stray loads beyond maxStrays; i.mu is held.
func (i *Inventory) boundStrays() {
	n := 0
	for _, sp := range i.strays {
		n += len(sp.loads)
	}
	for ; n > maxStrays; n-- {
		var oldestPod types.NamespacedName
		var oldestName string
		var oldest time.Time
		for key, sp := range i.strays {
			for name, s := range sp.loads {
				if oldestName == "" || s.since.Before(oldest) {
					oldestPod, oldestName, oldest = key, name, s.since
				}
			}
		}
		klog.Background().Error(nil, "Dropping the oldest stray load: too many are kept", "pod", oldestPod, "adapter", oldestName, "limit", maxStrays)
		i.dropStray(oldestPod, oldestName)
	}
}

// dropStray forgets one stray load; i.mu is held.
func (i *Inventory) dropStray(key types.NamespacedName, name string) {
	if sp := i.strays[key]; sp != nil {
		delete(sp.loads, name)
		if len(sp.loads) == 0 {
			delete(i.strays, key)
		}
	}
}

// abandon hands the sweep an adapter whose unload from pod deletion gave up on: apiKey is the
// key deletion used there, path what this controller loaded there ("" when unknown). It is
// kept in memory until syncStrays writes it.
func (i *Inventory) abandon(pod *corev1.Pod, a *v1alpha1.ModelAdapter, apiKey, path string) {
	s := &strayLoad{adapterUID: a.UID, path: path, apiKey: apiKey, since: i.clock.Now()}
	if a.Spec.CredentialsSecretRef != nil {
		s.secret = a.Spec.CredentialsSecretRef.Name
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.addStray(client.ObjectKeyFromObject(pod), pod.UID, a.Name, s)
}

// forgetStrays drops the stray loads of a pod that is gone, or whose incarnation is not the
// one they were on (uid "": any).
func (i *Inventory) forgetStrays(key types.NamespacedName, uid types.UID) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if sp := i.strays[key]; sp != nil && (uid == "" || sp.uid != uid) {
		delete(i.strays, key)
	}
}

// strayKey is the key the poll lists a pod holding only stray loads with: the last key that
// worked there for one of them, else the key of the credentials Secret of the adapter that
// loaded one (it recorded this very pod), else none. Loads handed over from another pod
// carry no key: a key is never sent to a pod other than the one its adapter recorded.
func (i *Inventory) strayKey(ctx context.Context, pod *corev1.Pod, keys *apiKeys) string {
	i.mu.Lock()
	sp := i.strays[client.ObjectKeyFromObject(pod)]
	var secrets []string
	if sp != nil && sp.uid == pod.UID {
		for _, name := range slices.Sorted(maps.Keys(sp.loads)) {
			s := sp.loads[name]
			if s.apiKey != "" {
				i.mu.Unlock()
				return s.apiKey
			}
			if s.secret != "" {
				secrets = append(secrets, s.secret)
			}
		}
	}
	i.mu.Unlock()
	for _, secret := range secrets {
		ref := &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace}}
		ref.Spec.CredentialsSecretRef = &corev1.LocalObjectReference{Name: secret}
		key, err := keys.of(ctx, ref)
		if err == nil && key != "" {
			return key
		}
	}
	return ""
}

// sweep unloads, through ep (which just listed the pod), the stray loads of a pod that its
// listing shows from the path this controller loaded, and forgets the others. Just before
// each unload it reads the adapter's name from the cache again (the poll's view of the
// adapters is older than the listing: an adapter deleted and created again since may have
// loaded the name there): while a ModelAdapter of that name exists the load is its own
// concern — forgotten when it records the pod, else it is enqueued (its reconcile, which
// sees the pod listing it, unloads it with its own retries and events). Nothing is unloaded
// while AIBrix's controllers run.
func (i *Inventory) sweep(ctx context.Context, pod *corev1.Pod, ep engine.Endpoint, l listed) {
	key := client.ObjectKeyFromObject(pod)
	log := klog.FromContext(ctx)
	i.mu.Lock()
	sp := i.strays[key]
	var names []string
	if sp != nil && sp.uid == pod.UID {
		for name, s := range sp.loads {
			path, ok := l[name]
			switch {
			case !ok:
				i.dropStray(key, name)
			case !s.ours(path):
				log.V(2).Info("Leaving an adapter alone: the engine lists it from another path than this controller loaded",
					"pod", klog.KObj(pod), "adapter", name, "listedPath", path, "loadedPath", s.path)
				i.dropStray(key, name)
			default:
				names = append(names, name)
			}
		}
	}
	i.mu.Unlock()
	slices.Sort(names)
	for _, name := range names {
		a := &v1alpha1.ModelAdapter{}
		err := i.reader.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: name}, a)
		switch {
		case err == nil && recordedPods(a)[pod.Name]:
			i.mu.Lock()
			i.dropStray(key, name) // its ModelAdapter records the pod and decides
			i.mu.Unlock()
			continue
		case err == nil:
			log.Info("An adapter this controller loaded is on a pod its ModelAdapter does not record (the pod took the address of one it was loaded on, or the adapter was created again): enqueued to unload it",
				"pod", klog.KObj(pod), "modeladapter", klog.KObj(a))
			select {
			case i.events <- event.GenericEvent{Object: a}:
			case <-ctx.Done():
				return
			}
			continue
		case !apierrors.IsNotFound(err):
			log.Error(err, "Reading the adapter before unloading a stray load", "pod", klog.KObj(pod), "adapter", name)
			continue
		}
		if i.aibrixRunning(ctx) {
			return
		}
		if err := i.unloadStray(ctx, ep, name); err != nil {
			recordStrayUnload(err)
			log.Error(err, "Unloading a stray adapter failed", "pod", klog.KObj(pod), "adapter", name)
			continue
		}
		recordStrayUnload(nil)
		log.Info("Unloaded a stray adapter: loaded by this controller, wanted by no ModelAdapter", "pod", klog.KObj(pod), "adapter", name)
		i.forgetAdapter(pod, name)
		i.mu.Lock()
		i.dropStray(key, name)
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

// strayRecord is one stray load as the ConfigMap keeps it: no key material, only the name of
// the Secret (in the load's own namespace) that the key came from.
type strayRecord struct {
	Namespace  string      `json:"namespace"`
	Pod        string      `json:"pod"`
	PodUID     types.UID   `json:"podUID"`
	Adapter    string      `json:"adapter"`
	AdapterUID types.UID   `json:"adapterUID,omitempty"`
	Path       string      `json:"path,omitempty"`
	HandedOver bool        `json:"handedOver,omitempty"`
	Secret     string      `json:"secret,omitempty"`
	Since      metav1.Time `json:"since"`
}

// strayRecords returns the stray loads as records, sorted; i.mu is held.
func (i *Inventory) strayRecords() []strayRecord {
	var out []strayRecord
	for key, sp := range i.strays {
		for name, s := range sp.loads {
			out = append(out, strayRecord{
				Namespace: key.Namespace, Pod: key.Name, PodUID: sp.uid, Adapter: name, AdapterUID: s.adapterUID,
				Path: s.path, HandedOver: s.handedOver, Secret: s.secret, Since: metav1.NewTime(s.since),
			})
		}
	}
	slices.SortFunc(out, func(a, b strayRecord) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Adapter, b.Adapter))
	})
	return out
}

// strayStore keeps the stray loads in a ConfigMap of the controller's own namespace, so that
// a restarted process or a new leader finishes the unloads deletion gave up on. Only the
// leader reads and writes it (the reconciler and the inventory run on the leader only).
type strayStore struct {
	reader client.Reader // uncached: ConfigMaps are in no cache of the controller
	writer client.Client
	key    types.NamespacedName

	mu     sync.Mutex // serialises syncStrays
	loaded bool
	cm     *corev1.ConfigMap // as last read or written; nil when it does not exist
}

// newStrayStore returns the store of the ConfigMap in namespace, or nil (memory only) when
// namespace is empty.
func newStrayStore(reader client.Reader, writer client.Client, namespace string) *strayStore {
	if namespace == "" {
		return nil
	}
	return &strayStore{reader: reader, writer: writer, key: types.NamespacedName{Namespace: namespace, Name: StrayConfigMapName}}
}

// errStrayStoreUnusable wraps the store errors that retrying cannot fix: the ConfigMap may
// not be written (RBAC), or its namespace does not exist.
type errStrayStoreUnusable struct{ err error }

func (e errStrayStoreUnusable) Error() string {
	return fmt.Sprintf("the stray loads cannot be kept in a ConfigMap (kept in memory only): %v", e.err)
}

func (e errStrayStoreUnusable) Unwrap() error { return e.err }

func classifyStoreError(err error) error {
	if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
		return errStrayStoreUnusable{err}
	}
	return err
}

// syncStrays makes the ConfigMap and memory agree: on first use (and after a write conflict)
// the records of the ConfigMap are added to the stray loads; then the stray loads are
// written, when they changed. Without a store it does nothing.
func (i *Inventory) syncStrays(ctx context.Context) error {
	s := i.store
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.loaded {
		cm := &corev1.ConfigMap{}
		switch err := s.reader.Get(ctx, s.key, cm); {
		case apierrors.IsNotFound(err):
			s.cm = nil
		case err != nil:
			return classifyStoreError(fmt.Errorf("reading ConfigMap %s: %w", s.key, err))
		default:
			s.cm = cm
			var records []strayRecord
			if err := json.Unmarshal([]byte(cm.Data[strayConfigMapKey]), &records); err != nil && cm.Data[strayConfigMapKey] != "" {
				klog.FromContext(ctx).Error(err, "Ignoring the unreadable stray loads of the ConfigMap", "configMap", s.key)
			}
			i.mu.Lock()
			for _, r := range records {
				i.addStray(types.NamespacedName{Namespace: r.Namespace, Name: r.Pod}, r.PodUID, r.Adapter, &strayLoad{
					adapterUID: r.AdapterUID, path: r.Path, handedOver: r.HandedOver, secret: r.Secret, since: r.Since.Time,
				})
			}
			i.mu.Unlock()
			if len(records) > 0 {
				klog.FromContext(ctx).V(2).Info("Read the stray loads kept by an earlier process", "configMap", s.key, "count", len(records))
			}
		}
		s.loaded = true
	}
	i.mu.Lock()
	records := i.strayRecords()
	i.mu.Unlock()
	data, err := json.Marshal(records)
	if err != nil {
		return err
	}
	if records == nil {
		data = []byte("[]")
	}
	if s.cm != nil && s.cm.Data[strayConfigMapKey] == string(data) {
		return nil
	}
	if s.cm == nil && len(records) == 0 {
		return nil
	}
	cm := &corev1.ConfigMap{}
	if s.cm != nil {
		cm = s.cm.DeepCopy()
	} else {
		cm.Namespace, cm.Name = s.key.Namespace, s.key.Name
		cm.Labels = map[string]string{ManagedByLabel: ManagedByValue}
	}
	cm.Data = map[string]string{strayConfigMapKey: string(data)}
	if s.cm != nil {
		err = s.writer.Update(ctx, cm) // guarded by the resourceVersion read
	} else {
		err = s.writer.Create(ctx, cm)
	}
	switch {
	case err == nil:
	case s.cm != nil && apierrors.IsNotFound(err):
		s.cm = nil // deleted by someone: created again by the next sync
		return fmt.Errorf("writing ConfigMap %s: %w", s.key, err)
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		s.loaded = false // another writer (a leader stepping down): read and merge next time
		return fmt.Errorf("writing ConfigMap %s: %w", s.key, err)
	default:
		return classifyStoreError(fmt.Errorf("writing ConfigMap %s: %w", s.key, err))
	}
	s.cm = cm
	return nil
}
