package testenv

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestTestAddress(t *testing.T) {
	for in, want := range map[string]string{"127.0.1.5": "198.18.1.5", "127.0.250.17": "198.18.250.17", "198.51.100.3": "198.51.100.3", "::1": "::1"} {
		if got := TestAddress(in); got != want {
			t.Errorf("TestAddress(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLoopbackEndpointSlicePolicy proves the test clusters' admission policy stores loopback
// pod IPs as 198.18.X.Y and keeps the rest of each endpoint.
func TestLoopbackEndpointSlicePolicy(t *testing.T) {
	flag.Parse()
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
	env, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	c, err := client.New(env.Config, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eps := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "loopback", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "x"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"127.0.3.7"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: "p", Namespace: "default"},
			NodeName:   ptr.To("node-1"),
		}},
	}
	var lastErr error
	Poll(20*time.Second, 200*time.Millisecond, func() bool { // the policy takes a moment to become active
		lastErr = c.Create(ctx, eps.DeepCopy())
		return lastErr == nil
	})
	if lastErr != nil {
		t.Fatalf("creating an EndpointSlice with a loopback address: %v", lastErr)
	}
	got := &discoveryv1.EndpointSlice{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(eps), got); err != nil {
		t.Fatal(err)
	}
	e := got.Endpoints[0]
	if e.Addresses[0] != "198.18.3.7" || e.TargetRef == nil || e.TargetRef.Name != "p" || e.NodeName == nil || *e.NodeName != "node-1" || !*e.Conditions.Ready {
		t.Fatalf("stored endpoint %+v, want address 198.18.3.7 with targetRef, nodeName and conditions kept", e)
	}
	// An EndpointSlice without endpoints (an adapter loaded nowhere yet) passes untouched.
	empty := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "empty", Namespace: "default"},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	if err := c.Create(ctx, empty); err != nil {
		t.Fatalf("creating an EndpointSlice without endpoints: %v", err)
	}
	_ = os.Getenv("")
}
