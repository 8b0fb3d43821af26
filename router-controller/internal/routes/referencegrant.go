package routes

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
)

// AssignReferenceGrants returns the ReferenceGrants that let routes in the gateway
// namespace reference exactly the given Services in namespace (duplicates merged, order
// irrelevant), changing as few of the current grants as it can: a Service stays in the
// grant that already admits it, so adding or removing one rewrites one grant.
//
// current are this router's grants in namespace (not being deleted); reserved are the names
// of the other grants there (not ours, or being deleted), which are never reused. The rules:
//
//  1. Current grants are taken in name order (shorter names first, then lexically, so
//     "x" < "x-2" < "x-10"). Each keeps the Services it admits that are still wanted and not
//     kept by an earlier grant, at most MaxReferenceGrantTo. A Service admitted twice is
//     thus dropped from the later grant.
//  2. The Services left, sorted, fill the current grants with room, in the same order.
//  3. What is still left goes to new grants of MaxReferenceGrantTo Services each, named
//     ReferenceGrantName(gateway namespace, i) for the smallest i whose name is free.
//
// The result is in that order, each grant's Services sorted, and depends only on the
// arguments. A current grant left without Services is not returned: it is surplus, to be
// deleted after the returned grants are applied. No grants (and no error) are returned when
// namespace is the gateway namespace or services is empty. Every grant carries
// ManagedByLabel, GatewayNamespaceLabel and InstallLabel.
func AssignReferenceGrants(cfg Config, namespace string, services []string,
	current []*gatewayv1beta1.ReferenceGrant, reserved []string) ([]*gatewayv1beta1.ReferenceGrant, error) {
	if msgs := validation.IsDNS1123Label(cfg.GatewayNamespace); len(msgs) > 0 {
		return nil, fmt.Errorf("gateway namespace %q is invalid: %s", cfg.GatewayNamespace, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Label(namespace); len(msgs) > 0 {
		return nil, fmt.Errorf("namespace %q is invalid: %s", namespace, strings.Join(msgs, "; "))
	}
	services = dedupSorted(services)
	for _, s := range services {
		if msgs := validation.IsDNS1035Label(s); len(msgs) > 0 {
			return nil, fmt.Errorf("service %q in namespace %q is invalid: %s", s, namespace, strings.Join(msgs, "; "))
		}
	}
	if namespace == cfg.GatewayNamespace || len(services) == 0 {
		return nil, nil
	}

	type slot struct {
		name     string
		services []string
	}
	wanted := make(map[string]bool, len(services))
	for _, s := range services {
		wanted[s] = true
	}
	taken := make(map[string]bool, len(current)+len(reserved))
	for _, name := range reserved {
		taken[name] = true
	}

	// 1. Keep what the current grants already admit.
	placed := make(map[string]bool, len(services))
	slots := make([]*slot, 0, len(current))
	for _, g := range slices.SortedFunc(slices.Values(current), func(a, b *gatewayv1beta1.ReferenceGrant) int {
		return compareGrantNames(a.Name, b.Name)
	}) {
		if taken[g.Name] {
			continue // listed twice
		}
		taken[g.Name] = true
		s := &slot{name: g.Name}
		for _, svc := range AdmittedServices(g) {
			if wanted[svc] && !placed[svc] && len(s.services) < MaxReferenceGrantTo {
				s.services = append(s.services, svc)
				placed[svc] = true
			}
		}
		slots = append(slots, s)
	}

	// 2. Fill the current grants with room.
	pending := slices.DeleteFunc(slices.Clone(services), func(svc string) bool { return placed[svc] })
	for _, s := range slots {
		n := min(MaxReferenceGrantTo-len(s.services), len(pending))
		s.services = append(s.services, pending[:n]...)
		pending = pending[n:]
	}

	// 3. New grants for the rest, under the first free names.
	for i := 0; len(pending) > 0; i++ {
		name := ReferenceGrantName(cfg.GatewayNamespace, i)
		if taken[name] {
			continue
		}
		taken[name] = true
		n := min(MaxReferenceGrantTo, len(pending))
		slots = append(slots, &slot{name: name, services: pending[:n]})
		pending = pending[n:]
	}

	var grants []*gatewayv1beta1.ReferenceGrant
	for _, s := range slots {
		if len(s.services) > 0 {
			grants = append(grants, newReferenceGrant(cfg, namespace, s.name, s.services))
		}
	}
	return grants, nil
}

// AdmittedServices returns the sorted distinct Services that a ReferenceGrant admits by
// name. Entries of other kinds, and entries without a name (every Service), are left out:
// the grants built here have neither.
func AdmittedServices(g *gatewayv1beta1.ReferenceGrant) []string {
	out := make([]string, 0, len(g.Spec.To))
	for _, to := range g.Spec.To {
		if to.Group == "" && to.Kind == "Service" && to.Name != nil {
			out = append(out, string(*to.Name))
		}
	}
	return dedupSorted(out)
}

// compareGrantNames orders grant names shorter first, then lexically, which is index order
// for the names ReferenceGrantName gives: "x" < "x-2" < "x-10".
func compareGrantNames(a, b string) int {
	return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
}

// newReferenceGrant builds a grant named name admitting services (in any order) in
// namespace to routes of the gateway namespace.
func newReferenceGrant(cfg Config, namespace, name string, services []string) *gatewayv1beta1.ReferenceGrant {
	to := make([]gatewayv1beta1.ReferenceGrantTo, 0, len(services))
	for _, s := range slices.Sorted(slices.Values(services)) {
		name := gatewayv1.ObjectName(s)
		to = append(to, gatewayv1beta1.ReferenceGrantTo{Group: "", Kind: "Service", Name: &name})
	}
	return &gatewayv1beta1.ReferenceGrant{
		TypeMeta: metav1.TypeMeta{APIVersion: gatewayv1beta1.GroupVersion.String(), Kind: "ReferenceGrant"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels: map[string]string{
				ManagedByLabel:        ManagedByValue,
				GatewayNamespaceLabel: cfg.GatewayNamespace,
				InstallLabel:          cfg.Install(),
			},
		},
		Spec: gatewayv1beta1.ReferenceGrantSpec{
			From: []gatewayv1beta1.ReferenceGrantFrom{{
				Group:     gatewayv1.GroupName,
				Kind:      "HTTPRoute",
				Namespace: gatewayv1.Namespace(cfg.GatewayNamespace),
			}},
			To: to,
		},
	}
}
