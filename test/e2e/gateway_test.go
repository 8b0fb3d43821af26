//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/fakeengine"
)

// The gateway tests need a Gateway API implementation serving the Gateway the routes name
// (make e2e: Traefik, test/e2e/kind/gateway) and its HTTP listener:
//
//	E2E_GATEWAY_URL        the listener, e.g. http://127.0.0.1:28080
//	E2E_GATEWAY_CONTROLLER the implementation's controllerName in route status (default
//	                       traefik.io/gateway-controller)
//	E2E_GATEWAY_NAME       the Gateway (default aibrix-eg)

const (
	// Bounds of the measured delays: the adapter Running → first answer through the gateway,
	// and the adapter deleted → its requests failing. Both are a route write, a gateway
	// watch event and a configuration reload (Traefik batches provider updates for up to 2 s).
	maxRouteDelay = 30 * time.Second
)

func gatewayURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("E2E_GATEWAY_URL")
	if u == "" {
		t.Skip("E2E_GATEWAY_URL is not set: no Gateway API implementation to send requests through (make e2e runs Traefik on kind)")
	}
	return strings.TrimSuffix(u, "/")
}

func gatewayController() string {
	return env("E2E_GATEWAY_CONTROLLER", "traefik.io/gateway-controller")
}
func gatewayName() string { return env("E2E_GATEWAY_NAME", "aibrix-eg") }

// modelService is the Service a model's route sends its requests to (the router's default: the
// model's name), selecting its pods as a user's Deployment manifest would.
func modelService(t *testing.T, ns, model string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: model, Namespace: ns},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{v1alpha1.ModelNameLabel: model},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 8000, TargetPort: intstr.FromInt32(8000)}},
		},
	}
	if err := k8s.Create(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
}

// answer is one request through the gateway: its status, who served it (the fake engine's
// pod) and, when it failed, the start of the body.
type gwAnswer struct {
	status   int
	servedBy string
	model    string
	body     string
	err      error
}

func (a gwAnswer) ok() bool { return a.err == nil && a.status == http.StatusOK }

func (a gwAnswer) String() string {
	if a.err != nil {
		return a.err.Error()
	}
	return fmt.Sprintf("%d %s %q", a.status, a.servedBy, a.body)
}

var gwClient = &http.Client{Timeout: 10 * time.Second}

// complete sends a completion (or a chat completion) for model through the gateway: header
// model (what the routes match) and the same model in the body (what the engine serves).
func complete(base, path, model string) gwAnswer {
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": "hello", "max_tokens": 4})
	req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return gwAnswer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("model", model)
	resp, err := gwClient.Do(req)
	if err != nil {
		return gwAnswer{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	a := gwAnswer{status: resp.StatusCode, servedBy: resp.Header.Get(fakeengine.ServedByHeader)}
	if resp.StatusCode != http.StatusOK {
		a.body = string(b[:min(len(b), 200)])
		return a
	}
	var c fakeengine.Completion
	if err := json.Unmarshal(b, &c); err != nil {
		a.err = fmt.Errorf("answer %q: %w", b, err)
		return a
	}
	a.model = c.Model
	if c.ServedBy != a.servedBy {
		a.err = fmt.Errorf("served_by %q but header %q", c.ServedBy, a.servedBy)
	}
	return a
}

// routeParentConditions returns the conditions our Gateway's implementation wrote on the route
// for its current generation, by type ("" when absent or stale).
func routeParentConditions(name string) (map[string]metav1.Condition, error) {
	r := &gatewayv1.HTTPRoute{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: gatewayNamespace(), Name: name}, r); err != nil {
		return nil, err
	}
	out := map[string]metav1.Condition{}
	for _, p := range r.Status.Parents {
		if string(p.ControllerName) != gatewayController() || string(p.ParentRef.Name) != gatewayName() {
			continue
		}
		for _, c := range p.Conditions {
			if c.ObservedGeneration == r.Generation {
				out[c.Type] = c
			}
		}
	}
	return out, nil
}

// waitRouteConditions waits until the gateway reports Accepted=True and ResolvedRefs with this
// status on the route, and returns the conditions.
func waitRouteConditions(t *testing.T, timeout time.Duration, name string, resolved metav1.ConditionStatus) map[string]metav1.Condition {
	const accepted = metav1.ConditionTrue
	t.Helper()
	var conds map[string]metav1.Condition
	waitFor(t, timeout, fmt.Sprintf("route %s: Accepted=%s ResolvedRefs=%s from %s", name, accepted, resolved, gatewayController()), func() (bool, string) {
		var err error
		conds, err = routeParentConditions(name)
		if err != nil {
			return false, err.Error()
		}
		a, r := conds[string(gatewayv1.RouteConditionAccepted)], conds[string(gatewayv1.RouteConditionResolvedRefs)]
		return a.Status == accepted && r.Status == resolved, fmt.Sprintf("%+v", conds)
	})
	return conds
}

// TestGatewayRoutesByModel: through a real Gateway API implementation, the routes the router
// writes are accepted with resolved references; a request for the base model is answered by
// one of its pods, a request for an adapter only by pods where it is loaded, spread over all
// of them; the adapter is served within maxRouteDelay of turning Running, and its requests
// fail within maxRouteDelay of its deletion.
func TestGatewayRoutesByModel(t *testing.T) {
	gw := gatewayURL(t)
	ctx := ctxFor(t, 6*time.Minute)
	ns := namespace(t)
	model := "e2e-gw-" + suffix()
	modelService(t, ns, model)
	pods := startModel(ctx, t, 90*time.Second, ns, model, 3)
	podNames := make([]string, 0, len(pods))
	for _, p := range pods {
		podNames = append(podNames, p.Name)
	}

	// The base model: its route accepted, and every answer from one of its pods.
	conds := waitRouteConditions(t, 60*time.Second, model+"-router", metav1.ConditionTrue)
	t.Logf("route %s/%s status from %s: Accepted=%s (%s), ResolvedRefs=%s (%s)", gatewayNamespace(), model+"-router", gatewayController(),
		conds["Accepted"].Status, conds["Accepted"].Reason, conds["ResolvedRefs"].Status, conds["ResolvedRefs"].Reason)
	waitFor(t, maxRouteDelay, "a request for the base model through the gateway", func() (bool, string) {
		a := complete(gw, "/v1/completions", model)
		return a.ok(), a.String()
	})
	basePods := map[string]int{}
	for i := range 30 {
		path := "/v1/completions"
		if i%2 == 1 {
			path = "/v1/chat/completions"
		}
		a := complete(gw, path, model)
		if !a.ok() || a.model != model || !slices.Contains(podNames, a.servedBy) {
			t.Fatalf("request %d for the base model %s: %s (model %q); its pods: %v", i, model, a, a.model, podNames)
		}
		basePods[a.servedBy]++
	}
	t.Logf("30 requests for the base model %s through the gateway, answered by its pods %v", model, basePods)

	// An adapter on 2 of the 3 pods.
	adapterName := "lora-gw-" + suffix()
	ad := &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Name: adapterName, Namespace: ns},
		Spec: v1alpha1.ModelAdapterSpec{
			BaseModel:   ptr.To(model),
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.ModelNameLabel: model}},
			ArtifactURL: "huggingface://ai-blond/Qwen-Qwen2.5-Coder-1.5B-Instruct-lora",
			Replicas:    ptr.To[int32](2),
		},
	}
	if err := k8s.Create(ctx, ad); err != nil {
		t.Fatal(err)
	}
	var instances []string
	waitFor(t, 90*time.Second, "the adapter Running on 2 pods", func() (bool, string) {
		got, err := adapterStatus(ns, adapterName)
		if err != nil {
			return false, err.Error()
		}
		instances = got.Status.Instances
		return got.Status.Phase == v1alpha1.ModelAdapterRunning && len(instances) == 2, fmt.Sprintf("%s %v", got.Status.Phase, instances)
	})
	running := time.Now()
	var first gwAnswer
	waitFor(t, maxRouteDelay, "the first answer for the adapter through the gateway", func() (bool, string) {
		first = complete(gw, "/v1/completions", adapterName)
		return first.ok(), first.String()
	})
	t.Logf("adapter %s Running → first answer through the gateway: %.2f s (from %s; limit %s)",
		adapterName, time.Since(running).Seconds(), first.servedBy, maxRouteDelay)
	if !slices.Contains(instances, first.servedBy) {
		t.Fatalf("the first answer for %s came from %s, not one of its instances %v", adapterName, first.servedBy, instances)
	}
	conds = waitRouteConditions(t, 30*time.Second, adapterName+"-router", metav1.ConditionTrue)
	t.Logf("route %s/%s: Accepted=%s ResolvedRefs=%s", gatewayNamespace(), adapterName+"-router", conds["Accepted"].Status, conds["ResolvedRefs"].Status)

	// Where the engines can be asked, the instances are exactly the pods holding the adapter.
	if haveEngineAdmin() {
		es := engines(t)
		for _, p := range pods {
			loaded := slices.Contains(es[ns+"/"+p.Name].Loaded, adapterName)
			if loaded != slices.Contains(instances, p.Name) {
				t.Fatalf("pod %s: adapter loaded=%v, but the instances are %v", p.Name, loaded, instances)
			}
		}
	}
	perPod := map[string]int{}
	for i := range 100 {
		path := "/v1/completions"
		if i%2 == 1 {
			path = "/v1/chat/completions"
		}
		a := complete(gw, path, adapterName)
		if !a.ok() || a.model != adapterName {
			t.Fatalf("request %d for adapter %s: %s (model %q)", i, adapterName, a, a.model)
		}
		if !slices.Contains(instances, a.servedBy) {
			t.Fatalf("request %d for adapter %s answered by %s, which is not one of its instances %v", i, adapterName, a.servedBy, instances)
		}
		perPod[a.servedBy]++
	}
	t.Logf("100 requests for adapter %s through the gateway: %v (instances %v; the third pod holds no copy)", adapterName, perPod, instances)
	for _, p := range instances {
		if perPod[p] < 100/(4*len(instances)) {
			t.Fatalf("the requests for %s were not spread over its instances: %v", adapterName, perPod)
		}
	}

	// Deletion: requests for the adapter fail (the engines unload it, the route goes).
	deleted := time.Now()
	if err := k8s.Delete(ctx, ad); err != nil {
		t.Fatal(err)
	}
	var failed gwAnswer
	waitFor(t, maxRouteDelay, "requests for the deleted adapter failing", func() (bool, string) {
		failed = complete(gw, "/v1/completions", adapterName)
		return failed.err == nil && failed.status != http.StatusOK, failed.String()
	})
	t.Logf("adapter %s deleted → first failed request: %.3f s (%d %s; limit %s)", adapterName, time.Since(deleted).Seconds(), failed.status, failed.body, maxRouteDelay)
	waitFor(t, maxRouteDelay, "the adapter's route gone and the gateway answering 404 for it", func() (bool, string) {
		err := routeErr(adapterName + "-router")
		a := complete(gw, "/v1/completions", adapterName)
		return apierrors.IsNotFound(err) && a.status == http.StatusNotFound && a.servedBy == "", fmt.Sprintf("route: %v; request: %s", err, a)
	})
	t.Logf("adapter %s deleted → route gone and the gateway answering 404 itself: %.2f s", adapterName, time.Since(deleted).Seconds())
	for i := range 20 {
		if a := complete(gw, "/v1/completions", adapterName); a.ok() {
			t.Fatalf("request %d for the deleted adapter %s succeeded: %s", i, adapterName, a)
		}
	}
	// The base model is still served.
	if a := complete(gw, "/v1/completions", model); !a.ok() || !slices.Contains(podNames, a.servedBy) {
		t.Fatalf("the base model after the adapter's deletion: %s", a)
	}
}

// TestGatewayReportsUnresolvedGrant: a route whose ReferenceGrant was removed by hand is
// reported ResolvedRefs=False (RefNotPermitted) by the gateway, and requests for it fail; the
// router-controller re-creates the grant, and the route is resolved and served again.
//
// The router restores a deleted grant within milliseconds, faster than the gateway writes a
// status, so the grant is removed while the router is stopped (E2E_STOP_ROUTER) and the
// router is started again (E2E_START_ROUTER) once the gateway has reported it.
func TestGatewayReportsUnresolvedGrant(t *testing.T) {
	gw := gatewayURL(t)
	stop, start := os.Getenv("E2E_STOP_ROUTER"), os.Getenv("E2E_START_ROUTER")
	if stop == "" || start == "" {
		t.Skip("E2E_STOP_ROUTER and E2E_START_ROUTER are not set")
	}
	ctx := ctxFor(t, 5*time.Minute)
	ns := namespace(t)
	model := "e2e-grant-" + suffix()
	modelService(t, ns, model)
	startModel(ctx, t, 90*time.Second, ns, model, 1)
	route := model + "-router"
	waitRouteConditions(t, 60*time.Second, route, metav1.ConditionTrue)
	waitFor(t, maxRouteDelay, "a request for the model through the gateway", func() (bool, string) {
		a := complete(gw, "/v1/completions", model)
		return a.ok(), a.String()
	})

	var grants gatewayv1beta1.ReferenceGrantList
	if err := k8s.List(ctx, &grants, client.InNamespace(ns)); err != nil || len(grants.Items) != 1 {
		t.Fatalf("the router's ReferenceGrant in %s: %v, %d grants", ns, err, len(grants.Items))
	}
	grant := grants.Items[0]
	shell(t, stop)
	stopped := true
	t.Cleanup(func() {
		if stopped {
			shell(t, start)
		}
	})
	removed := time.Now()
	if err := k8s.Delete(ctx, &grant); err != nil {
		t.Fatal(err)
	}
	conds := waitRouteConditions(t, 60*time.Second, route, metav1.ConditionFalse)
	rr := conds[string(gatewayv1.RouteConditionResolvedRefs)]
	t.Logf("grant %s/%s removed → the gateway reports ResolvedRefs=False on %s after %.3f s: %s: %s",
		ns, grant.Name, route, time.Since(removed).Seconds(), rr.Reason, rr.Message)
	if rr.Reason != string(gatewayv1.RouteReasonRefNotPermitted) {
		t.Fatalf("ResolvedRefs reason %q, want %s", rr.Reason, gatewayv1.RouteReasonRefNotPermitted)
	}
	var failed gwAnswer
	waitFor(t, maxRouteDelay, "requests for the model failing without the grant", func() (bool, string) {
		failed = complete(gw, "/v1/completions", model)
		return failed.err == nil && failed.status != http.StatusOK, failed.String()
	})
	t.Logf("without the grant the gateway answers %d %q", failed.status, failed.body)

	// E2E_START_ROUTER returns once the replicas are Ready: by then the router has synced and
	// restored the grant, so the times are measured from the start command.
	started := time.Now()
	shell(t, start)
	stopped = false
	t.Logf("router start command returned after %.2f s", time.Since(started).Seconds())
	waitFor(t, 60*time.Second, "the router re-creating the grant", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(&grant), &gatewayv1beta1.ReferenceGrant{})
		return err == nil, fmt.Sprint(err)
	})
	waitRouteConditions(t, 60*time.Second, route, metav1.ConditionTrue)
	waitFor(t, maxRouteDelay, "requests for the model answered again", func() (bool, string) {
		a := complete(gw, "/v1/completions", model)
		return a.ok(), a.String()
	})
	t.Logf("router started → grant re-created, route resolved and served again after %.2f s", time.Since(started).Seconds())
}
