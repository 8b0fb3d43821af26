package adapter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sync/semaphore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/testenv"
)

// fakeEngine is an engine.Client that keeps the adapters of each host in memory. A list
// answers what was loaded when it started. With hold set, every list waits until the test
// sends on hold (or its context ends).
type fakeEngine struct {
	hold    chan struct{}
	holdKey map[string]chan struct{} // lists made with that API key wait on it (when hold is nil)
	listErr error
	// unloadErr fails every unload; loadGate, when set, makes every load wait on it.
	unloadErr error
	loadErr   error // fails every load, without loading
	loadGate  chan struct{}
	lie       bool          // loads succeed without loading
	delay     time.Duration // of every call
	// keys are the API keys engines require, by host (none when absent): a call with another
	// answers 401.
	keys map[string]string

	mu          sync.Mutex
	loaded      map[string][]string          // host -> adapters
	paths       map[string]map[string]string // host -> adapter -> the path it was loaded from
	loads       int
	unloads     int
	lists       int
	listsByKey  map[string]int             // API key -> lists
	keysSeen    map[string]map[string]bool // host -> API keys presented ("" for none)
	running     int                        // lists in flight
	maxRunning  int
	loading     int // loads in flight
	maxLoading  int
	cancelled   int // lists whose context ended before they were answered
	listStarted chan struct{}
}

var _ engine.Client = (*fakeEngine)(nil)

func newFakeEngine() *fakeEngine {
	return &fakeEngine{loaded: map[string][]string{}, paths: map[string]map[string]string{}, listsByKey: map[string]int{},
		keys: map[string]string{}, keysSeen: map[string]map[string]bool{}, listStarted: make(chan struct{}, 1000)}
}

// authorize notes the key ep presents and answers 401 unless the host takes it; f.mu is held.
func (f *fakeEngine) authorize(ep engine.Endpoint, op engine.Op) error {
	if f.keysSeen[ep.Host] == nil {
		f.keysSeen[ep.Host] = map[string]bool{}
	}
	f.keysSeen[ep.Host][ep.APIKey] = true
	if want := f.keys[ep.Host]; want != "" && ep.APIKey != want {
		return &engine.Error{Reason: engine.ReasonEngineUnauthorized, Op: op, Status: 401, Message: "Unauthorized"}
	}
	return nil
}

// seen returns the API keys presented to host, sorted.
func (f *fakeEngine) seen(host string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.keysSeen[host]))
}

func (f *fakeEngine) Load(ctx context.Context, ep engine.Endpoint, req engine.LoadRequest) error {
	f.mu.Lock()
	if err := f.loadErr; err != nil {
		f.loads++
		f.mu.Unlock()
		return err
	}
	f.loading++
	f.maxLoading = max(f.maxLoading, f.loading)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.loading--
		f.mu.Unlock()
	}()
	time.Sleep(f.delay)
	if f.loadGate != nil {
		select {
		case <-f.loadGate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loads++
	if err := f.authorize(ep, engine.OpLoad); err != nil {
		return err
	}
	if !f.lie && !slices.Contains(f.loaded[ep.Host], req.Name) {
		f.loaded[ep.Host] = append(f.loaded[ep.Host], req.Name)
		path, _ := engine.ResolveArtifact(ep.Kind, req.ArtifactURL)
		f.setPath(ep.Host, req.Name, path)
	}
	return nil
}

// setPath records where an adapter was loaded from; f.mu is held.
func (f *fakeEngine) setPath(host, name, path string) {
	if f.paths[host] == nil {
		f.paths[host] = map[string]string{}
	}
	f.paths[host][name] = path
}

func (f *fakeEngine) Unload(_ context.Context, ep engine.Endpoint, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unloads++
	if f.unloadErr != nil {
		return f.unloadErr
	}
	if err := f.authorize(ep, engine.OpUnload); err != nil {
		return err
	}
	f.loaded[ep.Host] = slices.DeleteFunc(f.loaded[ep.Host], func(n string) bool { return n == name })
	delete(f.paths[ep.Host], name)
	return nil
}

func (f *fakeEngine) ListAdapters(ctx context.Context, ep engine.Endpoint) ([]engine.Adapter, error) {
	f.mu.Lock()
	f.lists++
	f.listsByKey[ep.APIKey]++
	if err := f.authorize(ep, engine.OpList); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	f.running++
	f.maxRunning = max(f.maxRunning, f.running)
	names := slices.Clone(f.loaded[ep.Host])
	paths := maps.Clone(f.paths[ep.Host])
	f.mu.Unlock()
	select {
	case f.listStarted <- struct{}{}: // tests that watch lists start read it; others never fill it
	default:
	}
	defer func() {
		f.mu.Lock()
		f.running--
		f.mu.Unlock()
	}()
	time.Sleep(f.delay)
	hold := f.hold
	if hold == nil {
		f.mu.Lock()
		hold = f.holdKey[ep.APIKey]
		f.mu.Unlock()
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			f.mu.Lock()
			f.cancelled++
			f.mu.Unlock()
			return nil, &engine.Error{Reason: engine.ReasonEngineRequestCanceled, Op: engine.OpList, Err: ctx.Err()}
		}
	}
	if f.listErr != nil {
		return nil, f.listErr
	}
	slices.Sort(names)
	out := make([]engine.Adapter, len(names))
	for i, n := range names {
		out[i] = engine.Adapter{Name: n, Path: paths[n]}
	}
	return out, nil
}

func (f *fakeEngine) count(n *int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *n
}

// load puts an adapter on a host directly, as another client would (from /models/<name>).
func (f *fakeEngine) load(host, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loaded[host] = append(f.loaded[host], name)
	f.setPath(host, name, "/models/"+name)
}

func fakePod(name, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name + "-uid")},
		Status:     corev1.PodStatus{PodIP: ip},
	}
}

func endpointFor(pod *corev1.Pod, apiKey string) engine.Endpoint {
	return engine.Endpoint{Kind: engine.KindVLLM, Host: pod.Status.PodIP, APIKey: apiKey}
}

// result is what one get returned.
type result struct {
	names listed
	err   error
}

// getAsync calls get in a goroutine and returns where its result arrives.
func getAsync(ctx context.Context, l *listings, pod *corev1.Pod, ep engine.Endpoint, after uint64) <-chan result {
	ch := make(chan result, 1)
	go func() {
		names, err := l.get(ctx, pod, ep, after)
		ch <- result{names, err}
	}()
	return ch
}

// waiters returns the number of callers waiting for the listing in flight and the pending
// one of a pod.
func waiters(l *listings, pod *corev1.Pod, ep engine.Endpoint) (inFlight, pending int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.pods[listingKey{pod: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}, uid: pod.UID, ep: ep}]
	if p == nil {
		return 0, 0
	}
	if p.inFlight != nil {
		inFlight = p.inFlight.waiters
	}
	if p.pending != nil {
		pending = p.pending.waiters
	}
	return inFlight, pending
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, time.Millisecond, what, func() (bool, string) { return cond(), "" })
}

func receive(t *testing.T, what string, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out after 10s waiting for %s", what)
		return result{}
	}
}

func newTestInventory(f *fakeEngine) *Inventory {
	return NewInventory(f, nil, time.Minute, 1, clock.RealClock{}, unboundedHooks())
}

// unboundedHooks are inventory hooks without engine call or listing slots.
func unboundedHooks() inventoryHooks {
	none := func(context.Context) error { return nil }
	return inventoryHooks{acquire: none, release: func() {}, acquireList: none, releaseList: func() {}}
}

func TestListingsShareConcurrentCallers(t *testing.T) {
	f := newFakeEngine()
	f.hold = make(chan struct{})
	inv := newTestInventory(f)
	pod := fakePod("p", "127.0.40.1")
	ep := endpointFor(pod, "")
	f.load(pod.Status.PodIP, "a")

	// Callers whose loads returned before the first listing started all share it.
	mark := inv.listings.mark()
	var results []<-chan result
	for range 5 {
		results = append(results, getAsync(t.Context(), inv.listings, pod, ep, mark))
	}
	eventually(t, "5 callers on the listing in flight", func() bool { n, _ := waiters(inv.listings, pod, ep); return n == 5 })
	f.hold <- struct{}{}
	for i, ch := range results {
		r := receive(t, fmt.Sprintf("caller %d", i), ch)
		if r.err != nil || !r.names.has("a") {
			t.Errorf("Caller %d got %v, %v; want a listing with a", i, r.names, r.err)
		}
	}
	if n := f.count(&f.lists); n != 1 {
		t.Errorf("%d list calls for 5 concurrent callers, want 1", n)
	}
	if loaded, known := inv.Loaded(pod, "a"); !loaded || !known {
		t.Errorf("Inventory Loaded(a) = %t, %t after the listing; want true, true", loaded, known)
	}
	if _, pending := waiters(inv.listings, pod, ep); pending != 0 || len(inv.listings.pods) != 0 {
		t.Errorf("Listings of %d pods left behind, want none", len(inv.listings.pods))
	}
}

func TestListingsLateCallerWaitsForTheNextListing(t *testing.T) {
	f := newFakeEngine()
	f.hold = make(chan struct{})
	inv := newTestInventory(f)
	pod := fakePod("p", "127.0.40.1")
	ep := endpointFor(pod, "")

	first := getAsync(t.Context(), inv.listings, pod, ep, inv.listings.mark())
	<-f.listStarted
	// Loaded after the first listing started: it may not show the adapter, so these two
	// callers wait for the next listing, and share it.
	f.load(pod.Status.PodIP, "late")
	late1 := getAsync(t.Context(), inv.listings, pod, ep, inv.listings.mark())
	late2 := getAsync(t.Context(), inv.listings, pod, ep, inv.listings.mark())
	eventually(t, "2 callers on the pending listing", func() bool { _, n := waiters(inv.listings, pod, ep); return n == 2 })
	if n := f.count(&f.running); n != 1 {
		t.Errorf("%d listings in flight with one pending, want 1", n)
	}
	f.hold <- struct{}{}
	if r := receive(t, "the first caller", first); r.err != nil || r.names.has("late") {
		t.Errorf("First caller got %v, %v; want the listing from before the late load", r.names, r.err)
	}
	<-f.listStarted
	f.hold <- struct{}{}
	for i, ch := range []<-chan result{late1, late2} {
		if r := receive(t, "a late caller", ch); r.err != nil || !r.names.has("late") {
			t.Errorf("Late caller %d got %v, %v; want a listing with late", i, r.names, r.err)
		}
	}
	if n := f.count(&f.lists); n != 2 {
		t.Errorf("%d list calls, want 2", n)
	}
}

func TestListingsShareErrors(t *testing.T) {
	f := newFakeEngine()
	f.hold = make(chan struct{})
	f.listErr = &engine.Error{Reason: engine.ReasonEngineServerError, Op: engine.OpList, Status: 500}
	inv := newTestInventory(f)
	pod := fakePod("p", "127.0.40.1")
	ep := endpointFor(pod, "")

	mark := inv.listings.mark()
	var results []<-chan result
	for range 3 {
		results = append(results, getAsync(t.Context(), inv.listings, pod, ep, mark))
	}
	eventually(t, "3 callers on the listing", func() bool { n, _ := waiters(inv.listings, pod, ep); return n == 3 })
	f.hold <- struct{}{}
	for i, ch := range results {
		if r := receive(t, "a caller", ch); engine.ReasonOf(r.err) != engine.ReasonEngineServerError {
			t.Errorf("Caller %d got error %v, want the engine's %s", i, r.err, engine.ReasonEngineServerError)
		}
	}
	if n := f.count(&f.lists); n != 1 {
		t.Errorf("%d list calls, want 1", n)
	}
	if _, known := inv.Loaded(pod, "a"); known {
		t.Error("A failed listing was recorded in the inventory")
	}
}

func TestListingsCancellation(t *testing.T) {
	pod := fakePod("p", "127.0.40.1")
	ep := endpointFor(pod, "")

	t.Run("one caller leaving does not cancel the others' listing", func(t *testing.T) {
		f := newFakeEngine()
		f.hold = make(chan struct{})
		inv := newTestInventory(f)
		ctx, cancel := context.WithCancel(t.Context())
		mark := inv.listings.mark()
		leaving := getAsync(ctx, inv.listings, pod, ep, mark)
		staying := getAsync(t.Context(), inv.listings, pod, ep, mark)
		eventually(t, "2 callers on the listing", func() bool { n, _ := waiters(inv.listings, pod, ep); return n == 2 })
		cancel()
		if r := receive(t, "the cancelled caller", leaving); !errors.Is(r.err, context.Canceled) {
			t.Errorf("Cancelled caller got %v, %v; want context.Canceled", r.names, r.err)
		}
		f.hold <- struct{}{}
		if r := receive(t, "the other caller", staying); r.err != nil {
			t.Errorf("Other caller got %v, want the listing", r.err)
		}
		if n := f.count(&f.cancelled); n != 0 {
			t.Errorf("%d list calls cancelled, want 0", n)
		}
	})

	t.Run("the last caller leaving cancels the listing", func(t *testing.T) {
		f := newFakeEngine()
		f.hold = make(chan struct{})
		inv := newTestInventory(f)
		ctx, cancel := context.WithCancel(t.Context())
		ch := getAsync(ctx, inv.listings, pod, ep, inv.listings.mark())
		<-f.listStarted
		cancel()
		if r := receive(t, "the cancelled caller", ch); !errors.Is(r.err, context.Canceled) {
			t.Errorf("Cancelled caller got %v, %v; want context.Canceled", r.names, r.err)
		}
		eventually(t, "the list call cancelled", func() bool { return f.count(&f.cancelled) == 1 })
		eventually(t, "the listing forgotten", func() bool {
			inv.listings.mu.Lock()
			defer inv.listings.mu.Unlock()
			return len(inv.listings.pods) == 0
		})
	})

	t.Run("a caller does not join a cancelled listing", func(t *testing.T) {
		f := newFakeEngine()
		f.hold = make(chan struct{})
		inv := newTestInventory(f)
		ctx, cancel := context.WithCancel(t.Context())
		mark := inv.listings.mark()
		first := getAsync(ctx, inv.listings, pod, ep, mark)
		<-f.listStarted
		// Hold the cancelled call in flight, as a slow engine would.
		f.mu.Lock()
		cancel()
		receive(t, "the cancelled caller", first)
		// This caller could join the first listing by its mark, but that one is cancelled.
		next := getAsync(t.Context(), inv.listings, pod, ep, mark)
		eventually(t, "the caller on the pending listing", func() bool { _, n := waiters(inv.listings, pod, ep); return n == 1 })
		f.mu.Unlock()
		<-f.listStarted
		f.hold <- struct{}{}
		if r := receive(t, "the next caller", next); r.err != nil {
			t.Errorf("Next caller got %v, want the second listing", r.err)
		}
	})

	t.Run("a pending listing nobody waits for is not made", func(t *testing.T) {
		f := newFakeEngine()
		f.hold = make(chan struct{})
		inv := newTestInventory(f)
		first := getAsync(t.Context(), inv.listings, pod, ep, inv.listings.mark())
		<-f.listStarted
		ctx, cancel := context.WithCancel(t.Context())
		late := getAsync(ctx, inv.listings, pod, ep, inv.listings.mark())
		eventually(t, "the caller on the pending listing", func() bool { _, n := waiters(inv.listings, pod, ep); return n == 1 })
		cancel()
		if r := receive(t, "the cancelled caller", late); !errors.Is(r.err, context.Canceled) {
			t.Errorf("Cancelled caller got %v, %v; want context.Canceled", r.names, r.err)
		}
		f.hold <- struct{}{}
		receive(t, "the first caller", first)
		eventually(t, "the listing forgotten", func() bool {
			inv.listings.mu.Lock()
			defer inv.listings.mu.Unlock()
			return len(inv.listings.pods) == 0
		})
		if n := f.count(&f.lists); n != 1 {
			t.Errorf("%d list calls, want 1 (the pending one was withdrawn)", n)
		}
	})

	t.Run("a caller whose context has ended makes no call", func(t *testing.T) {
		f := newFakeEngine()
		inv := newTestInventory(f)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := inv.listings.get(ctx, pod, ep, inv.listings.mark()); !errors.Is(err, context.Canceled) {
			t.Errorf("get() = %v, want context.Canceled", err)
		}
		if n := f.count(&f.lists); n != 0 {
			t.Errorf("%d list calls, want 0", n)
		}
	})
}

func TestListingsNotSharedAcrossKeys(t *testing.T) {
	f := newFakeEngine()
	f.hold = make(chan struct{})
	inv := newTestInventory(f)
	pod := fakePod("p", "127.0.40.1")
	recreated := pod.DeepCopy()
	recreated.UID = "other-uid"

	mark := inv.listings.mark()
	calls := map[string]struct {
		pod *corev1.Pod
		ep  engine.Endpoint
	}{
		"key a":         {pod, endpointFor(pod, "key-a")},
		"key b":         {pod, endpointFor(pod, "key-b")},
		"no key":        {pod, endpointFor(pod, "")},
		"recreated pod": {recreated, endpointFor(recreated, "key-a")},
	}
	var results []<-chan result
	for _, c := range calls {
		results = append(results, getAsync(t.Context(), inv.listings, c.pod, c.ep, mark))
	}
	eventually(t, "4 list calls in flight", func() bool { return f.count(&f.running) == 4 })
	for range results {
		f.hold <- struct{}{}
	}
	for _, ch := range results {
		if r := receive(t, "a caller", ch); r.err != nil {
			t.Errorf("get() failed: %v", r.err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if diff := cmp.Diff(map[string]int{"key-a": 2, "key-b": 1, "": 1}, f.listsByKey); diff != "" {
		t.Errorf("List calls by API key mismatch (-want +got):\n%s", diff)
	}
}

// TestListingsVerifyEveryLoad: many loads onto two pods, each verified with a listing that
// must show its adapter; they share listings, and nothing is left behind.
func TestListingsVerifyEveryLoad(t *testing.T) {
	f := newFakeEngine()
	inv := newTestInventory(f)
	pods := []*corev1.Pod{fakePod("p0", "127.0.40.1"), fakePod("p1", "127.0.40.2")}
	const loads = 200
	var wg sync.WaitGroup
	errs := make(chan error, loads)
	for i := range loads {
		pod := pods[i%len(pods)]
		wg.Go(func() {
			ctx := t.Context()
			if i%10 == 9 { // some callers give up early
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Duration(rand.IntN(300))*time.Microsecond)
				defer cancel()
			}
			name := fmt.Sprintf("a%d", i)
			time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
			f.load(pod.Status.PodIP, name)
			listed, err := inv.listings.get(ctx, pod, endpointFor(pod, ""), inv.listings.mark())
			switch {
			case err != nil && ctx.Err() == nil:
				errs <- fmt.Errorf("verifying %s: %w", name, err)
			case err == nil && !listed.has(name):
				errs <- fmt.Errorf("the listing verifying %s does not show it", name)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	lists := f.count(&f.lists)
	t.Logf("%d loads verified with %d list calls", loads, lists)
	if lists >= loads {
		t.Errorf("%d list calls for %d loads, want fewer", lists, loads)
	}
	eventually(t, "the listings forgotten", func() bool {
		inv.listings.mu.Lock()
		defer inv.listings.mu.Unlock()
		return len(inv.listings.pods) == 0
	})
}

// TestLoadSharesVerificationWithinSlots: with four engine call slots and one listing slot,
// many loads onto the same pods complete (a verification waiting for a shared listing holds
// no slot), never exceed either bound, share their verifications (loads finish faster than
// the one listing slot lists), and a lying engine is caught.
func TestLoadSharesVerificationWithinSlots(t *testing.T) {
	pods := []*corev1.Pod{fakePod("p0", "127.0.40.1"), fakePod("p1", "127.0.40.2")}
	newReconciler := func(f *fakeEngine, slots, listSlots int) *Reconciler {
		r := &Reconciler{client: fakeClient(t, interceptor.Funcs{}, pods[0], pods[1]), engine: f, clock: clock.RealClock{},
			unanswered: newUnansweredLoads(), slots: semaphore.NewWeighted(int64(slots)), listSlots: semaphore.NewWeighted(int64(listSlots))}
		r.inventory = NewInventory(f, nil, time.Minute, 1, clock.RealClock{}, r.inventoryHooks())
		return r
	}

	t.Run("four load slots, one listing slot", func(t *testing.T) {
		f := newFakeEngine()
		f.delay = time.Millisecond
		r := newReconciler(f, 4, 1)
		const adapters = 16
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, adapters*len(pods))
		for i := range adapters {
			a := &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("a%d", i)},
				Spec: v1alpha1.ModelAdapterSpec{ArtifactURL: "hf://org/repo"}}
			for _, pod := range pods {
				wg.Go(func() {
					if err := r.load(ctx, a, pod, newPass(a), false); err != nil {
						errs <- fmt.Errorf("loading %s on %s: %w", a.Name, pod.Name, err)
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		loads, lists := f.count(&f.loads), f.count(&f.lists)
		maxLoading, maxListing := f.count(&f.maxLoading), f.count(&f.maxRunning)
		t.Logf("%d loads verified with %d list calls, at most %d loads and %d lists at once", loads, lists, maxLoading, maxListing)
		if maxLoading > 4 || maxListing > 1 {
			t.Errorf("%d loads and %d lists at once, want at most 4 and 1 (the slots)", maxLoading, maxListing)
		}
		if lists >= loads {
			t.Errorf("%d list calls for %d loads, want fewer", lists, loads)
		}
	})

	t.Run("lying engine", func(t *testing.T) {
		f := newFakeEngine()
		f.lie = true
		r := newReconciler(f, 4, 4)
		a := &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"},
			Spec: v1alpha1.ModelAdapterSpec{ArtifactURL: "hf://org/repo"}}
		err := r.load(t.Context(), a, pods[0], newPass(a), false)
		if engine.ReasonOf(err) != ReasonNotVerified {
			t.Errorf("load() = %v, want reason %s", err, ReasonNotVerified)
		}
	})
}

// TestOlderListingNeverOverwrites: two listings of one pod run at once (different API keys,
// so they are not shared). The one that started first is held by the engine while the adapter
// is loaded and a later listing verifies it; when the older one answers (without the adapter,
// as of when it started) it must not overwrite that verification. Likewise an unload recorded
// after a listing started is not undone by that listing's answer.
func TestOlderListingNeverOverwrites(t *testing.T) {
	f := newFakeEngine()
	hold := make(chan struct{})
	f.holdKey = map[string]chan struct{}{"old": hold}
	inv := newTestInventory(f)
	pod := fakePod("p", "127.0.40.9")

	older := getAsync(t.Context(), inv.listings, pod, endpointFor(pod, "old"), inv.listings.mark())
	eventually(t, "the older listing in flight", func() bool { return f.count(&f.running) == 1 })
	f.load(pod.Status.PodIP, "lora") // the load lands after the older listing started
	newer := receive(t, "the newer listing", getAsync(t.Context(), inv.listings, pod, endpointFor(pod, "new"), inv.listings.mark()))
	if newer.err != nil || !newer.names.has("lora") {
		t.Fatalf("newer listing: %v %v", newer.names, newer.err)
	}
	if loaded, known := inv.Loaded(pod, "lora"); !loaded || !known {
		t.Fatalf("after the newer listing: loaded=%v known=%v", loaded, known)
	}
	close(hold)
	if r := receive(t, "the older listing", older); r.err != nil || r.names.has("lora") {
		t.Fatalf("older listing: %v %v (it started before the load)", r.names, r.err)
	}
	if loaded, _ := inv.Loaded(pod, "lora"); !loaded {
		t.Fatal("an older listing overwrote a newer verification: the inventory says the adapter is not loaded")
	}

	// An unload after a listing started: that listing's answer does not bring it back.
	hold = make(chan struct{})
	f.mu.Lock()
	f.holdKey["old"] = hold
	f.mu.Unlock()
	older = getAsync(t.Context(), inv.listings, pod, endpointFor(pod, "old"), inv.listings.mark())
	eventually(t, "the second older listing in flight", func() bool { return f.count(&f.running) == 1 })
	inv.forgetAdapter(pod, "lora") // unloaded meanwhile (the engine still has it for this test)
	close(hold)
	if r := receive(t, "the second older listing", older); r.err != nil || !r.names.has("lora") {
		t.Fatalf("second older listing: %v %v", r.names, r.err)
	}
	if loaded, _ := inv.Loaded(pod, "lora"); loaded {
		t.Fatal("a listing that started before an unload brought the adapter back into the inventory")
	}
}

// holds returns the adapters loaded on a host.
func (f *fakeEngine) holds(host string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.loaded[host])
}
