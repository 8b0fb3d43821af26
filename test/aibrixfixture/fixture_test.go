package aibrixfixture

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestFixturesRender: every template renders valid YAML of its kind with the fields the
// take-over reads, and the core kinds convert to their typed objects.
func TestFixturesRender(t *testing.T) {
	route, err := HTTPRoute(Route{Name: "qwen2-5-7b-9d7101d42cd9-router", Model: "Qwen2.5-7B", Namespace: "team", Service: "qwen"})
	if err != nil {
		t.Fatal(err)
	}
	matches, _, _ := unstructured.NestedSlice(route.Object, "spec", "rules")
	if len(matches) != 1 {
		t.Fatalf("rules %v", matches)
	}
	rule := matches[0].(map[string]any)
	if n := len(rule["matches"].([]any)); n != len(DefaultPaths) {
		t.Fatalf("%d matches, want %d", n, len(DefaultPaths))
	}
	header := rule["matches"].([]any)[0].(map[string]any)["headers"].([]any)[0].(map[string]any)
	if header["value"] != "Qwen2.5-7B" || header["name"] != "model" || header["type"] != "Exact" {
		t.Fatalf("header %v", header)
	}
	if ns, _, _ := unstructured.NestedString(route.Object, "metadata", "namespace"); ns != "aibrix-system" {
		t.Fatalf("route namespace %q", ns)
	}

	grant, err := ReferenceGrant(Grant{Namespace: "team"})
	if err != nil || grant.GetName() != "aibrix-system-reserved-referencegrant-in-team" {
		t.Fatalf("grant %v, %v", grant, err)
	}

	ad, err := ModelAdapter(Adapter{Name: "lora", Namespace: "team", BaseModel: "qwen", ArtifactURL: "huggingface://org/lora",
		Replicas: 1, Instances: []string{"qwen-1"}, Candidates: 2, ScheduledPods: []string{"qwen-1"}, RetryPods: []string{"qwen-0"}})
	if err != nil {
		t.Fatal(err)
	}
	if f := ad.GetFinalizers(); len(f) != 1 || f[0] != "adapter.model.aibrix.ai/finalizer" {
		t.Fatalf("finalizers %v", f)
	}
	if a := ad.GetAnnotations(); a["adapter.model.aibrix.ai/scheduled-pods"] != "qwen-1" || a["adapter.model.aibrix.ai/retry-count.qwen-0"] != "2" {
		t.Fatalf("annotations %v", a)
	}
	if inst, _, _ := unstructured.NestedStringSlice(ad.Object, "status", "instances"); len(inst) != 1 || inst[0] != "qwen-1" {
		t.Fatalf("instances %v", inst)
	}

	objs := AdapterObjects{Name: "lora", Namespace: "team", BaseModel: "qwen", UID: "0b5e", Addresses: []string{"127.0.1.7"}}
	u, err := Service(objs)
	if err != nil {
		t.Fatal(err)
	}
	var svc corev1.Service
	if err := To(u, &svc); err != nil || svc.Spec.ClusterIP != "None" || len(svc.OwnerReferences) != 1 {
		t.Fatalf("service %+v, %v", svc, err)
	}
	if u, err = EndpointSlice(objs); err != nil {
		t.Fatal(err)
	}
	var slice discoveryv1.EndpointSlice
	if err := To(u, &slice); err != nil || slice.AddressType != discoveryv1.AddressTypeIPv4 || slice.Endpoints[0].Addresses[0] != "127.0.1.7" {
		t.Fatalf("slice %+v, %v", slice, err)
	}
	renewed := time.Date(2026, 12, 3, 12, 0, 0, 123456000, time.UTC)
	if u, err = ControllerManagerLease(Lease{Holder: "cm-0_1", Renewed: renewed}); err != nil {
		t.Fatal(err)
	}
	var lease coordinationv1.Lease
	if err := To(u, &lease); err != nil || !lease.Spec.RenewTime.Time.Equal(renewed) || lease.Name != "aibrix-controller-manager" {
		t.Fatalf("lease %+v, %v", lease, err)
	}
}
