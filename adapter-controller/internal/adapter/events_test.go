package adapter

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// drainEvents returns the events recorded since the last call, by reason, and their texts.
func drainEvents(rec *events.FakeRecorder) (map[string]int, []string) {
	byReason := map[string]int{}
	var all []string
	for len(rec.Events) > 0 {
		e := <-rec.Events // "<type> <reason> <message>"
		all = append(all, e)
		if f := strings.Fields(e); len(f) > 1 {
			byReason[f[1]]++
		}
	}
	return byReason, all
}

// TestEventsPerPass: loads, load failures, unloads (scale-down and deletion) and unload
// failures on 20 pods make one event per pass and reason, naming the pods, not one per pod.
// (Before: 20 UnloadFailed, 20 Unloaded and 20 LoadFailed events, one per pod.)
func TestEventsPerPass(t *testing.T) {
	const n = 20
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	eng := newFakeEngine()
	a := testAdapter()
	r, c, rec := testReconciler(t, eng, clk, DefaultOptions(), interceptor.Funcs{}, append(readyPods(2*n), a)...)
	setModel := func(first, last int, model string) {
		t.Helper()
		for i := first; i < last; i++ {
			pod := &corev1.Pod{}
			if err := c.Get(t.Context(), types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("p%d", i)}, pod); err != nil {
				t.Fatal(err)
			}
			pod.Labels[v1alpha1.ModelNameLabel] = model
			if err := c.Update(t.Context(), pod); err != nil {
				t.Fatal(err)
			}
		}
	}
	pass := func(step string, want map[string]int, wantText string) {
		t.Helper()
		if _, err := reconcileAdapter(t, r); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		got, texts := drainEvents(rec)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: events by reason %v, want %v:\n%s", step, got, want, strings.Join(texts, "\n"))
		}
		if wantText != "" && (len(texts) != 1 || !strings.Contains(texts[0], wantText)) {
			t.Errorf("%s: events %q, want one saying %q", step, texts, wantText)
		}
	}

	setModel(n, 2*n, "other") // the first placement: p0..p19
	pass("first placement", map[string]int{}, "")

	eng.lie = true // loads answer success and load nothing: verification fails
	setModel(n, 2*n, "m")
	pass("scale-out whose loads fail", map[string]int{ReasonLoadFailed: 1}, "failed on 20 pods: pod p20 (attempt 1)")

	eng.lie = false
	clk.Step(time.Minute) // past the load backoff
	pass("the loads retried", map[string]int{ReasonLoaded: 1}, "Loaded and verified on 20 pods: p20, p21")

	setModel(n, 2*n, "other")
	pass("scale-down: de-published", map[string]int{}, "")
	pass("scale-down: unloaded", map[string]int{ReasonUnloaded: 1}, "Unloaded from 20 pods: p20, p21")

	eng.unloadErr = &engine.Error{Reason: engine.ReasonEngineUnreachable, Op: engine.OpUnload, Retryable: true, Message: "connection refused"}
	cur := &v1alpha1.ModelAdapter{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(a), cur); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(t.Context(), cur); err != nil {
		t.Fatal(err)
	}
	pass("deletion whose unloads fail", map[string]int{ReasonUnloadFailed: 1}, "Unloading failed on 20 pods: pod p0 (attempt 1)")

	eng.unloadErr = nil
	clk.Step(time.Minute) // past the deletion backoff
	pass("deletion", map[string]int{ReasonUnloaded: 1}, "Unloaded from 20 pods: p0, p1")
}
