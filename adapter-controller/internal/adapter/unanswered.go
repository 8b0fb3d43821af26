package adapter

// Loads the engine may still carry out: the request ended without an answer.

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// unansweredLoads remembers the loads whose request ended without the engine's answer (a
// timeout, a connection cut): the engine may still be loading, and the adapter appears there
// when it is done, after listings that do not show it yet. Until the horizon of such a load
// has passed (the load timeout again after the request ended: the engine had as long again
// as the controller waited), the pod counts as possibly holding the adapter — it is neither
// dropped from the adapter's record nor counted as unloaded by an unload sent before the
// horizon — so a load that lands late is found and undone instead of leaking.
type unansweredLoads struct {
	mu    sync.Mutex
	until map[unansweredKey]time.Time
}

type unansweredKey struct {
	adapter types.NamespacedName
	pod     types.UID
}

func newUnansweredLoads() *unansweredLoads {
	return &unansweredLoads{until: map[unansweredKey]time.Time{}}
}

func keyOfLoad(a *v1alpha1.ModelAdapter, pod *corev1.Pod) unansweredKey {
	return unansweredKey{adapter: types.NamespacedName{Namespace: a.Namespace, Name: a.Name}, pod: pod.UID}
}

// note records an unanswered load that may take effect until until.
func (u *unansweredLoads) note(k unansweredKey, until time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if until.After(u.until[k]) {
		u.until[k] = until
	}
}

// answered forgets the unanswered loads of k: a later load was answered.
func (u *unansweredLoads) answered(k unansweredKey) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.until, k)
}

// horizon reports the horizon of an unanswered load of k, if one is recorded. An expired entry
// is kept: the load may have landed (after the listings that did not show it), and only an
// unload sent after the horizon, or a later answered load, settles it.
func (u *unansweredLoads) horizon(k unansweredKey) (time.Time, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	t, ok := u.until[k]
	return t, ok
}

// settledBy reports whether an unload of k sent at sentAt (and answered) leaves nothing that
// may still land, forgetting k if so; otherwise it returns how long to wait from now before
// unloading again.
func (u *unansweredLoads) settledBy(k unansweredKey, sentAt, now time.Time) (time.Duration, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	t, ok := u.until[k]
	if !ok {
		return 0, true
	}
	if !t.After(sentAt) {
		delete(u.until, k)
		return 0, true
	}
	return max(t.Sub(now), time.Millisecond), false
}

// forgetAdapter drops the entries of an adapter that is gone.
func (u *unansweredLoads) forgetAdapter(namespace, name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for k := range u.until {
		if k.adapter.Namespace == namespace && k.adapter.Name == name {
			delete(u.until, k)
		}
	}
}
