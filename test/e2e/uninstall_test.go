//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

const (
	releaseNamespace = "loraplane-system"
	crdName          = "modeladapters.model.aibrix.ai"
)

// TestUninstallKeepsFleet: removing loraplane with a running fleet, the two ways it is
// installed, keeps the user's data by default:
//   - helm install of the chart (defaults, adopting the objects the local stack applied),
//     then helm uninstall: any pre-delete hook Job the chart renders is run as its pod would
//     run it (the adapter-controller binary with the Job's arguments, as the Job's
//     ServiceAccount), since kwok runs no containers;
//   - kubectl apply -k deploy/default, then make undeploy.
//
// After each, the controllers are stopped (their Deployments are gone) and: every
// ModelAdapter still exists, is not being deleted, is still loaded on every engine, the
// engines got no unload (nor load) call, the CRD is still there. Then the stack's objects are
// applied again and the controllers started, as a reinstall would: the adapters are Running
// on the same pods, still without a single engine call.
func TestUninstallKeepsFleet(t *testing.T) {
	if os.Getenv("E2E_UNINSTALL_KWOK") == "" {
		t.Skip("E2E_UNINSTALL_KWOK is not set: only on the local kwok cluster (make e2e-local), whose controllers run as processes; on kind hack/e2e-kind-helm.sh uninstalls the installation itself")
	}
	h := hooks(t, "E2E_REPO_ROOT", "E2E_STOP_ADAPTER", "E2E_STOP_ROUTER", "E2E_ENSURE_ADAPTER", "E2E_ENSURE_ROUTER", "E2E_ENGINE_ADMIN")
	root := h[0]
	stop := func() { shell(t, h[1]); shell(t, h[2]) }
	ensure := func() { shell(t, h[3]); shell(t, h[4]) }
	ctx := ctxFor(t, 12*time.Minute)
	t.Cleanup(func() { reinstallStack(t, root); ensure() })

	ns := namespace(t)
	model := "uninstall-" + suffix()
	pods := startModel(ctx, t, 90*time.Second, ns, model, 2)
	adapters := []string{"lora-keep-a", "lora-keep-b"}
	for _, name := range adapters {
		createAdapter(ctx, t, ns, name, model)
	}
	for _, name := range adapters {
		waitRunning(t, ns, name, pods)
	}
	before := engineCalls(t, ns)
	t.Logf("fleet: %d adapters Running on %d pods; engine calls %v", len(adapters), len(pods), before)

	for _, way := range []struct {
		name              string
		install, uninstal func(t *testing.T, root string)
	}{
		{"helm uninstall", helmInstall, helmUninstall},
		{"make undeploy", kustomizeInstall, makeUndeploy},
	} {
		t.Run(strings.ReplaceAll(way.name, " ", "-"), func(t *testing.T) {
			way.install(t, root)
			way.uninstal(t, root)
			stop() // the Deployments are gone, and with them the controllers
			assertKept(ctx, t, ns, adapters, pods, before)
			reinstallStack(t, root)
			ensure()
			for _, name := range adapters {
				waitRunning(t, ns, name, pods)
			}
			if after := engineCalls(t, ns); !mapsEqual(before, after) {
				t.Errorf("%s and a reinstall: engine calls %v, before %v; want none", way.name, after, before)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func createAdapter(ctx context.Context, t *testing.T, ns, name, model string) {
	t.Helper()
	a := &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.ModelAdapterSpec{
			BaseModel:   ptr.To(model),
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{v1alpha1.ModelNameLabel: model, v1alpha1.AdapterEnabledLabel: "true"}},
			ArtifactURL: "huggingface://example/" + name,
		},
	}
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
}

// waitRunning waits until the adapter is Running on every pod and loaded on each engine.
func waitRunning(t *testing.T, ns, name string, pods []corev1.Pod) {
	t.Helper()
	waitFor(t, 90*time.Second, fmt.Sprintf("%s Running on %d pods", name, len(pods)), func() (bool, string) {
		a, err := adapterStatus(ns, name)
		if err != nil || a.Status.Phase != v1alpha1.ModelAdapterRunning || int(a.Status.ReadyReplicas) != len(pods) {
			return false, fmt.Sprintf("%+v %v", a.Status, err)
		}
		return adapterOn(t, ns, pods, name)
	})
}

// assertKept: every adapter exists, is not being deleted and is loaded on every engine; no
// engine call since before; the CRD exists.
func assertKept(ctx context.Context, t *testing.T, ns string, adapters []string, pods []corev1.Pod, before map[string]string) {
	t.Helper()
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := k8s.Get(ctx, client.ObjectKey{Name: crdName}, crd); err != nil || crd.DeletionTimestamp != nil {
		t.Fatalf("the CRD %s after the removal: %v, deletion %v; want it kept", crdName, err, crd.DeletionTimestamp)
	}
	for _, name := range adapters {
		a, err := adapterStatus(ns, name)
		switch {
		case err != nil:
			t.Errorf("ModelAdapter %s/%s after the removal: %v", ns, name, err)
		case a.DeletionTimestamp != nil:
			t.Errorf("ModelAdapter %s/%s is being deleted after the removal", ns, name)
		}
		if ok, state := adapterOn(t, ns, pods, name); !ok {
			t.Errorf("ModelAdapter %s/%s: %s after the removal", ns, name, state)
		}
	}
	if after := engineCalls(t, ns); !mapsEqual(before, after) {
		t.Errorf("engine calls after the removal %v, before %v; want no unload (nor load)", after, before)
	}
}

// cmdIn runs a command in the repository root with the suite's kubeconfig; it returns the
// combined output.
func cmdIn(root string, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = root
	cmd.Env = os.Environ()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func mustCmd(t *testing.T, root string, timeout time.Duration, name string, args ...string) {
	t.Helper()
	out, err := cmdIn(root, timeout, name, args...)
	t.Logf("%s %s:\n%s", filepath.Base(name), strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("%s %s: %v", filepath.Base(name), strings.Join(args, " "), err)
	}
}

// helmInstall installs the chart with its defaults as release loraplane, adopting the objects
// the stack applied (the controllers themselves run as processes; the chart's pods stay
// Pending on kwok's tainted nodes).
func helmInstall(t *testing.T, root string) {
	mustCmd(t, root, 2*time.Minute, filepath.Join(root, "bin", "helm"), "install", "loraplane", "deploy/chart/loraplane",
		"-n", releaseNamespace, "--take-ownership", "--force-conflicts")
	t.Cleanup(func() {
		_, _ = cmdIn(root, time.Minute, filepath.Join(root, "bin", "helm"), "uninstall", "loraplane", "-n", releaseNamespace, "--no-hooks")
	})
}

// helmUninstall runs helm uninstall while playing the kubelet for the hook Jobs it creates.
func helmUninstall(t *testing.T, root string) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runHookJobs(t, root, done)
	}()
	out, err := cmdIn(root, 3*time.Minute, filepath.Join(root, "bin", "helm"), "uninstall", "loraplane", "-n", releaseNamespace, "--timeout", "60s")
	close(done)
	wg.Wait()
	t.Logf("helm uninstall:\n%s", out)
	if err != nil {
		t.Errorf("helm uninstall: %v", err)
	}
}

// runHookJobs runs each Helm hook Job that appears in the release namespace until done, as
// its pod would: bin/adapter-controller with the Job's arguments, as its ServiceAccount.
func runHookJobs(t *testing.T, root string, done <-chan struct{}) {
	ran := map[string]bool{}
	for {
		select {
		case <-done:
			return
		case <-time.After(200 * time.Millisecond):
		}
		var jobs batchv1.JobList
		if err := k8s.List(context.Background(), &jobs, client.InNamespace(releaseNamespace)); err != nil {
			continue
		}
		for _, j := range jobs.Items {
			if ran[string(j.UID)] || j.Annotations["helm.sh/hook"] == "" {
				continue
			}
			ran[string(j.UID)] = true
			spec := j.Spec.Template.Spec
			kc := impersonating(t, "system:serviceaccount:"+releaseNamespace+":"+spec.ServiceAccountName)
			args := append(slices.Clone(spec.Containers[0].Args), "--kubeconfig="+kc)
			out, err := cmdIn(root, 5*time.Minute, filepath.Join(root, "bin", "adapter-controller"), args...)
			t.Logf("hook Job %s (%s) run as its pod would: %v\n%s", j.Name, j.Annotations["helm.sh/hook"], err, out)
		}
	}
}

// impersonating writes a kubeconfig that acts as user (the suite's credentials, impersonating).
func impersonating(t *testing.T, user string) string {
	cfg, err := clientcmd.NewDefaultClientConfigLoadingRules().Load()
	if err != nil {
		t.Errorf("kubeconfig: %v", err)
		return ""
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Errorf("kubeconfig: %v", err)
	}
	return path
}

func kustomizeInstall(t *testing.T, root string) {
	mustCmd(t, root, 2*time.Minute, filepath.Join(root, "bin", "kubectl"), "apply", "--server-side", "--force-conflicts", "-k", "deploy/default")
}

func makeUndeploy(t *testing.T, root string) {
	out, err := cmdIn(root, 8*time.Minute, "make", "--no-print-directory", "undeploy")
	t.Logf("make undeploy:\n%s", out)
	if err != nil {
		t.Errorf("make undeploy: %v", err)
	}
}

// reinstallStack applies again what hack/stack.sh installs (the CRD, the release namespace,
// both controllers' RBAC), once a namespace being deleted is gone.
func reinstallStack(t *testing.T, root string) {
	t.Helper()
	waitFor(t, 3*time.Minute, "namespace "+releaseNamespace+" not terminating", func() (bool, string) {
		n := &corev1.Namespace{}
		err := k8s.Get(context.Background(), client.ObjectKey{Name: releaseNamespace}, n)
		return apierrors.IsNotFound(err) || (err == nil && n.DeletionTimestamp == nil), fmt.Sprint(err, n.Status.Phase)
	})
	kubectl := filepath.Join(root, "bin", "kubectl")
	for _, dir := range []string{"deploy/crds", "deploy/namespace"} {
		mustCmd(t, root, time.Minute, kubectl, "apply", "--server-side", "--force-conflicts", "-k", dir)
	}
	// The generated roles name their namespaces (the release's; the router's HTTPRoute Role the
	// gateway namespace, bound by gateway-rbac.yaml); the bindings leave it to kustomize.
	for _, b := range []string{"adapter-controller", "router-controller"} {
		mustCmd(t, root, time.Minute, kubectl, "apply", "--server-side", "--force-conflicts", "-f", "deploy/"+b+"/rbac/role.yaml")
		mustCmd(t, root, time.Minute, kubectl, "apply", "--server-side", "--force-conflicts", "-n", releaseNamespace, "-f", "deploy/"+b+"/rbac.yaml")
	}
	mustCmd(t, root, time.Minute, kubectl, "apply", "--server-side", "--force-conflicts", "-f", "deploy/router-controller/gateway-rbac.yaml")
	mustCmd(t, root, time.Minute, kubectl, "wait", "--for", "condition=established", "--timeout=60s", "crd/"+crdName)
}
