package adapter

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
)

// listings shares GET /v1/models calls between the callers that want the adapters of the
// same engine pod at about the same time: the verifications of loads that land on one pod
// together, and the periodic poll.
//
// A caller needs a listing that started after a point it marked (for a verification: when
// its load returned), because one that started earlier may not show its adapter. So per pod
// there is at most one listing in flight and one pending: a caller joins the listing in
// flight if it started after the caller's mark, and otherwise the pending one, which starts
// when the one in flight ends. Everyone who joined a listing gets its answer; a successful
// answer is recorded in the inventory once.
//
// The call itself runs on a context detached from the callers; it is cancelled when every
// caller has stopped waiting (each caller stops when its own context ends), and the engine
// client bounds each request with its timeout. A caller holds no engine call slot while it
// waits: the call takes one slot for its own duration.
type listings struct {
	// list makes one engine call; record stores a successful answer.
	list   func(ctx context.Context, ep engine.Endpoint) ([]engine.Adapter, error)
	record func(pod *corev1.Pod, ep engine.Endpoint, adapters []engine.Adapter, seq uint64)

	mu   sync.Mutex
	seq  uint64 // listings started so far, all pods together
	pods map[listingKey]*podListings
}

// listingKey names what a listing is of. Callers with different API keys never share a
// call: an answer obtained with one key is not evidence for a caller holding another.
type listingKey struct {
	pod types.NamespacedName
	uid types.UID
	ep  engine.Endpoint
}

type podListings struct {
	inFlight *listing // nil when no listing runs; then pending is nil too
	pending  *listing // starts when inFlight ends; nil when no one waits for it
}

// listing is one GET /v1/models call and the callers waiting for its answer.
type listing struct {
	seq     uint64 // when it started; 0 while pending
	waiters int
	base    context.Context // values (logger) for the call; never cancelled
	cancel  context.CancelFunc
	dropped bool // every waiter left: the call is being cancelled and nobody may join

	done  chan struct{} // closed when names and err are set
	names listed
	err   error
}

// listed is one listing's answer: the path of each adapter listed, by name ("" when the
// engine reports none).
type listed map[string]string

func (l listed) has(name string) bool {
	_, ok := l[name]
	return ok
}

func newListings(list func(context.Context, engine.Endpoint) ([]engine.Adapter, error), record func(*corev1.Pod, engine.Endpoint, []engine.Adapter, uint64)) *listings {
	return &listings{list: list, record: record, pods: map[listingKey]*podListings{}}
}

// mark returns a point in the sequence of listings: every listing that starts after mark
// was called has a greater sequence number.
func (l *listings) mark() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seq
}

// get returns the adapters the engine of pod lists in a listing that started after the
// point after (from mark). It returns ctx.Err() when ctx ends first.
func (l *listings) get(ctx context.Context, pod *corev1.Pod, ep engine.Endpoint, after uint64) (listed, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := listingKey{pod: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, uid: pod.UID, ep: ep}

	l.mu.Lock()
	p := l.pods[key]
	if p == nil {
		p = &podListings{}
		l.pods[key] = p
	}
	var joined *listing
	switch {
	case p.inFlight == nil:
		joined = newListing(ctx)
		p.inFlight = joined
		l.start(key, pod, joined)
		recordListRequest(ListStarted)
	case p.inFlight.seq > after && !p.inFlight.dropped:
		joined = p.inFlight
		recordListRequest(ListShared)
	default:
		if p.pending == nil {
			p.pending = newListing(ctx)
			recordListRequest(ListStarted)
		} else {
			recordListRequest(ListShared)
		}
		joined = p.pending
	}
	joined.waiters++
	l.mu.Unlock()

	select {
	case <-joined.done:
		return joined.names, joined.err
	case <-ctx.Done():
		l.leave(key, joined)
		return nil, ctx.Err()
	}
}

func newListing(ctx context.Context) *listing {
	return &listing{base: context.WithoutCancel(ctx), done: make(chan struct{})}
}

// start runs the listing of key; l.mu is held.
func (l *listings) start(key listingKey, pod *corev1.Pod, ls *listing) {
	l.seq++
	ls.seq = l.seq
	ctx, cancel := context.WithCancel(ls.base)
	ls.cancel = cancel
	go func() {
		defer cancel()
		adapters, err := l.list(ctx, key.ep)
		var set listed
		if err == nil {
			l.record(pod, key.ep, adapters, ls.seq)
			set = make(listed, len(adapters))
			for _, a := range adapters {
				set[a.Name] = a.Path
			}
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		ls.names, ls.err = set, err
		close(ls.done)
		p := l.pods[key]
		p.inFlight = nil
		if next := p.pending; next != nil {
			p.pending = nil
			p.inFlight = next
			l.start(key, pod, next)
			return
		}
		delete(l.pods, key)
	}()
}

// leave is called by a waiter whose context ended. The last waiter of a pending listing
// withdraws it; the last waiter of one in flight cancels the call.
func (l *listings) leave(key listingKey, ls *listing) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ls.waiters--
	if ls.waiters > 0 {
		return
	}
	p := l.pods[key]
	switch {
	case p == nil:
	case p.pending == ls:
		p.pending = nil
	case p.inFlight == ls:
		ls.dropped = true
		ls.cancel()
	}
}
