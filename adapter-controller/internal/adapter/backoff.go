package adapter

import (
	"sync"
	"time"
)

// backoffs tracks failures per (adapter, pod, operation): each failure doubles the wait up
// to a maximum, and a success forgets the entry.
type backoffs struct {
	base, max time.Duration
	mu        sync.Mutex
	entries   map[backoffKey]*backoffEntry
}

type backoffKey struct {
	namespace, adapter, pod, op string
}

type backoffEntry struct {
	failures int
	next     time.Time
	lastErr  error
}

func newBackoffs(base, maxDelay time.Duration) *backoffs {
	return &backoffs{base: base, max: maxDelay, entries: map[backoffKey]*backoffEntry{}}
}

// wait returns how long to wait before the next attempt (0: go ahead) and the failures so far.
func (b *backoffs) wait(k backoffKey, now time.Time) (time.Duration, int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[k]
	if !ok {
		return 0, 0, nil
	}
	if d := e.next.Sub(now); d > 0 {
		return d, e.failures, e.lastErr
	}
	return 0, e.failures, e.lastErr
}

// failed records a failure and returns the failure count and the delay before a retry.
func (b *backoffs) failed(k backoffKey, now time.Time, err error) (int, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[k]
	if !ok {
		e = &backoffEntry{}
		b.entries[k] = e
	}
	e.failures++
	e.lastErr = err
	d := b.base
	for i := 1; i < e.failures && d < b.max; i++ {
		d *= 2
	}
	d = min(d, b.max)
	e.next = now.Add(d)
	return e.failures, d
}

func (b *backoffs) succeeded(k backoffKey) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.entries, k)
}

// forgetAdapter drops every entry of an adapter (deleted).
func (b *backoffs) forgetAdapter(namespace, adapter string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.entries {
		if k.namespace == namespace && k.adapter == adapter {
			delete(b.entries, k)
		}
	}
}

// retain drops the entries of an adapter's op whose pod is not in pods: a pod that is gone,
// or no longer chosen, has nothing left to back off from.
func (b *backoffs) retain(namespace, adapter, op string, pods map[string]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.entries {
		if k.namespace == namespace && k.adapter == adapter && k.op == op && !pods[k.pod] {
			delete(b.entries, k)
		}
	}
}
