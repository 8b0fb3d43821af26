package main

import (
	"context"
	"errors"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// syncKey is the only workqueue item: every pod event asks for one level-triggered sync of
// all engines against all pods, and a burst of events collapses into one sync.
const syncKey = "sync"

// controller feeds the pods of an informer to manager.sync through a workqueue.
type controller struct {
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[string]
	m        *manager
	logger   klog.Logger
}

func newController(logger klog.Logger, lw cache.ListerWatcher, m *manager) (*controller, error) {
	c := &controller{
		informer: cache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, cache.SharedIndexInformerOptions{ObjectDescription: "pods"}),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "fake-engine"}),
		m:      m,
		logger: logger,
	}
	if err := c.informer.SetTransform(stripManagedFields); err != nil {
		return nil, err
	}
	// The handlers only enqueue: no work in the informer's goroutine.
	enqueue := func(any) { c.queue.Add(syncKey) }
	if _, err := c.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// stripManagedFields drops managedFields before objects enter the cache.
func stripManagedFields(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil && a.GetManagedFields() != nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

// run runs the informer and the worker until ctx is done.
func (c *controller) run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.queue.ShutDown()
	wg.Go(func() { c.informer.RunWithContext(ctx) })

	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.informer.HasSynced) {
		if ctx.Err() != nil {
			return nil // shut down before the cache synced: not a failure
		}
		return errors.New("pod cache did not sync")
	}
	c.queue.Add(syncKey) // even with no pods at all
	wg.Go(func() {
		for c.processNext() {
		}
	})
	<-ctx.Done()
	return nil
}

func (c *controller) processNext() bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)

	objs := c.informer.GetStore().List()
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	if err := c.m.sync(pods); err != nil {
		c.logger.Error(err, "Some engines did not start; retrying")
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}
