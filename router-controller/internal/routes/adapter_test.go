package routes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func TestServicePort(t *testing.T) {
	port := func(name string, proto corev1.Protocol, p int32) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Protocol: proto, Port: p}
	}
	cases := map[string]struct {
		ports  []corev1.ServicePort
		want   int32
		wantOK bool
	}{
		"the adapter-controller's": {ports: []corev1.ServicePort{port("http", corev1.ProtocolTCP, 30000)}, want: 30000, wantOK: true},
		"only port, unnamed":       {ports: []corev1.ServicePort{port("", corev1.ProtocolTCP, 8080)}, want: 8080, wantOK: true},
		"no protocol is TCP":       {ports: []corev1.ServicePort{port("", "", 8080)}, want: 8080, wantOK: true},
		"http wins over the first": {ports: []corev1.ServicePort{port("metrics", corev1.ProtocolTCP, 9090), port("http", corev1.ProtocolTCP, 30000)}, want: 30000, wantOK: true},
		"else the first TCP port":  {ports: []corev1.ServicePort{port("a", corev1.ProtocolUDP, 53), port("b", corev1.ProtocolTCP, 8001), port("c", corev1.ProtocolTCP, 8002)}, want: 8001, wantOK: true},
		"an http UDP port is not":  {ports: []corev1.ServicePort{port("http", corev1.ProtocolUDP, 53), port("b", corev1.ProtocolTCP, 8001)}, want: 8001, wantOK: true},
		"no TCP port":              {ports: []corev1.ServicePort{port("http", corev1.ProtocolSCTP, 30000)}},
		"no port":                  {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := ServicePort(&corev1.Service{Spec: corev1.ServiceSpec{Ports: tc.ports}})
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("ServicePort = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestAdapterPort(t *testing.T) {
	adapter := &metav1.ObjectMeta{Namespace: "team-a", Name: "sql-lora", UID: "uid-1"}
	// ours is the Service as the adapter-controller writes it for adapter.
	ours := func(mutate func(*corev1.Service)) *corev1.Service {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "team-a", Name: "sql-lora",
				Labels: map[string]string{"app.kubernetes.io/managed-by": "loraplane-adapter-controller", "model.aibrix.ai/name": "sql-lora"},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "model.aibrix.ai/v1alpha1", Kind: "ModelAdapter", Name: "sql-lora", UID: "uid-1", Controller: ptr.To(true),
				}},
			},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 30000}}},
		}
		if mutate != nil {
			mutate(svc)
		}
		return svc
	}
	cases := map[string]struct {
		svc  *corev1.Service
		want int32
	}{
		"published":      {svc: ours(nil), want: 30000},
		"none":           {svc: nil},
		"other name":     {svc: ours(func(s *corev1.Service) { s.Name = "other" })},
		"other ns":       {svc: ours(func(s *corev1.Service) { s.Namespace = "team-b" })},
		"not managed":    {svc: ours(func(s *corev1.Service) { delete(s.Labels, "app.kubernetes.io/managed-by") })},
		"other manager":  {svc: ours(func(s *corev1.Service) { s.Labels["app.kubernetes.io/managed-by"] = "helm" })},
		"no model label": {svc: ours(func(s *corev1.Service) { delete(s.Labels, "model.aibrix.ai/name") })},
		"other model":    {svc: ours(func(s *corev1.Service) { s.Labels["model.aibrix.ai/name"] = "other" })},
		"no controller":  {svc: ours(func(s *corev1.Service) { s.OwnerReferences[0].Controller = nil })},
		"earlier adapter of that name": {svc: ours(func(s *corev1.Service) {
			s.OwnerReferences[0].UID = types.UID("uid-0")
		})},
		"controlled by another kind": {svc: ours(func(s *corev1.Service) { s.OwnerReferences[0].Kind = "Deployment" })},
		"no TCP port": {svc: ours(func(s *corev1.Service) {
			s.Spec.Ports[0].Protocol = corev1.ProtocolUDP
		})},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := AdapterPort(adapter, tc.svc); got != tc.want {
				t.Errorf("AdapterPort = %d, want %d", got, tc.want)
			}
		})
	}
}
