package adapter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// TestPrunedStatusReported: when the API server drops status.instanceArtifacts (AIBrix's
// ModelAdapter CRD, kept by a switch-over that did not replace it, has no such field), the
// controller says so once: one Warning event CRDOutdated, however many passes write.
func TestPrunedStatusReported(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p0", UID: "p0", Labels: map[string]string{v1alpha1.ModelNameLabel: "m"}},
		Status:     corev1.PodStatus{PodIP: "127.0.42.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	a := &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "lora"},
		Spec: v1alpha1.ModelAdapterSpec{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.ModelNameLabel: "m"}},
			ArtifactURL: "huggingface://org/lora"},
	}
	// The status subresource of a CRD without instanceArtifacts: the field is pruned.
	prune := func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
		if err := c.SubResource(sub).Patch(ctx, obj, patch, opts...); err != nil {
			return err
		}
		stored := obj.(*v1alpha1.ModelAdapter)
		stored.Status.InstanceArtifacts = nil
		return c.SubResource(sub).Update(ctx, stored)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pod, a).WithStatusSubresource(&v1alpha1.ModelAdapter{}).
		WithIndex(&corev1.Pod{}, podModelIndex, podModel).
		WithInterceptorFuncs(interceptor.Funcs{SubResourcePatch: prune}).Build()
	rec := events.NewFakeRecorder(100)
	r := NewReconciler(c, c, newFakeEngine(), rec, clock.RealClock{}, DefaultOptions())
	for range 3 {
		if _, err := r.Reconcile(t.Context(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "lora"}}); err != nil {
			t.Fatal(err)
		}
	}
	var outdated []string
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, ReasonCRDOutdated) {
			outdated = append(outdated, e)
		}
	}
	if len(outdated) != 1 || !strings.HasPrefix(outdated[0], "Warning CRDOutdated") {
		t.Fatalf("CRDOutdated events %q, want one Warning", outdated)
	}
}

// TestFailureMessageIsValidUTF8: the message is cut on a character boundary. (Before: cut at
// byte 2048, possibly inside a character; the API server stores the normalised text, so the
// status computed next differed from the stored one on every pass.)
func TestFailureMessageIsValidUTF8(t *testing.T) {
	p := newPass(testAdapter())
	for i := range 3 {
		p.failures[fmt.Sprintf("p%d", i)] = podError{err: errors.New("xy" + strings.Repeat("é", 2000)), failures: 1}
	}
	msg := failureMessage(p)
	if !utf8.ValidString(msg) {
		t.Errorf("failure message of %d bytes is not valid UTF-8: ...%q", len(msg), msg[len(msg)-8:])
	}
	if len(msg) > maxFailureMessage+len("…") {
		t.Errorf("failure message of %d bytes, want at most %d", len(msg), maxFailureMessage+len("…"))
	}
}
