package routes

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	modelv1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/shared/text"
)

// KindModelAdapter is the Source kind of ModelAdapters, which route to their own Service.
const KindModelAdapter = "ModelAdapter"

// MaxCustomPaths caps the custom paths one source may add. It is half the per-route match
// limit, so a source cannot exhaust a route on its own together with the default paths.
const MaxCustomPaths = 64

// Limits from the Gateway API v1.6.3 standard CRDs (config/crd/standard).
const (
	// MaxMatchesPerRule is spec.rules[].matches maxItems.
	MaxMatchesPerRule = 64
	// MaxRulesPerRoute is spec.rules maxItems.
	MaxRulesPerRoute = 16
	// MaxMatchesPerRoute is the CEL limit on matches summed over all rules.
	MaxMatchesPerRoute = 128
	// MaxBackendRefsPerRule is spec.rules[].backendRefs maxItems.
	MaxBackendRefsPerRule = 16
	// MaxReferenceGrantTo is ReferenceGrant spec.to maxItems.
	MaxReferenceGrantTo = 16
	// MaxPathLength is spec.rules[].matches[].path.value maxLength.
	MaxPathLength = 1024
	// MaxHeaderValueLength is spec.rules[].matches[].headers[].value maxLength.
	MaxHeaderValueLength = 4096
)

// BuildRoute splits at most MaxMatchesPerRoute matches into rules of MaxMatchesPerRule, so
// it never needs more than MaxRulesPerRoute rules: this array has a negative length, and the
// package does not compile, if the limits ever change so that it could.
var _ [MaxRulesPerRoute - (MaxMatchesPerRoute+MaxMatchesPerRule-1)/MaxMatchesPerRule]struct{}

// Source is one workload that claims a model, reduced to what routing needs.
type Source struct {
	// Kind, Namespace and Name identify the workload, e.g. Deployment/team-a/llama.
	Kind      string
	Namespace string
	Name      string
	// Model is the model name clients send in the "model" header.
	Model string
	// Service is the Service in Namespace that fronts the workload.
	Service string
	// Port is the Service port.
	Port int32
	// Paths are the workload's valid custom path prefixes, sorted and de-duplicated.
	Paths []string
}

// Key returns "kind/namespace/name", which identifies a source in messages.
func (s Source) Key() string {
	return s.Kind + "/" + s.Namespace + "/" + s.Name
}

// ClaimedModel returns the model name a workload claims, whether or not it can be routed:
// for a ModelAdapter always its name, since engines load the adapter and AIBrix's gateway
// plugin looks it up by that name; for other kinds the label model.aibrix.ai/name, else the
// annotation of that key, else "" (no claim). SourceFromObject routes exactly the workloads
// that claim a model (and reports the problems of those it cannot route).
func ClaimedModel(kind string, obj metav1.Object) string {
	if kind == KindModelAdapter {
		return obj.GetName()
	}
	if m := obj.GetLabels()[modelv1alpha1.ModelNameLabel]; m != "" {
		return m
	}
	return obj.GetAnnotations()[modelv1alpha1.ModelNameLabel]
}

// adapterNameProblems reports a model.aibrix.ai/name label or annotation on a ModelAdapter
// that differs from its name: ClaimedModel ignores both.
func adapterNameProblems(obj metav1.Object) []string {
	var problems []string
	for _, m := range []struct{ what, value string }{
		{"Label", obj.GetLabels()[modelv1alpha1.ModelNameLabel]},
		{"Annotation", obj.GetAnnotations()[modelv1alpha1.ModelNameLabel]},
	} {
		if m.value != "" && m.value != obj.GetName() {
			problems = append(problems, fmt.Sprintf("%s %s %q differs from the adapter's name; it is routed as %q, the name engines and AIBrix's gateway use",
				m.what, modelv1alpha1.ModelNameLabel, m.value, obj.GetName()))
		}
	}
	return problems
}

// SourceFromObject reads the routing labels and annotations of a workload of the given kind.
//
// adapterPort matters for ModelAdapters only: the port of the Service the adapter-controller
// published for the adapter (AdapterPort), 0 while it has published none. A ModelAdapter is
// routed on that port (its port label is not read) and not at all without it: a route must
// not point at a Service that does not exist.
//
// ok is false when the object is not a model workload (no model name; problems is empty) or
// when it cannot be routed (problems says why). Problems are complete sentences meant for a
// Warning event on the object; with ok true they describe values that were ignored or replaced
// by defaults.
func SourceFromObject(kind string, obj metav1.Object, adapterPort int32) (src Source, ok bool, problems []string) {
	labels, annotations := obj.GetLabels(), obj.GetAnnotations()
	src = Source{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}

	if src.Model = ClaimedModel(kind, obj); src.Model == "" {
		return Source{}, false, nil
	}

	if kind == KindModelAdapter {
		problems = adapterNameProblems(obj)
		// The adapter controller publishes every adapter behind a headless Service named
		// after it; the service-name annotation cannot redirect that.
		src.Service = obj.GetName()
	} else if svc := annotations[modelv1alpha1.ServiceNameAnnotation]; svc != "" {
		src.Service = svc
	} else {
		src.Service = src.Model
	}

	var err error
	if kind == KindModelAdapter {
		src.Port = adapterPort
	} else if src.Port, err = modelv1alpha1.EnginePort(labels); err != nil {
		problems = append(problems, fmt.Sprintf("%s; using %d", capitalize(err.Error()), src.Port))
	}

	var pathProblems []string
	src.Paths, pathProblems = parseCustomPaths(annotations[modelv1alpha1.CustomPathsAnnotation])
	problems = append(problems, pathProblems...)

	if err := ValidateModelName(src.Model); err != nil {
		return Source{}, false, append(problems, fmt.Sprintf("Model name %q cannot be routed: %v", src.Model, err))
	}
	if msgs := validation.IsDNS1035Label(src.Service); len(msgs) > 0 {
		return Source{}, false, append(problems, fmt.Sprintf("Service name %q for model %q is not a valid Service name: %s",
			src.Service, src.Model, strings.Join(msgs, "; ")))
	}
	if kind == KindModelAdapter && src.Port == 0 {
		return Source{}, false, append(problems, fmt.Sprintf("Waiting for the adapter-controller to publish Service %s/%s",
			src.Namespace, src.Service))
	}
	return src, true, problems
}

// capitalize makes an error message the start of a Warning sentence.
func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// parseCustomPaths splits the custom-paths annotation. Entries are trimmed, empty ones
// dropped, invalid ones and those that reach an engine's adapter or admin endpoints
// (ReachesEngineAdmin) dropped with a problem, duplicates merged, and at most MaxCustomPaths
// kept (in annotation order). The result is sorted.
func parseCustomPaths(value string) (paths, problems []string) {
	seen := map[string]bool{}
	overflow := 0
	for _, p := range strings.Split(value, ",") {
		p = strings.TrimSpace(p)
		if p == "" || seen[p] {
			continue
		}
		if err := ValidatePath(p); err != nil {
			problems = append(problems, fmt.Sprintf("Ignoring custom path %q in annotation %s: %v",
				text.Truncate(p, 80), modelv1alpha1.CustomPathsAnnotation, err))
			continue
		}
		if engine, endpoint, reaches := ReachesEngineAdmin(p); reaches {
			problems = append(problems, fmt.Sprintf("Ignoring custom path %q in annotation %s: it would let gateway clients reach %s's endpoint %s, an engine adapter or admin endpoint",
				text.Truncate(p, 80), modelv1alpha1.CustomPathsAnnotation, engine, endpoint))
			continue
		}
		seen[p] = true
		if len(paths) == MaxCustomPaths {
			overflow++
			continue
		}
		paths = append(paths, p)
	}
	if overflow > 0 {
		problems = append(problems, fmt.Sprintf("Ignoring %d custom paths in annotation %s beyond the limit of %d",
			overflow, modelv1alpha1.CustomPathsAnnotation, MaxCustomPaths))
	}
	slices.Sort(paths)
	return paths, problems
}

// pathChars is the character rule of the HTTPRoute CRD for Exact and PathPrefix values.
var pathChars = regexp.MustCompile(`^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$`)

// ValidatePath checks a path prefix against the HTTPRoute CRD rules for PathPrefix values
// (gateway-api v1.6.3 apis/v1/httproute_types.go, HTTPPathMatch).
func ValidatePath(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return errors.New(`must start with "/"`)
	case len(p) > MaxPathLength:
		return fmt.Errorf("must be at most %d characters", MaxPathLength)
	case !pathChars.MatchString(p):
		return errors.New("must contain only URL path characters (no whitespace, '?', '#' or bare '%')")
	}
	for _, bad := range []string{"//", "/./", "/../", "%2f", "%2F"} {
		if strings.Contains(p, bad) {
			return fmt.Errorf("must not contain %q", bad)
		}
	}
	for _, bad := range []string{"/..", "/."} {
		if strings.HasSuffix(p, bad) {
			return fmt.Errorf("must not end with %q", bad)
		}
	}
	return nil
}

// ValidateModelName checks that a model name can be the value of the route's "model"
// header match: at most MaxHeaderValueLength bytes of valid UTF-8, without control
// characters or line and paragraph separators, spaces and tabs only singly between other
// characters (RFC 9110 field values, which clients and gateways trim).
//
// Non-ASCII names (模型) are routed: the standard channel of the v1.6.3 HTTPRoute CRD limits
// a header match value only in length, AIBrix routes such names, and its gateway plugin sets
// the header from the request body as it is. The experimental channel's CRD adds the pattern
// ^[!-~]+([\t ]?[!-~]+)*$ (printable US-ASCII): where it is installed, the API server refuses
// the route of such a name.
func ValidateModelName(model string) error {
	switch {
	case model == "":
		return errors.New("must not be empty")
	case len(model) > MaxHeaderValueLength:
		return fmt.Errorf("must be at most %d bytes", MaxHeaderValueLength)
	case !utf8.ValidString(model):
		return errors.New("must be valid UTF-8")
	}
	previousBlank := true // a blank at the start is refused like two in a row
	for _, r := range model {
		blank := r == ' ' || r == '\t'
		switch {
		case blank && previousBlank:
			return errors.New("must not start or end with a space or tab, nor have two in a row")
		case !blank && (unicode.IsControl(r) || unicode.In(r, unicode.Zl, unicode.Zp)):
			return fmt.Errorf("must not contain control characters or line separators (%U)", r)
		}
		previousBlank = blank
	}
	if previousBlank {
		return errors.New("must not start or end with a space or tab, nor have two in a row")
	}
	return nil
}

// dedupSorted returns the distinct elements of in, sorted; in is not modified.
func dedupSorted(in []string) []string {
	out := slices.Clone(in)
	slices.Sort(out)
	return slices.Compact(out)
}
