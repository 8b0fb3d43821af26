package text

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	tests := map[string]struct {
		in   string
		n    int
		want string
	}{
		"short":                  {in: "abc", n: 3, want: "abc"},
		"cut":                    {in: "abcdef", n: 3, want: "abc…"},
		"inside a character":     {in: "aé", n: 2, want: "a…"},
		"inside a 4-byte one":    {in: "x😀y", n: 3, want: "x…"},
		"invalid bytes replaced": {in: "a\xffb", n: 10, want: "a\uFFFDb"},
		"zero":                   {in: "é", n: 0, want: "…"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Truncate(tc.in, tc.n)
			if got != tc.want {
				t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("Truncate(%q, %d) = %q is not valid UTF-8", tc.in, tc.n, got)
			}
		})
	}
}

func FuzzTruncate(f *testing.F) {
	f.Add(strings.Repeat("é", 100), 7)
	f.Fuzz(func(t *testing.T, s string, n int) {
		if n < 0 || n > 1<<16 {
			return
		}
		got := Truncate(s, n)
		if !utf8.ValidString(got) || len(got) > n+len("…") {
			t.Fatalf("Truncate(%q, %d) = %q", s, n, got)
		}
	})
}
