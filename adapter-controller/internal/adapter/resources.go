package adapter

import (
	"context"
	"fmt"
	"maps"
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

	wantSvc, svc := desiredService(a, port), &corev1.Service{}
	ok, err := r.ensureOwned(ctx, p, owned{
		kind: "Service", want: wantSvc, have: svc, createFailed: ReasonServiceFailed,
		upToDate: func() bool { return equality.Semantic.DeepEqual(svc.Spec.Ports, wantSvc.Spec.Ports) },
		update:   func() { svc.Spec.Ports = wantSvc.Spec.Ports },
	})
	if !ok || err != nil {
		return err
	}
	wantEPS, eps := desiredEndpointSlice(a, p.instances, port), &discoveryv1.EndpointSlice{}
	ok, err = r.ensureOwned(ctx, p, owned{
		kind: "EndpointSlice", want: wantEPS, have: eps, createFailed: ReasonEndpointSliceFailed,
		upToDate: func() bool { return sameEndpoints(eps, wantEPS) },
		update: func() {
			eps.AddressType, eps.Ports, eps.Endpoints = wantEPS.AddressType, wantEPS.Ports, wantEPS.Endpoints
		},
	})
	if !ok || err != nil {
		return err
	}
	p.resourcesReady = true
	return nil
}

// owned is an object the adapter owns, named after it.
type owned struct {
	kind         string        // for messages
	want, have   client.Object // desired (with our labels); an empty object to read into
	createFailed string        // condition reason when creating it fails
	upToDate     func() bool   // have's own fields (labels aside) match want
	update       func()        // copies want's own fields into have
}

// ensureOwned creates o.want when missing and otherwise brings o.have up to date: our labels
// set, labels of others kept, o.update applied. An object of that name that the adapter
// does not control is reported in the status, never modified; ok is then false.
//
// The caches of these kinds hold only objects with our labels: one that exists without them
// (made by AIBrix's model-adapter-controller, which owns it by the adapter as we do) is
// found when the create answers AlreadyExists, read from the API server and, when the
// adapter controls it, adopted: our labels are written on it, so the cache holds it from
// then on.
func (r *Reconciler) ensureOwned(ctx context.Context, p *pass, o owned) (ok bool, err error) {
	a := p.adapter
	if err := controllerutil.SetControllerReference(a, o.want, r.client.Scheme()); err != nil {
		return false, err
	}
	key := client.ObjectKeyFromObject(o.want)
	err = r.client.Get(ctx, key, o.have)
	if apierrors.IsNotFound(err) {
		err = r.client.Create(ctx, o.want)
		if err == nil {
			return true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			p.resourceReason, p.resourceMsg = o.createFailed, err.Error()
			return false, fmt.Errorf("creating %s: %w", o.kind, err)
		}
		err = r.apiReader.Get(ctx, key, o.have)
	}
	switch {
	case err != nil:
		return false, fmt.Errorf("reading %s: %w", o.kind, err)
	case !metav1.IsControlledBy(o.have, a):
		p.resourceReason, p.resourceMsg = ReasonServiceConflict, fmt.Sprintf("%s %s exists and is not owned by this adapter", o.kind, o.want.GetName())
		return false, nil
	case o.upToDate() && hasLabels(o.have, o.want.GetLabels()):
		return true, nil
	}
	patch := client.MergeFrom(o.have.DeepCopyObject().(client.Object))
	labels := o.have.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, o.want.GetLabels())
	o.have.SetLabels(labels)
	o.update()
	if err := r.client.Patch(ctx, o.have, patch); err != nil {
		return false, fmt.Errorf("updating %s: %w", o.kind, err)
	}
	return true, nil
}

// hasLabels reports whether obj carries every label of want.
func hasLabels(obj client.Object, want map[string]string) bool {
	for k, v := range want {
		if obj.GetLabels()[k] != v {
			return false
		}
	}
	return true
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
	for i := range want.Endpoints {
		h, w := have.Endpoints[i], want.Endpoints[i]
		if h.TargetRef == nil || h.TargetRef.UID != w.TargetRef.UID ||
			!equality.Semantic.DeepEqual(h.Conditions, w.Conditions) || len(h.Addresses) != len(w.Addresses) {
			return false
		}
	}
	return true
}
