package adapter

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// The limits the API server enforces on a ModelAdapter write and the fake client does not.
const (
	totalAnnotationLimit = 256 << 10 // all annotations together (apimachinery's ValidateAnnotations)
	conditionMessageMax  = 32768     // metav1.Condition.message
)

// apiServerLimits refuses, as the API server would, ModelAdapter writes whose annotations or
// condition messages are too large.
func apiServerLimits() interceptor.Funcs {
	invalid := func(obj client.Object, path string, size, limit int) error {
		return apierrors.NewInvalid(schema.GroupKind{Group: "model.aibrix.ai", Kind: "ModelAdapter"}, obj.GetName(),
			field.ErrorList{field.TooLong(field.NewPath(path), fmt.Sprintf("<%d bytes>", size), limit)})
	}
	return interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			size := 0
			for k, v := range obj.GetAnnotations() {
				size += len(k) + len(v)
			}
			if size > totalAnnotationLimit {
				return invalid(obj, "metadata.annotations", size, totalAnnotationLimit)
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if a, ok := obj.(*v1alpha1.ModelAdapter); ok {
				for _, cond := range a.Status.Conditions {
					if len(cond.Message) > conditionMessageMax {
						return invalid(obj, "status.conditions.message", len(cond.Message), conditionMessageMax)
					}
				}
			}
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
}

// namedPods returns Ready model pods of ns with the names given.
func namedPods(names []string) []client.Object {
	out := make([]client.Object, 0, len(names))
	for i, name := range names {
		out = append(out, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
				Labels: map[string]string{v1alpha1.ModelNameLabel: "m"}},
			Status: corev1.PodStatus{PodIP: fmt.Sprintf("127.%d.%d.%d", 1+i/62500, (i/250)%250, 1+i%250),
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}
	return out
}

// TestSixThousandPods: an adapter on 6,000 pods with long names. Pods of ReplicaSets (a
// shared prefix) all fit in the scheduled-pods annotation, in its compact form, and the
// adapter runs; 6,000 pods with nothing in common fill it to its bound: the pods beyond get
// no load and the status says why, and the writes are accepted, so the adapter is not
// stuck. (Before: the annotation of either was over the API server's 256 KiB and refused,
// and the adapter recorded nothing.)
func TestSixThousandPods(t *testing.T) {
	const n = 6000
	tests := map[string]struct {
		name        func(i int) string
		wantRunning bool
	}{
		"ReplicaSet pods": {name: func(i int) string {
			return fmt.Sprintf("llama-3-8b-instruct-lora-serving-%d7f9c5d6b8-%05d", i%3, i) // 3 ReplicaSets
		}, wantRunning: true},
		"unrelated pods": {name: func(i int) string {
			return fmt.Sprintf("pod-%05d-llama-3-8b-instruct-lora-serving-engine", i)
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			names := make([]string, n)
			for i := range names {
				names[i] = tc.name(i)
			}
			eng := newFakeEngine()
			a := testAdapter()
			r, c, _ := testReconciler(t, eng, clock.RealClock{}, DefaultOptions(), apiServerLimits(), append(namedPods(names), a)...)
			if _, err := reconcileAdapter(t, r); err != nil {
				t.Fatalf("a pass on %d pods: %v", n, err)
			}
			cur := &v1alpha1.ModelAdapter{}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(a), cur); err != nil {
				t.Fatal(err)
			}
			annotation := cur.Annotations[v1alpha1.ScheduledPodsAnnotation]
			if len(annotation) > maxScheduledBytes {
				t.Errorf("scheduled-pods annotation of %d bytes, want at most %d", len(annotation), maxScheduledBytes)
			}
			recorded := scheduledPods(cur)
			for _, pod := range cur.Status.Instances {
				if !recorded[pod] {
					t.Fatalf("instance %s is not in the scheduled-pods annotation", pod)
				}
			}
			loaded := eng.count(&eng.loads)
			if loaded != len(recorded) {
				t.Errorf("%d loads sent, %d pods recorded: every load must be recorded first", loaded, len(recorded))
			}
			ready := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady)
			t.Logf("%d pods recorded in %d bytes; phase %s; %d instances; Ready: %s", len(recorded), len(annotation), cur.Status.Phase, len(cur.Status.Instances), ready.Message)
			if tc.wantRunning {
				if cur.Status.Phase != v1alpha1.ModelAdapterRunning || len(recorded) != n || len(cur.Status.Instances) != n {
					t.Errorf("phase %s, %d pods recorded, %d instances; want Running on all %d", cur.Status.Phase, len(recorded), len(cur.Status.Instances), n)
				}
				return
			}
			if len(recorded) == 0 || len(recorded) == n || len(cur.Status.Instances) != len(recorded) {
				t.Errorf("%d pods recorded, %d instances; want some but not all %d, each loaded", len(recorded), len(cur.Status.Instances), n)
			}
			if ready.Status != metav1.ConditionFalse || ready.Reason != ReasonRecordFull || cur.Status.DesiredReplicas != n {
				t.Errorf("Ready %s %s, desiredReplicas %d; want False %s, %d", ready.Status, ready.Reason, cur.Status.DesiredReplicas, ReasonRecordFull, n)
			}
		})
	}
}

// TestScheduledPodsEncoding: the annotation decodes to the pods encoded, in the plain form
// (AIBrix's) while it is small and in the compact form beyond.
func TestScheduledPodsEncoding(t *testing.T) {
	many := func(n int, name func(i int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = name(i)
		}
		return out
	}
	tests := map[string]struct {
		pods      []string
		wantPlain bool
	}{
		"few":         {pods: []string{"a-1", "a-2", "b"}, wantPlain: true},
		"StatefulSet": {pods: many(20000, func(i int) string { return fmt.Sprintf("vllm-%d", i) })},
		"mixed": {pods: append(many(5000, func(i int) string { return fmt.Sprintf("vllm-7d9f8-%05d", i) }),
			append(many(3000, func(i int) string { return fmt.Sprintf("x%05d", i) }), "vllm-7d9f8-a-b", "vllm-7d9f8", "z-")...)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			slices.Sort(tc.pods)
			enc := encodeScheduled(tc.pods)
			if plain := enc == strings.Join(tc.pods, ","); plain != tc.wantPlain {
				t.Errorf("plain form %v, want %v (%d bytes)", plain, tc.wantPlain, len(enc))
			}
			a := testAdapter()
			a.Annotations = map[string]string{v1alpha1.ScheduledPodsAnnotation: enc}
			if got := slices.Sorted(maps.Keys(scheduledPods(a))); !slices.Equal(got, tc.pods) {
				t.Errorf("decoded %d pods, want the %d encoded", len(got), len(tc.pods))
			}
		})
	}
}

// TestRolloutFailedMessageBounded: a rollout failing on 6,000 pods says so in a condition
// message the API server accepts, naming the first pods. (Before: every pod was named,
// 300 KB, and the status write was refused.)
func TestRolloutFailedMessageBounded(t *testing.T) {
	p := newPass(testAdapter())
	for i := range 6000 {
		p.rollout.failed = append(p.rollout.failed, fmt.Sprintf("llama-3-8b-instruct-lora-serving-7f9c5d6b8-%05d", i))
	}
	p.rollout.err = fmt.Errorf("no adapter found")
	st := computeStatus(p)
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionUpToDate)
	if c == nil || c.Reason != ReasonRolloutFailed || len(c.Message) > conditionMessageMax ||
		!strings.Contains(c.Message, "failed on 6000 pods (llama-3-8b-instruct-lora-serving-7f9c5d6b8-00000,") || !strings.Contains(c.Message, "and 5990 more") {
		t.Fatalf("UpToDate condition %+v", c)
	}
}
