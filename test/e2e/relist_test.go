//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
)

// TestWatchExpiredRelist: after writes the controllers do not watch have moved the revision
// past what they have seen, etcd is compacted at its current revision and the API server
// restarted: no watch can resume from a revision the controllers hold ("410 Gone"), so every
// informer must relist. Afterwards both controllers are ready, have not synced their caches
// again (a relist is not a new sync) and every cache is synced, new work converges, and none of
// the objects they had converged before is written again.
func TestWatchExpiredRelist(t *testing.T) {
	cmds := hooks(t, "E2E_RESTART_APISERVER_COMPACT", "E2E_ADAPTER_METRICS", "E2E_ROUTER_METRICS",
		"E2E_ADAPTER_READYZ", "E2E_ROUTER_READYZ", "E2E_ENGINE_ADMIN")
	restart := cmds[0]
	metricsURL := map[string]string{"adapter-controller": cmds[1], "router-controller": cmds[2]}
	readyz := map[string]string{"adapter-controller": cmds[3], "router-controller": cmds[4]}
	ctx := ctxFor(t, 5*time.Minute)
	ns := namespace(t)
	model := "e2e-expired-" + suffix()
	routedAdapter(ctx, t, ns, model, "before", 2)
	// What the controllers own, once nothing changes any more for 3 s.
	var before map[string]string
	waitFor(t, 60*time.Second, "the owned objects to settle", func() (bool, string) {
		a := ownedVersions(t, ns, model)
		time.Sleep(3 * time.Second)
		before = ownedVersions(t, ns, model)
		return maps.Equal(a, before), fmt.Sprintf("%v → %v", a, before)
	})
	counts := map[string]leaderCounts{}
	for name, url := range metricsURL {
		counts[name] = leaderMetrics(t, url)
	}

	// Writes the controllers do not watch move the revision past what they have seen.
	for i := range 10 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("revision-%d", i)}}
		if err := k8s.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	t.Log(shellOut(t, restart))
	back := time.Now()
	for name, check := range readyz {
		waitFor(t, 60*time.Second, name+" ready", func() (bool, string) { return probe(check) })
	}
	// Before new work: each controller reconciles the converged objects after the relist, so
	// "none written again" below covers passes that looked at them with the relisted cache,
	// not a controller that did nothing. A relist that finds an object unchanged hands it to
	// the handlers as a resync, which the router-controller's predicates rightly pass over
	// (nothing changed; on kind a fresh router then reconciled nothing for a minute), so the
	// model's Deployment gets an annotation no controller acts on: the router looks at the
	// model again, and must find nothing to write. The adapter-controller looks at every
	// adapter each inventory period.
	dep := &appsv1.Deployment{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: model}, dep); err != nil {
		t.Fatal(err)
	}
	touch := client.MergeFrom(dep.DeepCopy())
	metav1.SetMetaDataAnnotation(&dep.ObjectMeta, "e2e.loraplane.dev/after-relist", back.UTC().Format(time.RFC3339Nano))
	if err := k8s.Patch(ctx, dep, touch); err != nil {
		t.Fatal(err)
	}
	for name, url := range metricsURL {
		waitFor(t, 60*time.Second, name+" to reconcile after the relist", func() (bool, string) {
			now := leaderMetrics(t, url).reconciles
			return now > counts[name].reconciles, fmt.Sprintf("%v reconciles, %v before the restart", now, counts[name].reconciles)
		})
	}

	// New work converges after the relist: a model with an adapter in another namespace (in
	// this one, the namespace's ReferenceGrant would rightly change with it).
	ns2 := namespace(t)
	model2 := "e2e-expired2-" + suffix()
	routedAdapter(ctx, t, ns2, model2, "after", 1)
	converged := time.Since(back)

	for name, url := range metricsURL {
		now := leaderMetrics(t, url)
		if now.syncs != counts[name].syncs {
			t.Errorf("%s counted %v cache syncs after the relist, %v before: a relist is not a new sync (or the process restarted)",
				name, now.syncs, counts[name].syncs)
		}
		if now.unsynced != 0 {
			t.Errorf("%s reports %d caches not synced", name, now.unsynced)
		}
		t.Logf("%s: cache syncs %v before and after, every cache synced", name, now.syncs)
	}
	if after := ownedVersions(t, ns, model); !maps.Equal(after, before) {
		var changed []string
		for k, v := range before {
			if after[k] != v {
				changed = append(changed, fmt.Sprintf("%s %s→%s", k, v, after[k]))
			}
		}
		slices.Sort(changed)
		t.Errorf("objects converged before the restart were written again after the relist: %v", changed)
	}
	t.Logf("new work converged %s after the API server was back; %d objects owned before it, none written again",
		converged.Round(100*time.Millisecond), len(before))
}

// routedAdapter starts a model of n pods with one adapter and waits until the adapter runs on
// every pod behind its Service and EndpointSlice and both the model and the adapter are routed.
func routedAdapter(ctx context.Context, t *testing.T, ns, model, adapter string, n int) {
	t.Helper()
	pods := startModel(ctx, t, 90*time.Second, ns, model, n)
	if err := k8s.Create(ctx, loraAdapter(ns, adapter, model)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, "adapter "+adapter+" running with its Service, EndpointSlice and routes", func() (bool, string) {
		if ok, state := adapterState(t, ns, pods, []string{adapter}, nil); !ok {
			return false, state
		}
		for _, r := range []string{model + "-router", adapter + "-router"} {
			if err := routeErr(r); err != nil {
				return false, fmt.Sprintf("route %s: %v", r, err)
			}
		}
		return true, ""
	})
}

// ownedVersions returns the resourceVersions of what the controllers own for the adapter
// "before" and the model: the ModelAdapter (status), its Service and EndpointSlices, both
// routes, and the namespace's ReferenceGrants.
func ownedVersions(t *testing.T, ns, model string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	get := func(key client.ObjectKey, obj client.Object) {
		if err := k8s.Get(ctx, key, obj); err != nil {
			t.Fatalf("%T %s: %v", obj, key, err)
		}
		out[fmt.Sprintf("%T %s", obj, key)] = obj.GetResourceVersion()
	}
	a, err := adapterStatus(ns, "before")
	if err != nil {
		t.Fatal(err)
	}
	out["ModelAdapter before"] = a.ResourceVersion
	get(client.ObjectKey{Namespace: ns, Name: "before"}, &corev1.Service{})
	for _, r := range []string{model + "-router", "before-router"} {
		get(client.ObjectKey{Namespace: gatewayNamespace(), Name: r}, &gatewayv1.HTTPRoute{})
	}
	var slices discoveryv1.EndpointSliceList
	if err := k8s.List(ctx, &slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: "before"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range slices.Items {
		out["EndpointSlice "+s.Name] = s.ResourceVersion
	}
	var grants gatewayv1beta1.ReferenceGrantList
	if err := k8s.List(ctx, &grants, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, g := range grants.Items {
		out["ReferenceGrant "+g.Name] = g.ResourceVersion
	}
	return out
}

type leaderCounts struct {
	syncs      float64 // loraplane_cache_sync_duration_seconds_count summed over the resources
	unsynced   int     // resources whose cache_synced is not 1 (skipped optional ones aside)
	reconciles float64 // controller_runtime_reconcile_total summed over controllers and results
}

// leaderMetrics scrapes the leader's metrics: where url leads to every replica (kind's
// NodePort), it scrapes until leader_election_master_status says the answer is the leader's.
func leaderMetrics(t *testing.T, url string) leaderCounts {
	t.Helper()
	var body string
	waitFor(t, 30*time.Second, "an answer from the leader at "+url, func() (bool, string) {
		body = scrape(t, url)
		return leaderIn(body), "a standby answered"
	})
	var c leaderCounts
	skipped, notSynced := map[string]bool{}, map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		labels := line[strings.Index(line, "{")+1 : max(strings.Index(line, "}"), strings.Index(line, "{")+1)]
		switch {
		case strings.HasPrefix(line, "loraplane_cache_sync_duration_seconds_count{"):
			c.syncs += v
		case strings.HasPrefix(line, "controller_runtime_reconcile_total{"):
			c.reconciles += v
		case strings.HasPrefix(line, "loraplane_cache_synced{") && v != 1:
			notSynced[labels] = true
		case strings.HasPrefix(line, "loraplane_cache_resource_skipped{") && v == 1:
			skipped[labels] = true // an optional API not served: not synced by design
		}
	}
	for labels := range notSynced {
		if !skipped[labels] {
			c.unsynced++
		}
	}
	return c
}

func leaderIn(body string) bool {
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "leader_election_master_status{") && strings.HasSuffix(line, " 1") {
			return true
		}
	}
	return false
}
