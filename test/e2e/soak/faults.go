package main

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// fault is one kind of trouble the driver injects. start makes the trouble and returns what
// undoes it at the end of the step's fault window (nil when nothing needs undoing).
type fault struct {
	kind  string
	start func(ctx context.Context) (undo func(context.Context) error, err error)
}

func (d *driver) faults() []fault {
	return []fault{
		{"engine-down", d.engineFault(`{"status":503,"body":"{\"error\":\"engine unavailable\"}"}`, 2)},
		{"engine-fail-load", d.engineFault(`{"op":"load","status":500,"times":2}`, 0)},
		{"engine-fail-unload", d.engineFault(`{"op":"unload","status":500,"times":2}`, 0)},
		{"engine-latency", d.engineFault(`{"hang":"1500ms"}`, 0)},
		{"engine-restart", d.engineRestart},
		{"api-key-change", d.keyChange},
		{"kill-adapter-leader", d.killLeader("adapter-controller")},
		{"kill-router-leader", d.killLeader("router-controller")},
		{"apiserver-restart", d.apiServerRestart},
		{"slow-restart-adapter", d.slowRestart("adapter-controller")},
		{"slow-restart-router", d.slowRestart("router-controller")},
	}
}

// kills reports whether a fault kind kills controller processes.
func kills(kind string) bool {
	switch kind {
	case "kill-adapter-leader", "kill-router-leader", "slow-restart-adapter", "slow-restart-router":
		return true
	}
	return false
}

// weight is how often each fault kind is picked, relative to the others (the faults that kill
// controller processes are also held back by the kill cooldown).
func weight(kind string) int {
	switch kind {
	case "api-key-change":
		return 1
	default:
		return 2
	}
}

// pickFault picks a fault kind at random by weight.
func (d *driver) pickFault(all []fault) fault {
	total := 0
	for _, f := range all {
		total += weight(f.kind)
	}
	n := d.rng.IntN(total)
	for _, f := range all {
		if n -= weight(f.kind); n < 0 {
			return f
		}
	}
	return all[len(all)-1]
}

// engineFault installs the admin API fault body on the engines of a random model (on at
// most limit of them when limit > 0) and removes it at the end of the window.
func (d *driver) engineFault(body string, limit int) func(context.Context) (func(context.Context) error, error) {
	return func(ctx context.Context) (func(context.Context) error, error) {
		keys, err := d.enginesOf(ctx)
		if err != nil || len(keys) == 0 {
			return nil, err
		}
		if limit > 0 && len(keys) > limit {
			d.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			keys = keys[:1+d.rng.IntN(limit)]
		}
		for _, k := range keys {
			if err := d.engineCall(ctx, http.MethodPost, k, "fault", body); err != nil {
				return nil, err
			}
		}
		d.logf("  engines %v: fault %s", keys, body)
		return func(ctx context.Context) error {
			for _, k := range keys {
				if err := d.engineCall(ctx, http.MethodDelete, k, "fault", ""); err != nil {
					return err
				}
			}
			return nil
		}, nil
	}
}

// engineRestart restarts one or two engines of a model: a new engine generation that has
// forgotten every adapter.
func (d *driver) engineRestart(ctx context.Context) (func(context.Context) error, error) {
	keys, err := d.enginesOf(ctx)
	if err != nil || len(keys) == 0 {
		return nil, err
	}
	d.rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	keys = keys[:min(len(keys), 1+d.rng.IntN(2))]
	for _, k := range keys {
		if err := d.engineCall(ctx, http.MethodPost, k, "restart", ""); err != nil {
			return nil, err
		}
	}
	d.logf("  engines %v restarted", keys)
	return nil, nil
}

// keyChange rotates a namespace's API key: the Secret changes, then every keyed model rolls
// out pods whose engines want the new key.
func (d *driver) keyChange(ctx context.Context) (func(context.Context) error, error) {
	ns := pick(d.rng, d.world.namespace)
	d.logf("  API key of %s rotated", ns)
	return nil, d.setKey(ctx, ns, true)
}

// killLeader SIGKILLs the replica holding the lease (no release, no cleanup) and starts it
// again at once, as a kubelet would; the standby takes over when the lease expires.
func (d *driver) killLeader(controller string) func(context.Context) (func(context.Context) error, error) {
	return func(ctx context.Context) (func(context.Context) error, error) {
		l, err := d.leader(ctx, controller)
		if err != nil {
			return nil, err
		}
		if _, err := d.stack(ctx, "kill", l); err != nil {
			return nil, err
		}
		d.logf("  %s (leader) killed", l)
		_, err = d.stack(ctx, "start", l)
		return nil, err
	}
}

func (d *driver) apiServerRestart(ctx context.Context) (func(context.Context) error, error) {
	out, err := d.sh(ctx, d.o.root+"/hack/cluster.sh", "restart-apiserver")
	d.logf("  %s", out)
	return nil, err
}

// slowRestart kills both replicas of a controller, starts the one that led again through
// the slow proxy with every initial list of its informers held back longer than the lease
// (so it may win the lease before its caches are filled), then the other one directly.
func (d *driver) slowRestart(controller string) func(context.Context) (func(context.Context) error, error) {
	return func(ctx context.Context) (func(context.Context) error, error) {
		l, err := d.leader(ctx, controller)
		if err != nil {
			return nil, err
		}
		other := replicas[controller][0]
		if other == l {
			other = replicas[controller][1]
		}
		for _, r := range []string{l, other} {
			if _, err := d.stack(ctx, "ensure", r); err != nil {
				return nil, err
			}
			if _, err := d.stack(ctx, "kill", r); err != nil {
				return nil, err
			}
		}
		kc, err := d.proxyKubeconfig(controller)
		if err != nil {
			return nil, err
		}
		for _, p := range slowPaths[controller] {
			d.proxy.Delay(p, d.o.slowList)
		}
		held := d.proxy.Held()
		start := time.Now()
		_, err = d.stack(ctx, "start", l, "CONTROLLER_KUBECONFIG="+kc)
		for _, p := range slowPaths[controller] {
			d.proxy.Delay(p, 0)
		}
		if err != nil {
			return nil, err
		}
		if d.proxy.Held() == held {
			return nil, fmt.Errorf("%s started through the slow proxy but no initial list was held back", l)
		}
		d.logf("  %s and %s killed; %s ready through the slow proxy after %s (%d lists held %s)", l, other, l,
			time.Since(start).Round(100*time.Millisecond), d.proxy.Held()-held, d.o.slowList)
		_, err = d.stack(ctx, "start", other)
		return nil, err
	}
}
