// Command soak is loraplane's chaos soak (make soak). On the local kwok cluster of
// hack/stack.sh — both controllers as host processes impersonating their ServiceAccounts, a
// standby replica of each, the fake engine serving the pods — a seeded driver keeps changing
// models and ModelAdapters across a few namespaces while it injects overlapping faults:
// engines down, failing loads and unloads, slow engines, engine restarts, API key rotation,
// SIGKILLed leaders, API server restarts and restarts behind a slow API server. After every
// step it waits for a quiet, converged cluster and checks the invariants (see problems); it
// watches for objects deleted while their source exists, checks that no engine is ever sent
// another namespace's API key or an unload of an adapter it was started with
// (engineBreaches), and samples each controller's goroutines and RSS. It writes a markdown and a JSON report to -out and exits 1 on any
// invariant violation.
//
// The sequence of changes and faults depends only on the seed, which is printed for replay.
// Traffic goes only to 127.0.0.0/8.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/testenv"
)

type options struct {
	duration       time.Duration
	seed           uint64
	out            string
	root           string
	stackDir       string
	engineAdmin    string
	gatewayNS      string
	namespaces     int
	quietTimeout   time.Duration
	deletionBound  time.Duration
	slowList       time.Duration
	window         time.Duration
	sampleInterval time.Duration
	engineInterval time.Duration
	killCooldown   time.Duration
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", envDuration("SOAK_DURATION", 10*time.Minute), "How long to keep making changes and faults (env SOAK_DURATION).")
	flag.Uint64Var(&o.seed, "seed", envUint("SOAK_SEED", uint64(time.Now().UnixNano())), "Seed of the driver's choices (env SOAK_SEED); printed for replay.")
	flag.StringVar(&o.out, "out", "_artifacts/soak", "Report directory.")
	flag.StringVar(&o.root, "root", ".", "Repository root (hack/stack.sh and hack/cluster.sh).")
	flag.StringVar(&o.stackDir, "stack-dir", "_artifacts/soak/stack", "hack/stack.sh's directory (pids, logs, kubeconfigs).")
	flag.StringVar(&o.engineAdmin, "engine-admin", "http://127.0.0.1:19400", "The fake engine's admin API.")
	flag.StringVar(&o.gatewayNS, "gateway-namespace", "aibrix-system", "Namespace of the HTTPRoutes.")
	flag.IntVar(&o.namespaces, "namespaces", 3, "Namespaces the driver works in.")
	flag.DurationVar(&o.quietTimeout, "quiet-timeout", 150*time.Second, "How long a step may take to converge before its problems count as violations.")
	// Deletion gives up after --deletion-retry-limit (5) unload attempts of at most
	// --engine-timeout (10s) each, with 1+2+4+8 s of back-off between them: 65 s; plus one
	// leader failover (hack/stack.sh's 12 s lease) and an API server restart.
	flag.DurationVar(&o.deletionBound, "deletion-bound", 90*time.Second, "How long a deleted ModelAdapter may keep its finalizer.")
	flag.DurationVar(&o.slowList, "slow-list", 20*time.Second, "How long a slow restart's initial lists are held back (longer than the lease).")
	flag.DurationVar(&o.window, "fault-window", 6*time.Second, "How long engine faults stay installed.")
	flag.DurationVar(&o.killCooldown, "kill-cooldown", 100*time.Second, "Least time between two faults that kill controller processes.")
	flag.DurationVar(&o.sampleInterval, "sample-interval", 5*time.Second, "How often goroutines and RSS are sampled.")
	flag.DurationVar(&o.engineInterval, "engine-interval", 2*time.Second, "How often the keys and unloads every engine received are checked (stopped engines included).")
	flag.Parse()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func envDuration(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fmt.Fprintf(os.Stderr, "soak: %s=%q: %v\n", name, v, err)
			os.Exit(2)
		}
		return d
	}
	return def
}

func envUint(name string, def uint64) uint64 {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "soak: %s=%q: %v\n", name, v, err)
			os.Exit(2)
		}
		return n
	}
	return def
}

func run(ctx context.Context, o options) error {
	if o.duration <= 0 || o.namespaces < 1 || o.quietTimeout <= 0 {
		return fmt.Errorf("invalid options: duration %s, namespaces %d, quiet timeout %s", o.duration, o.namespaces, o.quietTimeout)
	}
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	utilruntime.Must(gatewayv1.Install(s))
	utilruntime.Must(gatewayv1beta1.Install(s))
	cfg, err := config.GetConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 50, 100
	k8s, err := client.NewWithWatch(cfg, client.Options{Scheme: s})
	if err != nil {
		return err
	}
	proxy, err := testenv.NewSlowProxy(cfg)
	if err != nil {
		return err
	}
	defer func() {
		// A controller started through the proxy may still be connected: drop its
		// connections (the stack is stopped next) instead of waiting for them.
		proxy.CloseClientConnections()
		proxy.Close()
	}()
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}

	var namespaces []string
	for i := range o.namespaces {
		namespaces = append(namespaces, "soak-"+string(rune('a'+i)))
	}
	rep := newReport(o)
	d := &driver{o: o, k8s: k8s, rng: rand.New(rand.NewPCG(o.seed, o.seed^0x5eed)), world: newWorld(namespaces), proxy: proxy, report: rep}
	logFile, err := os.Create(filepath.Join(o.out, "soak.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	var logMu sync.Mutex
	start := time.Now()
	d.logf = func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		line := fmt.Sprintf("[%6.1fs] ", time.Since(start).Seconds()) + fmt.Sprintf(format, args...)
		fmt.Println(line)
		fmt.Fprintln(logFile, line)
	}
	d.logf("soak: seed %d (replay: make soak SOAK_SEED=%d SOAK_DURATION=%s), %d namespaces", o.seed, o.seed, o.duration, o.namespaces)

	for _, ns := range namespaces {
		if err := d.retry(ctx, "namespace "+ns, func() error {
			return k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		if err := d.setKey(ctx, ns, false); err != nil {
			return err
		}
	}

	if err := d.waitGarbageCollector(ctx); err != nil {
		return err
	}

	mctx, stopMonitors := context.WithCancel(ctx)
	var wg sync.WaitGroup
	mon := &monitor{d: d, k8s: k8s, start: start}
	wg.Go(func() { mon.watchDeletions(mctx, &gatewayv1.HTTPRouteList{}, o.gatewayNS) })
	for _, ns := range namespaces {
		wg.Go(func() { mon.watchDeletions(mctx, &corev1.ServiceList{}, ns) })
	}
	wg.Go(func() { mon.sample(mctx, o.sampleInterval) })
	wg.Go(func() { mon.watchEngines(mctx, o.engineInterval) })

	for step := 1; time.Since(start) < o.duration && ctx.Err() == nil; step++ {
		d.step = step
		if err := d.runStep(ctx); err != nil {
			stopMonitors()
			wg.Wait()
			return fmt.Errorf("step %d (seed %d): %w", step, o.seed, err)
		}
	}
	stopMonitors()
	wg.Wait()
	// A last look at every engine, after the last step.
	if es, err := mon.checkEngines(ctx); err != nil {
		rep.violate(d.step, o.seed, "engine history", "reading every engine the fake engine ran at the end: "+err.Error())
	} else {
		rep.Engines = summarizeEngines(es)
		d.logf("soak: %s", rep.Engines)
	}
	rep.Duration = time.Since(start).Round(time.Second).String()
	rep.Violations = append(rep.Violations, mon.violations()...)
	rep.Resources, rep.Trends = mon.trends()
	rep.Violations = append(rep.Violations, rep.Trends...)
	if err := rep.write(o.out); err != nil {
		return err
	}
	d.logf("soak: %d steps, %d violations; report in %s", rep.Steps, len(rep.Violations), o.out)
	if len(rep.Violations) > 0 {
		return fmt.Errorf("%d invariant violations (seed %d); see %s", len(rep.Violations), o.seed, filepath.Join(o.out, "soak.md"))
	}
	return ctx.Err()
}

// runStep makes a few changes, injects zero to two overlapping faults while making more,
// removes the engine faults and waits for convergence.
func (d *driver) runStep(ctx context.Context) error {
	d.report.Steps = d.step
	d.focus = nil
	for range 1 + d.rng.IntN(2) {
		if err := d.randomOp(ctx); err != nil {
			return err
		}
	}
	all := d.faults()
	var kinds []string
	var undo []func(context.Context) error
	for range d.rng.IntN(3) {
		f := d.pickFault(all)
		if slices.Contains(kinds, f.kind) {
			continue
		}
		if kills(f.kind) {
			// Processes must live long enough for their trends to be judged: at most one
			// fault that kills controller processes per cooldown.
			if time.Since(d.lastKill) < d.o.killCooldown {
				continue
			}
			d.lastKill = time.Now()
		}
		kinds = append(kinds, f.kind)
		u, err := f.start(ctx)
		if err != nil {
			return fmt.Errorf("fault %s: %w", f.kind, err)
		}
		d.report.Faults[f.kind]++
		if u != nil {
			undo = append(undo, u)
		}
	}
	windowEnd := time.Now().Add(d.o.window)
	if d.focus != nil {
		if err := d.focusedOp(ctx); err != nil {
			return err
		}
	}
	for range d.rng.IntN(2) {
		if err := d.randomOp(ctx); err != nil {
			return err
		}
	}
	if len(undo) > 0 {
		time.Sleep(time.Until(windowEnd))
	}
	for _, u := range undo {
		if err := u(ctx); err != nil {
			return err
		}
	}
	label := strings.Join(kinds, "+")
	if label == "" {
		label = "none"
	}
	took, last := d.converge(ctx)
	if last != nil {
		d.logf("step %d [%s]: NOT converged after %s", d.step, label, d.o.quietTimeout)
		for _, p := range last {
			d.logf("  %s", p)
			d.report.violate(d.step, d.o.seed, "converged state", p)
		}
		return nil
	}
	d.logf("step %d [%s]: converged in %s (%d models, %d adapters)", d.step, label, took.Round(10*time.Millisecond),
		len(d.world.view().models), len(d.world.view().adapters))
	if len(kinds) == 0 {
		d.report.converged("none", took)
	}
	for _, k := range kinds {
		d.report.converged(k, took)
	}
	return nil
}

// converge polls the cluster until problems finds none, restarting controller processes
// that exited (as a kubelet would), and returns how long that took, or the problems still
// there at the quiet timeout.
func (d *driver) converge(ctx context.Context) (time.Duration, []string) {
	start := time.Now()
	var last []string
	lastEnsure, lastLog := time.Time{}, time.Now()
	for {
		if time.Since(lastEnsure) > 5*time.Second {
			d.ensureAll(ctx)
			lastEnsure = time.Now()
		}
		snap, err := d.snapshot(ctx)
		if err == nil {
			d.trackDeletions(snap)
			last = append(problems(d.world.view(), snap), d.leaderProblems(ctx)...)
			if len(last) == 0 {
				return time.Since(start), nil
			}
		} else {
			last = []string{"reading the cluster: " + err.Error()}
		}
		if time.Since(start) > d.o.quietTimeout || ctx.Err() != nil {
			return time.Since(start), last
		}
		if time.Since(lastLog) > 15*time.Second {
			d.logf("  not converged after %s: %s", time.Since(start).Round(time.Second), strings.Join(head(last, 3), "; "))
			lastLog = time.Now()
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// ensureAll starts any controller replica whose process has exited.
func (d *driver) ensureAll(ctx context.Context) {
	for _, r := range slices.Sorted(maps.Keys(metricsURL)) {
		out, err := d.stack(ctx, "ensure", r)
		switch {
		case err != nil:
			d.report.violate(d.step, d.o.seed, "controller process", fmt.Sprintf("%s could not be started again: %v", r, err))
		case strings.HasSuffix(out, "restarted"):
			d.report.Exits[r]++
			d.logf("  %s had exited; started it again (see its log)", r)
		}
	}
}

// trackDeletions records when each deleted adapter was first seen gone, and reports the
// ones past the deletion bound.
func (d *driver) trackDeletions(s *snapshot) {
	d.world.mu.Lock()
	defer d.world.mu.Unlock()
	for key, del := range d.world.deleting {
		if _, ok := s.adapters[key]; !ok {
			d.report.deletion(time.Since(del.at))
			delete(d.world.deleting, key)
			continue
		}
		if time.Since(del.at) > d.o.deletionBound {
			a := s.adapters[key]
			d.report.violate(del.step, d.o.seed, "deletion bound",
				fmt.Sprintf("adapter %s still exists %s after its deletion (finalizers %v)", key, d.o.deletionBound, a.Finalizers))
			delete(d.world.deleting, key)
		}
	}
}

func (d *driver) snapshot(ctx context.Context) (*snapshot, error) {
	s := &snapshot{adapters: map[string]*v1alpha1.ModelAdapter{}, namespace: map[string]bool{}}
	for _, ns := range d.world.namespace {
		s.namespace[ns] = true
		var as v1alpha1.ModelAdapterList
		var pods corev1.PodList
		var svcs corev1.ServiceList
		var eps discoveryv1.EndpointSliceList
		var grants gatewayv1beta1.ReferenceGrantList
		for _, l := range []client.ObjectList{&as, &pods, &svcs, &eps, &grants} {
			if err := d.k8s.List(ctx, l, client.InNamespace(ns)); err != nil {
				return nil, err
			}
		}
		for i := range as.Items {
			s.adapters[ns+"/"+as.Items[i].Name] = &as.Items[i]
		}
		s.pods = append(s.pods, pods.Items...)
		s.services = append(s.services, svcs.Items...)
		s.slices = append(s.slices, eps.Items...)
		s.grants = append(s.grants, grants.Items...)
	}
	var routes gatewayv1.HTTPRouteList
	if err := d.k8s.List(ctx, &routes, client.InNamespace(d.o.gatewayNS)); err != nil {
		return nil, err
	}
	s.routes = routes.Items
	es, err := d.engines(ctx)
	if err != nil {
		return nil, fmt.Errorf("engine admin: %w", err)
	}
	s.engines = es
	return s, nil
}

func head(s []string, n int) []string { return s[:min(len(s), n)] }

// leaderProblems reports each controller that has no leader, or more than one replica that
// says it leads: converged means one leader per controller (after a leader is killed, the
// lease it did not release has to expire first).
func (d *driver) leaderProblems(ctx context.Context) []string {
	var out []string
	for _, c := range slices.Sorted(maps.Keys(replicas)) {
		var leaders []string
		for _, r := range replicas[c] {
			if body, err := get(ctx, metricsURL[r]); err == nil && leaderIn(body) {
				leaders = append(leaders, r)
			}
		}
		if len(leaders) != 1 {
			out = append(out, fmt.Sprintf("%s: %d replicas lead %v, want one", c, len(leaders), leaders))
		}
	}
	return out
}

// waitGarbageCollector waits until the cluster's garbage collector removes the dependents of a
// deleted ModelAdapter. An adapter's Service and EndpointSlice go with it through their owner
// reference; on a cluster created seconds before, the collector learns the ModelAdapter CRD
// only at its next resync (30 s), and the first deletions would wait for that, which is the
// fresh cluster's start-up, not the controllers' behaviour.
func (d *driver) waitGarbageCollector(ctx context.Context) error {
	start := time.Now()
	ns := d.world.namespace[0]
	a := &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gc-probe"},
		Spec: v1alpha1.ModelAdapterSpec{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.ModelNameLabel: "gc-probe"}},
			ArtifactURL: "huggingface://soak/gc-probe",
		},
	}
	if err := d.retry(ctx, "gc probe adapter", func() error { return d.k8s.Create(ctx, a) }); err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gc-probe", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: v1alpha1.GroupVersion.String(), Kind: "ModelAdapter", Name: a.Name, UID: a.UID}}}}
	if err := d.retry(ctx, "gc probe ConfigMap", func() error { return d.k8s.Create(ctx, cm) }); err != nil {
		return err
	}
	if err := d.retry(ctx, "delete gc probe adapter", func() error { return d.k8s.Delete(ctx, a) }); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	for {
		err := d.k8s.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
		if apierrors.IsNotFound(err) {
			d.logf("soak: the garbage collector removed a deleted ModelAdapter's dependent after %s", time.Since(start).Round(100*time.Millisecond))
			return nil
		}
		if time.Since(start) > 2*time.Minute {
			if err != nil {
				return fmt.Errorf("the garbage collector did not remove the dependent of a deleted ModelAdapter within 2 minutes (last read: %w)", err)
			}
			return errors.New("the garbage collector did not remove the dependent of a deleted ModelAdapter within 2 minutes")
		}
		time.Sleep(500 * time.Millisecond)
	}
}
