package adapter

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/shared/text"
)

// Condition and event reasons.
const (
	ReasonInitialized       = "Initialized"
	ReasonInvalidSpec       = "InvalidSpec"
	ReasonSecretUnavailable = "SecretUnavailable"
	// ReasonSecretNotSelected: the credentials Secret lacks the labels of
	// --secret-label-selector; nothing of it is used.
	ReasonSecretNotSelected = "SecretNotSelected"
	ReasonScheduled         = "Scheduled"
	ReasonUnknownScheduler  = "UnknownSchedulerDefaultUsed"
	// ReasonNoReadyPods: no candidate pod is Ready (AIBrix's reason, on Scheduled and Ready).
	ReasonNoReadyPods = "NoReadyPods"
	// ReasonInsufficientReadyPods: fewer candidate pods are Ready than spec.replicas asks for
	// (AIBrix's reason, on Scheduled); the adapter is served by the pods there are meanwhile.
	ReasonInsufficientReadyPods = "InsufficientReadyPods"
	// ReasonInsufficientCapacity: some placements wait for a free adapter slot, the
	// candidate pods' engines being full (on Scheduled, and on Ready when placed nowhere).
	ReasonInsufficientCapacity = "InsufficientCapacity"
	ReasonBound                = "Bound"
	ReasonLoading              = "Loading"
	ReasonLoadFailed           = "LoadFailed"
	ReasonNotVerified          = "NotVerified"
	ReasonResourcesCreated     = "ResourcesCreated"
	ReasonServiceConflict      = "ServiceConflict"
	ReasonServiceFailed        = "ServiceFailed"
	ReasonEndpointSliceFailed  = "EndpointSliceFailed"
	ReasonReady                = "Ready"
	ReasonPartiallyReady       = "PartiallyReady"
	ReasonLoaded               = "Loaded"
	ReasonUnloaded             = "Unloaded"
	ReasonUnloadFailed         = "UnloadFailed"
	ReasonUnloadAbandoned      = "UnloadAbandoned"
	ReasonReloaded             = "Reloaded"
	ReasonReloadFailed         = "ReloadFailed"
	ReasonUpToDate             = "UpToDate"
	ReasonRolling              = "Rolling"
	ReasonRolloutFailed        = "RolloutFailed"
	// ReasonAIBrixRunning: the adapter is not acted on while AIBrix's controllers run.
	ReasonAIBrixRunning = "AIBrixRunning"
	// ReasonCRDOutdated: the installed ModelAdapter CRD drops fields of loraplane's status.
	ReasonCRDOutdated = "CRDOutdated"
)

func intOrPort(p int32) intstr.IntOrString { return intstr.FromInt32(p) }

// computeStatus derives the whole status from the pass.
func computeStatus(p *pass) v1alpha1.ModelAdapterStatus {
	a := p.adapter
	st := *a.Status.DeepCopy()
	set := func(t string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: a.Generation})
	}

	if p.specErr != nil {
		set(v1alpha1.ConditionInitialized, false, p.specReason, p.specErr.Error())
		set(v1alpha1.ConditionReady, false, p.specReason, p.specErr.Error())
		st.Phase = v1alpha1.ModelAdapterFailed
		return st
	}
	set(v1alpha1.ConditionInitialized, true, ReasonInitialized, "Spec accepted")
	setInstances(&st, p)
	setScheduled(set, p)
	failMsg := failureMessage(p)
	switch {
	case len(p.instances) > 0:
		set(v1alpha1.ConditionBound, true, ReasonBound, fmt.Sprintf("Loaded and verified on %d pods", len(p.instances)))
	case len(p.failures) > 0:
		set(v1alpha1.ConditionBound, false, failReason(p), failMsg)
	default:
		set(v1alpha1.ConditionBound, false, ReasonLoading, "Not loaded on any pod yet")
	}
	if p.resourcesReady {
		set(v1alpha1.ConditionResourceCreated, true, ReasonResourcesCreated, "Service and EndpointSlice are up to date")
	} else if p.resourceReason != "" {
		set(v1alpha1.ConditionResourceCreated, false, p.resourceReason, p.resourceMsg)
	}
	setUpToDate(set, p)
	ready := len(p.desired) > 0 && len(p.instances) == len(p.desired) && len(p.leftOut) == 0 && p.resourcesReady && !p.rollout.pending()
	setReady(set, p, ready, failMsg)
	st.Phase = phaseOf(p, ready)
	return st
}

// setCondition sets one condition of the status being computed.
type setCondition func(conditionType string, ok bool, reason, msg string)

// setInstances writes the instances, their artifacts and the counts.
func setInstances(st *v1alpha1.ModelAdapterStatus, p *pass) {
	st.Candidates = int32(len(p.candidates))
	st.PlacedReplicas = int32(len(p.desired) + len(p.kept) + len(p.leftOut))
	st.WaitingReplicas = int32(p.waiting)
	st.DesiredReplicas = st.PlacedReplicas + st.WaitingReplicas
	st.ReadyReplicas = int32(len(p.instances))
	st.Instances = nil
	st.InstanceArtifacts = nil
	for _, pod := range p.instances {
		st.Instances = append(st.Instances, pod.Name)
		st.InstanceArtifacts = append(st.InstanceArtifacts, v1alpha1.InstanceArtifact{Pod: pod.Name, ArtifactURL: p.artifacts[pod.Name]})
	}
	slices.Sort(st.Instances)
	slices.SortFunc(st.InstanceArtifacts, func(x, y v1alpha1.InstanceArtifact) int { return cmp.Compare(x.Pod, y.Pod) })
}

func setScheduled(set setCondition, p *pass) {
	a := p.adapter
	notes := capacityNotes(p)
	switch {
	case len(p.candidates) == 0 && len(p.unfit) > 0:
		set(v1alpha1.ConditionScheduled, false, p.unfit[0].reason, "No pod can take the adapter"+notes)
	case len(p.candidates) == 0:
		msg := "No ready backend pods available for scheduling: no Ready pod with an IP matches the pod selector"
		if p.excluded > 0 {
			msg += fmt.Sprintf("; %d matching pods serve another base model than %q", p.excluded, *a.Spec.BaseModel)
		}
		set(v1alpha1.ConditionScheduled, false, ReasonNoReadyPods, msg+notes)
	case a.Spec.Replicas != nil && len(p.candidates) < int(*a.Spec.Replicas) && p.waiting == 0:
		set(v1alpha1.ConditionScheduled, false, ReasonInsufficientReadyPods, fmt.Sprintf(
			"%d ready backend pods, but spec.replicas needs %d: placed on those %d meanwhile",
			len(p.candidates), *a.Spec.Replicas, len(p.desired))+notes)
	case p.waiting > 0:
		set(v1alpha1.ConditionScheduled, false, ReasonInsufficientCapacity, fmt.Sprintf(
			"Placed on %d pods; %d placements wait for a free adapter slot (full: %s), oldest adapter first",
			len(p.desired)+len(p.kept)+len(p.leftOut), p.waiting, summarize(p.full))+notes)
	case p.unknownPolicy:
		set(v1alpha1.ConditionScheduled, true, ReasonUnknownScheduler,
			fmt.Sprintf("Unknown schedulerName %q; used %s: %d of %d candidates chosen", a.Spec.SchedulerName, p.policy, len(p.desired), len(p.candidates))+notes)
	default:
		set(v1alpha1.ConditionScheduled, true, ReasonScheduled,
			fmt.Sprintf("%d of %d candidates chosen (%s)", len(p.desired), len(p.candidates), p.policy)+notes)
	}
}

// capacityNotes tells, after the Scheduled message, the matching pods whose engine cannot
// take the adapter (naming the missing flag) and the invalid capacity annotations.
func capacityNotes(p *pass) string {
	var b strings.Builder
	for i, u := range p.unfit {
		if i == summarizedPods {
			fmt.Fprintf(&b, "; and %d more pods that cannot take it", len(p.unfit)-i)
			break
		}
		fmt.Fprintf(&b, "; pod %s cannot take it (%s): %s", u.pod, u.reason, u.msg)
	}
	for _, err := range p.capacityErrs {
		fmt.Fprintf(&b, "; %v", err)
	}
	return text.Truncate(b.String(), maxFailureMessage)
}

func setUpToDate(set setCondition, p *pass) {
	a, ro := p.adapter, &p.rollout
	switch {
	case len(ro.failed) > 0:
		serving := len(ro.outdated) // instances still serving the earlier artifact
		if ro.parked != "" {
			serving++
		}
		failed := slices.Sorted(slices.Values(ro.failed))
		set(v1alpha1.ConditionUpToDate, false, ReasonRolloutFailed, text.Truncate(fmt.Sprintf(
			"Loading %s failed on %d pods (%s); %d other instances keep serving the earlier artifact: %v",
			a.Spec.ArtifactURL, len(failed), summarize(failed), serving, ro.err), maxFailureMessage))
	case ro.pending():
		set(v1alpha1.ConditionUpToDate, false, ReasonRolling, fmt.Sprintf(
			"Rolling out %s one pod at a time: %d of %d instances serve it; reloading %s next",
			a.Spec.ArtifactURL, len(p.instances)-len(ro.outdated), len(p.desired), ro.parked))
	default:
		set(v1alpha1.ConditionUpToDate, true, ReasonUpToDate, fmt.Sprintf("Every instance serves %s", a.Spec.ArtifactURL))
	}
}

func setReady(set setCondition, p *pass, ready bool, failMsg string) {
	switch {
	case ready:
		msg := fmt.Sprintf("Serving on %d of %d pods", len(p.instances), len(p.desired))
		if r := p.adapter.Spec.Replicas; r != nil && len(p.desired) < int(*r) {
			msg += fmt.Sprintf(" (spec.replicas asks for %d; see the Scheduled condition)", *r)
		} else if p.waiting > 0 {
			msg += fmt.Sprintf(" (%d more wait for a free adapter slot; see the Scheduled condition)", p.waiting)
		}
		set(v1alpha1.ConditionReady, true, ReasonReady, msg)
	case len(p.failures) > 0:
		set(v1alpha1.ConditionReady, false, failReason(p), failMsg)
	case p.rollout.pending():
		set(v1alpha1.ConditionReady, false, ReasonRolling, fmt.Sprintf("Rolling out %s", p.adapter.Spec.ArtifactURL))
	case len(p.candidates) == 0 && len(p.unfit) > 0:
		set(v1alpha1.ConditionReady, false, p.unfit[0].reason, "No pod can take the adapter: see the Scheduled condition")
	case len(p.candidates) == 0:
		set(v1alpha1.ConditionReady, false, ReasonNoReadyPods, "No ready backend pods to load the adapter on")
	case len(p.desired) == 0 && p.waiting > 0:
		set(v1alpha1.ConditionReady, false, ReasonInsufficientCapacity, fmt.Sprintf(
			"Not placed on any of the %d candidates: all are full; waiting for a free adapter slot", len(p.candidates)))
	case len(p.desired) == 0:
		set(v1alpha1.ConditionReady, false, ReasonPartiallyReady, fmt.Sprintf(
			"Not placed on any of the %d candidates: %d pods that hold it are kept while not Ready", len(p.candidates), len(p.kept)))
	default:
		set(v1alpha1.ConditionReady, false, ReasonPartiallyReady, fmt.Sprintf("Serving on %d of %d pods", len(p.instances), len(p.desired)))
	}
}

func phaseOf(p *pass, ready bool) v1alpha1.ModelAdapterPhase {
	switch {
	case ready:
		return v1alpha1.ModelAdapterRunning
	case p.failedHard:
		return v1alpha1.ModelAdapterFailed
	case len(p.instances) > 0 && p.resourcesReady:
		return v1alpha1.ModelAdapterResourceCreated
	case len(p.instances) > 0:
		return v1alpha1.ModelAdapterBound
	case len(p.desired) > 0:
		return v1alpha1.ModelAdapterScheduled
	default:
		return v1alpha1.ModelAdapterPending
	}
}

// failReason is the classified reason of the most frequent failure of this pass.
func failReason(p *pass) string {
	counts := map[string]int{}
	for _, f := range p.failures {
		counts[string(engine.ReasonOf(f.err))]++
	}
	best := ReasonLoadFailed
	n := 0
	for r, c := range counts {
		if r != "" && (c > n || (c == n && r < best)) {
			best, n = r, c
		}
	}
	return best
}

// maxFailureMessage bounds the failure message in the Ready condition.
const maxFailureMessage = 2048

// failureMessage lists the failing pods with the engine's message, bounded in size.
func failureMessage(p *pass) string {
	type f struct {
		pod string
		podError
	}
	var list []f
	for pod, e := range p.failures {
		list = append(list, f{pod, e})
	}
	slices.SortFunc(list, func(x, y f) int { return cmp.Compare(x.pod, y.pod) })
	var b strings.Builder
	for i, e := range list {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more pods", len(list)-3)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "pod %s (%d attempts): %v", e.pod, e.failures, e.err)
	}
	return text.Truncate(b.String(), maxFailureMessage)
}

// writeStatus writes the status once, only when it changed. The write is guarded by the
// resourceVersion the pass read (or its own metadata write returned): status.instances is
// the record of which pods hold the adapter, so a status computed from an older adapter
// must not replace a newer one; a conflict retries the reconcile.
func (r *Reconciler) writeStatus(ctx context.Context, p *pass) error {
	st := computeStatus(p)
	key := client.ObjectKeyFromObject(p.adapter)
	if equality.Semantic.DeepEqual(st, p.adapter.Status) || r.superseded.storedAs(key, &st, p.adapter.ResourceVersion) {
		return nil
	}
	patch := client.MergeFromWithOptions(p.adapter.DeepCopy(), client.MergeFromWithOptimisticLock{})
	storedArtifacts := len(p.adapter.Status.InstanceArtifacts) > 0
	p.adapter.Status = st
	sent := st.DeepCopy() // the answer is decoded into p.adapter, whose slices st shares
	old := p.adapter.ResourceVersion
	if err := r.client.Status().Patch(ctx, p.adapter, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("writing status: %w", err)
	}
	unchanged := p.adapter.ResourceVersion == old
	r.superseded.wrote(key, old, p.adapter.ResourceVersion)
	r.superseded.wroteStatus(key, sent, p.adapter.ResourceVersion, unchanged)
	if len(sent.InstanceArtifacts) > 0 && ((unchanged && !storedArtifacts) || len(p.adapter.Status.InstanceArtifacts) == 0) {
		r.reportPrunedStatus(ctx, p.adapter)
	}
	return nil
}

// reportPrunedStatus says, once per process, that the API server dropped
// status.instanceArtifacts from a status write: the installed ModelAdapter CRD is not
// loraplane's (AIBrix's has no such field), so artifact rollouts cannot be tracked and the
// status is rewritten on every pass until the CRD is replaced.
func (r *Reconciler) reportPrunedStatus(ctx context.Context, a *v1alpha1.ModelAdapter) {
	r.prunedOnce.Do(func() {
		klog.FromContext(ctx).Error(nil, "The installed ModelAdapter CRD drops status.instanceArtifacts: it is not loraplane's (AIBrix's CRD?); "+
			"apply deploy/crds/model.aibrix.ai_modeladapters.yaml (docs/switching-from-aibrix.md)")
		r.recorder.Eventf(a, nil, corev1.EventTypeWarning, ReasonCRDOutdated, "WriteStatus",
			"The API server dropped status.instanceArtifacts: the installed ModelAdapter CRD is not loraplane's; apply loraplane's CRD (docs/switching-from-aibrix.md)")
	})
}
