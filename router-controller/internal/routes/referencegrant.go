package routes

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
)

// BuildReferenceGrants returns the ReferenceGrants that let routes in the gateway namespace
// reference exactly the given Services in namespace (duplicates merged, order irrelevant).
//
// It returns no grants (and no error) when namespace is the gateway namespace or services is
// empty: nothing needs granting, and any existing managed grants there should be deleted.
//
// A ReferenceGrant names at most MaxReferenceGrantTo Services, so the sorted Services are cut
// into groups of that size, one grant each, named ReferenceGrantName(gateway namespace, i).
// Usually there is one grant. When there are several, adding or removing a Service can move
// others to a neighbouring grant, so apply every desired grant before deleting surplus ones.
// Every grant carries ManagedByLabel and GatewayNamespaceLabel.
func BuildReferenceGrants(cfg Config, namespace string, services []string) ([]*gatewayv1beta1.ReferenceGrant, error) {
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

	var grants []*gatewayv1beta1.ReferenceGrant
	for chunk := range slices.Chunk(services, MaxReferenceGrantTo) {
		to := make([]gatewayv1beta1.ReferenceGrantTo, 0, len(chunk))
		for _, s := range chunk {
			name := gatewayv1.ObjectName(s)
			to = append(to, gatewayv1beta1.ReferenceGrantTo{Group: "", Kind: "Service", Name: &name})
		}
		grants = append(grants, &gatewayv1beta1.ReferenceGrant{
			TypeMeta: metav1.TypeMeta{APIVersion: gatewayv1beta1.GroupVersion.String(), Kind: "ReferenceGrant"},
			ObjectMeta: metav1.ObjectMeta{
				Name:      ReferenceGrantName(cfg.GatewayNamespace, len(grants)),
				Namespace: namespace,
				Labels: map[string]string{
					ManagedByLabel:        ManagedByValue,
					GatewayNamespaceLabel: cfg.GatewayNamespace,
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
		})
	}
	return grants, nil
}

// ServicesByNamespace returns, for every namespace other than the gateway namespace, the
// sorted distinct Services that sources route to: the services argument of
// BuildReferenceGrants. Pass only sources whose routes are published.
func ServicesByNamespace(cfg Config, sources []Source) map[string][]string {
	out := map[string][]string{}
	for _, s := range sources {
		if s.Namespace != cfg.GatewayNamespace {
			out[s.Namespace] = append(out[s.Namespace], s.Service)
		}
	}
	for ns, svcs := range out {
		out[ns] = dedupSorted(svcs)
	}
	return out
}
