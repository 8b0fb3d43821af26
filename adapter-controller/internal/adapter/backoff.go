package adapter

import (
	"sync"
	"time"

	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
)

// backoffs tracks failures per (adapter, pod, operation). The delay before the next attempt
// comes from client-go's flowcontrol.Backoff (doubling from base up to max, reset after a
// long quiet); on top of it each entry keeps what the status reports: how many attempts
// failed and the last error. A success forgets the entry, and so does a pod that is gone or
// no longer chosen (retain).
type backoffs struct {
	delays  *flowcontrol.Backoff
	mu      sync.Mutex
	entries map[backoffKey]*backoffEntry
}

type backoffKey struct {
	namespace, adapter, pod, op string
}

func (k backoffKey) id() string { return k.namespace + "/" + k.adapter + "/" + k.pod + "/" + k.op }

type backoffEntry struct {
	failures int
	firstAt  time.Time // of the first failure since the last success
	failedAt time.Time
	lastErr  error
}

func newBackoffs(base, maxDelay time.Duration, clk clock.Clock) *backoffs {
	delays := flowcontrol.NewBackOff(base, maxDelay)
	delays.Clock = clk
	return &backoffs{delays: delays, entries: map[backoffKey]*backoffEntry{}}
}

// wait returns how long to wait before the next attempt (0: go ahead) and the failures so far.
func (b *backoffs) wait(k backoffKey, now time.Time) (time.Duration, int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[k]
	if !ok {
		return 0, 0, nil
	}
	if d := e.failedAt.Add(b.delays.Get(k.id())).Sub(now); d > 0 {
		return d, e.failures, e.lastErr
	}
	return 0, e.failures, e.lastErr
}

// failed records a failure and returns the failure count and the delay before a retry.
func (b *backoffs) failed(k backoffKey, now time.Time, err error) (int, time.Duration) {
	n, wait, _ := b.failedSince(k, now, err)
	return n, wait
}

// failedSince is failed that also returns how long the entry has been failing: since its
// first failure after the last success.
func (b *backoffs) failedSince(k backoffKey, now time.Time, err error) (int, time.Duration, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entries[k]
	if !ok {
		e = &backoffEntry{firstAt: now}
		b.entries[k] = e
	}
	e.failures++
	e.lastErr = err
	e.failedAt = now
	b.delays.Next(k.id(), now)
	return e.failures, b.delays.Get(k.id()), now.Sub(e.firstAt)
}

func (b *backoffs) succeeded(k backoffKey) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.drop(k)
}

// forgetAdapter drops every entry of an adapter (deleted).
func (b *backoffs) forgetAdapter(namespace, adapter string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.entries {
		if k.namespace == namespace && k.adapter == adapter {
			b.drop(k)
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
			b.drop(k)
		}
	}
}

// drop forgets one entry; b.mu is held.
func (b *backoffs) drop(k backoffKey) {
	delete(b.entries, k)
	b.delays.DeleteEntry(k.id())
}
