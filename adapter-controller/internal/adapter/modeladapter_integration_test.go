package adapter_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/adapter"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/fakeengine"
	"github.com/loraplane/loraplane/test/testenv"
)

// TestLoadOnAllPods: an AIBrix-style adapter without replicas is loaded on every matching
// pod, verified, published behind a headless Service and an EndpointSlice; deleting it
// unloads it everywhere and releases the finalizer.
func TestLoadOnAllPods(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	var engines []*fakeengine.Engine
	var pods []*corev1.Pod
	for _, name := range []string{"qwen-0", "qwen-1", "qwen-2"} {
		ip := newIP()
		engines = append(engines, engine(t, ip, 8000, fakeengine.Options{BaseModel: "qwen"}))
		pods = append(pods, modelPod(t, ns, name, ip, modelLabels("qwen")))
	}
	// A pod of another model must not get the adapter.
	other := newIP()
	otherEngine := engine(t, other, 8000, fakeengine.Options{})
	modelPod(t, ns, "llama-0", other, modelLabels("llama"))

	a := newAdapter(ns, "qwen-code-lora", "qwen")
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	got := waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "Running on 3 pods", running(3))
	if joined(got.Status.Instances) != "qwen-0,qwen-1,qwen-2" || got.Status.Candidates != 3 || got.Status.DesiredReplicas != 3 || got.Status.ReadyReplicas != 3 {
		t.Errorf("status: %+v", got.Status)
	}
	for _, c := range got.Status.Conditions {
		if c.Status != "True" || c.ObservedGeneration != got.Generation {
			t.Errorf("condition %s = %s (%s: %s), observedGeneration %d; want True at generation %d", c.Type, c.Status, c.Reason, c.Message, c.ObservedGeneration, got.Generation)
		}
	}
	for i, e := range engines {
		if joined(e.Loaded()) != "qwen-code-lora" {
			t.Errorf("engine of %s holds %v", pods[i].Name, e.Loaded())
		}
		if p := e.Adapters()["qwen-code-lora"]; p != "org/qwen-code-lora" {
			t.Errorf("engine of %s got lora_path %q, want org/qwen-code-lora", pods[i].Name, p)
		}
	}
	if len(otherEngine.Loaded()) != 0 {
		t.Errorf("the llama engine got %v", otherEngine.Loaded())
	}

	svc := &corev1.Service{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(a), svc); err != nil {
		t.Fatalf("Service: %v", err)
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.Selector != nil || svc.Spec.Ports[0].Port != 8000 || !isOwnedBy(svc.OwnerReferences, got) {
		t.Errorf("Service is not a headless, selector-less, owned Service on 8000: %+v", svc.Spec)
	}
	eps := &discoveryv1.EndpointSlice{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(a), eps); err != nil {
		t.Fatalf("EndpointSlice: %v", err)
	}
	var addrs []string
	for _, e := range eps.Endpoints {
		addrs = append(addrs, e.Addresses[0])
		if e.TargetRef == nil || e.TargetRef.Kind != "Pod" || e.Conditions.Ready == nil || !*e.Conditions.Ready {
			t.Errorf("endpoint without pod targetRef or ready condition: %+v", e)
		}
	}
	var want []string
	for _, p := range pods {
		want = append(want, testenv.TestAddress(p.Status.PodIP))
	}
	slices.Sort(addrs)
	slices.Sort(want)
	if joined(addrs) != joined(want) || eps.Labels[discoveryv1.LabelServiceName] != a.Name || eps.Labels[discoveryv1.LabelManagedBy] == "" || *eps.Ports[0].Port != 8000 {
		t.Errorf("EndpointSlice: addresses %v (want %v), labels %v", addrs, want, eps.Labels)
	}
	for _, m := range []struct {
		family string
		labels map[string]string
	}{
		{"loraplane_adapter_loads_total", map[string]string{"engine": "vllm", "result": "success"}},
		{"loraplane_engine_requests_total", map[string]string{"engine": "vllm", "op": "load", "code": "200"}},
		{"loraplane_engine_requests_total", map[string]string{"engine": "vllm", "op": "list", "code": "200"}},
		{"loraplane_adapters", map[string]string{"phase": "Running"}},
		{"loraplane_adapter_load_duration_seconds", nil},
	} {
		if v := metricValue(t, m.family, m.labels); v < 1 {
			t.Errorf("%s%v = %v, want >= 1", m.family, m.labels, v)
		}
	}
	instances := func(state string) map[string]string {
		return map[string]string{"namespace": ns, "name": a.Name, "state": state}
	}
	for _, state := range []string{"desired", "ready"} {
		if v := metricValue(t, "loraplane_adapter_instances", instances(state)); v != 3 {
			t.Errorf("loraplane_adapter_instances%v = %v, want 3", instances(state), v)
		}
	}
	// Nothing to change: a reconcile of the adapter (forced by a label it does not read) and
	// two inventory polls must write nothing.
	rv := eps.ResourceVersion
	reconciles, lists := testenv.ReconcileCount("modeladapter"), engines[0].Lists()
	touch := client.MergeFrom(got.DeepCopy())
	got.Labels = map[string]string{"example.com/touched": "1"}
	if err := k8s.Patch(ctx, got, touch); err != nil {
		t.Fatal(err)
	}
	statusRV := got.ResourceVersion // after the touch
	waitFor(t, 3*inventoryPeriod+5*time.Second, "a reconcile after the touch and two inventory polls", func() bool {
		return testenv.ReconcileCount("modeladapter") > reconciles && engines[0].Lists() >= lists+2
	})
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(a), eps); err != nil || eps.ResourceVersion != rv {
		t.Errorf("EndpointSlice rewritten without a change (resourceVersion %s -> %s)", rv, eps.ResourceVersion)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(a), got); err != nil || got.ResourceVersion != statusRV {
		t.Errorf("adapter written without a change (resourceVersion %s -> %s, status %+v)", statusRV, got.ResourceVersion, got.Status)
	}

	if err := k8s.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the adapter to be gone", func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(a), &v1alpha1.ModelAdapter{}))
	})
	for i, e := range engines {
		if len(e.Loaded()) != 0 {
			t.Errorf("after deletion, the engine of %s still holds %v", pods[i].Name, e.Loaded())
		}
	}
	if ms, err := testenv.Metrics("loraplane_adapter_instances", map[string]string{"namespace": ns, "name": a.Name}); err != nil || len(ms) != 0 {
		t.Errorf("after deletion, loraplane_adapter_instances of the adapter has %d series (err %v), want none", len(ms), err)
	}
}

func isOwnedBy(refs []metav1OwnerReference, a *v1alpha1.ModelAdapter) bool {
	for _, r := range refs {
		if r.UID == a.UID && r.Controller != nil && *r.Controller {
			return true
		}
	}
	return false
}

// TestSingleReplicaMovesWhenItsPodGoes: replicas 1 puts the adapter on one pod; when that
// pod is deleted the adapter moves to another candidate.
func TestSingleReplicaMovesWhenItsPodGoes(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	engines := map[string]*fakeengine.Engine{}
	for _, name := range []string{"m-0", "m-1", "m-2"} {
		ip := newIP()
		engines[name] = engine(t, ip, 8000, fakeengine.Options{})
		modelPod(t, ns, name, ip, modelLabels("m"))
	}
	a := newAdapter(ns, "one", "m", func(a *v1alpha1.ModelAdapter) { a.Spec.Replicas = ptr.To[int32](1) })
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	got := waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "Running on 1 pod", running(1))
	first := got.Status.Instances[0]
	if got.Status.Candidates != 3 || got.Status.DesiredReplicas != 1 {
		t.Errorf("candidates/desired = %d/%d, want 3/1", got.Status.Candidates, got.Status.DesiredReplicas)
	}
	loadedOn := 0
	for _, e := range engines {
		loadedOn += len(e.Loaded())
	}
	if loadedOn != 1 {
		t.Fatalf("loaded on %d engines, want 1", loadedOn)
	}
	if err := k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1ObjectMeta(ns, first)}, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	moved := waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "the adapter to move off "+first, func(a *v1alpha1.ModelAdapter) bool {
		return running(1)(a) && a.Status.Instances[0] != first
	})
	if e := engines[moved.Status.Instances[0]]; joined(e.Loaded()) != "one" {
		t.Errorf("new instance %s holds %v", moved.Status.Instances[0], e.Loaded())
	}
}

// TestDriftRepair: an engine that restarts forgets its adapters; the inventory notices
// within one period and the adapter is loaded again.
func TestDriftRepair(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	ip := newIP()
	e := engine(t, ip, 8000, fakeengine.Options{})
	modelPod(t, ns, "d-0", ip, modelLabels("d"))
	a := newAdapter(ns, "drift", "d")
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "Running", running(1))
	listsBefore := e.Lists()
	time.Sleep(3 * inventoryPeriod)
	if perPeriod := float64(e.Lists()-listsBefore) / 3; perPeriod > 1.5 {
		t.Errorf("%.1f inventory requests per period for one pod, want about 1", perPeriod)
	}
	e.Restart()
	start := time.Now()
	waitFor(t, 2*inventoryPeriod+10*time.Second, "the adapter to be reloaded after the engine restart", func() bool {
		return joined(e.Loaded()) == "drift"
	})
	t.Logf("reloaded %s after the engine restart (inventory period %s)", time.Since(start).Round(10*time.Millisecond), inventoryPeriod)
	// The bound is 3× the measured time or more (docs/reliability.md, "Wall-clock limits").
	if took, limit := time.Since(start), 2*inventoryPeriod+2*time.Second; took > limit {
		t.Errorf("reload took %s, want within %s (2 inventory periods of %s + 2 s)", took, limit, inventoryPeriod)
	}
}

// TestPodStopsMatching: a pod whose labels stop matching loses the adapter.
func TestPodStopsMatching(t *testing.T) {
	needEnv(t)
	for name, stop := range map[string]func(*corev1.Pod){
		"adapter-enabled label false": func(p *corev1.Pod) { p.Labels[v1alpha1.AdapterEnabledLabel] = "false" },
		// The pod leaves the controller's pod cache (scoped to pods with a model label): it
		// is still there and still holds the adapter. (Before: treated as gone, never
		// unloaded, not even when the ModelAdapter was deleted.)
		"model label removed": func(p *corev1.Pod) { delete(p.Labels, v1alpha1.ModelNameLabel) },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := ctxFor(t)
			ns := newNamespace(t)
			ips := []string{newIP(), newIP()}
			e0 := engine(t, ips[0], 8000, fakeengine.Options{})
			e1 := engine(t, ips[1], 8000, fakeengine.Options{})
			modelPod(t, ns, "s-0", ips[0], modelLabels("s"))
			p1 := modelPod(t, ns, "s-1", ips[1], modelLabels("s"))
			a := newAdapter(ns, "stop", "s", func(a *v1alpha1.ModelAdapter) {
				a.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.AdapterEnabledLabel: "true"}}
			})
			if err := k8s.Create(ctx, a); err != nil {
				t.Fatal(err)
			}
			waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "Running on 2", running(2))
			patch := client.MergeFrom(p1.DeepCopy())
			stop(p1)
			if err := k8s.Patch(ctx, p1, patch); err != nil {
				t.Fatal(err)
			}
			waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "Running on s-0 only", func(a *v1alpha1.ModelAdapter) bool {
				return running(1)(a) && a.Status.Instances[0] == "s-0"
			})
			waitFor(t, 10*time.Second, "the adapter to be unloaded from s-1", func() bool { return len(e1.Loaded()) == 0 })
			if joined(e0.Loaded()) != "stop" {
				t.Errorf("s-0 holds %v", e0.Loaded())
			}
		})
	}
}

// TestFailingEngineThenHeals: an engine with runtime LoRA updates disabled makes the
// adapter Failed with a classified reason and the engine's message; when the engine heals,
// retries (which continue) bring it to Running.
func TestFailingEngineThenHeals(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	ip := newIP()
	e := engine(t, ip, 8000, fakeengine.Options{})
	e.SetFault(fakeengine.Fault{Op: fakeengine.OpLoad, Status: 404, Body: `{"detail":"Not Found"}`})
	modelPod(t, ns, "f-0", ip, modelLabels("f"))
	a := newAdapter(ns, "fails", "f")
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	failed := waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "Failed", func(a *v1alpha1.ModelAdapter) bool {
		return a.Status.Phase == v1alpha1.ModelAdapterFailed
	})
	c := readyCondition(failed)
	if c == nil || c.Status != "False" || c.Reason != "LoRAUpdatingDisabled" || !strings.Contains(c.Message, "f-0") {
		t.Errorf("Ready condition %+v, want False/LoRAUpdatingDisabled naming pod f-0", c)
	}
	e.ClearFault()
	waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "Running after the engine healed", running(1))
}

// TestSGLangAndRuntimeSidecar: SGLang pods get the SGLang API; a pod with the aibrix-runtime
// sidecar is loaded through it (port 8080), which also takes s3:// and tos:// artifacts.
func TestSGLangAndRuntimeSidecar(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	sgIP, rtIP := newIP(), newIP()
	sg := engine(t, sgIP, 30000, fakeengine.Options{Kind: fakeengine.SGLang})
	rt := engine(t, rtIP, 8000, fakeengine.Options{Runtime: true})
	sgLabels := modelLabels("sg")
	sgLabels[v1alpha1.EngineLabel] = "sglang"
	sgLabels[v1alpha1.ModelPortLabel] = "30000"
	modelPod(t, ns, "sg-0", sgIP, sgLabels)
	modelPod(t, ns, "rt-0", rtIP, modelLabels("rt"), func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "aibrix-runtime", Image: "runtime"})
	})
	sgA := newAdapter(ns, "sg-lora", "sg")
	rtA := newAdapter(ns, "rt-lora", "rt", func(a *v1alpha1.ModelAdapter) { a.Spec.ArtifactURL = "s3://bucket/rt-lora" })
	for _, a := range []*v1alpha1.ModelAdapter{sgA, rtA} {
		if err := k8s.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	waitAdapter(t, client.ObjectKeyFromObject(sgA), 30*time.Second, "SGLang adapter Running", running(1))
	waitAdapter(t, client.ObjectKeyFromObject(rtA), 30*time.Second, "runtime adapter Running", running(1))
	if joined(sg.Loaded()) != "sg-lora" || sg.Requests()["POST /load_lora_adapter"] != 1 {
		t.Errorf("SGLang engine: loaded %v, requests %v", sg.Loaded(), sg.Requests())
	}
	if rt.Adapters()["rt-lora"] != "s3://bucket/rt-lora" || rt.Requests()["POST /v1/lora_adapter/load"] != 1 {
		t.Errorf("runtime sidecar: adapters %v, requests %v", rt.Adapters(), rt.Requests())
	}
	svc := &corev1.Service{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(sgA), svc); err != nil || svc.Spec.Ports[0].Port != 30000 {
		t.Errorf("SGLang adapter Service port: %v %+v", err, svc.Spec.Ports)
	}

	// A tos:// artifact (AIBrix's webhook and sidecar accept it) goes through the sidecar too.
	tosA := newAdapter(ns, "rt-tos-lora", "rt", func(a *v1alpha1.ModelAdapter) { a.Spec.ArtifactURL = "tos://bucket/rt-tos-lora" })
	if err := k8s.Create(ctx, tosA); err != nil {
		t.Fatal(err)
	}
	waitAdapter(t, client.ObjectKeyFromObject(tosA), 30*time.Second, "tos:// runtime adapter Running", running(1))
	if rt.Adapters()["rt-tos-lora"] != "tos://bucket/rt-tos-lora" {
		t.Errorf("runtime sidecar: adapters %v, want rt-tos-lora from tos://bucket/rt-tos-lora", rt.Adapters())
	}

	// An s3:// or tos:// artifact on a pod without the sidecar is refused with a reason that
	// says so, as AIBrix refuses it.
	for _, scheme := range []string{"s3", "tos"} {
		plain := newAdapter(ns, scheme+"-no-sidecar", "sg", func(a *v1alpha1.ModelAdapter) { a.Spec.ArtifactURL = scheme + "://bucket/x" })
		if err := k8s.Create(ctx, plain); err != nil {
			t.Fatal(err)
		}
		got := waitAdapter(t, client.ObjectKeyFromObject(plain), 30*time.Second, scheme+":// without the sidecar: a classified failure", func(a *v1alpha1.ModelAdapter) bool {
			c := readyCondition(a)
			return c != nil && c.Reason == "ArtifactNeedsRuntime"
		})
		if c := readyCondition(got); !strings.Contains(c.Message, "aibrix-runtime") {
			t.Errorf("%s: message %q does not say the sidecar is needed", scheme, c.Message)
		}
	}
}

// TestAPIKeyFromSecret: the Secret's api-key entry is sent as a bearer token and never
// appears in status or events.
func TestAPIKeyFromSecret(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	ip := newIP()
	e := engine(t, ip, 8000, fakeengine.Options{APIKey: "sk-secret-123"})
	modelPod(t, ns, "k-0", ip, modelLabels("k"))
	secret := &corev1.Secret{ObjectMeta: metav1ObjectMeta(ns, "engine-key"), StringData: map[string]string{"api-key": "sk-secret-123"}}
	if err := k8s.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	a := newAdapter(ns, "keyed", "k", func(a *v1alpha1.ModelAdapter) {
		a.Spec.CredentialsSecretRef = &corev1.LocalObjectReference{Name: "engine-key"}
	})
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	got := waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "Running with the Secret's key", running(1))
	if joined(e.Loaded()) != "keyed" {
		t.Errorf("engine holds %v", e.Loaded())
	}
	if strings.Contains(fmt.Sprintf("%+v", got.Status), "sk-secret-123") {
		t.Error("the API key appears in the status")
	}
	// A wrong key is classified, and the key is not echoed.
	bad := newAdapter(ns, "bad-key", "k", func(a *v1alpha1.ModelAdapter) { a.Spec.AdditionalConfig = map[string]string{"api-key": "sk-wrong-456"} })
	if err := k8s.Create(ctx, bad); err != nil {
		t.Fatal(err)
	}
	failed := waitAdapter(t, client.ObjectKeyFromObject(bad), 30*time.Second, "EngineUnauthorized", func(a *v1alpha1.ModelAdapter) bool {
		c := readyCondition(a)
		return c != nil && c.Reason == "EngineUnauthorized"
	})
	if strings.Contains(fmt.Sprintf("%+v", failed.Status), "sk-wrong-456") {
		t.Error("the wrong API key appears in the status")
	}
}

// TestDeletionWithUnreachablePod: a deleted adapter whose pod cannot be reached is released
// after the bounded retries, with a Warning event.
func TestDeletionWithUnreachablePod(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	ip := newIP()
	e := engine(t, ip, 8000, fakeengine.Options{})
	modelPod(t, ns, "u-0", ip, modelLabels("u"))
	a := newAdapter(ns, "unreachable", "u")
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "Running", running(1))
	e.Close() // connection refused from now on
	start := time.Now()
	if err := k8s.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the finalizer to be released", func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(a), &v1alpha1.ModelAdapter{}))
	})
	t.Logf("released %s after deletion with the pod unreachable", time.Since(start).Round(10*time.Millisecond))
	waitFor(t, 10*time.Second, "an UnloadAbandoned Warning event", func() bool {
		var evs eventsList
		if err := k8s.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false
		}
		for _, ev := range evs.Items {
			if ev.Reason == "UnloadAbandoned" && ev.Type == corev1.EventTypeWarning && ev.Regarding.Name == "unreachable" {
				return true
			}
		}
		return false
	})
}

// TestBaseModelMismatch: pods that match the selector but serve another base model than
// spec.baseModel are never loaded; the Scheduled condition says how many were excluded and
// why; once a pod of the right model appears, the adapter runs there and only there.
func TestBaseModelMismatch(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	ips := []string{newIP(), newIP()}
	wrong := engine(t, ips[0], 8000, fakeengine.Options{})
	right := engine(t, ips[1], 8000, fakeengine.Options{})
	// The selector only asks for adapter-enabled pods; the pod's model label disagrees with
	// spec.baseModel.
	sel := map[string]string{v1alpha1.AdapterEnabledLabel: "true"}
	modelPod(t, ns, "other-0", ips[0], modelLabels("other-model"))
	a := newAdapter(ns, "mismatch", "", func(a *v1alpha1.ModelAdapter) {
		a.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: sel}
		a.Spec.BaseModel = ptr.To("base-model")
	})
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	got := waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "the mismatch reported", func(a *v1alpha1.ModelAdapter) bool {
		c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionScheduled)
		return c != nil && c.Status == metav1.ConditionFalse && c.ObservedGeneration == a.Generation
	})
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionScheduled)
	if c.Reason != adapter.ReasonNoReadyPods || !strings.Contains(c.Message, `1 matching pods serve another base model than "base-model"`) {
		t.Errorf("Scheduled condition %s: %q, want %s naming the excluded pod count and the base model", c.Reason, c.Message, adapter.ReasonNoReadyPods)
	}
	if got.Status.Candidates != 0 || len(got.Status.Instances) != 0 {
		t.Errorf("status candidates %d, instances %v; want none", got.Status.Candidates, got.Status.Instances)
	}
	if n := wrong.Loads(); n != 0 {
		t.Errorf("the pod of another base model got %d load calls", n)
	}

	modelPod(t, ns, "base-0", ips[1], modelLabels("base-model"))
	waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "Running on base-0 only", func(a *v1alpha1.ModelAdapter) bool {
		return running(1)(a) && a.Status.Instances[0] == "base-0"
	})
	if joined(right.Loaded()) != "mismatch" || wrong.Loads() != 0 {
		t.Errorf("engines hold base-0 %v, other-0 %v (%d loads); want the adapter on base-0 only", right.Loaded(), wrong.Loaded(), wrong.Loads())
	}
}

// TestOwnedObjectsKeepForeignLabels: the Service and the EndpointSlice follow one rule for
// labels: ours are set back when changed, labels others added are kept.
func TestOwnedObjectsKeepForeignLabels(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	ip := newIP()
	engine(t, ip, 8000, fakeengine.Options{})
	modelPod(t, ns, "fl-0", ip, modelLabels("fl"))
	a := newAdapter(ns, "labels", "fl")
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitAdapter(t, client.ObjectKeyFromObject(a), 30*time.Second, "Running", running(1))
	for _, obj := range []client.Object{&corev1.Service{}, &discoveryv1.EndpointSlice{}} {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(a), obj); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
		labels := obj.GetLabels()
		labels["team"] = "search"                    // someone else's
		labels[v1alpha1.ModelNameLabel] = "tampered" // ours
		obj.SetLabels(labels)
		if err := k8s.Patch(ctx, obj, patch); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, fmt.Sprintf("%T labels repaired and the foreign one kept", obj), func() bool {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(a), obj); err != nil {
				return false
			}
			return obj.GetLabels()[v1alpha1.ModelNameLabel] == "labels" && obj.GetLabels()["team"] == "search"
		})
	}
}
