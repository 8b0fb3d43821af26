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
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

const (
	// ControllerManagerLease is the Lease AIBrix's controller-manager holds while it runs
	// (all of AIBrix's controllers, the model-adapter-controller and model-route-controller
	// among them).
	ControllerManagerLease = "aibrix-system/aibrix-controller-manager"
	// StandaloneAdapterLease is the Lease of AIBrix's standalone model-adapter-controller
	// (its config/standalone/model-adapter-controller overlay).
	StandaloneAdapterLease = "aibrix-system/aibrix-model-adapter-controller"
	// DefaultCheckPeriod is how long one reading of the Lease is reused, how often the
	// detector reads the Leases by itself, and how often the controllers look again while
	// the take-over waits.
	DefaultCheckPeriod = 10 * time.Second
	// StaleReadings is for how many check periods the last good reading of a Lease stands
	// in for readings that fail (30 s with the default period: two of AIBrix's lease
	// durations). Past that, whether AIBrix's controllers run is unknown and the take-over
	// waits.
	StaleReadings = 3
	// defaultLeaseDuration is client-go's and AIBrix's default, for a Lease that states none.
	defaultLeaseDuration = 15 * time.Second
	// minReadTimeout bounds one reading of the Leases when the check period is shorter.
	minReadTimeout = 5 * time.Second
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
	// Running is true while the take-over must wait: one of AIBrix's Leases is held and
	// renewed, or whether it is cannot be told (see Detector).
	Running bool
	// Reason says why, for events and logs.
	Reason string
	// Episode numbers the stretch of readings with Running true that this one belongs to,
	// from 1 on; 0 while not running. A caller reports a wait once per object and episode.
	Episode uint64
}

// Detector tells whether AIBrix's controllers are running, from their leader election
// Leases, and keeps loraplane_aibrix_controller_running current.
//
// A Lease counts as running while it has a holder and is renewed, judged by this process's
// clock only, as client-go's leader election judges a Lease held by another: the Lease
// runs until the detector has seen it unchanged (holder, renewTime, acquireTime, duration,
// transitions) for its leaseDurationSeconds. Its renewTime, written by the holder's clock,
// is never compared with ours, so a skew between the clocks cannot make a renewed Lease look
// expired (a take-over racing AIBrix) nor an abandoned one look renewed. The price: a held
// Lease seen for the first time counts as running for one lease duration (15 s) even if
// AIBrix stopped long ago without releasing it, as it does on shutdown.
//
// A Lease that does not exist, or has no holder (released), is not running. A Lease whose
// read is refused (Forbidden) is taken as running: this controller cannot tell, and a
// take-over must not race AIBrix; the reason says so and an error is logged. Any other read
// error (timeouts, 5xx, throttling, a refused connection) keeps the Lease's last good
// reading for StaleReadings check periods, so that an API server blip neither pauses the
// fleet nor lets it take over; past that, or with no good reading yet, the Lease is taken
// as running.
//
// One reading is reused for the check period, so a controller asking on every reconcile
// costs at most one GET per Lease and period, and Start reads once per period by itself.
// The GETs are made without holding the lock, by one caller at a time: the others get the
// last reading meanwhile, or wait for the first one. A nil *Detector never reports running.
type Detector struct {
	reader     client.Reader
	controller string
	clock      clock.WithTicker
	period     time.Duration

	mu         sync.Mutex
	read       bool      // a reading was published
	readAt     time.Time // when
	last       Status
	episode    uint64        // the last episode of running readings
	refreshing chan struct{} // closed when the reading in progress ends; nil when none
	// leases are read and written only by the reading in progress (one at a time).
	leases []*leaseState
}

var _ manager.LeaderElectionRunnable = (*Detector)(nil)

// leaseRecord is what a holder writes on each renewal: a change of it is a renewal.
type leaseRecord struct {
	holder         string
	renew, acquire time.Time
	duration       time.Duration
	transitions    int32
}

// leaseState is what was seen of one Lease.
type leaseState struct {
	key    types.NamespacedName
	seen   bool
	record leaseRecord
	seenAt time.Time // when record was first seen as it is, by our clock
	// renewalSeen: record changed between two readings with the same holder (not first sight).
	renewalSeen bool
	// good is the last judgement from a successful read (NotFound included), made at goodAt.
	good   *Status
	goodAt time.Time
	// failure is the kind of read error the last reading met ("" when it succeeded), so that
	// a change is logged once.
	failure string
}

// NewDetector returns a detector reading leases through reader (an uncached reader: Leases
// are in no cache), or nil when there are none (the check is off). controller names the
// loraplane binary in logs and metrics; period bounds how often the Leases are read (zero:
// DefaultCheckPeriod). Add it to the manager (Start) to keep its gauge current.
func NewDetector(reader client.Reader, leases []types.NamespacedName, controller string, clk clock.WithTicker, period time.Duration) *Detector {
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

// Start reads the Leases once per check period until ctx ends, so that the gauge follows
// AIBrix without reconciles. It runs on every replica, leader or not: the gauge then tells
// the truth on each.
func (d *Detector) Start(ctx context.Context) error {
	t := d.clock.NewTicker(d.period)
	defer t.Stop()
	for {
		d.check(ctx, true)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// NeedLeaderElection: the detector only reads, on every replica.
func (d *Detector) NeedLeaderElection() bool { return false }

// Check returns whether AIBrix's controllers are running, reading their Leases when the last
// reading is older than the check period. Transitions are logged.
func (d *Detector) Check(ctx context.Context) Status {
	if d == nil {
		return Status{Reason: "the AIBrix check is off (--aibrix-controller-leases is empty)"}
	}
	return d.check(ctx, false)
}

// check returns the last reading while it is younger than the period (unless force), or
// else reads the Leases, unless another caller is reading them: then it returns the last
// reading, or waits for the first one as long as ctx lets it.
func (d *Detector) check(ctx context.Context, force bool) Status {
	var mine chan struct{}
	for mine == nil {
		st, ok, wait, claimed := d.next(force)
		switch {
		case ok:
			return st
		case wait != nil:
			select {
			case <-wait: // the first reading ended: published, or abandoned by its caller
				force = false
			case <-ctx.Done():
				return d.lastOr(ctx.Err())
			}
		default:
			mine = claimed
		}
	}
	defer d.endReading(mine)
	st, err := d.readLeases(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		// The caller went away: nothing was learnt about the Leases.
		return d.lastOrLocked(err)
	}
	d.publishLocked(ctx, st)
	return d.last
}

// next says what a caller does: return st (ok), wait for the reading in progress (wait),
// or read the Leases itself, which it has claimed (mine, to be passed to endReading).
func (d *Detector) next(force bool) (st Status, ok bool, wait <-chan struct{}, mine chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.read && !force && d.clock.Since(d.readAt) < d.period:
		return d.last, true, nil, nil
	case d.refreshing == nil:
		d.refreshing = make(chan struct{})
		return Status{}, false, nil, d.refreshing
	case d.read:
		return d.last, true, nil, nil
	default:
		return Status{}, false, d.refreshing, nil
	}
}

// endReading lets the next reading start and wakes those waiting for this one.
func (d *Detector) endReading(done chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.refreshing = nil
	close(done)
}

// lastOr returns the last reading or, with none, a status saying there is none yet.
func (d *Detector) lastOr(err error) Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastOrLocked(err)
}

func (d *Detector) lastOrLocked(err error) Status {
	if d.read {
		return d.last
	}
	return Status{Running: true, Reason: fmt.Sprintf("AIBrix's Leases are not read yet (%v), so AIBrix's controllers may be running", err)}
}

// publishLocked makes st the last reading: its episode, the gauge, a log line on a change.
func (d *Detector) publishLocked(ctx context.Context, st Status) {
	if st.Running {
		if !d.read || !d.last.Running {
			d.episode++
		}
		st.Episode = d.episode
	}
	if !d.read || st.Running != d.last.Running {
		log := klog.FromContext(ctx).WithName("aibrix")
		if st.Running {
			log.Info("AIBrix's controllers are running: the take-over from AIBrix waits until they stop", "reason", st.Reason)
		} else {
			log.Info("AIBrix's controllers are not running: taking over from AIBrix is allowed", "reason", st.Reason)
		}
	}
	d.read, d.readAt, d.last = true, d.clock.Now(), st
	value := 0.0
	if st.Running {
		value = 1
	}
	running.WithLabelValues(d.controller).Set(value)
}

// readLeases reads every Lease, bounded by one check period (minReadTimeout at least), and
// judges them together: the first running one gives the reason. It fails only when ctx
// ended.
func (d *Detector) readLeases(ctx context.Context) (Status, error) {
	readCtx, cancel := context.WithTimeout(ctx, max(d.period, minReadTimeout))
	defer cancel()
	leases := make([]*coordinationv1.Lease, len(d.leases))
	errs := make([]error, len(d.leases))
	for i, l := range d.leases {
		leases[i] = &coordinationv1.Lease{}
		errs[i] = d.reader.Get(readCtx, l.key, leases[i])
	}
	if err := ctx.Err(); err != nil {
		return Status{}, err
	}
	now := d.clock.Now()
	log := klog.FromContext(ctx).WithName("aibrix")
	var st Status
	reasons := make([]string, 0, len(d.leases))
	for i, l := range d.leases {
		ls := l.judge(log, leases[i], errs[i], now, StaleReadings*d.period)
		if ls.Running && !st.Running {
			st = ls
		}
		reasons = append(reasons, ls.Reason)
	}
	if !st.Running {
		st.Reason = strings.Join(reasons, "; ")
	}
	return st, nil
}

// judge judges the Lease from one read of it (lease, or err) made at now; maxStale bounds
// how long the last good judgement stands in for failing reads.
func (l *leaseState) judge(log klog.Logger, lease *coordinationv1.Lease, err error, now time.Time, maxStale time.Duration) Status {
	switch {
	case err == nil:
		l.noteFailure(log, "", nil, maxStale)
		st := l.judgeRead(lease, now)
		l.good, l.goodAt = &st, now
		return st
	case apierrors.IsNotFound(err):
		l.noteFailure(log, "", nil, maxStale)
		l.seen = false
		st := Status{Reason: fmt.Sprintf("Lease %s does not exist", l.key)}
		l.good, l.goodAt = &st, now
		return st
	case apierrors.IsForbidden(err):
		// Not granted: this controller cannot tell, so it does not take over. The shipped
		// roles grant the read, also to a namespaced install.
		l.noteFailure(log, "forbidden", err, maxStale)
		return Status{Running: true, Reason: fmt.Sprintf("Lease %s cannot be read (forbidden by RBAC), so AIBrix's controllers may be running: "+
			"grant get on it, or turn the check off with --aibrix-controller-leases=", l.key)}
	}
	l.noteFailure(log, "error", err, maxStale)
	if l.good != nil && now.Sub(l.goodAt) < maxStale {
		st := *l.good
		st.Reason = fmt.Sprintf("%s (read %s ago; reading it again failed: %v)", st.Reason, now.Sub(l.goodAt).Round(time.Second), err)
		return st
	}
	return Status{Running: true, Reason: fmt.Sprintf("cannot read Lease %s (%v), so AIBrix's controllers may be running", l.key, err)}
}

// noteFailure logs a change of the kind of read error met (kind "" is none).
func (l *leaseState) noteFailure(log klog.Logger, kind string, err error, maxStale time.Duration) {
	if kind == l.failure {
		return
	}
	switch kind {
	case "":
		log.Info("AIBrix's Lease is readable again", "lease", l.key)
	case "forbidden":
		log.Error(err, "Cannot read AIBrix's Lease: the take-over from AIBrix waits; grant get on it, or turn the check off with --aibrix-controller-leases=", "lease", l.key)
	default:
		log.Error(err, "Reading AIBrix's Lease failed: its last reading stands in for a while", "lease", l.key, "maxStale", maxStale)
	}
	l.failure = kind
}

// judgeRead judges a Lease read at now, by whether its record changed within its duration.
func (l *leaseState) judgeRead(lease *coordinationv1.Lease, now time.Time) Status {
	rec := leaseRecord{duration: defaultLeaseDuration}
	if lease.Spec.HolderIdentity != nil {
		rec.holder = *lease.Spec.HolderIdentity
	}
	if lease.Spec.RenewTime != nil {
		rec.renew = lease.Spec.RenewTime.Time
	}
	if lease.Spec.AcquireTime != nil {
		rec.acquire = lease.Spec.AcquireTime.Time
	}
	if lease.Spec.LeaseDurationSeconds != nil && *lease.Spec.LeaseDurationSeconds > 0 {
		rec.duration = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	if lease.Spec.LeaseTransitions != nil {
		rec.transitions = *lease.Spec.LeaseTransitions
	}
	if !l.seen || !rec.equal(l.record) {
		l.renewalSeen = l.seen && rec.holder == l.record.holder
		l.seen, l.record, l.seenAt = true, rec, now
	}
	renewed := "never renewed"
	if !rec.renew.IsZero() {
		renewed = "last renewed " + rec.renew.UTC().Format(time.RFC3339) + " by its holder's clock"
	}
	unchanged := now.Sub(l.seenAt)
	switch {
	case rec.holder == "":
		return Status{Reason: fmt.Sprintf("Lease %s has no holder (released)", l.key)}
	case unchanged < rec.duration && l.renewalSeen:
		return Status{Running: true, Reason: fmt.Sprintf("Lease %s is held by %s and renewed (a renewal seen %s ago, lease duration %s)",
			l.key, rec.holder, unchanged.Round(time.Second), rec.duration)}
	case unchanged < rec.duration:
		return Status{Running: true, Reason: fmt.Sprintf("Lease %s is held by %s (%s), counted as renewed until seen unchanged for its duration %s",
			l.key, rec.holder, renewed, rec.duration)}
	default:
		return Status{Reason: fmt.Sprintf("Lease %s of %s was not renewed for %s, more than its duration %s (%s)",
			l.key, rec.holder, unchanged.Round(time.Second), rec.duration, renewed)}
	}
}

func (r leaseRecord) equal(o leaseRecord) bool {
	return r.holder == o.holder && r.renew.Equal(o.renew) && r.acquire.Equal(o.acquire) &&
		r.duration == o.duration && r.transitions == o.transitions
}
