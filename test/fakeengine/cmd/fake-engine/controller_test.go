package main

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/loraplane/loraplane/test/fakeengine"
)

// noWatchList tells the reflector to list then watch, as a fake client does.
type noWatchList struct{}

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// fakeListWatch lists pods and hands out the watchers it creates.
func fakeListWatch(pods ...*corev1.Pod) (cache.ListerWatcher, chan *watch.FakeWatcher) {
	watchers := make(chan *watch.FakeWatcher, 10)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			l := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
			for _, p := range pods {
				l.Items = append(l.Items, *p)
			}
			return l, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			w := watch.NewFake()
			watchers <- w
			return w, nil
		},
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, noWatchList{}), watchers
}

// TestController runs the informer, queue and manager together on a fake watch.
func TestController(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig())
	m, _ := newTestManager(t, fakeengine.Options{})

	a := pod("a", "127.0.19.70")
	a.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kwok", Operation: metav1.ManagedFieldsOperationUpdate}}
	lw, watchers := fakeListWatch(a)
	c, err := newController(logger, lw, m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.run(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("run did not return after cancel")
		}
	}()

	eventually(t, "engine of listed pod a", func() bool { return m.get("ns", "a") != nil })
	if !listening("127.0.19.70:8000") {
		t.Fatal("engine a not listening")
	}
	objs := c.informer.GetStore().List()
	if len(objs) != 1 || objs[0].(*corev1.Pod).ManagedFields != nil {
		t.Fatalf("cache holds %d pods, managedFields %v", len(objs), objs[0].(*corev1.Pod).ManagedFields)
	}

	var w *watch.FakeWatcher
	select {
	case w = <-watchers:
	case <-time.After(10 * time.Second):
		t.Fatal("no watch started")
	}

	// A new pod, pending then running.
	b := pod("b", "", withPhase(corev1.PodPending), withLabel(labelEngine, "sglang"))
	w.Add(b)
	b = pod("b", "127.0.19.71", withLabel(labelEngine, "sglang"))
	w.Modify(b)
	eventually(t, "engine of added pod b", func() bool { return m.get("ns", "b") != nil })
	if k := m.get("ns", "b").engine.Kind(); k != fakeengine.SGLang {
		t.Fatalf("b kind = %s", k)
	}

	// a is recreated under the same name and IP.
	first := m.get("ns", "a").engine
	w.Delete(a)
	w.Add(pod("a", "127.0.19.70", withUID("a-uid-2")))
	eventually(t, "recreated engine of a", func() bool {
		r := m.get("ns", "a")
		return r != nil && r.spec.UID == "a-uid-2"
	})
	if m.get("ns", "a").engine == first {
		t.Fatal("engine a not replaced")
	}

	// b is deleted.
	w.Delete(b)
	eventually(t, "engine of b closed", func() bool { return m.get("ns", "b") == nil })
	eventually(t, "127.0.19.71:8000 closed", func() bool { return !listening("127.0.19.71:8000") })
}

func TestControllerStopsBeforeSync(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig())
	m, _ := newTestManager(t, fakeengine.Options{})
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
			<-ctx.Done() // an API server that never answers
			return nil, ctx.Err()
		},
		WatchFuncWithContext: func(ctx context.Context, _ metav1.ListOptions) (watch.Interface, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		},
	}
	c, err := newController(logger, cache.ToListWatcherWithWatchListSemantics(lw, noWatchList{}), m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := c.run(ctx); err != nil {
		t.Fatalf("run = %v, want nil on shutdown", err)
	}
}
