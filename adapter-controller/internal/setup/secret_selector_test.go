package setup_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/setup"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/fakeengine"
	"github.com/loraplane/loraplane/test/testenv"
)

// TestSecretLabelSelector: with --secret-label-selector an adapter naming an unlabelled
// credentials Secret reports Ready=False, reason SecretNotSelected, and its key reaches no
// engine (nothing is loaded), while an adapter naming a labelled Secret runs with that
// Secret's key; once the first Secret is labelled, its adapter runs too.
func TestSecretLabelSelector(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k8s, err := client.New(env.Config, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "secret-selector-"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	ip := "127.0.36.1"
	e, err := fakeengine.Start(ip, 8000, fakeengine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	labels := map[string]string{v1alpha1.ModelNameLabel: "sel", v1alpha1.AdapterEnabledLabel: "true"}
	if _, err := testenv.CreateReadyPod(ctx, k8s, ns.Name, "sel-0", ip, labels); err != nil {
		t.Fatal(err)
	}
	const optIn = "loraplane.io/engine-credentials"
	plain := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "plain"}, StringData: map[string]string{"api-key": "sk-plain"}}
	labelled := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "labelled", Labels: map[string]string{optIn: "true"}},
		StringData: map[string]string{"api-key": "sk-labelled"}}
	for _, s := range []*corev1.Secret{plain, labelled} {
		if err := k8s.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	o := options()
	o.WatchNamespaces = []string{ns.Name}
	fs := flag.NewFlagSet("adapter-controller", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--secret-label-selector=" + optIn + "=true"}); err != nil {
		t.Fatal(err)
	}
	stop := start(t, o)
	defer stop()

	newAdapter := func(name, secret string) *v1alpha1.ModelAdapter {
		a := &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name},
			Spec: v1alpha1.ModelAdapterSpec{PodSelector: &metav1.LabelSelector{MatchLabels: labels}, ArtifactURL: "/models/" + name,
				CredentialsSecretRef: &corev1.LocalObjectReference{Name: secret}}}
		if err := k8s.Create(ctx, a); err != nil {
			t.Fatal(err)
		}
		return a
	}
	wait := func(a *v1alpha1.ModelAdapter, what string, ok func(*v1alpha1.ModelAdapter) bool) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, "adapter "+a.Name+": "+what, func() (bool, string) {
			err := k8s.Get(ctx, client.ObjectKeyFromObject(a), a)
			return err == nil && ok(a), fmt.Sprintf("error %v, status %+v", err, a.Status)
		})
	}
	running := func(a *v1alpha1.ModelAdapter) bool { return a.Status.Phase == v1alpha1.ModelAdapterRunning }

	refused := newAdapter("refused", plain.Name)
	wait(refused, "Ready=False, reason SecretNotSelected", func(a *v1alpha1.ModelAdapter) bool {
		c := meta.FindStatusCondition(a.Status.Conditions, string(v1alpha1.ConditionReady))
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "SecretNotSelected" && c.ObservedGeneration == a.Generation
	})
	c := meta.FindStatusCondition(refused.Status.Conditions, string(v1alpha1.ConditionReady))
	if !strings.Contains(c.Message, "--secret-label-selector="+optIn+"=true") || !strings.Contains(c.Message, plain.Name) {
		t.Errorf("the condition's message %q does not name the Secret and the selector", c.Message)
	}
	accepted := newAdapter("accepted", labelled.Name)
	wait(accepted, "Running", running)
	if got := e.KeysSeen(); slices.Contains(got, "sk-plain") || !slices.Contains(got, "sk-labelled") {
		t.Errorf("keys the engine saw: %v; want sk-labelled and never sk-plain", got)
	}
	if got := e.Loaded(); !slices.Equal(got, []string{"accepted"}) {
		t.Errorf("engine holds %v, want only the adapter with the labelled Secret", got)
	}

	// Opting the Secret in lets its adapter run (its next look, here woken by an edit).
	plain.Labels = map[string]string{optIn: "true"}
	if err := k8s.Update(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if refused.Annotations == nil {
		refused.Annotations = map[string]string{}
	}
	refused.Annotations["test/wake"] = "1"
	if err := k8s.Update(ctx, refused); err != nil {
		t.Fatal(err)
	}
	wait(refused, "Running once its Secret is labelled", running)
	if got := e.KeysSeen(); !slices.Contains(got, "sk-plain") {
		t.Errorf("keys the engine saw after the Secret was labelled: %v; want sk-plain among them", got)
	}
}
