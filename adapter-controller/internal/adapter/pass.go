package adapter

// The state one reconcile of one adapter carries from step to step.

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// pass is the state of one reconcile of one adapter, filled by the steps in order.
type pass struct {
	adapter *v1alpha1.ModelAdapter

	// resolveSpec
	specErr     error  // the spec cannot be acted on (reason in specReason)
	specReason  string // PascalCase condition reason
	apiKey      string
	credentials map[string]string
	rank        int // the adapter's declared rank (LoRARankAnnotation); 0 when none

	// choosePods
	candidates    []*corev1.Pod
	excluded      int // matching pods of another base model
	desired       []*corev1.Pod
	kept          []*corev1.Pod // holders not Ready for less than the grace period: not unloaded, not published
	policy        string
	unknownPolicy bool
	unfit         []unfitPod // matching pods whose engine cannot take the adapter (preflight)
	waiting       int        // placements waiting for a free adapter slot
	full          []string   // candidates without room for the adapter
	capacityErrs  []error    // invalid capacity annotations of candidates

	leftOut []string // desired pods no load is sent to (recordPods: no room to record them)

	// findHolders
	toUnload   []*corev1.Pod // live pods that may hold the adapter and are not desired
	notHolding []string      // recorded pods that provably do not hold it (listed without it, gone)

	// recordPods: the pods of the scheduled-pods annotation (updated when it is written)
	scheduled map[string]bool

	// syncEngines
	instances   []*corev1.Pod       // desired pods with the adapter loaded and verified
	artifacts   map[string]string   // instance -> the artifact URL it serves
	failures    map[string]podError // pod -> last error of this pass or its backoff
	failedHard  bool                // some pod reached the retry limit
	unloaded    []string            // pods this pass unloaded the adapter from
	depublished []string            // pods to unload once no longer published (make-before-break)
	rollout     rollout
	requeueIn   time.Duration
	resourceErr error

	// syncResources
	resourcesReady bool
	resourceReason string
	resourceMsg    string
}

type podError struct {
	err      error
	failures int
}

// rollout is the state of a changed artifactURL being rolled out, one pod at a time.
type rollout struct {
	outdated []string // instances still serving an earlier artifact
	parked   string   // the instance taken out of the EndpointSlice in this pass, to reload next
	failed   []string // pods whose reload failed (out of the EndpointSlice, retried with backoff)
	err      error    // the last reload failure
}

// pending reports whether some pod does not serve the current artifact yet.
func (ro *rollout) pending() bool {
	return len(ro.outdated) > 0 || ro.parked != "" || len(ro.failed) > 0
}

func newPass(a *v1alpha1.ModelAdapter) *pass {
	return &pass{adapter: a, failures: map[string]podError{}, artifacts: map[string]string{}, scheduled: scheduledPods(a)}
}

// specOK reports whether the spec can be acted on: the steps after resolveSpec do nothing
// otherwise, and the status reports specErr.
func (p *pass) specOK() bool { return p.specErr == nil }

// leaveOut takes the named pods out of the desired ones for this pass, failing with err.
func (p *pass) leaveOut(names []string, err error) {
	out := map[string]bool{}
	for _, name := range names {
		out[name] = true
		p.failures[name] = podError{err: err, failures: 1}
	}
	p.desired = slices.DeleteFunc(p.desired, func(pod *corev1.Pod) bool { return out[pod.Name] })
	p.leftOut = append(p.leftOut, names...)
}

func (p *pass) requeueAfter(d time.Duration) {
	if d > 0 && (p.requeueIn == 0 || d < p.requeueIn) {
		p.requeueIn = d
	}
}

func (p *pass) result() reconcile.Result {
	return reconcile.Result{RequeueAfter: p.requeueIn}
}
