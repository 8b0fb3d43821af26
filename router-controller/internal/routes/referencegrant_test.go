package routes

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
)

func mustMatch(pattern, s string) bool {
	return regexp.MustCompile(pattern).MatchString(s)
}

func wantGrant(name string, services ...string) *gatewayv1beta1.ReferenceGrant {
	var to []gatewayv1beta1.ReferenceGrantTo
	for _, s := range services {
		to = append(to, gatewayv1beta1.ReferenceGrantTo{Group: "", Kind: "Service", Name: ptr.To(gatewayv1.ObjectName(s))})
	}
	return &gatewayv1beta1.ReferenceGrant{
		TypeMeta: metav1.TypeMeta{APIVersion: "gateway.networking.k8s.io/v1beta1", Kind: "ReferenceGrant"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: "team-a",
			Labels: map[string]string{
				"app.kubernetes.io/managed-by":    "modelplane-router-controller",
				"modelplane.io/gateway-namespace": "aibrix-system",
			},
		},
		Spec: gatewayv1beta1.ReferenceGrantSpec{
			From: []gatewayv1beta1.ReferenceGrantFrom{{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Namespace: "aibrix-system"}},
			To:   to,
		},
	}
}

func TestBuildReferenceGrants(t *testing.T) {
	var seventeen []string
	for i := 16; i >= 0; i-- { // reverse order: output must be sorted anyway
		seventeen = append(seventeen, fmt.Sprintf("svc-%02d", i))
	}
	cases := map[string]struct {
		namespace string
		services  []string
		want      []*gatewayv1beta1.ReferenceGrant
		wantErr   string
	}{
		"sorted and deduplicated": {
			namespace: "team-a", services: []string{"llama", "adapter", "llama"},
			want: []*gatewayv1beta1.ReferenceGrant{wantGrant("modelplane-router-aibrix-system", "adapter", "llama")},
		},
		"gateway namespace needs none": {namespace: "aibrix-system", services: []string{"llama"}},
		"no services needs none":       {namespace: "team-a"},
		"exactly 16": {
			namespace: "team-a", services: seventeen[1:],
			want: []*gatewayv1beta1.ReferenceGrant{wantGrant("modelplane-router-aibrix-system",
				"svc-00", "svc-01", "svc-02", "svc-03", "svc-04", "svc-05", "svc-06", "svc-07",
				"svc-08", "svc-09", "svc-10", "svc-11", "svc-12", "svc-13", "svc-14", "svc-15")},
		},
		"17 services split": {
			namespace: "team-a", services: seventeen,
			want: []*gatewayv1beta1.ReferenceGrant{
				wantGrant("modelplane-router-aibrix-system",
					"svc-00", "svc-01", "svc-02", "svc-03", "svc-04", "svc-05", "svc-06", "svc-07",
					"svc-08", "svc-09", "svc-10", "svc-11", "svc-12", "svc-13", "svc-14", "svc-15"),
				wantGrant("modelplane-router-aibrix-system-2", "svc-16"),
			},
		},
		"invalid service":   {namespace: "team-a", services: []string{"Llama"}, wantErr: `service "Llama" in namespace "team-a" is invalid`},
		"invalid namespace": {namespace: "Team", services: []string{"llama"}, wantErr: `namespace "Team" is invalid`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := BuildReferenceGrants(testConfig(), tc.namespace, tc.services)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("BuildReferenceGrants: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("BuildReferenceGrants mismatch (-want +got):\n%s", diff)
			}
			for _, g := range got {
				if !IsManaged(g) {
					t.Errorf("grant %s is not marked managed", g.Name)
				}
				if n := len(g.Spec.To); n < 1 || n > MaxReferenceGrantTo {
					t.Errorf("grant %s has %d to entries, want 1-%d", g.Name, n, MaxReferenceGrantTo)
				}
			}
		})
	}
}

func TestServicesByNamespace(t *testing.T) {
	sources := []Source{
		src("Deployment", "team-b", "b", "m1", "svc-b", 8000),
		src("Deployment", "team-a", "a", "m1", "svc-a", 8000),
		src("StatefulSet", "team-a", "a", "m2", "svc-a", 9000),
		src(KindModelAdapter, "team-a", "lora", "lora", "lora", 8000),
		src("Deployment", "aibrix-system", "c", "m3", "svc-c", 8000),
	}
	want := map[string][]string{"team-a": {"lora", "svc-a"}, "team-b": {"svc-b"}}
	if diff := cmp.Diff(want, ServicesByNamespace(testConfig(), sources)); diff != "" {
		t.Errorf("ServicesByNamespace mismatch (-want +got):\n%s", diff)
	}
}
