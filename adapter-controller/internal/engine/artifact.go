package engine

import (
	"fmt"
	"net/url"
	"strings"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// Artifact URL schemes.
var (
	// huggingFaceSchemes name a Hugging Face repository the engine downloads itself.
	huggingFaceSchemes = []string{"huggingface://", "hf://"}
	// runtimeSchemes need the aibrix-runtime sidecar to download the artifact.
	runtimeSchemes = v1alpha1.RuntimeArtifactSchemes
)

// ResolveArtifact returns what to send to an engine of the given kind to load
// the adapter stored at artifactURL.
//
// For KindVLLM and KindSGLang (and ""), "huggingface://org/repo" and
// "hf://org/repo" become "org/repo", and absolute paths ("/models/x") pass
// through unchanged. s3://, gs://, gcs://, tos://, http:// and https:// fail with
// ReasonArtifactNeedsRuntime: only the aibrix-runtime sidecar can fetch them.
// Anything else fails with ReasonArtifactUnsupported.
//
// For KindRuntime the URL passes through unchanged whatever its scheme: the
// sidecar resolves it.
//
// Error messages never contain user information or query strings of the URL.
func ResolveArtifact(kind Kind, artifactURL string) (string, error) {
	fail := func(reason Reason, format string, args ...any) (string, error) {
		return "", &Error{Reason: reason, Engine: kind, Message: fmt.Sprintf(format, args...)}
	}
	if strings.TrimSpace(artifactURL) == "" {
		return fail(ReasonArtifactUnsupported, "the artifact URL is empty")
	}
	if strings.TrimSpace(artifactURL) != artifactURL {
		return fail(ReasonArtifactUnsupported, "the artifact URL %q has leading or trailing white space", redactURL(artifactURL))
	}

	switch kind {
	case KindRuntime:
		return artifactURL, nil
	case "", KindVLLM, KindSGLang:
	default:
		return fail(ReasonEngineUnsupported, "unknown engine kind %q", string(kind))
	}
	if kind == "" {
		kind = KindVLLM
	}

	if scheme, rest, ok := cutScheme(artifactURL, huggingFaceSchemes); ok {
		repo, err := huggingFaceRepo(rest)
		if err != nil {
			return fail(ReasonArtifactUnsupported, "artifact URL %q: %v (want %s<org>/<repo>)", redactURL(artifactURL), err, scheme)
		}
		return repo, nil
	}
	if strings.HasPrefix(artifactURL, "/") {
		return artifactURL, nil
	}
	if scheme, _, ok := cutScheme(artifactURL, runtimeSchemes); ok {
		return fail(ReasonArtifactNeedsRuntime,
			"artifact URL %q needs the %s sidecar on the pod: %s cannot fetch %s artifacts itself (it loads only huggingface://, hf:// and absolute paths)",
			redactURL(artifactURL), RuntimeContainerName, kind, strings.TrimSuffix(scheme, "://"))
	}
	return fail(ReasonArtifactUnsupported,
		"artifact URL %q is not supported: want huggingface://<org>/<repo>, hf://<org>/<repo>, an absolute path, or s3://, gs://, gcs://, tos://, http(s):// with the %s sidecar",
		redactURL(artifactURL), RuntimeContainerName)
}

// cutScheme matches artifactURL against schemes case-insensitively (schemes
// are case-insensitive in URLs) and returns the matched scheme and the rest.
func cutScheme(artifactURL string, schemes []string) (scheme, rest string, ok bool) {
	for _, s := range schemes {
		if len(artifactURL) >= len(s) && strings.EqualFold(artifactURL[:len(s)], s) {
			return s, artifactURL[len(s):], true
		}
	}
	return "", "", false
}

// huggingFaceRepo validates "org/repo" as a Hugging Face repository id.
func huggingFaceRepo(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("the repository is empty")
	}
	parts := strings.Split(s, "/")
	if len(parts) != 2 {
		return "", fmt.Errorf("the repository must be exactly two path segments")
	}
	for i, p := range parts {
		if p == "" {
			return "", fmt.Errorf("the repository has an empty segment")
		}
		if p == "." || p == ".." {
			return "", fmt.Errorf("the repository segment %q is not allowed", p)
		}
		for _, c := range p {
			if !isRepoChar(c) {
				// Not quoted: it may be user information pasted by mistake.
				return "", fmt.Errorf("repository segment %d has a character other than letters, digits, '-', '_' and '.'", i+1)
			}
		}
	}
	return s, nil
}

// redactURL drops user information, query and fragment from a URL so that
// credentials and signatures never reach an error message. Text that does
// not parse as a URL with a scheme is replaced entirely when it might hold
// such parts.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		if strings.ContainsAny(s, "@?#") {
			return "<redacted>"
		}
		return s
	}
	u.User = nil
	u.RawQuery = ""
	u.ForceQuery = false
	u.Fragment = ""
	u.RawFragment = ""
	out := u.String()
	if strings.Contains(out, "@") {
		// An opaque URL ("scheme:user:pw@host") keeps its user information.
		return "<redacted>"
	}
	return out
}

// isRepoChar reports whether c may appear in a Hugging Face organisation or repository name.
func isRepoChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// ListsLoadPath reports whether the engine of kind lists each adapter with the
// lora_path it was loaded from as its "root" in GET /v1/models, so that the
// artifact it serves can be read from a listing: true for vLLM and SGLang.
// Behind the runtime sidecar the engine lists the sidecar's local download
// directory instead, which says nothing about the artifact URL.
func ListsLoadPath(kind Kind) bool {
	return kind == "" || kind == KindVLLM || kind == KindSGLang
}
