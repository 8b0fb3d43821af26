package controller_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/router-controller/internal/controller"
	"github.com/loraplane/loraplane/router-controller/internal/routes"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/testenv"
)

// writeRequests sums client-go's rest_client_requests_total for the methods that write.
func writeRequests(t *testing.T) float64 {
	t.Helper()
	total := 0.0
	for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		v, err := testenv.MetricSum("rest_client_requests_total", map[string]string{"method": m})
		if err != nil {
			t.Fatal(err)
		}
		total += v
	}
	return total
}

// warnings returns the notes of the Warning events on the object name in ns.
func warnings(ctx context.Context, t *testing.T, ns, name string) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Type == corev1.EventTypeWarning {
			out = append(out, e.Reason+": "+e.Note)
		}
	}
	return out
}

// TestBadWorkloadInput: workloads with hostile model names, port labels and custom paths
// end in a route the HTTPRoute CRD accepts or in a Warning event on the workload, and the
// router then stops writing (no retry loop on a route the API server rejects). A non-ASCII
// model name is routed: the standard channel's CRD, installed here, admits it.
func TestBadWorkloadInput(t *testing.T) {
	needEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "bad")
	var many []string
	for i := range 200 {
		many = append(many, fmt.Sprintf("/p%d", i))
	}
	// Each input names its outcome: a route with that many paths, or none; and the Warning
	// (reason InvalidSource) whose note contains warning, or none.
	type input struct {
		name        string
		model       string // as the model annotation (label values cannot hold most of these)
		labels      map[string]string
		annotations map[string]string
		wantPaths   int    // paths of the route; 0: no route
		warning     string // part of the Warning's note; "": no Warning
	}
	d := len(routes.DefaultPaths) // the default --route-paths
	cases := []input{
		{name: "slash", model: "org/model", warning: `Service name "org/model" for model "org/model" is not a valid Service name`},
		{name: "upper", labels: modelLabels("UPPER"), warning: `Service name "UPPER" for model "UPPER" is not a valid Service name`},
		{name: "long", model: strings.Repeat("m", 300), warning: "is not a valid Service name"},
		{name: "unicode", model: "модель-模型-🦙", warning: `Service name "модель-模型-🦙" for model "модель-模型-🦙" is not a valid Service name`},
		{name: "unicode-svc", model: "模型", annotations: map[string]string{v1alpha1.ServiceNameAnnotation: "svc"}, wantPaths: d},
		{name: "control", model: "模型\u0085", annotations: map[string]string{v1alpha1.ServiceNameAnnotation: "svc"}, warning: "cannot be routed: must not contain control characters"},
		{name: "slash-svc", model: "org/model-" + ns, annotations: map[string]string{v1alpha1.ServiceNameAnnotation: "svc"}, wantPaths: d},
		{name: "long-svc", model: strings.Repeat("n", 300), annotations: map[string]string{v1alpha1.ServiceNameAnnotation: "svc"}, wantPaths: d},
		{name: "port-abc", labels: modelLabels("port-abc-"+ns, portKey, "abc"), wantPaths: d, warning: `value "abc" is not a decimal number; using 8000`},
		{name: "port-zero", labels: modelLabels("port-zero-"+ns, portKey, "0"), wantPaths: d, warning: `value "0" is out of range 1-65535; using 8000`},
		{name: "port-high", labels: modelLabels("port-high-"+ns, portKey, "70000"), wantPaths: d, warning: `value "70000" is out of range 1-65535; using 8000`},
		{name: "path-space", labels: modelLabels("path-space-" + ns), annotations: map[string]string{pathsKey: "/with space,/ok"}, wantPaths: d + 1, warning: `Ignoring custom path "/with space"`},
		{name: "path-dup", labels: modelLabels("path-dup-" + ns), annotations: map[string]string{pathsKey: "/a,/a, /a ,/a/"}, wantPaths: d + 2},
		{name: "path-admin", labels: modelLabels("path-admin-" + ns), annotations: map[string]string{pathsKey: "/V1/Load_LoRA_Adapter/,/ok"}, wantPaths: d + 1, warning: `Ignoring custom path "/V1/Load_LoRA_Adapter/" in annotation model.aibrix.ai/model-router-custom-paths: it would let gateway clients reach vLLM's endpoint /v1/load_lora_adapter`},
		{name: "path-relative", labels: modelLabels("path-rel-" + ns), annotations: map[string]string{pathsKey: "v1/chat"}, wantPaths: d, warning: `Ignoring custom path "v1/chat"`},
		{name: "path-200", labels: modelLabels("path-200-" + ns), annotations: map[string]string{pathsKey: strings.Join(many, ",")}, wantPaths: d + routes.MaxCustomPaths, warning: "Ignoring 136 custom paths"},
	}
	models := map[string]string{}
	for _, c := range cases {
		ann := map[string]string{}
		maps.Copy(ann, c.annotations)
		if c.model != "" {
			ann[nameKey] = c.model
		}
		createDeployment(t, ns, c.name, c.labels, ann)
		models[c.name] = c.model
		if c.model == "" {
			models[c.name] = c.labels[nameKey]
		}
	}
	startRouter(t, env.Config, gw, []string{ns})

	for _, c := range cases {
		model := models[c.name]
		eventually(t, fmt.Sprintf("the outcome of %s", c.name), func() error {
			route := getRoute(t, gw, routes.RouteName(model))
			warns := warnings(ctx, t, ns, c.name)
			switch {
			case c.wantPaths == 0 && route != nil:
				return fmt.Errorf("route %s exists, want none", route.Name)
			case c.wantPaths > 0 && route == nil:
				return fmt.Errorf("no route yet")
			case c.wantPaths > 0 && len(paths(route)) != c.wantPaths:
				return fmt.Errorf("route %s has %d paths, want %d", route.Name, len(paths(route)), c.wantPaths)
			case c.warning == "" && len(warns) > 0:
				return fmt.Errorf("Warning %q, want none", warns[0])
			case c.warning != "" && (len(warns) == 0 || !strings.HasPrefix(warns[0], "InvalidSource: ") || !strings.Contains(warns[0], c.warning)):
				return fmt.Errorf("Warnings %q, want InvalidSource containing %q", warns, c.warning)
			}
			return nil
		})
	}
	// Port problems fall back to the default port and say so.
	for _, c := range []string{"port-abc", "port-zero", "port-high"} {
		waitRoute(t, gw, models[c], wantBackends(fmt.Sprintf("0:%s/%s:8000", ns, models[c])))
		if len(warnings(ctx, t, ns, c)) == 0 {
			t.Errorf("%s: no Warning event", c)
		}
	}

	// Quiet period: once every workload has its outcome, nothing is written any more. The
	// router is made to look at every workload again first (a change that alters nothing it
	// reads, each counted as a reconcile; their Warning events are written again), then a
	// window follows in which a write retry loop would show.
	reconciles := testenv.ReconcileCount(controller.ControllerName)
	for _, c := range cases {
		patchMeta(t, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: c.name}}, nil, map[string]*string{"example.com/unrelated": ptr.To("x")})
	}
	eventually(t, "a reconcile of the changed workloads", func() error {
		if n := testenv.ReconcileCount(controller.ControllerName) - reconciles; n < float64(len(cases)) {
			return fmt.Errorf("%v reconciles counted since the change, want %d", n, len(cases))
		}
		return nil
	})
	time.Sleep(time.Second) // the Events of those reconciles
	before := writeRequests(t)
	const quiet = 4 * time.Second
	time.Sleep(quiet)
	writes := writeRequests(t) - before
	t.Logf("%v API writes in the %s after all %d bad workloads settled and were reconciled again", writes, quiet, len(cases))
	if writes > 2 {
		t.Errorf("%v API writes in %s with nothing changing: a write retry loop", writes, quiet)
	}
}
