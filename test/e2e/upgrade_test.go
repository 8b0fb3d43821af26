//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// fleet is what TestUpgradeRollback runs through the rollouts: models with pods, adapters on
// them, and the names the gateway routes.
type fleet struct {
	ns       string
	models   map[string]int    // model -> pods
	adapters map[string]string // adapter -> model
	replicas map[string]int32  // adapter -> spec.replicas (absent: every pod)
}

// routed are the names a request may carry: every model and adapter.
func (f fleet) routed() []string {
	var out []string
	for m := range f.models {
		out = append(out, m)
	}
	for a := range f.adapters {
		out = append(out, a)
	}
	return out
}

// TestUpgradeRollback: a fleet brought up by the previous release survives the upgrade to the
// current build and the rollback to the previous release, each a Deployment-like rollout of
// one controller after the other with leader election handover and the release's manifests
// applied (the install manifest with kubectl, the chart with helm upgrade): no engine load or
// unload call, no HTTPRoute or ReferenceGrant deleted or created again, every adapter Running
// on the same pods, and every request through the gateway (kwok: the test's own routing of
// the controllers' objects, localGateway) and to each adapter's engines answered.
//
// E2E_ROLLOUT_PREVIOUS and E2E_ROLLOUT_CURRENT are the commands that roll the cluster to each
// release (make e2e-local: hack/rollout.sh; make e2e: hack/e2e-kind-rollout.sh, the way the
// installation at hand upgrades: kubectl apply or helm upgrade).
func TestUpgradeRollback(t *testing.T) {
	previous, current := os.Getenv("E2E_ROLLOUT_PREVIOUS"), os.Getenv("E2E_ROLLOUT_CURRENT")
	if previous == "" || current == "" {
		t.Skip("E2E_ROLLOUT_PREVIOUS and E2E_ROLLOUT_CURRENT are not set")
	}
	if !haveEngineAdmin() {
		t.Skip("E2E_ENGINE_ADMIN is not set: the engines' load and unload calls cannot be counted")
	}
	// Whatever happens, the cluster ends on the current build for the tests after this one.
	t.Cleanup(func() { shell(t, current) })
	timed(t, "rollout to the previous release", func() { t.Log(shell(t, previous)) })

	ctx := ctxFor(t, 10*time.Minute)
	sfx := suffix()
	f := fleet{
		ns:       namespace(t),
		models:   map[string]int{"upg-a-" + sfx: 3, "upg-b-" + sfx: 2},
		adapters: map[string]string{"upg-a1-" + sfx: "upg-a-" + sfx, "upg-a2-" + sfx: "upg-a-" + sfx, "upg-b1-" + sfx: "upg-b-" + sfx},
		replicas: map[string]int32{"upg-a2-" + sfx: 2},
	}
	timed(t, "the fleet under the previous release", func() { startFleet(ctx, t, f) })

	for _, step := range []struct{ name, cmd string }{{"upgrade to the current build", current}, {"rollback to the previous release", previous}} {
		t.Run(strings.Fields(step.name)[0], func(t *testing.T) { rolloutKeeps(t, f, step.name, step.cmd) })
	}
}

// timed runs fn and logs how long it took.
func timed(t *testing.T, what string, fn func()) {
	t.Helper()
	start := time.Now()
	fn()
	t.Logf("%s: %s", what, time.Since(start).Round(100*time.Millisecond))
}

// startFleet creates the fleet's models (with their Services), adapters, and waits until every
// adapter runs where it should and every name answers through the gateway.
func startFleet(ctx context.Context, t *testing.T, f fleet) {
	t.Helper()
	for m, n := range f.models {
		modelService(t, f.ns, m)
		startModel(ctx, t, 90*time.Second, f.ns, m, n)
	}
	for a, m := range f.adapters {
		ma := loraAdapter(f.ns, a, m)
		if r, ok := f.replicas[a]; ok {
			ma.Spec.Replicas = ptr.To(r)
		}
		if err := k8s.Create(ctx, ma); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 2*time.Minute, "every adapter Running on its pods and every name answered through the gateway", func() (bool, string) {
		if ok, why := fleetRunning(t, f); !ok {
			return false, why
		}
		for _, name := range f.routed() {
			if a := viaAIBrixPlugin(t, name+"-router", name); !a.ok() || a.model != name {
				return false, fmt.Sprintf("%s through the gateway: %s", name, a)
			}
		}
		return true, ""
	})
}

// fleetRunning: every adapter Running with as many instances as it wants, each instance's
// engine holding it.
func fleetRunning(t *testing.T, f fleet) (bool, string) {
	es := engines(t)
	for a, m := range f.adapters {
		ma, err := adapterStatus(f.ns, a)
		if err != nil {
			return false, err.Error()
		}
		want := int32(f.models[m])
		if r, ok := f.replicas[a]; ok {
			want = r
		}
		if ma.Status.Phase != v1alpha1.ModelAdapterRunning || ma.Status.ReadyReplicas != want || len(ma.Status.Instances) != int(want) {
			return false, fmt.Sprintf("adapter %s: %s, %d/%d ready, instances %v", a, ma.Status.Phase, ma.Status.ReadyReplicas, want, ma.Status.Instances)
		}
		for _, pod := range ma.Status.Instances {
			if e := es[f.ns+"/"+pod]; !slices.Contains(e.Loaded, a) {
				return false, fmt.Sprintf("adapter %s is an instance of %s, whose engine holds %v", a, pod, e.Loaded)
			}
		}
	}
	return true, ""
}

// fleetSnapshot is what a rollout must leave as it was.
type fleetSnapshot struct {
	counts    map[string][2]int   // engine (ns/pod) -> loads, unloads
	lists     map[string]int      // engine -> model list calls (the adapter-controller's inventory)
	instances map[string][]string // adapter -> instances
	uids      map[string]string   // "HTTPRoute name" / "ReferenceGrant name" -> uid
	gens      map[string]int64    // the same keys -> metadata.generation
	versions  map[string]string   // the lists' resourceVersions to watch from, by kind
}

func snapshot(t *testing.T, f fleet) fleetSnapshot {
	t.Helper()
	s := fleetSnapshot{counts: map[string][2]int{}, lists: map[string]int{}, instances: map[string][]string{}, uids: map[string]string{}, gens: map[string]int64{}, versions: map[string]string{}}
	for key, e := range engines(t) {
		if strings.HasPrefix(key, f.ns+"/") {
			s.counts[key] = [2]int{e.Counts.Loads, e.Counts.Unloads}
			s.lists[key] = e.Counts.Lists
		}
	}
	for a := range f.adapters {
		ma, err := adapterStatus(f.ns, a)
		if err != nil {
			t.Fatal(err)
		}
		s.instances[a] = ma.Status.Instances
	}
	ctx := context.Background()
	var routes gatewayv1.HTTPRouteList
	if err := k8s.List(ctx, &routes, client.InNamespace(gatewayNamespace())); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, n := range f.routed() {
		names[n+"-router"] = true
	}
	for _, r := range routes.Items {
		if names[r.Name] {
			s.uids["HTTPRoute "+r.Name] = string(r.UID)
			s.gens["HTTPRoute "+r.Name] = r.Generation
		}
	}
	var grants gatewayv1beta1.ReferenceGrantList
	if err := k8s.List(ctx, &grants, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	for _, g := range grants.Items {
		s.uids["ReferenceGrant "+g.Name] = string(g.UID)
	}
	if len(s.uids) != len(names)+len(grants.Items) || len(grants.Items) == 0 {
		t.Fatalf("the fleet's routes and grants are not all there: %v", s.uids)
	}
	s.versions["HTTPRoute"], s.versions["ReferenceGrant"] = routes.ResourceVersion, grants.ResourceVersion
	return s
}

// rolloutKeeps runs one rollout command while watching the fleet's routes and grants and
// sending requests through the gateway and to each adapter's engines, then checks that the
// rollout changed nothing the fleet serves with.
func rolloutKeeps(t *testing.T, f fleet, what, cmd string) {
	before := snapshot(t, f)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var changes []string
	record := func(s string) { mu.Lock(); changes = append(changes, s); mu.Unlock() }
	for kind, list := range map[string]client.ObjectList{"HTTPRoute": &gatewayv1.HTTPRouteList{}, "ReferenceGrant": &gatewayv1beta1.ReferenceGrantList{}} {
		ns := gatewayNamespace()
		if kind == "ReferenceGrant" {
			ns = f.ns
		}
		wg.Add(1)
		go func() { defer wg.Done(); watchIdentity(ctx, kind, ns, before, list, record) }()
	}
	p := &prober{}
	wg.Add(1)
	go func() { defer wg.Done(); p.run(ctx, t, f, before.instances) }()

	start := time.Now()
	t.Log(shell(t, cmd))
	rolled := time.Since(start)
	// The new adapter-controller looked at every engine: two more inventory lists on each
	// after the old one stopped (the roll returns once the new replica leads).
	afterRoll := engines(t)
	waitFor(t, 30*time.Second+4*inventoryPeriod(t), "two inventory rounds of the new adapter-controller on every engine of the fleet", func() (bool, string) {
		now := engines(t)
		for key := range before.lists {
			if now[key].Counts.Lists < afterRoll[key].Counts.Lists+2 {
				return false, fmt.Sprintf("%s: %d lists since the roll", key, now[key].Counts.Lists-afterRoll[key].Counts.Lists)
			}
		}
		return true, ""
	})
	routerLooked(t, len(before.uids))
	stop()
	wg.Wait()
	t.Logf("%s: rolled in %s, watched and probed for %s: %s", what, rolled.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond), p.summary())

	after := snapshot(t, f)
	for key, c := range before.counts {
		if after.counts[key] != c {
			t.Errorf("%s: engine %s was called to load or unload: loads,unloads %v -> %v", what, key, c, after.counts[key])
		}
	}
	for a, inst := range before.instances {
		if strings.Join(after.instances[a], ",") != strings.Join(inst, ",") {
			t.Errorf("%s: adapter %s moved: instances %v -> %v", what, a, inst, after.instances[a])
		}
	}
	rewritten := 0
	for key, uid := range before.uids {
		if after.uids[key] != uid {
			t.Errorf("%s: %s was created again: uid %s -> %s", what, key, uid, after.uids[key])
		}
		if after.gens[key] != before.gens[key] {
			rewritten++
		}
	}
	t.Logf("%s: %d of the fleet's %d routes were updated in place (same uid, new generation)", what, rewritten, len(before.gens))
	for _, c := range changes {
		t.Errorf("%s: %s", what, c)
	}
	if ok, why := fleetRunning(t, f); !ok {
		t.Errorf("%s: the fleet is not all Running after it: %s", what, why)
	}
	if msg := p.failed(); msg != "" {
		t.Errorf("%s: requests failed during the rollout: %s", what, msg)
	}
}

// watchIdentity watches one kind from the snapshot's resourceVersion and records every
// deletion of a fleet object and every object of the fleet's names created with a new uid.
func watchIdentity(ctx context.Context, kind, ns string, before fleetSnapshot, list client.ObjectList, record func(string)) {
	rv := before.versions[kind]
	for ctx.Err() == nil {
		w, err := k8s.Watch(ctx, list, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
		if err != nil {
			if ctx.Err() == nil {
				record(fmt.Sprintf("watching %s in %s: %v", kind, ns, err))
			}
			return
		}
		for ev := range w.ResultChan() {
			obj, ok := ev.Object.(client.Object)
			if !ok {
				// The watch ends with an error event when the test stops it: not a finding.
				if st, isStatus := ev.Object.(*metav1.Status); isStatus && ctx.Err() == nil {
					record(fmt.Sprintf("watch of %s in %s ended: %s", kind, ns, st.Message))
				}
				continue
			}
			rv = obj.GetResourceVersion()
			key := kind + " " + obj.GetName()
			uid, fleetObject := before.uids[key]
			switch {
			case !fleetObject || ev.Type == watch.Bookmark:
			case ev.Type == watch.Deleted:
				record(fmt.Sprintf("%s was deleted", key))
			case string(obj.GetUID()) != uid:
				record(fmt.Sprintf("%s was created again (%s, uid %s, was %s)", key, ev.Type, obj.GetUID(), uid))
			}
		}
		w.Stop()
	}
}

// routerLooked waits until the router-controller that leads now has reconciled at least as
// many keys as the fleet has routes and grants, and its queues are empty.
func routerLooked(t *testing.T, objects int) {
	t.Helper()
	urls := []string{os.Getenv("E2E_ROUTER_METRICS"), os.Getenv("E2E_ROUTER_STANDBY_METRICS")}
	waitFor(t, 60*time.Second, fmt.Sprintf("the leading router-controller (of %v) reconciled at least %d keys with empty queues", urls, objects), func() (bool, string) {
		for _, u := range urls {
			body, ok := leaderBody(u)
			if !ok {
				continue
			}
			reconciles, depth := 0.0, 0.0
			for _, line := range strings.Split(body, "\n") {
				v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
				if err != nil {
					continue
				}
				switch {
				case strings.HasPrefix(line, "controller_runtime_reconcile_total{"):
					reconciles += v
				case strings.HasPrefix(line, "workqueue_depth{"):
					depth += v
				}
			}
			return reconciles >= float64(objects) && depth == 0, fmt.Sprintf("%s: %g reconciles, queue depth %g", u, reconciles, depth)
		}
		return false, "no replica leads"
	})
}

// leaderBody scrapes url and reports whether the replica there leads.
func leaderBody(url string) (string, bool) {
	body, err := fetchMetrics(url)
	if err != nil {
		return "", false
	}
	return body, leaderIn(body)
}

// prober sends, in rounds until its context ends, a completion for every model and adapter
// through the gateway and one for every adapter to each engine it was loaded on.
type prober struct {
	mu       sync.Mutex
	rounds   int
	gateway  int
	engine   int
	failures []string
}

func (p *prober) run(ctx context.Context, t *testing.T, f fleet, instances map[string][]string) {
	for ctx.Err() == nil {
		for _, name := range f.routed() {
			if a := viaAIBrixPlugin(t, name+"-router", name); !a.ok() || a.model != name {
				p.fail(fmt.Sprintf("%s %s through the gateway: %s", time.Now().Format("15:04:05.000"), name, a))
			}
			p.count(&p.gateway)
		}
		for a, inst := range instances {
			for _, pod := range inst {
				if err := completeOn(ctx, f.ns, pod, a); err != nil && ctx.Err() == nil {
					p.fail(fmt.Sprintf("%s %s on %s: %v", time.Now().Format("15:04:05.000"), a, pod, err))
				}
				p.count(&p.engine)
			}
		}
		p.count(&p.rounds)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (p *prober) count(n *int) { p.mu.Lock(); *n++; p.mu.Unlock() }

func (p *prober) fail(s string) { p.mu.Lock(); p.failures = append(p.failures, s); p.mu.Unlock() }

func (p *prober) summary() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("%d rounds, %d requests through the gateway and %d to the adapters' engines, %d failed", p.rounds, p.gateway, p.engine, len(p.failures))
}

func (p *prober) failed() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.failures) == 0 {
		return ""
	}
	return fmt.Sprintf("%d, first: %s", len(p.failures), strings.Join(p.failures[:min(5, len(p.failures))], "; "))
}

// completeOn sends a completion for adapter to the engine of the pod, through the engine admin
// API's complete call (E2E_ENGINE_ADMIN: the host-mode fake engine on kwok, the aggregator on
// kind), which sends it to that engine's inference API over HTTP.
func completeOn(ctx context.Context, ns, pod, adapter string) error {
	body, _ := json.Marshal(map[string]any{"model": adapter, "prompt": "hello", "max_tokens": 4})
	url := os.Getenv("E2E_ENGINE_ADMIN") + "/engines/" + ns + "/" + pod + "/complete"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := gwClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return nil
}
