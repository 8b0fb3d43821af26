package adapter_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/adapter"
	"github.com/loraplane/loraplane/test/fakeengine"
	"github.com/loraplane/loraplane/test/testenv"
)

// sliceEndpoints returns "pod=address" of each endpoint of the slice, sorted; ok false when
// the slice does not exist.
func sliceEndpoints(t *testing.T, ns, name string, family discoveryv1.AddressType) (eps []string, ok bool) {
	t.Helper()
	s := &discoveryv1.EndpointSlice{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
		if !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return nil, false
	}
	if s.AddressType != family {
		t.Fatalf("EndpointSlice %s: addressType %s, want %s", name, s.AddressType, family)
	}
	for _, e := range s.Endpoints {
		eps = append(eps, e.TargetRef.Name+"="+e.Addresses[0])
	}
	slices.Sort(eps)
	return eps, true
}

// podsOf returns the pod of each "pod=address".
func podsOf(eps []string) []string {
	out := make([]string, 0, len(eps))
	for _, e := range eps {
		pod, _, _ := strings.Cut(e, "=")
		out = append(out, pod)
	}
	return out
}

// TestEndpointSlicePerAddressFamily: an adapter on an IPv4 pod and two dual-stack pods keeps
// two EndpointSlices, as Kubernetes' EndpointSlice controller does: IPv4 under its name with
// every pod, IPv6 under <name>-ipv6 with the dual-stack pods. When no instance has an IPv6
// address any more, the IPv6 slice is deleted; the IPv4 one, whose addressType never changes,
// stays. Engine calls go to each pod's primary address, on loopback; the IPv6 addresses are
// from the documentation range 2001:db8::/32 and are only data (the API server refuses ::1
// in an EndpointSlice, and nothing here may dial another address). IPv6-only pods are
// covered by TestDesiredEndpointSlices.
func TestEndpointSlicePerAddressFamily(t *testing.T) {
	needEnv(t)
	ctx := ctxFor(t)
	ns := newNamespace(t)
	const model = "family"
	v4, dualA, dualB := newIP(), newIP(), newIP()
	pods := map[string]*corev1.Pod{}
	for name, ip := range map[string]string{"v4": v4, "dual-a": dualA, "dual-b": dualB} {
		engine(t, ip, 8000, fakeengine.Options{})
		pods[name] = modelPod(t, ns, name, ip, modelLabels(model))
	}
	setIPs := func(name string, ips ...string) {
		t.Helper()
		pod := pods[name]
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			t.Fatal(err)
		}
		pod.Status.PodIPs = nil
		for _, ip := range ips {
			pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		if err := k8s.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	setIPs("dual-a", dualA, "2001:db8::a")
	setIPs("dual-b", dualB, "2001:db8::b")

	a := newAdapter(ns, "lora-family", model)
	if err := k8s.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(a)
	waitAdapter(t, key, 30*time.Second, "Running on the 3 pods", running(3))

	// IPv4 endpoints by pod: the test cluster's admission maps loopback pod addresses.
	want4 := []string{"dual-a", "dual-b", "v4"}
	want6 := []string{"dual-a=2001:db8::a", "dual-b=2001:db8::b"}
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, "one slice per family", func() (bool, string) {
		got4, ok4 := sliceEndpoints(t, ns, a.Name, discoveryv1.AddressTypeIPv4)
		got6, ok6 := sliceEndpoints(t, ns, a.Name+adapter.IPv6SliceSuffix, discoveryv1.AddressTypeIPv6)
		return ok4 && ok6 && slices.Equal(podsOf(got4), want4) && slices.Equal(got6, want6), fmt.Sprintf("IPv4 %v %v, IPv6 %v %v", ok4, got4, ok6, got6)
	})

	// One dual-stack pod goes, the other loses its IPv6 address: no instance has one.
	if err := k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1ObjectMeta(ns, "dual-b")}); err != nil {
		t.Fatal(err)
	}
	setIPs("dual-a", dualA)
	want4 = []string{"dual-a", "v4"}
	waitFor(t, 20*time.Second, "the IPv6 slice deleted, the IPv4 slice kept", func() bool {
		got4, ok4 := sliceEndpoints(t, ns, a.Name, discoveryv1.AddressTypeIPv4)
		_, ok6 := sliceEndpoints(t, ns, a.Name+adapter.IPv6SliceSuffix, discoveryv1.AddressTypeIPv6)
		return ok4 && !ok6 && slices.Equal(podsOf(got4), want4)
	})
	t.Logf("slices per family: %s (IPv4) %v, %s (IPv6) %v; the IPv6 slice deleted when no instance had an IPv6 address",
		a.Name, want4, a.Name+adapter.IPv6SliceSuffix, want6)
}
