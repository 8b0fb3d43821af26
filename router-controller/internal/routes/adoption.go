package routes

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// maxListedChanges caps the items one AdoptionChanges phrase lists, so that an event stays
// short whatever the route.
const maxListedChanges = 6

// AdoptionChanges describes, in short phrases for an event, what writing desired over
// existing changes in how the route routes and in its labels and annotations: "paths added:
// /v1/responses, /v1/messages", "paths removed: …", "backends: +team-a/llama-svc:8000,
// -team-a/old:8000", "timeout 2m → 10m", "rules: 1 → 2", "labels added: …", "labels
// changed: …", "annotations added: …". Fields the API server defaults (a backend's group,
// kind and weight, a match's types) are not differences. Nothing changed: no phrase.
func AdoptionChanges(existing, desired *gatewayv1.HTTPRoute) []string {
	var out []string
	add := func(label string, items []string) {
		if len(items) > 0 {
			out = append(out, label+listed(items))
		}
	}
	before, after := routePaths(existing), routePaths(desired)
	add("paths added: ", missing(after, before))
	add("paths removed: ", missing(before, after))

	oldBackends, newBackends := routeBackends(existing), routeBackends(desired)
	var backends []string
	for _, b := range missing(newBackends, oldBackends) {
		backends = append(backends, "+"+b)
	}
	for _, b := range missing(oldBackends, newBackends) {
		backends = append(backends, "-"+b)
	}
	add("backends: ", backends)

	if a, b := ruleTimeout(existing), ruleTimeout(desired); a != b {
		out = append(out, fmt.Sprintf("timeout %s → %s", a, b))
	}
	if a, b := len(existing.Spec.Rules), len(desired.Spec.Rules); a != b {
		out = append(out, fmt.Sprintf("rules: %d → %d", a, b))
	}

	var added, changed []string
	for _, k := range slices.Sorted(maps.Keys(desired.Labels)) {
		v := desired.Labels[k]
		switch old, ok := existing.Labels[k]; {
		case !ok:
			added = append(added, k+"="+v)
		case old != v:
			changed = append(changed, fmt.Sprintf("%s %s → %s", k, old, v))
		}
	}
	add("labels added: ", added)
	add("labels changed: ", changed)
	var annotations []string
	for _, k := range slices.Sorted(maps.Keys(desired.Annotations)) {
		if existing.Annotations[k] != desired.Annotations[k] {
			annotations = append(annotations, k)
		}
	}
	add("annotations set: ", annotations)
	return out
}

// listed joins items, at most maxListedChanges of them, saying how many more there are.
func listed(items []string) string {
	if len(items) <= maxListedChanges {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s (+%d more)", strings.Join(items[:maxListedChanges], ", "), len(items)-maxListedChanges)
}

// missing returns the elements of a that b lacks, in a's order.
func missing(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// routePaths returns the distinct path values of route's matches, in order of appearance.
func routePaths(route *gatewayv1.HTTPRoute) []string {
	var out []string
	for _, rule := range route.Spec.Rules {
		for _, m := range rule.Matches {
			if m.Path != nil && m.Path.Value != nil && !slices.Contains(out, *m.Path.Value) {
				out = append(out, *m.Path.Value)
			}
		}
	}
	return out
}

// routeBackends returns route's distinct backends as "namespace/name:port" (the namespace
// defaulting to the route's, the port left out when absent), sorted.
func routeBackends(route *gatewayv1.HTTPRoute) []string {
	var out []string
	for _, rule := range route.Spec.Rules {
		for _, ref := range rule.BackendRefs {
			b := string(ptr.Deref(ref.Namespace, gatewayv1.Namespace(route.Namespace))) + "/" + string(ref.Name)
			if ref.Port != nil {
				b += ":" + strconv.Itoa(int(*ref.Port))
			}
			out = append(out, b)
		}
	}
	return dedupSorted(out)
}

// ruleTimeout renders the request timeout of route's first rule for a message: "none", a
// duration normalised by formatDuration ("2m" for "120s"), or the value as written when it
// cannot be read.
func ruleTimeout(route *gatewayv1.HTTPRoute) string {
	if len(route.Spec.Rules) == 0 || route.Spec.Rules[0].Timeouts == nil || route.Spec.Rules[0].Timeouts.Request == nil {
		return "none"
	}
	raw := string(*route.Spec.Rules[0].Timeouts.Request)
	d, err := parseDuration(raw)
	if err != nil {
		return raw
	}
	return describeTimeout(d)
}
