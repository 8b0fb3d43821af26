package routes

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Defaults for Config, matching the router-controller flag defaults.
const (
	DefaultGatewayNamespace = "aibrix-system"
	DefaultGatewayName      = "aibrix-eg"
	// DefaultTimeout is the request timeout AIBrix's model router writes on its routes by
	// default (AIBRIX_GATEWAY_TIMEOUT_SECONDS unset) in its sources after August 2026: 600 s.
	// Its releases v0.4.0 to v0.7.0 wrote 120 s, earlier ones none.
	DefaultTimeout = 600 * time.Second
)

// DefaultPaths are the path prefixes every model route matches unless Config.Paths says
// otherwise: those of AIBrix's model router in its newest sources (pkg/controller/modelrouter,
// modelPaths), in its order. Its v0.7.0 release had 11 of them (without /v1/decisions,
// /v1/video, /v1/videos, /tokenize and /pooling). Callers must not modify the slice.
var DefaultPaths = []string{
	"/v1/completions",
	"/v1/chat/completions",
	"/v1/responses",
	"/v1/messages",
	"/v1/embeddings",
	"/v1/rerank",
	"/v1/classify",
	"/v1/decisions",
	"/generate",
	"/generatevideo",
	"/v1/video",
	"/v1/videos",
	"/v1/audio/transcriptions",
	"/v1/audio/translations",
	"/tokenize",
	"/pooling",
}

// Labels and annotations written on the objects this package builds.
const (
	// ManagedByLabel marks routes and grants owned by the router controller; objects without it
	// (or with another value) are never modified.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of ManagedByLabel on owned objects.
	ManagedByValue = "loraplane-router-controller"
	// ModelHashLabel carries ModelHash(model) on a route, so routes can be listed by model
	// even though model names are not valid label values in general.
	ModelHashLabel = "loraplane.io/model-hash"
	// GatewayNamespaceLabel on a ReferenceGrant names the gateway namespace it admits routes
	// from, so controllers for different gateway namespaces never touch each other's grants.
	GatewayNamespaceLabel = "loraplane.io/gateway-namespace"
	// InstallLabel on a route or grant names the router install that owns it (Config.InstallID):
	// a router acts only on the objects of its own install, so that two installs sharing a
	// gateway namespace never write each other's objects.
	InstallLabel = "loraplane.io/install"
	// GatewayLabel on a route names the Gateway (in the route's namespace) it was written
	// for, so that two routers for two Gateways of one namespace tell their routes apart.
	GatewayLabel = "loraplane.io/gateway"
	// ModelAnnotation carries the exact model name of a route.
	ModelAnnotation = "loraplane.io/model"
	// ScopesAnnotation lists where the sources of a route live, as sorted, comma-separated,
	// distinct Kind/namespace pairs. It changes only when a kind or namespace joins or leaves
	// the route, not with every workload, and it stays small whatever the number of sources.
	// A router whose view (watched namespaces, watched kinds) does not cover every scope of a
	// route never deletes or rewrites it.
	ScopesAnnotation = "loraplane.io/source-scopes"
	// LegacySourcesAnnotation is where earlier builds listed every source of a route as
	// kind/namespace/name. It is read for the route's scopes and removed on the next write.
	LegacySourcesAnnotation = "loraplane.io/sources"
)

// DefaultInstallID is the install identity of a router that is given none and cannot tell
// its own namespace (out of a cluster).
const DefaultInstallID = "default"

// Config holds what BuildRoute and AssignReferenceGrants need beyond the sources.
type Config struct {
	// GatewayNamespace is where routes are created and where the Gateway lives.
	GatewayNamespace string
	// GatewayName is the Gateway every route attaches to.
	GatewayName string
	// InstallID identifies the router install (a label value); routes and grants carry it.
	// Empty means DefaultInstallID.
	InstallID string
	// Paths are the path prefixes every model route matches, in addition to the sources'
	// custom paths. Used as given: a nil or empty list means no base paths.
	Paths []string
	// Timeout is the request timeout of every rule. Zero leaves timeouts unset (the gateway
	// implementation's default). Must be a whole number of milliseconds.
	Timeout time.Duration
}

// Validate reports every reason the configuration cannot produce valid objects.
func (c Config) Validate() error {
	var errs []error
	if msgs := validation.IsDNS1123Label(c.GatewayNamespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("gateway namespace %q is invalid: %s", c.GatewayNamespace, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsDNS1123Subdomain(c.GatewayName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("gateway name %q is invalid: %s", c.GatewayName, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsValidLabelValue(c.InstallID); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("install id %q is invalid: %s", c.InstallID, strings.Join(msgs, "; ")))
	}
	for _, p := range c.Paths {
		if err := ValidatePath(p); err != nil {
			errs = append(errs, fmt.Errorf("path %q is invalid: %w", p, err))
		}
	}
	if n := len(dedupSorted(c.Paths)); n > MaxMatchesPerRoute {
		errs = append(errs, fmt.Errorf("%d paths exceed the Gateway API limit of %d matches per route", n, MaxMatchesPerRoute))
	}
	if _, err := formatDuration(c.Timeout); err != nil {
		errs = append(errs, fmt.Errorf("timeout %s is invalid: %w", c.Timeout, err))
	}
	return errors.Join(errs...)
}

// maxDurationHours is the largest hour count a Gateway API Duration can express: the CRD
// pattern ^([0-9]{1,5}(h|m|s|ms)){1,4}$ allows at most five digits per component.
const maxDurationHours = 99999

// formatDuration renders d in the Gateway API Duration format (GEP-2257), e.g. "2m",
// "1h30m", "1s500ms". Zero renders as "". Sub-millisecond precision and negative durations
// cannot be expressed and are errors.
func formatDuration(d time.Duration) (string, error) {
	switch {
	case d == 0:
		return "", nil
	case d < 0:
		return "", errors.New("must not be negative")
	case d%time.Millisecond != 0:
		return "", errors.New("must be a whole number of milliseconds")
	case d/time.Hour > maxDurationHours:
		return "", fmt.Errorf("must be at most %dh", maxDurationHours)
	}
	var b strings.Builder
	parts := []struct {
		unit   time.Duration
		suffix string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}}
	for _, p := range parts {
		if n := d / p.unit; n > 0 {
			b.WriteString(strconv.FormatInt(int64(n), 10))
			b.WriteString(p.suffix)
			d -= n * p.unit
		}
	}
	return b.String(), nil
}

// Install returns the install identity routes and grants carry: InstallID, or
// DefaultInstallID when it is empty.
func (c Config) Install() string {
	if c.InstallID == "" {
		return DefaultInstallID
	}
	return c.InstallID
}

// durationPattern is the pattern of the Gateway API Duration type (GEP-2257).
var durationPattern = regexp.MustCompile(`^([0-9]{1,5}(h|m|s|ms)){1,4}$`)

// parseDuration reads a Gateway API Duration such as "120s" or "1h30m".
func parseDuration(s string) (time.Duration, error) {
	if !durationPattern.MatchString(s) {
		return 0, errors.New("not a Gateway API duration (GEP-2257)")
	}
	return time.ParseDuration(s)
}
