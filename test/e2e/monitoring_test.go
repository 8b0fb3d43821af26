//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The monitoring tests need a Prometheus that scrapes the controllers through deploy/prometheus
// (make e2e: Prometheus Operator on kind, test/e2e/kind/monitoring):
//
//	E2E_PROMETHEUS_URL   its HTTP API, e.g. http://127.0.0.1:29090
//	E2E_CONTROLLER_NAMESPACE  the controllers' namespace (default loraplane-system)

func prometheusURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("E2E_PROMETHEUS_URL")
	if u == "" {
		t.Skip("E2E_PROMETHEUS_URL is not set: no Prometheus Operator installation to check (make e2e runs one on kind)")
	}
	return strings.TrimSuffix(u, "/")
}

func controllerNamespace() string { return env("E2E_CONTROLLER_NAMESPACE", "loraplane-system") }

// promSample is one series of an instant query.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s promSample) value() string { v, _ := s.Value[1].(string); return v }

// promQuery runs an instant query through Prometheus's HTTP API.
func promQuery(base, q string) ([]promSample, error) {
	resp, err := http.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string       `json:"resultType"`
			Result     []promSample `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("query %q: %s: %w", q, resp.Status, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s", q, r.Error)
	}
	return r.Data.Result, nil
}

// controllerPods returns the names of a controller's pods.
func controllerPods(t *testing.T, name string) []string {
	t.Helper()
	var pods corev1.PodList
	if err := k8s.List(context.Background(), &pods, client.InNamespace(controllerNamespace()), client.MatchingLabels{"app.kubernetes.io/name": name}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	sort.Strings(out)
	return out
}

var syncCountLine = regexp.MustCompile(`^loraplane_cache_sync_duration_seconds_count\{([^}]*)\}`)
var labelPair = regexp.MustCompile(`(\w+)="([^"]*)"`)

// syncedResources returns the resources ("group/version/kind") a controller's own /metrics
// reports a sync duration for: what Prometheus must have for each of its pods.
func syncedResources(t *testing.T, metricsURL string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(scrape(t, metricsURL), "\n") {
		m := syncCountLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		l := map[string]string{}
		for _, p := range labelPair.FindAllStringSubmatch(m[1], -1) {
			l[p[1]] = p[2]
		}
		out = append(out, l["group"]+"/"+l["version"]+"/"+l["kind"])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestPrometheusScrapesControllers: the Prometheus Operator turns deploy/prometheus's
// ServiceMonitors into scrapes over verified TLS with the metrics reader's token: every
// controller pod (two replicas each) is up, and each has a sync duration for every resource
// its controller reads.
func TestPrometheusScrapesControllers(t *testing.T) {
	prom := prometheusURL(t)
	want := map[string][]string{}
	for name, env := range map[string]string{"adapter-controller": "E2E_ADAPTER_METRICS", "router-controller": "E2E_ROUTER_METRICS"} {
		pods := controllerPods(t, name)
		if len(pods) == 0 {
			t.Fatalf("no pods of %s", name)
		}
		want[name] = pods
		if os.Getenv(env) == "" {
			t.Fatalf("%s is not set: the resources %s reads are unknown", env, name)
		}
	}
	var allPods []string
	for _, p := range want {
		allPods = append(allPods, p...)
	}
	sort.Strings(allPods)

	ns := controllerNamespace()
	start := time.Now()
	waitFor(t, 3*time.Minute, fmt.Sprintf("up == 1 for the %d controller pods %v", len(allPods), allPods), func() (bool, string) {
		res, err := promQuery(prom, fmt.Sprintf(`up{namespace=%q}`, ns))
		if err != nil {
			return false, err.Error()
		}
		var up []string
		var state []string
		for _, s := range res {
			state = append(state, fmt.Sprintf("%s/%s=%s", s.Metric["job"], s.Metric["pod"], s.value()))
			if s.value() == "1" {
				up = append(up, s.Metric["pod"])
			}
		}
		sort.Strings(up)
		return slices.Equal(up, allPods), strings.Join(state, " ")
	})
	res, _ := promQuery(prom, fmt.Sprintf(`up{namespace=%q}`, ns))
	for _, s := range res {
		t.Logf("up{job=%q, pod=%q, instance=%q} = %s", s.Metric["job"], s.Metric["pod"], s.Metric["instance"], s.value())
	}
	t.Logf("all %d controller pods up in Prometheus %.1f s after the test started", len(allPods), time.Since(start).Seconds())

	// The targets are scraped over HTTPS (verified: the ServiceMonitors give the CA and the
	// server name, never insecureSkipVerify) without errors.
	targets := promTargets(t, prom)
	n := 0
	for _, tg := range targets {
		if tg.Labels["namespace"] != ns {
			continue
		}
		n++
		if !strings.HasPrefix(tg.ScrapeURL, "https://") || tg.Health != "up" || tg.LastError != "" {
			t.Errorf("target %s (%s): health %s, error %q", tg.ScrapePool, tg.ScrapeURL, tg.Health, tg.LastError)
		}
	}
	if n != len(allPods) {
		t.Errorf("%d active targets in %s, want %d", n, ns, len(allPods))
	}

	for name, env := range map[string]string{"adapter-controller": "E2E_ADAPTER_METRICS", "router-controller": "E2E_ROUTER_METRICS"} {
		resources := syncedResources(t, os.Getenv(env))
		if len(resources) == 0 {
			t.Fatalf("%s reports no loraplane_cache_sync_duration_seconds_count", name)
		}
		waitFor(t, time.Minute, fmt.Sprintf("loraplane_cache_sync_duration_seconds_count of %s for %v on each of %v", name, resources, want[name]), func() (bool, string) {
			res, err := promQuery(prom, fmt.Sprintf(`loraplane_cache_sync_duration_seconds_count{namespace=%q, controller=%q} >= 1`, ns, name))
			if err != nil {
				return false, err.Error()
			}
			have := map[string][]string{}
			for _, s := range res {
				r := s.Metric["group"] + "/" + s.Metric["version"] + "/" + s.Metric["kind"]
				have[s.Metric["pod"]] = append(have[s.Metric["pod"]], r)
			}
			var missing []string
			for _, pod := range want[name] {
				for _, r := range resources {
					if !slices.Contains(have[pod], r) {
						missing = append(missing, pod+":"+r)
					}
				}
			}
			return len(missing) == 0, fmt.Sprintf("missing %v", missing)
		})
		t.Logf("%s: loraplane_cache_sync_duration_seconds_count in Prometheus for %d resources %v on each of %v", name, len(resources), resources, want[name])
	}
}

type promTarget struct {
	Labels     map[string]string `json:"labels"`
	ScrapePool string            `json:"scrapePool"`
	ScrapeURL  string            `json:"scrapeUrl"`
	Health     string            `json:"health"`
	LastError  string            `json:"lastError"`
}

func promTargets(t *testing.T, base string) []promTarget {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/targets?state=active")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			ActiveTargets []promTarget `json:"activeTargets"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r.Data.ActiveTargets
}

type promAlert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
}

func promAlerts(base string) ([]promAlert, error) {
	resp, err := http.Get(base + "/api/v1/alerts")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	return r.Data.Alerts, nil
}

// ruleFor returns the `for` of an alerting rule loaded in Prometheus.
func ruleFor(t *testing.T, base, alert string) time.Duration {
	t.Helper()
	var d time.Duration
	waitFor(t, 2*time.Minute, "Prometheus loading the alert "+alert+" (PrometheusRule of deploy/prometheus)", func() (bool, string) {
		resp, err := http.Get(base + "/api/v1/rules?type=alert")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var r struct {
			Data struct {
				Groups []struct {
					Rules []struct {
						Name     string  `json:"name"`
						Duration float64 `json:"duration"`
					} `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return false, err.Error()
		}
		for _, g := range r.Data.Groups {
			for _, rule := range g.Rules {
				if rule.Name == alert {
					d = time.Duration(rule.Duration * float64(time.Second))
					return true, ""
				}
			}
		}
		return false, fmt.Sprintf("%d rule groups, none with %s", len(r.Data.Groups), alert)
	})
	return d
}

// requireCannotListHTTPRoutes: the Deployment's service account can no longer list HTTPRoutes
// in the gateway namespace (asked of the API server's authorizer), so the test's premise holds;
// another binding that still grants it (one an earlier installation left) is named at once
// instead of the alert never firing.
func requireCannotListHTTPRoutes(ctx context.Context, t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	sa := dep.Spec.Template.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	var reason string
	waitFor(t, 30*time.Second, "the Role change to reach the authorizer", func() (bool, string) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "system:serviceaccount:" + dep.Namespace + ":" + sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + dep.Namespace,
				"system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: gatewayNamespace(),
				Verb: "list", Group: "gateway.networking.k8s.io", Resource: "httproutes"},
		}}
		if err := k8s.Create(ctx, sar); err != nil {
			return false, err.Error()
		}
		reason = sar.Status.Reason
		return !sar.Status.Allowed, "still allowed: " + reason
	})
	if reason != "" {
		t.Logf("service account %s/%s may no longer list HTTPRoutes in %s (%s)", dep.Namespace, sa, gatewayNamespace(), reason)
	}
}

// TestSyncAlertFiresAndResolves: the sync alert of deploy/prometheus fires for real. The
// router-controller's Role in the gateway namespace (its only grant on HTTPRoutes) loses
// HTTPRoutes and the router is rolled out: the new pod cannot list HTTPRoutes, its cache
// never syncs, and LoraplaneCacheNotSynced fires for it (kind HTTPRoute) once its `for` has
// passed; the permission restored, the cache syncs and the alert resolves. The old replicas
// keep serving meanwhile (the rollout waits for the new pod).
func TestSyncAlertFiresAndResolves(t *testing.T) {
	prom := prometheusURL(t)
	const alert, kind, ctl = "LoraplaneCacheNotSynced", "HTTPRoute", "router-controller"
	// The Role is named after the release (the chart's full name), as kustomize's generated one.
	const roleName = "loraplane-" + ctl
	forDur := ruleFor(t, prom, alert)
	ctx := ctxFor(t, 12*time.Minute)

	key := client.ObjectKey{Namespace: gatewayNamespace(), Name: roleName}
	role := &rbacv1.Role{}
	if err := k8s.Get(ctx, key, role); err != nil {
		t.Fatal(err)
	}
	original := role.DeepCopy()
	restored := false
	restore := func() {
		cur := &rbacv1.Role{}
		if err := k8s.Get(context.Background(), key, cur); err != nil {
			t.Errorf("restoring the Role: %v", err)
			return
		}
		cur.Rules = original.Rules
		if err := k8s.Update(context.Background(), cur); err != nil {
			t.Errorf("restoring the Role: %v", err)
		}
		restored = true
	}
	t.Cleanup(func() {
		if !restored {
			restore()
		}
		waitRolledOut(t, ctl)
	})
	// A rule left without resources is invalid: it goes.
	removed := 0
	var kept []rbacv1.PolicyRule
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, "gateway.networking.k8s.io") && slices.Contains(r.Resources, "httproutes") {
			r.Resources = slices.DeleteFunc(slices.Clone(r.Resources), func(s string) bool { return s == "httproutes" })
			removed++
		}
		if len(r.Resources) > 0 {
			kept = append(kept, r)
		}
	}
	role.Rules = kept
	if removed == 0 {
		t.Fatalf("Role %s grants nothing on httproutes: %+v", key, role.Rules)
	}
	if err := k8s.Update(ctx, role); err != nil {
		t.Fatal(err)
	}
	dep := &appsv1.Deployment{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: controllerNamespace(), Name: ctl}, dep); err != nil {
		t.Fatal(err)
	}
	requireCannotListHTTPRoutes(ctx, t, dep)
	before := map[string]bool{}
	for _, p := range controllerPods(t, ctl) {
		before[p] = true
	}
	patch := client.MergeFrom(dep.DeepCopy())
	if dep.Spec.Template.Annotations == nil {
		dep.Spec.Template.Annotations = map[string]string{}
	}
	dep.Spec.Template.Annotations["loraplane.dev/e2e-restarted-at"] = time.Now().UTC().Format(time.RFC3339)
	if err := k8s.Patch(ctx, dep, patch); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	t.Logf("Role %s: httproutes removed from %d rule(s); %s rolled out", key, removed, ctl)

	var newPod string
	waitFor(t, 60*time.Second, "a new "+ctl+" pod", func() (bool, string) {
		for _, p := range controllerPods(t, ctl) {
			if !before[p] {
				newPod = p
				return true, ""
			}
		}
		return false, "none yet"
	})
	var firing promAlert
	state := func(a []promAlert) (promAlert, bool) {
		for _, x := range a {
			if x.Labels["alertname"] == alert && x.Labels["pod"] == newPod && x.Labels["kind"] == kind {
				return x, true
			}
		}
		return promAlert{}, false
	}
	waitFor(t, forDur+3*time.Minute, fmt.Sprintf("%s firing for pod %s, kind %s", alert, newPod, kind), func() (bool, string) {
		as, err := promAlerts(prom)
		if err != nil {
			return false, err.Error()
		}
		a, ok := state(as)
		firing = a
		return ok && a.State == "firing", fmt.Sprintf("%+v", a)
	})
	fired := time.Now()
	t.Logf("%s{pod=%q, kind=%q} firing %.1f s after the rollout (pending since %.1f s after it; for: %s; severity %s)",
		alert, newPod, kind, fired.Sub(restarted).Seconds(), firing.ActiveAt.Sub(restarted).Seconds(), forDur, firing.Labels["severity"])
	if pendingFor := fired.Sub(firing.ActiveAt); pendingFor < forDur {
		t.Fatalf("the alert fired %s after turning pending, before its for: %s", pendingFor, forDur)
	}
	// Pending starts at the pod's first scrape (a few seconds after it starts); firing follows
	// after `for` and at most an evaluation interval or two later.
	if d := fired.Sub(restarted); d > forDur+90*time.Second {
		t.Fatalf("the alert fired %s after the rollout: more than its for (%s) + 90 s", d, forDur)
	}

	restore()
	restoredAt := time.Now()
	waitFor(t, 3*time.Minute, fmt.Sprintf("%s for pod %s resolved", alert, newPod), func() (bool, string) {
		as, err := promAlerts(prom)
		if err != nil {
			return false, err.Error()
		}
		a, ok := state(as)
		return !ok, fmt.Sprintf("%+v", a)
	})
	t.Logf("Role restored → %s for pod %s resolved after %.1f s", alert, newPod, time.Since(restoredAt).Seconds())
	waitRolledOut(t, ctl)
	t.Logf("%s rolled out again %.1f s after the restore", ctl, time.Since(restoredAt).Seconds())
}

// waitRolledOut waits until every replica of the controller's Deployment is updated and available.
func waitRolledOut(t *testing.T, name string) {
	t.Helper()
	waitFor(t, 4*time.Minute, name+" rolled out", func() (bool, string) {
		d := &appsv1.Deployment{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: controllerNamespace(), Name: name}, d); err != nil {
			return false, err.Error()
		}
		s, want := d.Status, ptr.Deref(d.Spec.Replicas, 1)
		return s.ObservedGeneration == d.Generation && s.UpdatedReplicas == want && s.AvailableReplicas == want && s.Replicas == want,
			fmt.Sprintf("%+v", s)
	})
}
