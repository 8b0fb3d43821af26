package controller_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/loraplane/loraplane/router-controller/internal/controller"
	"github.com/loraplane/loraplane/router-controller/internal/routes"
	"github.com/loraplane/loraplane/router-controller/internal/setup"
)

// grantWriteLog counts the writes to the ReferenceGrants of one namespace, as seen by a
// watch independent of the router: every ADDED, MODIFIED and DELETED event is one write.
type grantWriteLog struct {
	mu     sync.Mutex
	writes int
}

func watchGrantWrites(t *testing.T, ns string) *grantWriteLog {
	t.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := wc.Watch(ctx, &gatewayv1beta1.ReferenceGrantList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatalf("watching the ReferenceGrants in %s: %v", ns, err)
	}
	log := &grantWriteLog{}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				log.mu.Lock()
				log.writes++
				log.mu.Unlock()
			}
		}
	}()
	return log
}

func (l *grantWriteLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writes
}

// settled waits until no grant write was seen for quiet (at most waitTimeout) and returns
// the count.
func (l *grantWriteLog) settled(t *testing.T, quiet time.Duration) int {
	t.Helper()
	last, since := l.count(), time.Now()
	eventually(t, fmt.Sprintf("no ReferenceGrant write for %s", quiet), func() error {
		if n := l.count(); n != last {
			last, since = n, time.Now()
		}
		if time.Since(since) < quiet {
			return fmt.Errorf("%d writes so far, the last %s ago", last, time.Since(since).Round(time.Millisecond))
		}
		return nil
	})
	return last
}

// TestGrantWritesBatched: 100 models created in quick succession in one namespace cost
// about one ReferenceGrant write per grant and per batch window, not one per route, and
// the grants admit exactly the routed Services, each once, at most 16 per grant. Deleting a
// third of the models, then all of them, converges the same way and ends with no grant.
func TestGrantWritesBatched(t *testing.T) {
	needEnv(t)
	const (
		models = 100
		window = controller.DefaultGrantBatchWindow
		quiet  = 3 * window
		grants = (models + routes.MaxReferenceGrantTo - 1) / routes.MaxReferenceGrantTo
	)
	// Growing: each grant is created once, and each window in which Services arrive costs
	// about one update (of the grant with room), plus slack for the window that ends after
	// the last change. Here that is 9-12 writes; one write per route would be 100.
	// Shrinking: each window may update every grant that lost a Service.
	growLimit := func(took time.Duration) int { return grants + int(took/window) + 2 }
	shrinkLimit := func(took time.Duration) int { return grants*(int(took/window)+1) + 2 }
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	writes := watchGrantWrites(t, ns)
	r := startRouter(t, env.Config, gw, []string{ns})
	r.waitOpen(t)

	// A client without client-side throttling creates the Deployments one after the other as
	// fast as the API server takes them, in an order that inserts Services all over the
	// sorted list.
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 1000, 1000
	fast, err := client.New(cfg, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, models)
	for i := range models {
		names[i] = fmt.Sprintf("model-%03d", (i*37)%models)
	}
	start := time.Now()
	parallel(t, 1, names, func(name string) error {
		d := deploymentFor(ns, name, modelLabels(name), nil)
		return fast.Create(context.Background(), d)
	})
	created := time.Since(start)

	services := slices.Sorted(slices.Values(names))
	waitGrant(t, gw, ns, services...)
	converged := time.Since(start)
	checkGrantShape(t, gw, ns)
	n := writes.settled(t, quiet)
	t.Logf("%d Deployments created in %s; grants admit all %d Services after %s with %d ReferenceGrant writes",
		models, created.Round(time.Millisecond), models, converged.Round(time.Millisecond), n)
	if n > growLimit(converged) {
		t.Errorf("%d ReferenceGrant writes for %d routes created within %s, want at most %d", n, models, converged, growLimit(converged))
	}

	// Delete every third model: the Services leave their grants, the others stay put.
	var gone, kept []string
	for i, name := range services {
		if i%3 == 0 {
			gone = append(gone, name)
		} else {
			kept = append(kept, name)
		}
	}
	before, start := n, time.Now()
	parallel(t, 8, gone, func(name string) error {
		return client.IgnoreNotFound(fast.Delete(context.Background(), deploymentFor(ns, name, nil, nil)))
	})
	waitGrant(t, gw, ns, kept...)
	deleted := time.Since(start)
	checkGrantShape(t, gw, ns)
	n = writes.settled(t, quiet)
	t.Logf("%d Deployments deleted, grants converged after %s with %d ReferenceGrant writes", len(gone), deleted.Round(time.Millisecond), n-before)
	if n-before > shrinkLimit(deleted) {
		t.Errorf("%d ReferenceGrant writes for %d routes deleted within %s, want at most %d", n-before, len(gone), deleted, shrinkLimit(deleted))
	}

	// Delete the rest: every grant goes.
	before, start = n, time.Now()
	parallel(t, 8, kept, func(name string) error {
		return client.IgnoreNotFound(fast.Delete(context.Background(), deploymentFor(ns, name, nil, nil)))
	})
	waitGrant(t, gw, ns)
	deleted = time.Since(start)
	n = writes.settled(t, quiet)
	t.Logf("%d Deployments deleted, grants gone after %s with %d ReferenceGrant writes", len(kept), deleted.Round(time.Millisecond), n-before)
	if n-before > shrinkLimit(deleted) {
		t.Errorf("%d ReferenceGrant writes for the last %d routes deleted within %s, want at most %d", n-before, len(kept), deleted, shrinkLimit(deleted))
	}
}

// parallel runs do for every item on workers goroutines and fails the test on the first
// error.
func parallel(t *testing.T, workers int, items []string, do func(string) error) {
	t.Helper()
	work := make(chan string)
	errs := make(chan error, len(items))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for item := range work {
				if err := do(item); err != nil {
					errs <- fmt.Errorf("%s: %w", item, err)
				}
			}
		})
	}
	for _, item := range items {
		work <- item
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// checkGrantShape checks that the grants of ours in ns are valid: 1-16 Services each, none
// admitted twice.
func checkGrantShape(t *testing.T, gw, ns string) {
	t.Helper()
	var list gatewayv1beta1.ReferenceGrantList
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns),
		client.MatchingLabels{routes.ManagedByLabel: routes.ManagedByValue, routes.GatewayNamespaceLabel: gw}); err != nil {
		t.Fatalf("listing ReferenceGrants in %s: %v", ns, err)
	}
	seen := map[string]string{}
	for _, g := range list.Items {
		if n := len(g.Spec.To); n < 1 || n > routes.MaxReferenceGrantTo {
			t.Errorf("grant %s/%s admits %d Services, want 1-%d", ns, g.Name, n, routes.MaxReferenceGrantTo)
		}
		for _, to := range g.Spec.To {
			if to.Name == nil {
				t.Errorf("grant %s/%s admits every Service", ns, g.Name)
				continue
			}
			if other, ok := seen[string(*to.Name)]; ok {
				t.Errorf("Service %s admitted by both %s and %s", *to.Name, other, g.Name)
			}
			seen[string(*to.Name)] = g.Name
		}
	}
	t.Logf("%d grants in %s", len(list.Items), ns)
}

// deploymentFor is a Deployment like createDeployment's, not created; safe off the test
// goroutine.
func deploymentFor(ns, name string, labels, annotations map[string]string) *appsv1.Deployment {
	sel, tmpl := podTemplate()
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: annotations},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: sel, Template: tmpl},
	}
}
