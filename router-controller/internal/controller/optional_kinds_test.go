package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
)

var lwsGVK = schema.GroupVersionKind{Group: "leaderworkerset.x-k8s.io", Version: "v1", Kind: "LeaderWorkerSet"}

// fakeDiscovery serves the group versions it holds: group version -> resources.
type fakeDiscovery struct {
	mu     sync.Mutex
	served map[string][]metav1.APIResource
	err    error
	asked  int
}

func (d *fakeDiscovery) set(served map[string][]metav1.APIResource, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.served, d.err = served, err
}

func (d *fakeDiscovery) ServerGroups() (*metav1.APIGroupList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return nil, d.err
	}
	byGroup := map[string]*metav1.APIGroup{}
	list := &metav1.APIGroupList{}
	for gvString := range d.served {
		gv, _ := schema.ParseGroupVersion(gvString)
		g, ok := byGroup[gv.Group]
		if !ok {
			list.Groups = append(list.Groups, metav1.APIGroup{Name: gv.Group})
			g = &list.Groups[len(list.Groups)-1]
			byGroup[gv.Group] = g
		}
		g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: gvString, Version: gv.Version})
	}
	return list, nil
}

func (d *fakeDiscovery) ServerResourcesForGroupVersion(gv string) (*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked++
	if d.err != nil {
		return nil, d.err
	}
	res, ok := d.served[gv]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{}, "")
	}
	return &metav1.APIResourceList{GroupVersion: gv, APIResources: res}, nil
}

func lwsResources() []metav1.APIResource {
	return []metav1.APIResource{
		{Name: "leaderworkersets", Kind: "LeaderWorkerSet", Namespaced: true},
		{Name: "leaderworkersets/status", Kind: "LeaderWorkerSet", Namespaced: true},
	}
}

func TestDiscoverKind(t *testing.T) {
	other := []metav1.APIResource{{Name: "others", Kind: "Other"}}
	cases := map[string]struct {
		served  map[string][]metav1.APIResource
		err     error
		want    servedness
		wantErr bool
	}{
		"served":                     {served: map[string][]metav1.APIResource{"leaderworkerset.x-k8s.io/v1": lwsResources()}, want: servedness{served: true, groupServed: true}},
		"group not served":           {served: map[string][]metav1.APIResource{"apps/v1": other}},
		"other versions serve it":    {served: map[string][]metav1.APIResource{"leaderworkerset.x-k8s.io/v1beta1": lwsResources(), "leaderworkerset.x-k8s.io/v1alpha1": lwsResources()}, want: servedness{groupServed: true, versions: []string{"v1alpha1", "v1beta1"}}},
		"version served without it":  {served: map[string][]metav1.APIResource{"leaderworkerset.x-k8s.io/v1": other, "leaderworkerset.x-k8s.io/v2": other}, want: servedness{groupServed: true}},
		"only as a subresource":      {served: map[string][]metav1.APIResource{"leaderworkerset.x-k8s.io/v1": {{Name: "others/scale", Kind: "LeaderWorkerSet"}}}, want: servedness{groupServed: true}},
		"discovery fails, not a 404": {err: apierrors.NewServiceUnavailable("etcd"), wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := &fakeDiscovery{served: tc.served, err: tc.err}
			got, err := discoverKind(d, lwsGVK)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(servedness{})); diff != "" {
				t.Errorf("servedness (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeGate is the sync gate as the router sees it: Activate calls prepare and marks the kind
// synced unless told to fail.
type fakeGate struct {
	mu            sync.Mutex
	synced        map[schema.GroupVersionKind]bool
	activateErr   error
	activations   int
	deactivations int
}

func (g *fakeGate) Synced(gvk schema.GroupVersionKind) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.synced[gvk]
}

func (g *fakeGate) Activate(ctx context.Context, obj client.Object, prepare func(context.Context) error) error {
	g.mu.Lock()
	g.activations++
	err := g.activateErr
	g.mu.Unlock()
	if err != nil {
		return err
	}
	if err := prepare(ctx); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.synced[obj.GetObjectKind().GroupVersionKind()] = true
	return nil
}

func (g *fakeGate) Deactivate(_ context.Context, obj client.Object) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.deactivations++
	delete(g.synced, obj.GetObjectKind().GroupVersionKind())
	return nil
}

func (g *fakeGate) counts() (activations, deactivations int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.activations, g.deactivations
}

// fakeIndexer records the indexes added and fails with err when set.
type fakeIndexer struct {
	err     error
	indexed []string
}

func (f *fakeIndexer) IndexField(_ context.Context, obj client.Object, field string, _ client.IndexerFunc) error {
	if f.err != nil {
		return f.err
	}
	f.indexed = append(f.indexed, obj.GetObjectKind().GroupVersionKind().Kind+" "+field)
	return nil
}

// fakeWatch is one watch of an informer; it records its context.
type fakeWatch struct{ ctx context.Context }

func (w *fakeWatch) Start(ctx context.Context, _ workqueue.TypedRateLimitingInterface[Key]) error {
	w.ctx = ctx
	return nil
}

func (w *fakeWatch) WaitForSync(context.Context) error { return nil }

// logLines collects the lines a logr.Logger writes.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{})
}

// take returns the lines written since the last take.
func (l *logLines) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lines
	l.lines = nil
	return out
}

// optionalFixture is a reconciler with LeaderWorkerSet as its optional kind, on fakes.
type optionalFixture struct {
	r       *RouteReconciler
	gate    *fakeGate
	disc    *fakeDiscovery
	indexer *fakeIndexer
	watches []*fakeWatch
	queue   workqueue.TypedRateLimitingInterface[Key]
	logs    *logLines
}

func newOptionalFixture(t *testing.T, objs ...client.Object) *optionalFixture {
	t.Helper()
	Register()
	f := &optionalFixture{
		gate:    &fakeGate{synced: map[schema.GroupVersionKind]bool{}},
		disc:    &fakeDiscovery{},
		indexer: &fakeIndexer{},
		logs:    &logLines{},
	}
	kinds := append(DefaultSourceKinds(), SourceKind{GVK: lwsGVK, Optional: true})
	c := fake.NewClientBuilder().WithScheme(testScheme(t)).WithObjects(objs...).Build()
	f.r = &RouteReconciler{cfg: Config{Routes: routesConfig()}, cache: c}
	for _, k := range kinds {
		f.r.kinds = append(f.r.kinds, sourceKind{SourceKind: k, indexed: !k.Optional})
	}
	f.r.optional = newOptionalKinds(kinds, f.gate, f.disc, DefaultKindRecheckPeriod)
	f.r.optional.indexer = f.indexer
	src := f.r.optionalSource(SourceKind{GVK: lwsGVK, Optional: true}, func() source.TypedSyncingSource[Key] {
		w := &fakeWatch{}
		f.watches = append(f.watches, w)
		return w
	})
	// The controller runs (this replica leads); the kind is not served yet.
	f.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[Key]())
	t.Cleanup(f.queue.ShutDown)
	if err := src.Start(context.Background(), f.queue); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *optionalFixture) recheck() {
	f.r.optional.recheck(context.Background(), f.logs.logger())
}

func (f *optionalFixture) active() []string {
	var out []string
	for _, k := range f.r.activeKinds(context.Background()) {
		out = append(out, fmt.Sprintf("%s indexed=%v", k.GVK.Kind, k.indexed))
	}
	return out
}

func servedGauge(gvk schema.GroupVersionKind) float64 {
	return testutil.ToFloat64(SourceKindServed.WithLabelValues(gvk.Group, gvk.Version, gvk.Kind))
}

// queued drains the queue.
func queued(q workqueue.TypedRateLimitingInterface[Key]) []string {
	var out []string
	for q.Len() > 0 {
		k, _ := q.Get()
		out = append(out, k.String())
		q.Done(k)
	}
	return out
}

func hasLine(lines []string, parts ...string) bool {
	for _, l := range lines {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return true
		}
	}
	return false
}

var builtIn = []string{"Deployment indexed=true", "StatefulSet indexed=true", "ModelAdapter indexed=true"}

// TestRecheckFollowsTheCRD: an optional kind not served at start is watched once discovery
// serves it (index, gate, watch, requeue of the routes naming it), left alone while nothing
// changes or discovery fails, and no longer watched once its API is gone.
func TestRecheckFollowsTheCRD(t *testing.T) {
	route := builtRoute(t, "lws-model", routes.Source{Kind: "LeaderWorkerSet", Namespace: srcNS, Name: "gone", Model: "lws-model", Service: "lws-model", Port: 8000})
	other := builtRoute(t, "deploy-model", src("d", "deploy-model", 8000))
	f := newOptionalFixture(t, route, other)

	f.recheck()
	if diff := cmp.Diff(builtIn, f.active()); diff != "" {
		t.Errorf("active kinds before the CRD (-want +got):\n%s", diff)
	}
	if f.r.watchesKind("LeaderWorkerSet") || !f.r.watchesKind("Deployment") || f.r.watchesKind("Unknown") {
		t.Errorf("watchesKind before the CRD: LeaderWorkerSet %v, Deployment %v, Unknown %v; want false, true, false",
			f.r.watchesKind("LeaderWorkerSet"), f.r.watchesKind("Deployment"), f.r.watchesKind("Unknown"))
	}
	if lines := f.logs.take(); !hasLine(lines, "Optional source kind is not served: its group is not served", "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet") {
		t.Errorf("log lines %q, want the kind reported not served", lines)
	}
	if g := servedGauge(lwsGVK); g != 0 {
		t.Errorf("served gauge %v, want 0", g)
	}

	// The CRD is installed.
	f.disc.set(map[string][]metav1.APIResource{"leaderworkerset.x-k8s.io/v1": lwsResources()}, nil)
	f.recheck()
	if diff := cmp.Diff(append(builtIn, "LeaderWorkerSet indexed=true"), f.active()); diff != "" {
		t.Errorf("active kinds after the CRD (-want +got):\n%s", diff)
	}
	if !f.r.watchesKind("LeaderWorkerSet") {
		t.Error("watchesKind(LeaderWorkerSet) = false after the CRD, want true")
	}
	if diff := cmp.Diff([]string{"LeaderWorkerSet loraplane.io/routing"}, f.indexer.indexed); diff != "" {
		t.Errorf("indexes added (-want +got):\n%s", diff)
	}
	if len(f.watches) != 1 || f.watches[0].ctx == nil {
		t.Fatalf("watches started: %d, want 1 started", len(f.watches))
	}
	// The route whose LeaderWorkerSet is gone is reconciled; the other route is not.
	if diff := cmp.Diff([]string{"model:lws-model"}, queued(f.queue)); diff != "" {
		t.Errorf("keys enqueued (-want +got):\n%s", diff)
	}
	if lines := f.logs.take(); !hasLine(lines, "Watching optional source kind", `"indexed"=true`) {
		t.Errorf("log lines %q, want the watch reported", lines)
	}
	if g := servedGauge(lwsGVK); g != 1 {
		t.Errorf("served gauge %v, want 1", g)
	}

	// Nothing changes, then discovery fails: nothing happens, nothing is said at V(0).
	f.recheck()
	f.disc.set(map[string][]metav1.APIResource{"leaderworkerset.x-k8s.io/v1": lwsResources()}, apierrors.NewServiceUnavailable("down"))
	f.recheck()
	if a, d := f.gate.counts(); a != 1 || d != 0 {
		t.Errorf("gate activations %d, deactivations %d; want 1, 0", a, d)
	}
	if lines := f.logs.take(); len(lines) != 0 {
		t.Errorf("log lines %q while nothing changed, want none", lines)
	}
	if !f.r.watchesKind("LeaderWorkerSet") {
		t.Error("a failed discovery stopped the watch")
	}

	// The CRD is deleted.
	f.disc.set(map[string][]metav1.APIResource{}, nil)
	f.recheck()
	if diff := cmp.Diff(builtIn, f.active()); diff != "" {
		t.Errorf("active kinds after the CRD went (-want +got):\n%s", diff)
	}
	if f.r.watchesKind("LeaderWorkerSet") {
		t.Error("watchesKind(LeaderWorkerSet) = true after the CRD went")
	}
	if f.watches[0].ctx.Err() == nil {
		t.Error("the watch was not stopped")
	}
	if keys := queued(f.queue); len(keys) != 0 {
		t.Errorf("keys enqueued when the CRD went: %v, want none", keys)
	}
	if lines := f.logs.take(); !hasLine(lines, "Not watching optional source kind any more: its API is no longer served") {
		t.Errorf("log lines %q, want the end of the watch reported", lines)
	}

	// Installed again: a new informer, a new index, a new watch.
	f.disc.set(map[string][]metav1.APIResource{"leaderworkerset.x-k8s.io/v1": lwsResources()}, nil)
	f.recheck()
	if len(f.watches) != 2 || f.watches[1].ctx.Err() != nil || !f.r.watchesKind("LeaderWorkerSet") {
		t.Errorf("after the CRD came back: %d watches, watchesKind %v; want a second, running watch", len(f.watches), f.r.watchesKind("LeaderWorkerSet"))
	}
}

// TestRecheckUnservedVersion: a kind whose group serves it in other versions only is
// reported once, with those versions, and again only when that changes; it is not watched.
func TestRecheckUnservedVersion(t *testing.T) {
	f := newOptionalFixture(t)
	f.disc.set(map[string][]metav1.APIResource{"leaderworkerset.x-k8s.io/v1beta1": lwsResources()}, nil)
	f.recheck()
	f.recheck()
	lines := f.logs.take()
	if len(lines) != 1 || !hasLine(lines, "not served in this version", `"servedVersions"=["v1beta1"]`, "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet") {
		t.Errorf("log lines %q, want one line naming the kind and the served version v1beta1", lines)
	}
	if g := servedGauge(lwsGVK); g != 0 {
		t.Errorf("served gauge %v, want 0", g)
	}
	if a, _ := f.gate.counts(); a != 0 || f.r.watchesKind("LeaderWorkerSet") {
		t.Errorf("activations %d, watchesKind %v; want 0, false", a, f.r.watchesKind("LeaderWorkerSet"))
	}
	f.disc.set(map[string][]metav1.APIResource{"leaderworkerset.x-k8s.io/v1beta1": lwsResources(), "leaderworkerset.x-k8s.io/v1beta2": lwsResources()}, nil)
	f.recheck()
	if lines := f.logs.take(); !hasLine(lines, `"servedVersions"=["v1beta1" "v1beta2"]`) {
		t.Errorf("log lines %q after a version was added, want it reported", lines)
	}
}

// TestRecheckActivationFails: a kind whose informer does not sync stays unwatched and is
// tried again at the next re-check; one whose index cannot be added is watched unindexed.
func TestRecheckActivationFails(t *testing.T) {
	f := newOptionalFixture(t)
	f.disc.set(map[string][]metav1.APIResource{"leaderworkerset.x-k8s.io/v1": lwsResources()}, nil)
	f.gate.activateErr = errors.New("caches of router did not sync within 2m0s")
	f.recheck()
	if f.r.watchesKind("LeaderWorkerSet") || len(f.watches) != 0 {
		t.Errorf("watchesKind %v, %d watches after a failed activation; want false, 0", f.r.watchesKind("LeaderWorkerSet"), len(f.watches))
	}
	if lines := f.logs.take(); !hasLine(lines, "Watching optional source kind failed; trying again at the next re-check", "did not sync") {
		t.Errorf("log lines %q, want the failure reported", lines)
	}

	f.gate.activateErr = nil
	f.indexer.err = errors.New("indexer conflict")
	f.recheck()
	if diff := cmp.Diff(append(builtIn, "LeaderWorkerSet indexed=false"), f.active()); diff != "" {
		t.Errorf("active kinds (-want +got):\n%s", diff)
	}
	if a, _ := f.gate.counts(); a != 2 {
		t.Errorf("activations %d, want 2 (one retry)", a)
	}
}

// TestOptionalSourceOnStandby: on a replica whose controller has not started, activation
// starts no watch and enqueues nothing; the controller's start watches the kind then.
func TestOptionalSourceOnStandby(t *testing.T) {
	watched := false
	var started int
	s := &optionalSource{
		kind:    SourceKind{GVK: lwsGVK, Optional: true},
		watched: func() bool { return watched },
		newInner: func() source.TypedSyncingSource[Key] {
			started++
			return &fakeWatch{}
		},
		requeue: func(context.Context) ([]Key, error) { return []Key{ModelKey("m")}, nil },
	}
	watched = true
	if err := s.watch(); err != nil || started != 0 {
		t.Fatalf("watch on a standby: err %v, %d watches started; want none", err, started)
	}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[Key]())
	defer q.ShutDown()
	if err := s.Start(context.Background(), q); err != nil || started != 1 {
		t.Fatalf("controller start: err %v, %d watches started; want 1", err, started)
	}
	if err := s.watch(); err != nil || started != 1 || q.Len() != 0 {
		t.Errorf("watch of a watched kind: err %v, %d watches, %d keys; want 1 watch, no keys", err, started, q.Len())
	}
}
