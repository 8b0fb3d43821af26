//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// applyPodDryRun server-side applies pod with dryRun=All: admission (Pod Security among it)
// runs, nothing is stored.
func applyPodDryRun(ctx context.Context, pod *corev1.Pod) error {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion("v1")
	u.SetKind("Pod")
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("loraplane-e2e"), client.ForceOwnership, client.DryRunAll)
}

// TestPodSecurityRestricted: the Pods of both controller Deployments in deploy/ are admitted
// by a namespace that enforces the "restricted" Pod Security Standard (server-side apply,
// dry run), and the same Pod without its security settings is refused — so the check can
// fail.
func TestPodSecurityRestricted(t *testing.T) {
	root := os.Getenv("E2E_REPO_ROOT")
	if root == "" {
		root = "../.." // test/e2e, where go test runs
	}
	ctx := ctxFor(t, time.Minute)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "e2e-psa-" + suffix(), Labels: map[string]string{
		"pod-security.kubernetes.io/enforce":         "restricted",
		"pod-security.kubernetes.io/enforce-version": "latest",
	}}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })

	for _, binary := range []string{"adapter-controller", "router-controller"} {
		t.Run(binary, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(root, "deploy", binary, "deployment.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var dep appsv1.Deployment
			if err := yaml.UnmarshalStrict(raw, &dep); err != nil {
				t.Fatalf("deploy/%s/deployment.yaml: %v", binary, err)
			}
			if sa := dep.Spec.Template.Spec.ServiceAccountName; sa != "" {
				if err := k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns.Name}}); err != nil && !apierrors.IsAlreadyExists(err) {
					t.Fatal(err)
				}
			}
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: binary, Namespace: ns.Name, Labels: dep.Spec.Template.Labels},
				Spec:       *dep.Spec.Template.Spec.DeepCopy(),
			}
			if err := applyPodDryRun(ctx, pod); err != nil {
				t.Fatalf("the Pod of deploy/%s is refused in a namespace enforcing restricted: %v", binary, err)
			}

			// Negative control: without the security settings the same Pod is refused.
			loose := pod.DeepCopy()
			loose.Spec.SecurityContext = nil
			for i := range loose.Spec.Containers {
				loose.Spec.Containers[i].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(true)}
			}
			err = applyPodDryRun(ctx, loose)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "violates PodSecurity") {
				t.Fatalf("the Pod without its security settings: %v; want a PodSecurity refusal", err)
			}
			t.Logf("deploy/%s: admitted under restricted; without its securityContext refused (%s)", binary, firstLine(err.Error()))
		})
	}
}

func firstLine(s string) string {
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

// TestAPIKeyNeverLeaks: engines that require an API key get it from the adapter's Secret;
// a wrong key is classified as EngineUnauthorized. Neither key, raw or base64, appears in
// the controllers' logs, in any Event of the namespace, or in any adapter's status.
func TestAPIKeyNeverLeaks(t *testing.T) {
	cmds := hooks(t, "E2E_LOG_DIR", "E2E_ENGINE_ADMIN")
	logDir := cmds[0]
	ctx := ctxFor(t, 3*time.Minute)
	ns := namespace(t)
	model := "e2e-key-" + suffix()
	key, wrong := "mp-e2e-key-"+suffix()+suffix()+suffix(), "mp-e2e-wrong-"+suffix()+suffix()+suffix()

	dep := modelDeployment(ns, model, 2)
	dep.Spec.Template.Annotations = map[string]string{"fake-engine.loraplane.dev/api-key": key}
	if err := k8s.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	for name, k := range map[string]string{"engine-key": key, "wrong-key": wrong} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: map[string]string{"api-key": k}}
		if err := k8s.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	pods := waitModelPods(t, 60*time.Second, ns, model, 2)

	keyed := loraAdapter(ns, "keyed", model)
	keyed.Spec.CredentialsSecretRef = &corev1.LocalObjectReference{Name: "engine-key"}
	bad := loraAdapter(ns, "wrong", model)
	bad.Spec.CredentialsSecretRef = &corev1.LocalObjectReference{Name: "wrong-key"}
	for _, a := range []*v1alpha1.ModelAdapter{keyed, bad} {
		if err := k8s.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 60*time.Second, "the keyed adapter on both pods", func() (bool, string) {
		a, err := adapterStatus(ns, keyed.Name)
		if err != nil || a.Status.Phase != v1alpha1.ModelAdapterRunning || a.Status.ReadyReplicas != 2 {
			return false, fmt.Sprintf("%v %+v", err, a.Status)
		}
		return adapterOn(t, ns, pods, keyed.Name)
	})
	waitFor(t, 60*time.Second, "the wrong key reported as EngineUnauthorized", func() (bool, string) {
		a, err := adapterStatus(ns, bad.Name)
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(a.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "EngineUnauthorized", fmt.Sprintf("%+v", c)
	})

	secrets := map[string]string{
		"the key": key, "the key in base64": base64.StdEncoding.EncodeToString([]byte(key)),
		"the wrong key": wrong, "the wrong key in base64": base64.StdEncoding.EncodeToString([]byte(wrong)),
	}
	haystacks := map[string][]byte{}
	if collect := os.Getenv("E2E_COLLECT_LOGS"); collect != "" {
		shell(t, collect) // make e2e: kubectl logs of every replica into logDir
	}
	logs, err := filepath.Glob(filepath.Join(logDir, "*-controller*.log")) // standbys too
	if err != nil || len(logs) < 2 {
		t.Fatalf("controller logs in %s: %v %v", logDir, logs, err)
	}
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		haystacks[filepath.Base(f)] = b
	}
	var coreEvents corev1.EventList
	var newEvents eventsv1.EventList
	var adapters v1alpha1.ModelAdapterList
	for _, l := range []client.ObjectList{&coreEvents, &newEvents, &adapters} {
		if err := k8s.List(ctx, l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
	}
	for name, v := range map[string]any{"core Events": coreEvents.Items, "events.k8s.io Events": newEvents.Items} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		haystacks[name] = b
	}
	for _, a := range adapters.Items {
		b, err := json.Marshal(a.Status)
		if err != nil {
			t.Fatal(err)
		}
		haystacks["status of "+a.Name] = b
	}
	var bytes int
	for where, hay := range haystacks {
		bytes += len(hay)
		for what, s := range secrets {
			if strings.Contains(string(hay), s) {
				t.Errorf("%s appears in %s", what, where)
			}
		}
	}
	if n := len(coreEvents.Items) + len(newEvents.Items); n == 0 {
		t.Error("no Events in the namespace: nothing was searched there")
	}
	t.Logf("searched %d bytes (%d controller logs, %d core and %d events.k8s.io Events, %d adapter statuses) for both keys, raw and base64: not found",
		bytes, len(logs), len(coreEvents.Items), len(newEvents.Items), len(adapters.Items))
}
