//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/testenv"
)

// hooks returns the commands in the named environment variables (set by make e2e-local),
// skipping the test when one is missing: on kind the processes are Pods and these faults
// are not injected.
func hooks(t *testing.T, names ...string) []string {
	t.Helper()
	out := make([]string, len(names))
	for i, n := range names {
		if out[i] = os.Getenv(n); out[i] == "" {
			t.Skipf("%s is not set (make e2e-local sets it)", n)
		}
	}
	return out
}

// shellOut runs cmd with bash and returns its trimmed output, failing the test on error.
func shellOut(t *testing.T, cmd string) string {
	t.Helper()
	out, err := exec.Command("bash", "-c", cmd).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	return strings.TrimSpace(string(out))
}

// setEngineFault installs a fault on the fake engine of every pod through the admin API
// (body as the admin API takes it), or clears it when body is empty.
func setEngineFault(t *testing.T, ns string, pods []corev1.Pod, body string) {
	t.Helper()
	admin := os.Getenv("E2E_ENGINE_ADMIN")
	for _, p := range pods {
		method := http.MethodPost
		if body == "" {
			method = http.MethodDelete
		}
		req, err := http.NewRequest(method, admin+"/engines/"+ns+"/"+p.Name+"/fault", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("engine fault on %s: %v", p.Name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("engine fault on %s: %s", p.Name, resp.Status)
		}
	}
}

// waitEngines waits until the fake engine serves every pod.
func waitEngines(t *testing.T, ns string, pods []corev1.Pod) {
	t.Helper()
	waitFor(t, 30*time.Second, "a fake engine on every pod", func() (bool, string) {
		es := engines(t)
		for _, p := range pods {
			if _, ok := es[ns+"/"+p.Name]; !ok {
				return false, "no engine for " + p.Name
			}
		}
		return true, ""
	})
}

func loraAdapter(ns, name, model string) *v1alpha1.ModelAdapter {
	return &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.ModelAdapterSpec{
			BaseModel:   ptr.To(model),
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.ModelNameLabel: model, v1alpha1.AdapterEnabledLabel: "true"}},
			ArtifactURL: "huggingface://org/" + name,
		},
	}
}

// adapterState compares the cluster and the engines with what should be there: every
// adapter of want Running on all pods, loaded on exactly those pods, behind exactly one
// Service and one EndpointSlice (with one endpoint per pod); adapters in gone deleted and
// loaded nowhere; and no other Service or EndpointSlice in the namespace.
func adapterState(t *testing.T, ns string, pods []corev1.Pod, want, gone []string) (bool, string) {
	ctx := context.Background()
	for _, name := range want {
		a, err := adapterStatus(ns, name)
		if err != nil || a.Status.Phase != v1alpha1.ModelAdapterRunning || int(a.Status.ReadyReplicas) != len(pods) {
			return false, fmt.Sprintf("adapter %s: %v %s %d/%d", name, err, a.Status.Phase, a.Status.ReadyReplicas, len(pods))
		}
	}
	for _, name := range gone {
		if _, err := adapterStatus(ns, name); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("deleted adapter %s still exists (%v)", name, err)
		}
	}
	es := engines(t)
	for _, p := range pods {
		loaded := es[ns+"/"+p.Name].Loaded
		for _, name := range want {
			if !slices.Contains(loaded, name) {
				return false, fmt.Sprintf("%s not loaded on %s", name, p.Name)
			}
		}
		for _, name := range loaded {
			if !slices.Contains(want, name) {
				return false, fmt.Sprintf("%s holds %s, which it should not", p.Name, name)
			}
		}
	}
	var svcs corev1.ServiceList
	if err := k8s.List(ctx, &svcs, client.InNamespace(ns)); err != nil {
		return false, err.Error()
	}
	var epSlices discoveryv1.EndpointSliceList
	if err := k8s.List(ctx, &epSlices, client.InNamespace(ns)); err != nil {
		return false, err.Error()
	}
	var svcNames, sliceNames []string
	for _, s := range svcs.Items {
		svcNames = append(svcNames, s.Name)
	}
	for _, s := range epSlices.Items {
		sliceNames = append(sliceNames, s.Name)
		if len(s.Endpoints) != len(pods) {
			return false, fmt.Sprintf("EndpointSlice %s has %d endpoints, want %d", s.Name, len(s.Endpoints), len(pods))
		}
	}
	slices.Sort(svcNames)
	slices.Sort(sliceNames)
	sorted := slices.Sorted(slices.Values(want))
	if !slices.Equal(svcNames, sorted) || !slices.Equal(sliceNames, sorted) {
		return false, fmt.Sprintf("Services %v, EndpointSlices %v; want exactly %v", svcNames, sliceNames, sorted)
	}
	return true, ""
}

// TestAdapterControllerKilledMidLoad: the adapter-controller gets SIGKILL while it loads 20
// adapters on 10 pods (engines act on a load at once and answer 1 s later). While it is down
// the five adapters with the most loads on the engines are deleted.
// After a restart (which has to wait for the unreleased lease) the 15 left run everywhere,
// the 5 deleted ones are unloaded everywhere and gone, and there is exactly one Service and
// one EndpointSlice per adapter.
func TestAdapterControllerKilledMidLoad(t *testing.T) {
	cmds := hooks(t, "E2E_KILL_ADAPTER", "E2E_START_ADAPTER", "E2E_ENGINE_ADMIN")
	kill, start := cmds[0], cmds[1]
	ctx := ctxFor(t, 6*time.Minute)
	ns := namespace(t)
	model := "e2e-kill-" + suffix()
	pods := startModel(ctx, t, 90*time.Second, ns, model, 10)
	// Engines act on a load at once and answer 1 s later: a process killed meanwhile never
	// learns which loads happened.
	setEngineFault(t, ns, pods, `{"op":"load","stall":"1s"}`)

	const total, deleted = 20, 5
	var names []string
	for i := range total {
		names = append(names, fmt.Sprintf("kill-%02d", i))
		if err := k8s.Create(ctx, loraAdapter(ns, names[i], model)); err != nil {
			t.Fatal(err)
		}
	}
	// held counts the loads each adapter has on the engines.
	held := func() map[string]int {
		out := map[string]int{}
		es := engines(t)
		for _, p := range pods {
			for _, name := range es[ns+"/"+p.Name].Loaded {
				out[name]++
			}
		}
		return out
	}
	running := func() int {
		n := 0
		for _, name := range names {
			if a, err := adapterStatus(ns, name); err == nil && a.Status.Phase == v1alpha1.ModelAdapterRunning && a.Status.ReadyReplicas == 10 {
				n++
			}
		}
		return n
	}
	var loadsAtKill int
	waitFor(t, 60*time.Second, "the first loads", func() (bool, string) {
		loadsAtKill = 0
		for _, n := range held() {
			loadsAtKill += n
		}
		return loadsAtKill >= 30, fmt.Sprintf("%d loads", loadsAtKill)
	})
	shell(t, kill)
	killed := time.Now()
	runningAtKill := running()
	if runningAtKill == total {
		t.Fatalf("all %d adapters ran before the kill (%d loads): nothing was killed mid-load", total, loadsAtKill)
	}
	setEngineFault(t, ns, pods, "")
	// Delete the adapters with the most loads on the engines: deleting them while the
	// controller is down is what once leaked them there.
	atKill := held()
	byLoads := slices.Clone(names)
	slices.SortStableFunc(byLoads, func(a, b string) int { return atKill[b] - atKill[a] })
	gone := byLoads[:deleted]
	var kept []string
	heldByDeleted := 0
	for _, name := range names {
		if slices.Contains(gone, name) {
			heldByDeleted += atKill[name]
		} else {
			kept = append(kept, name)
		}
	}
	for _, name := range gone {
		if err := k8s.Delete(ctx, &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	shell(t, start)
	restarted := time.Now()
	waitFor(t, 3*time.Minute, "15 adapters on all 10 pods, 5 gone and unloaded, one Service and EndpointSlice each", func() (bool, string) {
		return adapterState(t, ns, pods, kept, gone)
	})
	t.Logf("killed after %d of %d loads (%d/%d adapters Running, %d loads of the adapters then deleted); converged %s after the restart, %s after the kill (the restarted process waits for the unreleased lease)",
		loadsAtKill, total*10, runningAtKill, total, heldByDeleted, time.Since(restarted).Round(100*time.Millisecond), time.Since(killed).Round(100*time.Millisecond))
}

// modelRoutes returns the names of the HTTPRoutes in the gateway namespace that start with
// prefix.
func modelRoutes(t *testing.T, prefix string) []string {
	t.Helper()
	var list gatewayv1.HTTPRouteList
	if err := k8s.List(context.Background(), &list, client.InNamespace(gatewayNamespace())); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range list.Items {
		if strings.HasPrefix(r.Name, prefix) {
			out = append(out, r.Name)
		}
	}
	slices.Sort(out)
	return out
}

// grantedServices returns the Services the ReferenceGrants of ns admit, sorted, with
// duplicates kept (a Service admitted twice shows twice).
func grantedServices(t *testing.T, ns string) []string {
	t.Helper()
	var grants gatewayv1beta1.ReferenceGrantList
	if err := k8s.List(context.Background(), &grants, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range grants.Items {
		for _, to := range g.Spec.To {
			if to.Name != nil {
				out = append(out, string(*to.Name))
			}
		}
	}
	slices.Sort(out)
	return out
}

// createDeployments creates model Deployments (no replicas: the router routes workloads,
// not pods) 8 at a time.
func createDeployments(ctx context.Context, ns string, models []string) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		work = make(chan string)
	)
	for range 8 {
		wg.Go(func() {
			for m := range work {
				if err := k8s.Create(ctx, modelDeployment(ns, m, 0)); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, m := range models {
		work <- m
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("creating Deployments: %w", errors.Join(errs...))
	}
	return nil
}

// TestRouterControllerKilledMidLoad: the router-controller gets SIGKILL while it creates the
// routes of 200 model Deployments. While it is down 20 of them are deleted and 10 new ones
// created. After a restart there is exactly one route per live model, none for the deleted
// ones, and the namespace's ReferenceGrants admit exactly the live Services, once each.
func TestRouterControllerKilledMidLoad(t *testing.T) {
	cmds := hooks(t, "E2E_KILL_ROUTER", "E2E_START_ROUTER")
	kill, start := cmds[0], cmds[1]
	ctx := ctxFor(t, 6*time.Minute)
	ns := namespace(t)
	prefix := "e2e-rk-" + suffix() + "-"
	model := func(i int) string { return fmt.Sprintf("%s%03d", prefix, i) }
	var first, later []string
	for i := range 200 {
		first = append(first, model(i))
	}
	for i := 200; i < 210; i++ {
		later = append(later, model(i))
	}
	t.Cleanup(func() {
		// Routes of this test's models go with their Deployments (deleted with the
		// namespace); wait so that later tests start from a quiet router.
		_ = k8s.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		testenv.Poll(2*time.Minute, 500*time.Millisecond, func() bool { return len(modelRoutes(t, prefix)) == 0 })
	})

	createStart := time.Now()
	created := make(chan error, 1)
	go func() { created <- createDeployments(ctx, ns, first) }()
	var routesAtKill int
	waitFor(t, 2*time.Minute, "the first 20 routes", func() (bool, string) {
		routesAtKill = len(modelRoutes(t, prefix))
		return routesAtKill >= 20, fmt.Sprintf("%d routes", routesAtKill)
	})
	shell(t, kill)
	killed := time.Now()
	routesAtKill = len(modelRoutes(t, prefix))
	if routesAtKill == len(first) {
		t.Fatalf("all %d routes existed at the kill: nothing was killed mid-way", len(first))
	}
	// Wait for the Deployments still being created, then change the world.
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	deletedModels := first[:20]
	for _, m := range deletedModels {
		if err := k8s.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: m}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := createDeployments(ctx, ns, later); err != nil {
		t.Fatal(err)
	}
	live := append(slices.Clone(first[20:]), later...)
	var wantRoutes []string
	for _, m := range live {
		wantRoutes = append(wantRoutes, m+"-router")
	}
	slices.Sort(wantRoutes)
	slices.Sort(live)

	shell(t, start)
	restarted := time.Now()
	waitFor(t, 3*time.Minute, "one route per live model, none for the deleted ones, grants for exactly the live Services", func() (bool, string) {
		got := modelRoutes(t, prefix)
		if !slices.Equal(got, wantRoutes) {
			missing, extra := diff(wantRoutes, got)
			return false, fmt.Sprintf("%d routes; missing %d %v, extra %d %v", len(got), len(missing), head(missing), len(extra), head(extra))
		}
		if granted := grantedServices(t, ns); !slices.Equal(granted, live) {
			missing, extra := diff(live, granted)
			return false, fmt.Sprintf("grants admit %d Services; missing %v, extra or twice %v", len(granted), head(missing), head(extra))
		}
		return true, ""
	})
	t.Logf("killed with %d of 200 routes created (%s after the first create); converged %s after the restart, %s after the kill (the restarted process waits for the unreleased lease)",
		routesAtKill, killed.Sub(createStart).Round(100*time.Millisecond), time.Since(restarted).Round(100*time.Millisecond), time.Since(killed).Round(100*time.Millisecond))
}

// diff returns what want has and got lacks, and what got has beyond want (multisets).
func diff(want, got []string) (missing, extra []string) {
	count := map[string]int{}
	for _, w := range want {
		count[w]++
	}
	for _, g := range got {
		if count[g] > 0 {
			count[g]--
		} else {
			extra = append(extra, g)
		}
	}
	for _, w := range want {
		if count[w] > 0 {
			count[w]--
			missing = append(missing, w)
		}
	}
	return missing, extra
}

func head(s []string) []string { return s[:min(len(s), 5)] }

// TestAPIServerRestart: work is pending in both controllers (new adapters, new model
// Deployments) when kube-apiserver is killed and started again. Both controllers keep
// running (or are restarted as a kubelet would, if they exit), their caches resync, the
// pending work completes and nothing is duplicated.
func TestAPIServerRestart(t *testing.T) {
	cmds := hooks(t, "E2E_RESTART_APISERVER", "E2E_ENSURE_ADAPTER", "E2E_ENSURE_ROUTER", "E2E_ADAPTER_READYZ", "E2E_ROUTER_READYZ", "E2E_ENGINE_ADMIN")
	restartAPIServer, ensureAdapter, ensureRouter := cmds[0], cmds[1], cmds[2]
	readyz := map[string]string{"adapter-controller": cmds[3], "router-controller": cmds[4]}
	ctx := ctxFor(t, 6*time.Minute)
	ns := namespace(t)
	model := "e2e-apirestart-" + suffix()
	pods := startModel(ctx, t, 60*time.Second, ns, model, 3)
	adapters := []string{"before-0"}
	if err := k8s.Create(ctx, loraAdapter(ns, adapters[0], model)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the first adapter running", func() (bool, string) {
		return adapterState(t, ns, pods, adapters, nil)
	})

	// Pending work, then the crash: the creates are stored; every load hangs 2 s, so the
	// adapter-controller is mid-load (and cannot write status) when the API server goes.
	setEngineFault(t, ns, pods, `{"op":"load","hang":"2s"}`)
	models := []string{model}
	for i := range 3 {
		adapters = append(adapters, fmt.Sprintf("pending-%d", i))
		if err := k8s.Create(ctx, loraAdapter(ns, adapters[len(adapters)-1], model)); err != nil {
			t.Fatal(err)
		}
		models = append(models, fmt.Sprintf("%s-extra-%d", model, i))
		if err := k8s.Create(ctx, modelDeployment(ns, models[len(models)-1], 0)); err != nil {
			t.Fatal(err)
		}
	}
	renew, err := time.ParseDuration(env("E2E_RENEW_DEADLINE", "10s"))
	if err != nil {
		t.Fatalf("E2E_RENEW_DEADLINE: %v", err)
	}
	killed := time.Now()
	t.Log(shellOut(t, restartAPIServer))
	back := time.Now()
	outage := back.Sub(killed) // at least as long as the API did not answer
	setEngineFault(t, ns, pods, "")
	// A controller that exited would be restarted here (as a kubelet would) and the test goes
	// on, but it fails when the outage was shorter than the leader election renew deadline:
	// then both must survive. Past the deadline a leader must give up its lease and exit
	// (controller-runtime does; acting on without the lease risks two leaders); the kubelet
	// restarts it and the work must still converge. (On kind a second kill of the API server
	// container waits out the kubelet's restart back-off, 10 s.)
	for name, ensure := range map[string]string{"adapter-controller": ensureAdapter, "router-controller": ensureRouter} {
		state := strings.TrimSpace(shellOut(t, ensure))
		switch {
		case state == "running":
		case outage >= renew:
			t.Logf("%s exited: the API was away up to %s, past the renew deadline %s, so the leader gave up its lease (%s)",
				name, outage.Round(100*time.Millisecond), renew, state)
		default:
			t.Errorf("%s did not survive an API server outage of at most %s (renew deadline %s): %s",
				name, outage.Round(100*time.Millisecond), renew, state)
		}
	}
	for name, check := range readyz {
		waitFor(t, 60*time.Second, name+" ready", func() (bool, string) { return probe(check) })
	}
	var wantRoutes []string
	for _, m := range append(slices.Clone(models), adapters...) {
		wantRoutes = append(wantRoutes, m+"-router")
	}
	slices.Sort(wantRoutes)
	wantServices := append(slices.Clone(models), adapters...)
	slices.Sort(wantServices)
	waitFor(t, 2*time.Minute, "all adapters running, one route per model and adapter, grants for exactly those Services", func() (bool, string) {
		if ok, state := adapterState(t, ns, pods, adapters, nil); !ok {
			return false, state
		}
		var got []string
		for _, r := range modelRoutes(t, "") {
			if slices.Contains(wantRoutes, r) {
				got = append(got, r)
			}
		}
		if !slices.Equal(got, wantRoutes) {
			return false, fmt.Sprintf("routes %v, want %v", got, wantRoutes)
		}
		if granted := grantedServices(t, ns); !slices.Equal(granted, wantServices) {
			return false, fmt.Sprintf("grants admit %v, want %v", granted, wantServices)
		}
		return true, ""
	})
	t.Logf("pending work (3 adapters on 3 pods, 3 model routes) converged %s after the API server was back", time.Since(back).Round(100*time.Millisecond))
}

// syncCount sums loraplane_cache_sync_duration_seconds_count on a metrics endpoint: how
// many cache syncs the process has done.
func syncCount(t *testing.T, url string) float64 {
	t.Helper()
	var sum float64
	for _, line := range strings.Split(scrape(t, url), "\n") {
		if !strings.HasPrefix(line, "loraplane_cache_sync_duration_seconds_count") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// TestLeaderFailover: each controller runs a second replica (host process, leader election
// on, caches warm). The leader gets SIGKILL, so its lease is not released; the standby must
// take over and reconcile new work within lease duration + 2 s of the kill, without
// a fresh cache sync. Afterwards the killed replica is started again and the standby stopped
// gracefully (it releases the lease), leaving the stack as it was.
func TestLeaderFailover(t *testing.T) {
	cmds := hooks(t, "E2E_STACK", "E2E_LOG_DIR", "E2E_ADAPTER_STANDBY_METRICS", "E2E_ROUTER_STANDBY_METRICS", "E2E_ENGINE_ADMIN")
	stack, dir := cmds[0], cmds[1]
	standbyMetrics := map[string]string{"adapter-controller": cmds[2], "router-controller": cmds[3]}
	lease, err := time.ParseDuration(env("E2E_LEASE_DURATION", "15s"))
	if err != nil {
		t.Fatalf("E2E_LEASE_DURATION: %v", err)
	}
	// The bound keeps 3× the measured failover (docs/reliability.md, "Wall-clock limits").
	// That the standby is warm is checked by counts (its cache syncs do not change).
	limit := 3 * (lease + 2*time.Second)
	ctx := ctxFor(t, 5*time.Minute)
	ns := namespace(t)
	model := "e2e-failover-" + suffix()
	pods := startModel(ctx, t, 60*time.Second, ns, model, 1)

	// newWork creates something only the named controller acts on and returns a check that
	// it has been done.
	newWork := map[string]func(i int) func() (bool, string){
		"adapter-controller": func(i int) func() (bool, string) {
			name := fmt.Sprintf("failover-%d", i)
			if err := k8s.Create(ctx, loraAdapter(ns, name, model)); err != nil {
				t.Fatal(err)
			}
			return func() (bool, string) {
				a, err := adapterStatus(ns, name)
				if err != nil || a.Status.Phase != v1alpha1.ModelAdapterRunning {
					return false, fmt.Sprintf("%v %s", err, a.Status.Phase)
				}
				return adapterOn(t, ns, pods, name)
			}
		},
		"router-controller": func(i int) func() (bool, string) {
			m := fmt.Sprintf("%s-%d", model, i)
			if err := k8s.Create(ctx, modelDeployment(ns, m, 0)); err != nil {
				t.Fatal(err)
			}
			return func() (bool, string) {
				err := routeErr(m + "-router")
				return err == nil, fmt.Sprint(err)
			}
		},
	}
	for i, name := range []string{"adapter-controller", "router-controller"} {
		t.Run(name, func(t *testing.T) {
			shell(t, stack+" start "+name+"-standby "+dir)
			t.Cleanup(func() {
				// Back to one leader on the usual ports: the killed replica returns (as a
				// standby), then the standby stops and releases the lease to it.
				shell(t, stack+" start "+name+" "+dir)
				shell(t, stack+" stop "+name+"-standby "+dir)
			})
			waitFor(t, 30*time.Second, "the standby's caches synced", func() (bool, string) {
				n := syncCount(t, standbyMetrics[name])
				return n > 0, fmt.Sprintf("%v syncs", n)
			})
			syncsBefore := syncCount(t, standbyMetrics[name])
			shell(t, stack+" kill "+name+" "+dir)
			killed := time.Now()
			done := newWork[name](i)
			waitFor(t, 2*limit, "the standby to take over and reconcile new work", done)
			took := time.Since(killed)
			if took > limit {
				t.Errorf("failover took %s, more than 3 × (lease duration + 2 s) = %s", took.Round(100*time.Millisecond), limit)
			}
			if after := syncCount(t, standbyMetrics[name]); after != syncsBefore {
				t.Errorf("the standby synced its caches again on takeover: %v syncs before, %v after", syncsBefore, after)
			}
			t.Logf("%s: new work reconciled by the standby %s after SIGKILL of the leader (limit %s); cache syncs %v before and after",
				name, took.Round(100*time.Millisecond), limit, syncsBefore)
		})
	}
}
