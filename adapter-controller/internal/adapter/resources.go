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

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/shared/objmeta"
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
	if err != nil {
		return err
	}
	if !ok {
		// A Service of that name that is not ours: our EndpointSlices would attach to it.
		// Ours go, so that nothing stays published (and removals, which wait for the pods to
		// leave them, are not held back).
		for _, name := range []string{a.Name, a.Name + IPv6SliceSuffix} {
			if err := r.deleteOwned(ctx, a, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: a.Namespace, Name: name}}); err != nil {
				return fmt.Errorf("deleting EndpointSlice %s: %w", name, err)
			}
		}
		return nil
	}
	// One EndpointSlice per address family, as Kubernetes' EndpointSlice controller keeps
	// them (addressType is immutable): IPv4 under the adapter's name, as AIBrix names its
	// one slice, always present; IPv6 under <name>-ipv6 while some instance has an IPv6
	// address. A dual-stack pod is in both.
	v4, v6 := desiredEndpointSlices(a, p.instances, port)
	for _, want := range []*discoveryv1.EndpointSlice{v4, v6} {
		if want.AddressType == discoveryv1.AddressTypeIPv6 && len(want.Endpoints) == 0 {
			if err := r.deleteOwned(ctx, a, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: want.Namespace, Name: want.Name}}); err != nil {
				return fmt.Errorf("deleting EndpointSlice %s: %w", want.Name, err)
			}
			continue
		}
		eps := &discoveryv1.EndpointSlice{}
		ok, err = r.ensureOwned(ctx, p, owned{
			kind: "EndpointSlice", want: want, have: eps, createFailed: ReasonEndpointSliceFailed,
			upToDate:  func() bool { return sameEndpoints(eps, want) },
			update:    func() { eps.Ports, eps.Endpoints = want.Ports, want.Endpoints },
			immutable: func() bool { return eps.AddressType != want.AddressType },
		})
		if !ok || err != nil {
			return err
		}
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
	immutable    func() bool   // (optional) have differs from want in a field no update may change
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
	case o.upToDate() && objmeta.HasAll(o.have.GetLabels(), o.want.GetLabels()):
		return true, nil
	case o.immutable != nil && o.immutable():
		// Replaced: deleted (that very object, by UID) and created as wanted.
		uid := o.have.GetUID()
		if err := r.client.Delete(ctx, o.have, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("replacing %s: %w", o.kind, err)
		}
		if err := r.client.Create(ctx, o.want); err != nil {
			p.resourceReason, p.resourceMsg = o.createFailed, err.Error()
			return false, fmt.Errorf("re-creating %s: %w", o.kind, err)
		}
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

// deleteOwned deletes obj (its namespace and name set) when it exists, carries our label
// and the adapter controls it; anything else is left alone.
func (r *Reconciler) deleteOwned(ctx context.Context, a *v1alpha1.ModelAdapter, obj client.Object) error {
	if err := r.client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(obj, a) || obj.GetLabels()[ManagedByLabel] != ManagedByValue {
		return nil
	}
	uid := obj.GetUID()
	return client.IgnoreNotFound(r.client.Delete(ctx, obj, client.Preconditions{UID: &uid}))
}

func desiredService(a *v1alpha1.ModelAdapter, port int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: a.Name, Namespace: a.Namespace,
			Labels: map[string]string{ManagedByLabel: ManagedByValue, v1alpha1.ModelNameLabel: a.Name, v1alpha1.AdapterNameLabel: a.Name},
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

// desiredEndpointSlices returns the adapter's IPv4 slice (named after it) and IPv6 slice
// (<name>-ipv6), each with the instances' addresses of its family (status.podIPs, else
// status.podIP).
func desiredEndpointSlices(a *v1alpha1.ModelAdapter, instances []*corev1.Pod, port int32) (v4, v6 *discoveryv1.EndpointSlice) {
	slice := func(name string, family discoveryv1.AddressType) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: a.Namespace,
				Labels: map[string]string{
					ManagedByLabel:               ManagedByValue,
					discoveryv1.LabelServiceName: a.Name,
					discoveryv1.LabelManagedBy:   EndpointSliceManagedBy,
					v1alpha1.ModelNameLabel:      a.Name,
				},
			},
			AddressType: family,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(port)}},
			Endpoints:   []discoveryv1.Endpoint{},
		}
	}
	v4, v6 = slice(a.Name, discoveryv1.AddressTypeIPv4), slice(a.Name+IPv6SliceSuffix, discoveryv1.AddressTypeIPv6)
	for _, pod := range instances {
		for _, ip := range podIPs(pod) {
			eps := v4
			if ip.To4() == nil {
				eps = v6
			}
			e := discoveryv1.Endpoint{
				Addresses:  []string{ip.String()},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
			}
			if pod.Spec.NodeName != "" {
				e.NodeName = ptr.To(pod.Spec.NodeName)
			}
			eps.Endpoints = append(eps.Endpoints, e)
		}
	}
	return v4, v6
}

// IPv6SliceSuffix ends the name of an adapter's IPv6 EndpointSlice.
const IPv6SliceSuffix = "-ipv6"

// podIPs returns the pod's addresses, at most one per family: status.podIPs, else podIP.
func podIPs(pod *corev1.Pod) []net.IP {
	raw := []string{pod.Status.PodIP}
	if len(pod.Status.PodIPs) > 0 {
		raw = raw[:0]
		for _, ip := range pod.Status.PodIPs {
			raw = append(raw, ip.IP)
		}
	}
	var out []net.IP
	var have4, have6 bool
	for _, s := range raw {
		ip := net.ParseIP(s)
		switch {
		case ip == nil:
		case ip.To4() != nil && !have4:
			have4 = true
			out = append(out, ip)
		case ip.To4() == nil && !have6:
			have6 = true
			out = append(out, ip)
		}
	}
	return out
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
