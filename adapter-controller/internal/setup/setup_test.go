package setup_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/setup"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/fakeengine"
	"github.com/loraplane/loraplane/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	var err error
	if env, err = testenv.Start(); err != nil {
		panic(err)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

func options() *setup.Options {
	o := setup.NewOptions()
	o.MetricsBindAddress = "0"
	o.HealthProbeBindAddress = testenv.FreeAddr()
	o.Adapter.InventoryPeriod = time.Second
	o.GracefulShutdownTimeout = 5 * time.Second
	o.Adapter.SkipNameValidation = true
	return o
}

// start runs the controller until the returned stop is called.
func start(t *testing.T, o *setup.Options) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- setup.Run(ctx, o, env.Config) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	}
}

// TestRestartWithSlowPodListChangesNothing: a controller restarted while the Pod list is slow
// (5s) must not write status, unload or reload anything before its caches are synced, must
// answer /readyz 5xx until then and 200 after, and has nothing to change afterwards.
func TestRestartWithSlowPodListChangesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k8s, err := client.New(env.Config, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ip := "127.0.30.1"
	e, err := fakeengine.Start(ip, 8000, fakeengine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	labels := map[string]string{v1alpha1.ModelNameLabel: "m", v1alpha1.AdapterEnabledLabel: "true"}
	if _, err := testenv.CreateReadyPod(ctx, k8s, "default", "m-0", ip, labels); err != nil {
		t.Fatal(err)
	}
	a := &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Name: "lora", Namespace: "default"},
		Spec: v1alpha1.ModelAdapterSpec{PodSelector: &metav1.LabelSelector{MatchLabels: labels}, ArtifactURL: "/models/lora"}}
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}

	stop := start(t, options())
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, "the adapter to run", func() (bool, string) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(a), a)
		return err == nil && a.Status.Phase == v1alpha1.ModelAdapterRunning, fmt.Sprintf("error %v, status %+v", err, a.Status)
	})
	stop()
	rv := a.ResourceVersion
	loads, unloads := e.Loads(), e.Unloads()

	proxy, err := testenv.NewSlowProxy(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	const delay = 5 * time.Second
	proxy.Delay("/api/v1/pods", delay)
	o := options()
	ctx2, cancel2 := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- setup.Run(ctx2, o, proxy.Config()) }()
	restarted := time.Now()
	readyz := "http://" + o.HealthProbeBindAddress + "/readyz"
	var notReady, readyAt time.Duration
	codes := map[int]int{}
	// Watched for 3 s after the slow list, and until the restarted controller has reconciled
	// the adapter: "no write, no engine call" then covers a reconcile that looked at it.
	reconciles := testenv.ReconcileCount("modeladapter")
	for time.Since(restarted) < delay+3*time.Second || testenv.ReconcileCount("modeladapter") == reconciles {
		if time.Since(restarted) > delay+30*time.Second {
			t.Fatalf("the restarted controller did not reconcile the adapter within %s", delay+30*time.Second)
		}
		code := httpStatus(readyz)
		codes[code]++
		switch {
		case code == http.StatusOK && readyAt == 0:
			readyAt = time.Since(restarted)
			if readyAt < delay {
				t.Fatalf("/readyz 200 %s after the restart, before the %s Pod list returned", readyAt, delay)
			}
		case code >= http.StatusInternalServerError: // controller-runtime answers 500; any 5xx is a closed gate
			if readyAt > 0 {
				t.Fatalf("/readyz %d again %s after the restart, after 200 at %s", code, time.Since(restarted), readyAt)
			}
			notReady = time.Since(restarted)
		}
		got := &v1alpha1.ModelAdapter{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(a), got); err != nil {
			t.Fatal(err)
		}
		if got.ResourceVersion != rv {
			t.Fatalf("the adapter was written %s after the restart (phase %s, instances %v)", time.Since(restarted), got.Status.Phase, got.Status.Instances)
		}
		if e.Unloads() != unloads || e.Loads() != loads {
			t.Fatalf("engine calls after the restart: loads %d->%d, unloads %d->%d", loads, e.Loads(), unloads, e.Unloads())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := e.Loaded(); len(got) != 1 || got[0] != "lora" {
		t.Errorf("engine holds %v after the restart, want [lora]", got)
	}
	if notReady == 0 || readyAt == 0 {
		t.Errorf("/readyz: last 5xx at %s, first 200 at %s after the restart (status codes seen: %v); want 5xx while the Pod list is slow, then 200", notReady, readyAt, codes)
	}
	t.Logf("/readyz 5xx until %s, 200 from %s after the restart (Pod list delayed %s); %v reconciles, no write, no engine call",
		notReady, readyAt, delay, testenv.ReconcileCount("modeladapter")-reconciles)
	cancel2()
	if err := <-done; err != nil {
		t.Errorf("restarted controller: %v", err)
	}
}

// httpStatus returns the status code of a GET of url, or 0 when it cannot be fetched.
func httpStatus(url string) int {
	resp, err := http.Get(url) //nolint:gosec,noctx // a loopback probe address chosen by the test
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestValidateReportsEveryBadOption: all bad options are named at once, not the first only.
func TestValidateReportsEveryBadOption(t *testing.T) {
	o := setup.NewOptions()
	o.EngineTimeout = 0
	o.Adapter.RetryLimit = 0
	o.CacheSyncTimeout = -1
	err := o.Validate()
	if err == nil {
		t.Fatal("Validate() accepted bad options")
	}
	for _, want := range []string{"--engine-timeout", "retry limits", "cache-sync-timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q, does not name %s", err, want)
		}
	}
}
