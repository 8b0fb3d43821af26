package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

const (
	modelLabel   = "model.aibrix.ai/name"
	portLabel    = "model.aibrix.ai/port"
	benchLabel   = "bench.loraplane.io/point"
	modelsNS     = "bench-models"
	otherNS      = "bench-other"
	floorNS      = "bench-floor"
	gatewayNS    = "aibrix-system"
	podsPerNode  = 250
	podsPerOther = 250
)

var (
	adapterGVR = schema.GroupVersionResource{Group: "model.aibrix.ai", Version: "v1alpha1", Resource: "modeladapters"}
	routeGVR   = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"}
	grantGVR   = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1beta1", Resource: "referencegrants"}
	deployGVR  = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	stsGVR     = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
	svcGVR     = schema.GroupVersionResource{Version: "v1", Resource: "services"}
)

type clients struct {
	cfg  *rest.Config
	kube kubernetes.Interface
	dyn  dynamic.Interface
	meta metadata.Interface
}

// newClients builds clients from the admin kubeconfig. qps 0 means no client-side limit.
func newClients(kubeconfig string, qps float32, burst int) (*clients, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	if qps > 0 {
		cfg.QPS, cfg.Burst = qps, burst
	} else {
		cfg.QPS, cfg.Burst = -1, 0
	}
	c := &clients{cfg: cfg}
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if c.meta, err = metadata.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

func (b *bench) sh(ctx context.Context, envs []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = b.o.root
	cmd.Env = append(os.Environ(), envs...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

func (b *bench) kubectl(ctx context.Context, args ...string) error {
	return b.sh(ctx, nil, filepath.Join(b.o.root, "bin", "kubectl"), append([]string{"--kubeconfig", b.kubeconfig}, args...)...)
}

// clusterUpNoNS creates (or starts) the kwok cluster with enough fake nodes.
func (b *bench) clusterUpNoNS(ctx context.Context, pods int) error {
	nodes := (pods+podsPerNode-1)/podsPerNode + 1
	if nodes > 250 {
		return fmt.Errorf("%d pods need %d nodes; podCIDRs 127.0.N.0/24 allow at most 250", pods, nodes)
	}
	logf("cluster %s: up with %d fake nodes (≤%d pods each, podCIDR 127.0.N.0/24)", b.o.cluster, nodes, podsPerNode)
	envs := []string{"CLUSTER_NAME=" + b.o.cluster, fmt.Sprintf("CLUSTER_NODES=%d", nodes)}
	b.clusterStarted = true
	return b.sh(ctx, envs, filepath.Join(b.o.root, "hack", "cluster.sh"), "up")
}

// clusterUp installs the CRDs, the test admission policy and the namespaces.
func (b *bench) clusterUp(ctx context.Context, _ int) error {
	gw, err := gatewayCRDDir(ctx, b.o.root)
	if err != nil {
		return err
	}
	logf("installing the ModelAdapter CRD, Gateway API CRDs (%s), the loopback EndpointSlice policy, namespaces", gw)
	steps := [][]string{
		{"apply", "--server-side", "-k", filepath.Join(b.o.root, "deploy", "crds")},
		{"apply", "--server-side", "-f", filepath.Join(gw, "config", "crd", "standard")},
		{"apply", "--server-side", "-f", filepath.Join(b.o.root, "hack", "testing", "loopback-endpointslices.yaml")},
		{"wait", "--for", "condition=established", "--timeout=60s", "crd/modeladapters.model.aibrix.ai", "crd/httproutes.gateway.networking.k8s.io"},
	}
	for _, s := range steps {
		if err := b.kubectl(ctx, s...); err != nil {
			return err
		}
	}
	for _, ns := range []string{gatewayNS, modelsNS, otherNS, floorNS} {
		_, err := b.admin.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

func gatewayCRDDir(ctx context.Context, root string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api")
	cmd.Dir = filepath.Join(root, "router-controller")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating the gateway-api module: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func podTemplate(labels map[string]string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"type": "kwok"},
			Tolerations: []corev1.Toleration{{
				Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule,
			}},
			Containers:                    []corev1.Container{{Name: "engine", Image: "fake.invalid/engine:bench"}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
}

func deployment(ns, name string, replicas int, labels map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: podTemplate(mergeLabels(labels, map[string]string{"app": name})),
		},
	}
}

func mergeLabels(a, b map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range a {
		m[k] = v
	}
	for k, v := range b {
		m[k] = v
	}
	return m
}

// parallel runs fn(i) for i in [0,n) with at most p in flight, printing progress; the first
// error cancels the rest and is returned.
func parallel(ctx context.Context, what string, n, p int, fn func(ctx context.Context, i int) error) error {
	if n == 0 {
		return nil
	}
	var done atomic.Int64
	start := time.Now()
	stopProgress := make(chan struct{})
	go func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-t.C:
				logf("  %s: %d/%d", what, done.Load(), n)
			}
		}
	}()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(p)
	for i := range n {
		g.Go(func() error {
			defer done.Add(1)
			return fn(gctx, i)
		})
	}
	err := g.Wait()
	close(stopProgress)
	logf("  %s: %d/%d in %s", what, done.Load(), n, time.Since(start).Round(time.Millisecond))
	return err
}

// applyDeployment creates the Deployment or sets its replicas.
func (b *bench) applyDeployment(ctx context.Context, d *appsv1.Deployment) error {
	api := b.admin.kube.AppsV1().Deployments(d.Namespace)
	_, err := api.Create(ctx, d, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	cur, err := api.Get(ctx, d.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if ptr.Deref(cur.Spec.Replicas, 0) == ptr.Deref(d.Spec.Replicas, 0) {
		return nil
	}
	cur.Spec.Replicas = d.Spec.Replicas
	_, err = api.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}

func modelName(i int) string { return fmt.Sprintf("bench-model-%04d", i) }
func poolName(pt int) string { return fmt.Sprintf("bench-pool-%d", pt) }

// populate brings the cluster to point p: M model Deployments holding S pods, U unrelated
// pods, and the adapter pool of this point (P pods), then waits until every pod runs.
func (b *bench) populate(ctx context.Context, idx int, p Point) error {
	logf("populating %s", p)
	var deps []*appsv1.Deployment
	for i := range p.M {
		n := p.S / p.M
		if i < p.S%p.M {
			n++
		}
		deps = append(deps, deployment(modelsNS, modelName(i), n, map[string]string{modelLabel: modelName(i)}))
	}
	for i := range (p.U + podsPerOther - 1) / podsPerOther {
		n := min(podsPerOther, p.U-i*podsPerOther)
		deps = append(deps, deployment(otherNS, fmt.Sprintf("bench-other-%03d", i), n, map[string]string{"role": "unrelated"}))
	}
	pool := deployment(modelsNS, poolName(idx), p.P, map[string]string{modelLabel: poolName(idx), portLabel: fmt.Sprint(b.o.enginePort)})
	if p.C > 0 {
		// A vLLM engine holding C adapters: the fake engines and the controller read these.
		engine := &pool.Spec.Template.Spec.Containers[0]
		engine.Command = []string{"vllm", "serve"}
		engine.Args = []string{poolName(idx), "--enable-lora", "--max-loras", fmt.Sprint(p.C)}
		engine.Env = []corev1.EnvVar{{Name: "VLLM_ALLOW_RUNTIME_LORA_UPDATING", Value: "true"}}
	}
	deps = append(deps, pool)
	if err := parallel(ctx, "deployments created/updated", len(deps), b.o.parallel, func(ctx context.Context, i int) error {
		return b.applyDeployment(ctx, deps[i])
	}); err != nil {
		return err
	}
	want := map[string]int{modelsNS: b.poolPods + p.S + p.P, otherNS: p.U}
	b.poolPods += p.P
	return b.waitPods(ctx, want, 20*time.Minute)
}

// waitPods waits until exactly want[ns] pods run with an IP in each benchmark namespace.
// Exactly: when a point scales a namespace down, pods the ReplicaSet controller has not
// deleted yet must not stand in for pods of another namespace still being created.
func (b *bench) waitPods(ctx context.Context, want map[string]int, timeout time.Duration) error {
	start := time.Now()
	deadline := start.Add(timeout)
	last := time.Time{}
	total := 0
	for _, w := range want {
		total += w
	}
	for {
		n, done := 0, true
		for _, ns := range []string{modelsNS, otherNS} {
			running := 0
			opts := metav1.ListOptions{Limit: 1000}
			for {
				l, err := b.admin.kube.CoreV1().Pods(ns).List(ctx, opts)
				if err != nil {
					return err
				}
				for i := range l.Items {
					if l.Items[i].Status.Phase == corev1.PodRunning && l.Items[i].Status.PodIP != "" && l.Items[i].DeletionTimestamp == nil {
						running++
					}
				}
				if l.Continue == "" {
					break
				}
				opts.Continue = l.Continue
			}
			n += running
			done = done && running == want[ns]
		}
		if done {
			logf("  pods running: %d/%d after %s", n, total, time.Since(start).Round(time.Second))
			return nil
		}
		if time.Since(last) > 5*time.Second {
			logf("  pods running: %d/%d", n, total)
			last = time.Now()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d pods running after %s (want %v per namespace)", n, total, timeout, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

var errTimeout = errors.New("timed out")
