package routes

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// ModelHeader is the request header that selects a model.
const ModelHeader = "model"

// backend is one distinct backendRef target.
type backend struct {
	namespace, service string
	port               int32
}

func compareBackends(a, b backend) int {
	return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.service, b.service), cmp.Compare(a.port, b.port))
}

// BuildRoute returns the desired HTTPRoute for model, served by sources (every live source
// claiming the model; at least one). The route is named RouteName(model) and lives in the
// gateway namespace. The result depends only on the set of sources, not their order.
//
// Shape:
//   - one match per path prefix (Config.Paths ∪ sources' Paths, de-duplicated, sorted by
//     byte value), each also requiring header "model" to equal model exactly;
//   - matches split into rules of at most MaxMatchesPerRule, in path order, every rule with the
//     same backends and request timeout;
//   - one backendRef per distinct (namespace, Service, port), sorted, weight 1, with group,
//     kind and namespace always set (also for the gateway namespace), so the object is explicit
//     and equals what the API server stores.
//
// It returns an error, and no route, when the configuration or a source is invalid or the
// route would exceed the Gateway API limits (more than MaxMatchesPerRoute paths or
// MaxBackendRefsPerRule backends). Errors here are not fixed by retrying.
func BuildRoute(cfg Config, model string, sources []Source) (*gatewayv1.HTTPRoute, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid router configuration: %w", err)
	}
	if err := ValidateModelName(model); err != nil {
		return nil, fmt.Errorf("model name %q cannot be routed: %w", model, err)
	}
	srcs, err := canonicalSources(model, sources)
	if err != nil {
		return nil, err
	}

	paths := slices.Clone(cfg.Paths)
	var backends []backend
	for _, s := range srcs {
		paths = append(paths, s.Paths...)
		backends = append(backends, backend{namespace: s.Namespace, service: s.Service, port: s.Port})
	}
	paths = dedupSorted(paths)
	slices.SortFunc(backends, compareBackends)
	backends = slices.Compact(backends)

	switch {
	case len(paths) == 0:
		// A route without matches would default to matching every request on the gateway.
		return nil, fmt.Errorf("model %q has no paths to route: configure paths or add custom paths", model)
	case len(paths) > MaxMatchesPerRoute:
		return nil, fmt.Errorf("model %q needs %d path matches, more than the Gateway API limit of %d per route",
			model, len(paths), MaxMatchesPerRoute)
	case len(backends) > MaxBackendRefsPerRule:
		return nil, fmt.Errorf("model %q has %d distinct backends (namespace, Service, port), more than the Gateway API limit of %d",
			model, len(backends), MaxBackendRefsPerRule)
	}

	timeout, _ := formatDuration(cfg.Timeout) // validated above
	var rules []gatewayv1.HTTPRouteRule
	for chunk := range slices.Chunk(paths, MaxMatchesPerRule) {
		rule := gatewayv1.HTTPRouteRule{
			Matches:     make([]gatewayv1.HTTPRouteMatch, 0, len(chunk)),
			BackendRefs: backendRefs(backends),
		}
		for _, p := range chunk {
			rule.Matches = append(rule.Matches, match(model, p))
		}
		if timeout != "" {
			rule.Timeouts = &gatewayv1.HTTPRouteTimeouts{Request: ptr.To(gatewayv1.Duration(timeout))}
		}
		rules = append(rules, rule)
	}

	return &gatewayv1.HTTPRoute{
		TypeMeta: metav1.TypeMeta{APIVersion: gatewayv1.GroupVersion.String(), Kind: "HTTPRoute"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      RouteName(model),
			Namespace: cfg.GatewayNamespace,
			Labels: map[string]string{
				ManagedByLabel: ManagedByValue,
				ModelHashLabel: ModelHash(model),
				InstallLabel:   cfg.Install(),
				GatewayLabel:   cfg.GatewayName,
			},
			Annotations: map[string]string{
				ModelAnnotation:  model,
				ScopesAnnotation: FormatScopes(SourceScopes(srcs)),
			},
		},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{
				ParentRefs: []gatewayv1.ParentReference{{
					Group:     ptr.To(gatewayv1.Group(gatewayv1.GroupName)),
					Kind:      ptr.To(gatewayv1.Kind("Gateway")),
					Namespace: ptr.To(gatewayv1.Namespace(cfg.GatewayNamespace)),
					Name:      gatewayv1.ObjectName(cfg.GatewayName),
				}},
			},
			Rules: rules,
		},
	}, nil
}

func match(model, path string) gatewayv1.HTTPRouteMatch {
	return gatewayv1.HTTPRouteMatch{
		Path: &gatewayv1.HTTPPathMatch{
			Type:  ptr.To(gatewayv1.PathMatchPathPrefix),
			Value: ptr.To(path),
		},
		Headers: []gatewayv1.HTTPHeaderMatch{{
			Type:  ptr.To(gatewayv1.HeaderMatchExact),
			Name:  ModelHeader,
			Value: model,
		}},
	}
}

// backendRefs builds fresh backendRefs (no sharing between rules).
func backendRefs(backends []backend) []gatewayv1.HTTPBackendRef {
	refs := make([]gatewayv1.HTTPBackendRef, 0, len(backends))
	for _, b := range backends {
		refs = append(refs, gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{
			BackendObjectReference: gatewayv1.BackendObjectReference{
				Group:     ptr.To(gatewayv1.Group("")),
				Kind:      ptr.To(gatewayv1.Kind("Service")),
				Name:      gatewayv1.ObjectName(b.service),
				Namespace: ptr.To(gatewayv1.Namespace(b.namespace)),
				Port:      ptr.To(b.port),
			},
			Weight: ptr.To[int32](1),
		}})
	}
	return refs
}

// canonicalSources validates sources for model and returns them sorted by Key, with exact
// duplicates merged. Two different sources with the same key are an error.
func canonicalSources(model string, sources []Source) ([]Source, error) {
	if len(sources) == 0 {
		return nil, fmt.Errorf("model %q has no sources", model)
	}
	out := make([]Source, 0, len(sources))
	var errs []error
	for _, s := range sources {
		if err := validateSource(model, s); err != nil {
			errs = append(errs, fmt.Errorf("source %s: %w", s.Key(), err))
			continue
		}
		s.Paths = dedupSorted(s.Paths)
		out = append(out, s)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("model %q: %w", model, err)
	}
	slices.SortFunc(out, func(a, b Source) int { return cmp.Compare(a.Key(), b.Key()) })
	merged := out[:1]
	for _, s := range out[1:] {
		last := merged[len(merged)-1]
		if s.Key() != last.Key() {
			merged = append(merged, s)
			continue
		}
		if s.Service != last.Service || s.Port != last.Port || !slices.Equal(s.Paths, last.Paths) {
			return nil, fmt.Errorf("model %q: conflicting duplicate source %s", model, s.Key())
		}
	}
	return merged, nil
}

// kindPattern is the Gateway API Kind pattern; it keeps "/" and "," out of ScopesAnnotation.
var kindPattern = regexp.MustCompile(`^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`)

func validateSource(model string, s Source) error {
	var errs []error
	if s.Model != model {
		errs = append(errs, fmt.Errorf("claims model %q, not %q", s.Model, model))
	}
	if len(s.Kind) > 63 || !kindPattern.MatchString(s.Kind) {
		errs = append(errs, fmt.Errorf("kind %q is invalid", s.Kind))
	}
	if msgs := validation.IsDNS1123Label(s.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("namespace %q is invalid: %s", s.Namespace, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsDNS1123Subdomain(s.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("name %q is invalid: %s", s.Name, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsDNS1035Label(s.Service); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("service %q is invalid: %s", s.Service, strings.Join(msgs, "; ")))
	}
	if s.Port < 1 || s.Port > 65535 {
		errs = append(errs, fmt.Errorf("port %d is out of range 1-65535", s.Port))
	}
	for _, p := range s.Paths {
		if err := ValidatePath(p); err != nil {
			errs = append(errs, fmt.Errorf("path %q is invalid: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// IsManaged reports whether obj carries the router controller's managed-by label. Objects
// that are not managed are never modified or deleted.
func IsManaged(obj metav1.Object) bool {
	return obj.GetLabels()[ManagedByLabel] == ManagedByValue
}

// ModelOf returns the model name a route built by BuildRoute serves, or "" when obj carries
// no model annotation.
func ModelOf(obj metav1.Object) string {
	return obj.GetAnnotations()[ModelAnnotation]
}
