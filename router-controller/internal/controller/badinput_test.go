package controller_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/modelplane/modelplane/router-controller/internal/routes"
	v1alpha1 "github.com/modelplane/modelplane/shared/api/model/v1alpha1"
	"github.com/modelplane/modelplane/test/testenv"
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
// router then stops writing (no retry loop on a route the API server rejects).
func TestBadWorkloadInput(t *testing.T) {
	needEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "bad")
	var many []string
	for i := range 200 {
		many = append(many, fmt.Sprintf("/p%d", i))
	}
	type input struct {
		name        string
		model       string // as the model annotation (label values cannot hold most of these)
		labels      map[string]string
		annotations map[string]string
	}
	cases := []input{
		{name: "slash", model: "org/model"},
		{name: "upper", labels: modelLabels("UPPER")},
		{name: "long", model: strings.Repeat("m", 300)},
		{name: "unicode", model: "модель-模型-🦙"},
		{name: "slash-svc", model: "org/model-" + ns, annotations: map[string]string{v1alpha1.ServiceNameAnnotation: "svc"}},
		{name: "long-svc", model: strings.Repeat("n", 300), annotations: map[string]string{v1alpha1.ServiceNameAnnotation: "svc"}},
		{name: "port-abc", labels: modelLabels("port-abc-"+ns, portKey, "abc")},
		{name: "port-zero", labels: modelLabels("port-zero-"+ns, portKey, "0")},
		{name: "port-high", labels: modelLabels("port-high-"+ns, portKey, "70000")},
		{name: "path-space", labels: modelLabels("path-space-" + ns), annotations: map[string]string{pathsKey: "/with space,/ok"}},
		{name: "path-dup", labels: modelLabels("path-dup-" + ns), annotations: map[string]string{pathsKey: "/a,/a, /a ,/a/"}},
		{name: "path-relative", labels: modelLabels("path-rel-" + ns), annotations: map[string]string{pathsKey: "v1/chat"}},
		{name: "path-200", labels: modelLabels("path-200-" + ns), annotations: map[string]string{pathsKey: strings.Join(many, ",")}},
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
		var outcome string
		eventually(t, fmt.Sprintf("a route or a Warning event for %s", c.name), func() error {
			route := getRoute(t, gw, routes.RouteName(model))
			warns := warnings(ctx, t, ns, c.name)
			switch {
			case route != nil && len(warns) > 0:
				outcome = fmt.Sprintf("route %s (backends %v, %d paths) and Warning %q", route.Name, backends(route), len(paths(route)), warns[0])
			case route != nil:
				outcome = fmt.Sprintf("route %s (backends %v, %d paths)", route.Name, backends(route), len(paths(route)))
			case len(warns) > 0:
				outcome = fmt.Sprintf("no route, Warning %q", warns[0])
			default:
				return fmt.Errorf("neither yet")
			}
			return nil
		})
		if len(outcome) > 300 {
			outcome = outcome[:300] + "..."
		}
		t.Logf("%s: %s", c.name, outcome)
	}
	// Port problems fall back to the default port and say so.
	for _, c := range []string{"port-abc", "port-zero", "port-high"} {
		waitRoute(t, gw, models[c], wantBackends(fmt.Sprintf("0:%s/%s:8000", ns, models[c])))
		if len(warnings(ctx, t, ns, c)) == 0 {
			t.Errorf("%s: no Warning event", c)
		}
	}

	// Quiet period: once every workload has its outcome, nothing is written any more.
	time.Sleep(time.Second)
	before := writeRequests(t)
	const quiet = 4 * time.Second
	time.Sleep(quiet)
	writes := writeRequests(t) - before
	t.Logf("%v API writes in the %s after all %d bad workloads settled", writes, quiet, len(cases))
	if writes > 2 {
		t.Errorf("%v API writes in %s with nothing changing: a write retry loop", writes, quiet)
	}
}
