// Package text bounds the text the controllers copy from elsewhere (engine answers, gateway
// conditions, annotations) into API objects, events and logs.
package text

import (
	"strings"
	"unicode/utf8"
)

// Truncate returns s as valid UTF-8 (invalid bytes become U+FFFD) cut to at most n bytes on a
// character boundary, with "…" marking a cut. Cutting inside a multi-byte character would
// leave invalid UTF-8, which the API server normalises on write: an object compared with
// what it wrote would then differ every time.
func Truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
