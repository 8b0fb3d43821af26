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
	routeHashLen = 8
	// maxRoutePrefix keeps "<prefix>-router-<hash>" within a DNS-1123 label (63).
	maxRoutePrefix = validation.DNS1123LabelMaxLength - len(routeSuffix) - 1 - routeHashLen
	// modelHashLen is the length of ModelHash, well under the 63-character label value limit.
	modelHashLen = 32
	// referenceGrantPrefix starts every ReferenceGrant name.
	referenceGrantPrefix = "modelplane-router-"
)

// RouteName returns the HTTPRoute name for a model. It is part of the upgrade contract: the
// same model must map to the same name in every release, or upgrades orphan routes.
//
//   - If "<model>-router" is a valid DNS-1123 label (lowercase alphanumerics and '-', at most
//     63 characters), that is the name: "llama-3-8b" → "llama-3-8b-router".
//   - Otherwise the model name is normalised: lowercased, every run of characters other than
//     [a-z0-9] replaced by one '-', leading and trailing '-' trimmed, cut to 47 characters, and
//     the name is "<normalised>-router-<h>" where h is the first 8 hex digits of the SHA-256 of
//     the original model name ("router-<h>" when nothing survives normalisation), e.g.
//     "Qwen/Qwen2.5-7B" → "qwen-qwen2-5-7b-router-<h>".
//
// Distinct models never share a name: unchanged names end in "-router" while normalised ones
// end in eight hex digits, and two normalised names are equal only if both the normalised
// prefix and the hash of the original names agree. The result is always a valid DNS-1123
// label, hence also a valid object name.
func RouteName(model string) string {
	if name := model + routeSuffix; len(validation.IsDNS1123Label(name)) == 0 {
		return name
	}
	prefix := normalise(model, maxRoutePrefix)
	h := hashHex(model, routeHashLen)
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
// routes from gatewayNamespace: "modelplane-router-<gatewayNamespace>" for the first, then
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
