//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/loraplane/loraplane/test/fakeengine"
)

// localGateway routes one request as a Gateway API implementation would on the local kwok
// cluster, where none runs: it reads the objects the controllers write and nothing else.
//
//  1. The HTTPRoutes of the gateway namespace attached to the Gateway: the oldest one with a
//     rule whose match takes the path (PathPrefix) and the header model (Exact).
//  2. One of that rule's backendRefs (a Service); in another namespace only when a
//     ReferenceGrant there admits HTTPRoutes of the gateway namespace to it, as the Gateway
//     API requires (else 500, as an implementation answers for RefNotPermitted).
//  3. A ready endpoint of the Service's EndpointSlices. The local cluster's admission policy
//     rewrote the pods' loopback addresses 127.0.X.Y to 198.18.X.Y (data only); they are
//     mapped back, and nothing outside 127.0.0.0/8 is ever dialled.
func localGateway(t *testing.T, path, model string) gwAnswer {
	ctx := context.Background()
	var routes gatewayv1.HTTPRouteList
	if err := k8s.List(ctx, &routes, client.InNamespace(gatewayNamespace())); err != nil {
		return gwAnswer{err: err}
	}
	slices.SortFunc(routes.Items, func(a, b gatewayv1.HTTPRoute) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for i := range routes.Items {
		r := &routes.Items[i]
		if !attached(r) {
			continue
		}
		for _, rule := range r.Spec.Rules {
			if !slices.ContainsFunc(rule.Matches, func(m gatewayv1.HTTPRouteMatch) bool { return matches(m, path, model) }) {
				continue
			}
			if len(rule.BackendRefs) == 0 {
				return gwAnswer{status: http.StatusInternalServerError, body: "no backends"}
			}
			return forward(ctx, t, r, rule.BackendRefs[rand.IntN(len(rule.BackendRefs))], path, model)
		}
	}
	return gwAnswer{status: http.StatusNotFound, body: "no route"}
}

func attached(r *gatewayv1.HTTPRoute) bool {
	for _, p := range r.Spec.ParentRefs {
		ns := r.Namespace
		if p.Namespace != nil {
			ns = string(*p.Namespace)
		}
		if ns == gatewayNamespace() && string(p.Name) == gatewayName() {
			return true
		}
	}
	return false
}

func matches(m gatewayv1.HTTPRouteMatch, path, model string) bool {
	if m.Path != nil {
		prefix := strings.TrimSuffix(ptr.Deref(m.Path.Value, "/"), "/")
		if path != prefix && !strings.HasPrefix(path, prefix+"/") {
			return false
		}
	}
	for _, h := range m.Headers {
		if ptr.Deref(h.Type, gatewayv1.HeaderMatchExact) != gatewayv1.HeaderMatchExact || !strings.EqualFold(string(h.Name), "model") || h.Value != model {
			return false
		}
	}
	return true
}

func forward(ctx context.Context, t *testing.T, r *gatewayv1.HTTPRoute, ref gatewayv1.HTTPBackendRef, path, model string) gwAnswer {
	ns := string(ptr.Deref(ref.Namespace, gatewayv1.Namespace(r.Namespace)))
	if ns != r.Namespace && !granted(ctx, ns, r.Namespace, string(ref.Name)) {
		return gwAnswer{status: http.StatusInternalServerError, body: fmt.Sprintf("RefNotPermitted: Service %s/%s", ns, ref.Name)}
	}
	var eps discoveryv1.EndpointSliceList
	if err := k8s.List(ctx, &eps, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: string(ref.Name)}); err != nil {
		return gwAnswer{err: err}
	}
	var targets []netip.AddrPort
	for _, s := range eps.Items {
		if len(s.Ports) == 0 || s.Ports[0].Port == nil {
			continue
		}
		for _, e := range s.Endpoints {
			if !ptr.Deref(e.Conditions.Ready, true) || len(e.Addresses) == 0 {
				continue
			}
			ip, ok := loopbackOf(e.Addresses[0])
			if !ok {
				t.Errorf("endpoint %s of Service %s/%s is neither loopback nor the test mapping of it; not dialled", e.Addresses[0], ns, ref.Name)
				continue
			}
			targets = append(targets, netip.AddrPortFrom(ip, uint16(*s.Ports[0].Port)))
		}
	}
	if len(targets) == 0 {
		return gwAnswer{status: http.StatusServiceUnavailable, body: fmt.Sprintf("no ready endpoint for Service %s/%s", ns, ref.Name)}
	}
	target := targets[rand.IntN(len(targets))]
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": "hello", "max_tokens": 4})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+target.String()+path, bytes.NewReader(body))
	if err != nil {
		return gwAnswer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := gwClient.Do(req)
	if err != nil {
		return gwAnswer{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	a := gwAnswer{status: resp.StatusCode, servedBy: resp.Header.Get(fakeengine.ServedByHeader)}
	if resp.StatusCode != http.StatusOK {
		a.body = string(b[:min(len(b), 200)])
		return a
	}
	var c fakeengine.Completion
	if err := json.Unmarshal(b, &c); err != nil {
		a.err = fmt.Errorf("answer %q: %w", b, err)
		return a
	}
	a.model = c.Model
	return a
}

// granted reports whether a ReferenceGrant in ns admits HTTPRoutes of from to Service svc.
func granted(ctx context.Context, ns, from, svc string) bool {
	var grants gatewayv1beta1.ReferenceGrantList
	if err := k8s.List(ctx, &grants, client.InNamespace(ns)); err != nil {
		return false
	}
	for _, g := range grants.Items {
		fromOK := slices.ContainsFunc(g.Spec.From, func(f gatewayv1beta1.ReferenceGrantFrom) bool {
			return f.Group == gatewayv1.GroupName && f.Kind == "HTTPRoute" && string(f.Namespace) == from
		})
		toOK := slices.ContainsFunc(g.Spec.To, func(to gatewayv1beta1.ReferenceGrantTo) bool {
			return to.Group == "" && to.Kind == "Service" && (to.Name == nil || string(*to.Name) == svc)
		})
		if fromOK && toOK {
			return true
		}
	}
	return false
}

// loopbackOf maps an endpoint address to the loopback address to dial: 127.0.0.0/8 as is,
// 198.18.X.Y (the local cluster's rewrite of 127.0.X.Y) back to 127.0.X.Y; anything else is
// refused.
func loopbackOf(addr string) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(addr)
	if err != nil || !ip.Is4() {
		return netip.Addr{}, false
	}
	b := ip.As4()
	switch {
	case b[0] == 127:
		return ip, true
	case b[0] == 198 && b[1] == 18:
		return netip.AddrFrom4([4]byte{127, 0, b[2], b[3]}), true
	}
	return netip.Addr{}, false
}
