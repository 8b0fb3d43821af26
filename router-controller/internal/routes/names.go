package routes

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

const (
	routeSuffix = "-router"
	// routeHashLen is how many hex digits of sha256(model) a normalised route name carries.
	routeHashLen = 12
	// maxRouteBase keeps "<base>-<hash>-router" within a DNS-1123 subdomain (253).
	maxRouteBase = validation.DNS1123SubdomainMaxLength - len(routeSuffix) - 1 - routeHashLen
	// emptyRouteBase stands in for a model name with no [a-z0-9] in it.
	emptyRouteBase = "model"

	// legacyHashLen and maxLegacyPrefix are the constants of LegacyRouteName.
	legacyHashLen   = 8
	maxLegacyPrefix = validation.DNS1123LabelMaxLength - len(routeSuffix) - 1 - legacyHashLen

	// modelHashLen is the length of ModelHash, well under the 63-character label value limit.
	modelHashLen = 32
	// referenceGrantPrefix starts every ReferenceGrant name.
	referenceGrantPrefix = "loraplane-router-"
)

// RouteName returns the name of the HTTPRoute of a model.
//
// The name is a contract with AIBrix's gateway plugin, not ours to choose: the plugin finds a
// model's route with GET <gateway namespace>/<RouteName(model)> and answers 503 when it is
// not there, so this must be AIBrix's ModelRouterName (pkg/utils/model_router.go, since
// AIBrix PR #2501) for every model name, and must never change:
//
//   - If "<model>-router" is a valid DNS-1123 subdomain (lowercase alphanumerics, '-' and
//     '.', at most 253 characters), that is the name: "llama-3.1-8b" → "llama-3.1-8b-router".
//   - Otherwise the model name is lowercased, every run of characters other than [a-z0-9]
//     becomes one '-', leading and trailing '-' are trimmed ("model" when nothing is left),
//     the result is cut to 233 characters and trimmed of '-' again, and the name is
//     "<base>-<h>-router" where h is the first 12 hex digits of the SHA-256 of the original
//     model name: "Qwen2.5-7B" → "qwen2-5-7b-9d7101d42cd9-router".
//
// The result is always a valid DNS-1123 subdomain, hence a valid object name. Two model
// names share a route name only through a 48-bit hash collision or when a normalised name
// happens to equal a verbatim one ("x-<12 hex digits>"); the reconciler treats a route of
// that name serving another model as a conflict.
func RouteName(model string) string {
	if name := model + routeSuffix; len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	base := normalise(model, maxRouteBase)
	if base == "" {
		base = emptyRouteBase
	}
	return base + "-" + hashHex(model, routeHashLen) + routeSuffix
}

// LegacyRouteName is the route name earlier loraplane releases gave a model:
// "<model>-router" when that is a DNS-1123 label, else "<normalised, cut to 47>-router-<first
// 8 hex digits of sha256(model)>" ("router-<h>" when nothing survives normalisation). Routes
// of ours under a legacy name that differs from RouteName are replaced: the reconciler
// writes the route under RouteName, then deletes the legacy one (no gap in serving).
func LegacyRouteName(model string) string {
	if name := model + routeSuffix; len(validation.IsDNS1123Label(name)) == 0 {
		return name
	}
	prefix := normalise(model, maxLegacyPrefix)
	h := hashHex(model, legacyHashLen)
	if prefix == "" {
		return strings.TrimPrefix(routeSuffix, "-") + "-" + h
	}
	return prefix + routeSuffix + "-" + h
}

// ModelHash returns the value of ModelHashLabel for a model: the first 32 hex digits of the
// SHA-256 of the model name. Stable across releases.
func ModelHash(model string) string {
	return hashHex(model, modelHashLen)
}

// ReferenceGrantName returns the name of the index'th (0-based) ReferenceGrant that admits
// routes from gatewayNamespace: "loraplane-router-<gatewayNamespace>" for the first, then
// "-2", "-3", … appended. A namespace label is at most 63 characters, so the name is always
// a valid DNS-1123 subdomain without hashing.
func ReferenceGrantName(gatewayNamespace string, index int) string {
	name := referenceGrantPrefix + gatewayNamespace
	if index > 0 {
		name += "-" + strconv.Itoa(index+1)
	}
	return name
}

// normalise lowercases s, replaces runs of characters outside [a-z0-9] with '-', trims '-'
// from both ends and cuts the result to at most max characters (without a trailing '-').
func normalise(s string, max int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			continue
		}
		dash = true
	}
	out := b.String()
	if len(out) > max {
		out = strings.TrimRight(out[:max], "-")
	}
	return out
}

func hashHex(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}
