package aibrix

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// ControllerManagerLease is the Lease AIBrix's controller-manager holds while it runs
	// (all of AIBrix's controllers, the model-adapter-controller and model-route-controller
	// among them).
	ControllerManagerLease = "aibrix-system/aibrix-controller-manager"
	// StandaloneAdapterLease is the Lease of AIBrix's standalone model-adapter-controller
	// (its config/standalone/model-adapter-controller overlay).
	StandaloneAdapterLease = "aibrix-system/aibrix-model-adapter-controller"
	// DefaultCheckPeriod is how long one reading of the Lease is reused, and how often the
	// controllers look again while the take-over waits.
	DefaultCheckPeriod = 10 * time.Second
	// defaultLeaseDuration is client-go's and AIBrix's default, for a Lease that states none.
	defaultLeaseDuration = 15 * time.Second
)

// ParseLeases parses the --aibrix-controller-leases values, each "namespace/name".
func ParseLeases(values []string) ([]types.NamespacedName, error) {
	out := make([]types.NamespacedName, 0, len(values))
	for _, v := range values {
		l, err := parseLease(v)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

func parseLease(s string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok {
		return types.NamespacedName{}, fmt.Errorf("%q is not namespace/name", s)
	}
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		return types.NamespacedName{}, fmt.Errorf("namespace %q: %s", ns, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return types.NamespacedName{}, fmt.Errorf("name %q: %s", name, strings.Join(msgs, "; "))
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// Status is what a Detector last read.
type Status struct {
	// Running is true while one of AIBrix's Leases is held and renewed, and when one cannot
	// be read for another reason than RBAC (taken as running: a take-over must not race
	// AIBrix).
	Running bool
	// Reason says why, for events and logs.
	Reason string
}

// Detector tells whether AIBrix's controllers are running, from their leader election
// Leases. A Lease counts as running while it has a holder and is renewed: by the renewTime
// it carries (renewTime + leaseDurationSeconds not past), or by a change of renewTime seen
// within one lease duration (so that a clock behind the holder's does not hide it). A Lease
// that does not exist, or has no holder (released), is not running; one that cannot be read
// for another reason than RBAC is taken as running. One reading is reused for the check period, so a controller asking on
// every reconcile costs at most one GET per Lease and period. A nil *Detector never reports
// running.
type Detector struct {
	reader     client.Reader
	controller string
	clock      clock.PassiveClock
	period     time.Duration

	mu     sync.Mutex
	read   bool
	readAt time.Time
	last   Status
	leases []*leaseState
}

// leaseState is what was seen of one Lease.
type leaseState struct {
	key       types.NamespacedName
	renew     time.Time // the renewTime last seen
	changedAt time.Time // when renewTime was seen to change
	changed   bool      // renewTime changed between two readings (not just first seen)
	read      bool
}

// NewDetector returns a detector reading leases through reader (an uncached reader: Leases
// are in no cache), or nil when there are none (the check is off). controller names the
// loraplane binary in logs and metrics; period bounds how often the Leases are read (zero:
// DefaultCheckPeriod).
func NewDetector(reader client.Reader, leases []types.NamespacedName, controller string, clk clock.PassiveClock, period time.Duration) *Detector {
	if len(leases) == 0 {
		return nil
	}
	if period <= 0 {
		period = DefaultCheckPeriod
	}
	Register()
	running.WithLabelValues(controller).Set(0)
	d := &Detector{reader: reader, controller: controller, clock: clk, period: period}
	for _, l := range leases {
		d.leases = append(d.leases, &leaseState{key: l})
	}
	return d
}

// Period is how long a reading is reused: the time to wait before asking again.
func (d *Detector) Period() time.Duration {
	if d == nil {
		return DefaultCheckPeriod
	}
	return d.period
}

// Check returns whether AIBrix's controllers are running, reading their Leases when the last
// reading is older than the check period. Transitions are logged.
func (d *Detector) Check(ctx context.Context) Status {
	if d == nil {
		return Status{Reason: "the AIBrix check is off (--aibrix-controller-leases is empty)"}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.clock.Now()
	if d.read && now.Sub(d.readAt) < d.period {
		return d.last
	}
	var st Status
	reasons := make([]string, 0, len(d.leases))
	for _, l := range d.leases {
		ls := l.check(ctx, d.reader, now)
		if ls.Running && !st.Running {
			st = ls
		}
		reasons = append(reasons, ls.Reason)
	}
	if !st.Running {
		st.Reason = strings.Join(reasons, "; ")
	}
	if !d.read || st.Running != d.last.Running {
		log := klog.FromContext(ctx).WithName("aibrix")
		if st.Running {
			log.Info("AIBrix's controllers are running: the take-over from AIBrix waits until they stop", "reason", st.Reason)
		} else {
			log.Info("AIBrix's controllers are not running: taking over from AIBrix is allowed", "reason", st.Reason)
		}
	}
	d.read, d.readAt, d.last = true, now, st
	value := 0.0
	if st.Running {
		value = 1
	}
	running.WithLabelValues(d.controller).Set(value)
	return st
}

// check reads the Lease and judges it.
func (l *leaseState) check(ctx context.Context, reader client.Reader, now time.Time) Status {
	lease := &coordinationv1.Lease{}
	if err := reader.Get(ctx, l.key, lease); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return Status{Reason: fmt.Sprintf("Lease %s does not exist", l.key)}
		case apierrors.IsForbidden(err):
			// Not granted (a namespaced install): this controller cannot tell, and says so
			// when it logs the reason; the shipped ClusterRoles grant the read.
			return Status{Reason: fmt.Sprintf("Lease %s cannot be read (forbidden by RBAC), so whether AIBrix's controllers run is not checked", l.key)}
		}
		return Status{Running: true, Reason: fmt.Sprintf("cannot read Lease %s (%v), so AIBrix's controllers may be running", l.key, err)}
	}
	holder := ""
	if lease.Spec.HolderIdentity != nil {
		holder = *lease.Spec.HolderIdentity
	}
	var renew time.Time
	switch {
	case lease.Spec.RenewTime != nil:
		renew = lease.Spec.RenewTime.Time
	case lease.Spec.AcquireTime != nil:
		renew = lease.Spec.AcquireTime.Time
	}
	if !renew.Equal(l.renew) {
		l.changed = l.read // a change seen between two readings, not the first sight
		l.renew, l.changedAt = renew, now
	}
	l.read = true
	duration := defaultLeaseDuration
	if lease.Spec.LeaseDurationSeconds != nil && *lease.Spec.LeaseDurationSeconds > 0 {
		duration = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	fresh := !renew.IsZero() && now.Before(renew.Add(duration))
	renewing := l.changed && now.Sub(l.changedAt) < duration
	switch {
	case holder == "":
		return Status{Reason: fmt.Sprintf("Lease %s has no holder (released)", l.key)}
	case fresh || renewing:
		return Status{Running: true, Reason: fmt.Sprintf("Lease %s is held by %s and renewed (last renewal %s, lease duration %s)",
			l.key, holder, renew.UTC().Format(time.RFC3339), duration)}
	default:
		return Status{Reason: fmt.Sprintf("Lease %s of %s was last renewed %s, more than its duration %s ago",
			l.key, holder, renew.UTC().Format(time.RFC3339), duration)}
	}
}
