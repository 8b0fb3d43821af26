package setup_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/setup"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/fakeengine"
	"github.com/loraplane/loraplane/test/testenv"
)

// process is one adapter-controller process that the test can kill: after kill it makes no
// API request and receives no answer (its transport fails every request), its engine calls
// are cancelled, and the engines' answers still on their way never reach it.
type process struct {
	cancel context.CancelFunc
	done   chan error
	dead   atomic.Bool
	killed chan struct{}
	// holdStatus makes the process's ModelAdapter status writes wait until the kill.
	holdStatus atomic.Bool
	statusHeld atomic.Int64
}

var errKilled = errors.New("the process was killed")

func startProcess(t *testing.T, o *setup.Options) *process {
	t.Helper()
	p := &process{done: make(chan error, 1), killed: make(chan struct{})}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if p.dead.Load() {
				return nil, errKilled
			}
			if p.holdStatus.Load() && strings.Contains(r.URL.Path, "/modeladapters/") && strings.HasSuffix(r.URL.Path, "/status") {
				p.statusHeld.Add(1)
				select {
				case <-p.killed:
				case <-r.Context().Done():
				}
				return nil, errKilled
			}
			resp, err := rt.RoundTrip(r)
			if p.dead.Load() {
				if resp != nil {
					_ = resp.Body.Close()
				}
				return nil, errKilled
			}
			return resp, err
		})
	})
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() { p.done <- setup.Run(ctx, o, cfg) }()
	return p
}

// kill ends the process at once, as SIGKILL would: nothing it does afterwards reaches the
// API server or an engine.
func (p *process) kill(t *testing.T) {
	p.dead.Store(true)
	close(p.killed)
	p.cancel()
	t.Logf("killed controller ended with: %v", <-p.done)
}

func (p *process) stop(t *testing.T) {
	t.Helper()
	p.cancel()
	if err := <-p.done; err != nil {
		t.Errorf("controller: %v", err)
	}
}

// crashFleet is a namespace with engine pods and adapters selecting all of them.
type crashFleet struct {
	k8s      client.Client
	ns       string
	engines  map[string]*fakeengine.Engine
	adapters []string
}

var crashIPs atomic.Int32

func newCrashFleet(ctx context.Context, t *testing.T, pods, adapters int) *crashFleet {
	t.Helper()
	k8s, err := client.New(env.Config, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "crash-"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	f := &crashFleet{k8s: k8s, ns: ns.Name, engines: map[string]*fakeengine.Engine{}}
	labels := map[string]string{v1alpha1.ModelNameLabel: "crash", v1alpha1.AdapterEnabledLabel: "true"}
	for i := range pods {
		ip := fmt.Sprintf("127.0.34.%d", crashIPs.Add(1))
		e, err := fakeengine.Start(ip, 8000, fakeengine.Options{Preload: map[string]string{"static": "/models/static"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		name := fmt.Sprintf("crash-%d", i)
		f.engines[name] = e
		if _, err := testenv.CreateReadyPod(ctx, k8s, f.ns, name, ip, labels); err != nil {
			t.Fatal(err)
		}
	}
	for i := range adapters {
		name := fmt.Sprintf("lora-%d", i)
		f.adapters = append(f.adapters, name)
		a := &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
			Spec: v1alpha1.ModelAdapterSpec{PodSelector: &metav1.LabelSelector{MatchLabels: labels}, ArtifactURL: "/models/" + name}}
		if err := k8s.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *crashFleet) setFault(fault fakeengine.Fault) {
	for _, e := range f.engines {
		e.SetFault(fault)
	}
}

func (f *crashFleet) clearFaults() {
	for _, e := range f.engines {
		e.ClearFault()
	}
}

// held counts the loads of the fleet's adapters that the engines hold.
func (f *crashFleet) held() int {
	n := 0
	for _, e := range f.engines {
		for _, name := range e.Loaded() {
			if slices.Contains(f.adapters, name) {
				n++
			}
		}
	}
	return n
}

func (f *crashFleet) requests(route string) int {
	n := 0
	for _, e := range f.engines {
		n += e.Requests()[route]
	}
	return n
}

func (f *crashFleet) delete(ctx context.Context, t *testing.T, names []string) {
	t.Helper()
	for _, name := range names {
		if err := f.k8s.Delete(ctx, &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
}

// holders returns the engine pods holding the adapter.
func (f *crashFleet) holders(name string) []string {
	var out []string
	for pod, e := range f.engines {
		if slices.Contains(e.Loaded(), name) {
			out = append(out, pod)
		}
	}
	slices.Sort(out)
	return out
}

// waitConverged waits until the deleted adapters are gone — checking, the moment each is
// gone, that no engine holds it — and the others run on every pod. Every engine must still
// hold the adapter it was started with.
func (f *crashFleet) waitConverged(ctx context.Context, t *testing.T, deleted []string, timeout time.Duration) {
	t.Helper()
	gone := map[string]bool{}
	testenv.Eventually(t, timeout, 20*time.Millisecond, "the deleted adapters gone and the others running everywhere", func() (bool, string) {
		for _, name := range deleted {
			if gone[name] {
				continue
			}
			err := f.k8s.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, &v1alpha1.ModelAdapter{})
			if apierrors.IsNotFound(err) {
				gone[name] = true
				if h := f.holders(name); len(h) > 0 {
					t.Errorf("the finalizer of %s was released while it is still loaded on %v", name, h)
				}
			}
		}
		running := 0
		var last string
		for _, name := range f.adapters {
			if slices.Contains(deleted, name) {
				continue
			}
			a := &v1alpha1.ModelAdapter{}
			if err := f.k8s.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, a); err == nil &&
				a.Status.Phase == v1alpha1.ModelAdapterRunning && len(a.Status.Instances) == len(f.engines) && len(f.holders(name)) == len(f.engines) {
				running++
			} else {
				last = fmt.Sprintf("%s: %s on %v, held by %v", name, a.Status.Phase, a.Status.Instances, f.holders(name))
			}
		}
		return len(gone) == len(deleted) && running == len(f.adapters)-len(deleted),
			fmt.Sprintf("%d of %d deleted adapters gone, %d of %d running everywhere (%s)",
				len(gone), len(deleted), running, len(f.adapters)-len(deleted), last)
	})
	for pod, e := range f.engines {
		if !slices.Contains(e.Loaded(), "static") {
			t.Errorf("the engine of %s lost the adapter it was started with: %v", pod, e.Loaded())
		}
		for _, name := range deleted {
			if slices.Contains(e.Loaded(), name) {
				t.Errorf("the engine of %s still holds deleted adapter %s", pod, name)
			}
		}
	}
}

// TestCrashLeavesNoLoadBehind: the adapter-controller is killed at several points of the
// lifecycle of 6 adapters on 3 engine pods; while it is down, half of the adapters are
// deleted (in the deletion case, all of them). A new process must unload every deleted
// adapter from every engine before releasing its finalizer, bring the others to Running on
// every pod, and never touch the adapter the engines were started with.
func TestCrashLeavesNoLoadBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
	const load, unload = "POST /v1/load_lora_adapter", "POST /v1/unload_lora_adapter"
	cases := map[string]struct {
		// arrange prepares the engines and the process before the adapters run; crashed
		// reports when to kill it.
		arrange func(f *crashFleet, p *process)
		crashed func(f *crashFleet, p *process) bool
		// deleteBeforeKill deletes every adapter first (the kill then hits their unloads).
		deleteBeforeKill bool
		// deleteAll deletes every adapter while the controller is down, not half of them:
		// then no load of a live adapter makes the new process list the engines before it
		// finalizes the deleted ones.
		deleteAll bool
	}{
		"before the first load call": {
			arrange: func(f *crashFleet, _ *process) {
				f.setFault(fakeengine.Fault{Op: fakeengine.OpLoad, Hang: time.Minute})
			},
			crashed: func(f *crashFleet, _ *process) bool { return f.requests(load) >= 3 },
		},
		"mid-loads": {
			arrange: func(f *crashFleet, _ *process) {
				f.setFault(fakeengine.Fault{Op: fakeengine.OpLoad, Stall: time.Minute})
			},
			crashed: func(f *crashFleet, _ *process) bool { return f.held() >= 9 },
		},
		"mid-loads, every adapter deleted": {
			arrange: func(f *crashFleet, _ *process) {
				f.setFault(fakeengine.Fault{Op: fakeengine.OpLoad, Stall: time.Minute})
			},
			crashed:   func(f *crashFleet, _ *process) bool { return f.held() >= 9 },
			deleteAll: true,
		},
		"after the loads, before the status write": {
			arrange: func(_ *crashFleet, p *process) { p.holdStatus.Store(true) },
			crashed: func(f *crashFleet, p *process) bool { return f.held() == 18 && p.statusHeld.Load() >= 6 },
		},
		"mid-unloads during deletion": {
			// The adapters run first; then some engines act on unloads without answering
			// and the others hang, and every adapter is deleted.
			crashed:          func(f *crashFleet, _ *process) bool { return f.requests(unload) >= 9 },
			deleteBeforeKill: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			f := newCrashFleet(ctx, t, 3, 6)
			o := options()
			o.WatchNamespaces = []string{f.ns}
			p := startProcess(t, o)
			deleted := f.adapters[3:]
			if tc.deleteAll {
				deleted = f.adapters
			}
			if tc.deleteBeforeKill {
				testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, "18 loads", func() (bool, string) { return f.held() == 18, "" })
				i := 0
				for _, e := range f.engines {
					if i%2 == 0 {
						e.SetFault(fakeengine.Fault{Op: fakeengine.OpUnload, Stall: time.Minute})
					} else {
						e.SetFault(fakeengine.Fault{Op: fakeengine.OpUnload, Hang: time.Minute})
					}
					i++
				}
				deleted = f.adapters
				f.delete(ctx, t, deleted)
			} else {
				tc.arrange(f, p)
			}
			testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, "the moment to kill the controller", func() (bool, string) { return tc.crashed(f, p), "" })
			heldAtKill := f.held()
			p.kill(t)
			f.clearFaults()
			if !tc.deleteBeforeKill {
				f.delete(ctx, t, deleted)
			}
			unloadsBefore := f.requests(unload)
			restarted := time.Now()
			p2 := startProcess(t, o)
			defer p2.stop(t)
			f.waitConverged(ctx, t, deleted, 60*time.Second)
			t.Logf("killed holding %d of 18 loads; after the restart converged in %s with %d unload calls for %d deleted adapters on %d pods",
				heldAtKill, time.Since(restarted).Round(10*time.Millisecond), f.requests(unload)-unloadsBefore, len(deleted), len(f.engines))
		})
	}
}
