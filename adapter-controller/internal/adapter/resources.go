package adapter

import (
	"context"
	"fmt"
	"net"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1alpha1 "github.com/modelplane/modelplane/shared/api/model/v1alpha1"
)

// enginePort is the port of the adapter's Service: the engine port of its first instance
// (or of the first candidate), the default without either. An instance's port is valid: a
// pod with a bad port label cannot be loaded on.
func enginePort(p *pass) int32 {
	pods := p.instances
	if len(pods) == 0 {
		pods = p.candidates
	}
	if len(pods) == 0 {
		return v1alpha1.DefaultEnginePort
	}
	port, _ := v1alpha1.EnginePort(pods[0].Labels) // a bad value: the default, as documented
	return port
}

// syncResources keeps the headless Service (no selector) and the EndpointSlice of the
// adapter: addresses are the instances' pod IPs. Objects that exist but are not ours are
// reported, never modified.
func (r *Reconciler) syncResources(ctx context.Context, p *pass) error {
	if p.specErr != nil {
		return nil //nolint:nilerr // an unusable spec is reported in the status; there is nothing to publish
	}
	a := p.adapter
	port := enginePort(p)

	svc := &corev1.Service{}
	err := r.client.Get(ctx, client.ObjectKeyFromObject(a), svc)
	switch {
	case apierrors.IsNotFound(err):
		svc = desiredService(a, port)
		if err := controllerutil.SetControllerReference(a, svc, r.client.Scheme()); err != nil {
			return err
		}
		if err := r.client.Create(ctx, svc); err != nil && !apierrors.IsAlreadyExists(err) {
			p.resourceReason, p.resourceMsg = ReasonServiceFailed, err.Error()
			return fmt.Errorf("creating Service: %w", err)
		}
	case err != nil:
		return fmt.Errorf("reading Service: %w", err)
	case !metav1.IsControlledBy(svc, a):
		p.resourceReason, p.resourceMsg = ReasonServiceConflict, fmt.Sprintf("Service %s exists and is not owned by this adapter", a.Name)
		return nil
	default:
		want := desiredService(a, port)
		if !equality.Semantic.DeepEqual(svc.Spec.Ports, want.Spec.Ports) || svc.Labels[ManagedByLabel] != ManagedByValue {
			patch := client.MergeFrom(svc.DeepCopy())
			svc.Spec.Ports = want.Spec.Ports
			if svc.Labels == nil {
				svc.Labels = map[string]string{}
			}
			for k, v := range want.Labels {
				svc.Labels[k] = v
			}
			if err := r.client.Patch(ctx, svc, patch); err != nil {
				return fmt.Errorf("updating Service: %w", err)
			}
		}
	}

	want := desiredEndpointSlice(a, p.instances, port)
	if err := controllerutil.SetControllerReference(a, want, r.client.Scheme()); err != nil {
		return err
	}
	eps := &discoveryv1.EndpointSlice{}
	err = r.client.Get(ctx, client.ObjectKeyFromObject(want), eps)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
			p.resourceReason, p.resourceMsg = ReasonEndpointSliceFailed, err.Error()
			return fmt.Errorf("creating EndpointSlice: %w", err)
		}
	case err != nil:
		return fmt.Errorf("reading EndpointSlice: %w", err)
	case !metav1.IsControlledBy(eps, a):
		p.resourceReason, p.resourceMsg = ReasonServiceConflict, fmt.Sprintf("EndpointSlice %s exists and is not owned by this adapter", want.Name)
		return nil
	case !sameEndpoints(eps, want):
		eps.Labels, eps.AddressType, eps.Ports, eps.Endpoints = want.Labels, want.AddressType, want.Ports, want.Endpoints
		if err := r.client.Update(ctx, eps); err != nil {
			return fmt.Errorf("updating EndpointSlice: %w", err)
		}
	}
	p.resourcesReady = true
	return nil
}

func desiredService(a *v1alpha1.ModelAdapter, port int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: a.Name, Namespace: a.Namespace,
			Labels: map[string]string{ManagedByLabel: ManagedByValue, v1alpha1.ModelNameLabel: a.Name},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Ports: []corev1.ServicePort{{
				Name: "http", Protocol: corev1.ProtocolTCP, Port: port,
				TargetPort: intOrPort(port),
			}},
		},
	}
}

func desiredEndpointSlice(a *v1alpha1.ModelAdapter, instances []*corev1.Pod, port int32) *discoveryv1.EndpointSlice {
	eps := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: a.Name, Namespace: a.Namespace,
			Labels: map[string]string{
				ManagedByLabel:               ManagedByValue,
				discoveryv1.LabelServiceName: a.Name,
				discoveryv1.LabelManagedBy:   EndpointSliceManagedBy,
				v1alpha1.ModelNameLabel:      a.Name,
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(port)}},
		Endpoints:   []discoveryv1.Endpoint{},
	}
	for _, pod := range instances {
		ip := net.ParseIP(pod.Status.PodIP)
		if ip == nil {
			continue
		}
		if ip.To4() == nil {
			eps.AddressType = discoveryv1.AddressTypeIPv6
		}
		e := discoveryv1.Endpoint{
			Addresses:  []string{pod.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		}
		if pod.Spec.NodeName != "" {
			e.NodeName = ptr.To(pod.Spec.NodeName)
		}
		eps.Endpoints = append(eps.Endpoints, e)
	}
	return eps
}

// sameEndpoints compares endpoints by the pod they point at (UID) rather than by address: a
// pod's IP does not change while its UID stays, and admission may rewrite addresses (the
// test clusters map loopback pod IPs), which must not cause an update on every pass.
func sameEndpoints(have, want *discoveryv1.EndpointSlice) bool {
	if have.AddressType != want.AddressType || !equality.Semantic.DeepEqual(have.Ports, want.Ports) ||
		len(have.Endpoints) != len(want.Endpoints) {
		return false
	}
	for k, v := range want.Labels {
		if have.Labels[k] != v {
			return false
		}
	}
	for i := range want.Endpoints {
		h, w := have.Endpoints[i], want.Endpoints[i]
		if h.TargetRef == nil || h.TargetRef.UID != w.TargetRef.UID ||
			!equality.Semantic.DeepEqual(h.Conditions, w.Conditions) || len(h.Addresses) != len(w.Addresses) {
			return false
		}
	}
	return true
}
