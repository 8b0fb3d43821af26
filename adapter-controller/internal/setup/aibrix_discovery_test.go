package setup_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/setup"
	"github.com/loraplane/loraplane/test/aibrixfixture"
)

// TestRefusesToStartBesideUnseenAIBrix: AIBrix's controller-manager installed by its Helm
// chart into another namespace holds its Lease there, which the default
// --aibrix-controller-leases does not list: the adapter-controller refuses to start (both
// would load and unload the same adapters) and says which Lease to add; with it listed, or
// with AIBrix scaled to zero, it starts.
func TestRefusesToStartBesideUnseenAIBrix(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ns = "ml-serving"
	if err := env.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	k8s, err := client.New(env.Config, client.Options{Scheme: setup.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := aibrixfixture.ControllerManagerDeployment(aibrixfixture.ControllerManager{
		Namespace: ns, Name: "prod-aibrix-controller-manager", Replicas: 1,
		Args: []string{"--leader-elect", "--leader-election-namespace=" + ns, "--enable-runtime-sidecar"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), d) })

	o := options()
	_, err = setup.Build(ctx, o, env.Config)
	if err == nil || !strings.Contains(err.Error(), "refusing to start") ||
		!strings.Contains(err.Error(), "holding the Lease ml-serving/aibrix-controller-manager, which --aibrix-controller-leases does not list") {
		t.Fatalf("with AIBrix's Lease unlisted: got %v, want a refusal naming the Lease", err)
	}

	o = options()
	o.AIBrixControllerLeases = append(o.AIBrixControllerLeases, ns+"/aibrix-controller-manager")
	if _, err := setup.Build(ctx, o, env.Config); err != nil {
		t.Fatalf("with AIBrix's Lease listed: %v", err)
	}

	if err := k8s.Patch(ctx, d, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"replicas":0}}`))); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Build(ctx, options(), env.Config); err != nil {
		t.Fatalf("with AIBrix scaled to zero: %v", err)
	}
}
