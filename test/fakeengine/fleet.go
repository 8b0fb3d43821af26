package fakeengine

import (
	"fmt"
	"slices"
	"sync"
)

// Fleet is a set of engines keyed by pod IP. The zero value is ready to use; it must not be
// copied after first use.
type Fleet struct {
	mu      sync.Mutex
	engines map[string]*Engine
	removed Counts // counters of engines removed or closed
}

// Add starts an engine on ip:port (see Start). It fails if the fleet has an engine on ip.
func (f *Fleet) Add(ip string, port int, opts Options) (*Engine, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.engines[ip]; ok {
		return nil, fmt.Errorf("fakeengine: fleet already has an engine on %s", ip)
	}
	e, err := Start(ip, port, opts)
	if err != nil {
		return nil, err
	}
	if f.engines == nil {
		f.engines = map[string]*Engine{}
	}
	f.engines[ip] = e
	return e, nil
}

// Get returns the engine on ip, or nil.
func (f *Fleet) Get(ip string) *Engine {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.engines[ip]
}

// IPs returns the IPs of the fleet's engines, sorted.
func (f *Fleet) IPs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ips := make([]string, 0, len(f.engines))
	for ip := range f.engines {
		ips = append(ips, ip)
	}
	slices.Sort(ips)
	return ips
}

// Remove closes and forgets the engine on ip, if any (a pod going away). Its counters stay
// in Totals.
func (f *Fleet) Remove(ip string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.engines[ip]; ok {
		f.retire(ip, e)
	}
}

// Close closes every engine. The fleet stays usable.
func (f *Fleet) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ip, e := range f.engines {
		f.retire(ip, e)
	}
}

func (f *Fleet) retire(ip string, e *Engine) {
	e.Close()
	f.removed.add(e.Counts())
	delete(f.engines, ip)
}

// Totals sums the counters of every engine the fleet has had, removed ones included.
func (f *Fleet) Totals() Counts {
	f.mu.Lock()
	defer f.mu.Unlock()
	var c Counts
	c.add(f.removed)
	for _, e := range f.engines {
		c.add(e.Counts())
	}
	return c
}
