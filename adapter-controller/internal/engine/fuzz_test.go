package engine

import (
	"errors"
	"net/http"
	neturl "net/url"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// The fuzz targets below run their seed corpus (f.Add and testdata/fuzz) in every `go test`;
// `make fuzz FUZZTIME=60s` explores each for that long.

// messageSeeds are engine answers as the engines and their proxies send them, and broken ones.
var messageSeeds = []string{
	`{"error":{"message":"The lora adapter 'x' has already been loaded.","type":"BadRequestError","code":400}}`,
	`{"object":"error","message":"LoRA adapter x cannot be found.","type":"NotFoundError","code":404}`,
	`{"success":false,"error_message":"LoRA with name x already exists"}`,
	`{"detail":[{"loc":["body","lora_name"],"msg":"field required","type":"value_error.missing"}]}`,
	`{"detail":"Not Found"}`,
	`{"error":"key sk-123 is wrong"}`,
	`<html><body>502 Bad Gateway</body></html>`,
	`{"error":{"message":`,
	"\xff\xfe{\"error\":\"\xc3\x28\"}",
	strings.Repeat(`{"detail":[`, 200) + strings.Repeat(`]}`, 200),
	strings.Repeat("é", 600),
}

// FuzzEngineMessage: any body, any key → a message of valid UTF-8, at most maxMessageBytes
// (plus the ellipsis), that never shows the key.
func FuzzEngineMessage(f *testing.F) {
	for _, s := range messageSeeds {
		f.Add([]byte(s), "sk-123")
	}
	f.Add([]byte("a redacted answer"), "redacted")
	f.Add([]byte("xx<"), "x<")
	f.Fuzz(func(t *testing.T, body []byte, apiKey string) {
		msg := engineMessage(body, apiKey)
		if !utf8.ValidString(msg) {
			t.Fatalf("message is not valid UTF-8: %q", msg)
		}
		if len(msg) > maxMessageBytes+len("…") {
			t.Fatalf("message of %d bytes, want at most %d", len(msg), maxMessageBytes+len("…"))
		}
		if apiKey != "" && strings.Contains(msg, apiKey) {
			t.Fatalf("message %q shows the key %q", msg, apiKey)
		}
	})
}

// FuzzParseModels: any /v1/models answer → the adapters, sorted, each named once, or an *Error.
func FuzzParseModels(f *testing.F) {
	f.Add([]byte(`{"object":"list","data":[{"id":"llama","root":"/m"},{"id":"a","root":"/a","parent":"llama"},{"id":"b","parent":"llama"}]}`))
	f.Add([]byte(`{"data":[{"id":"a","parent":"llama"},{"id":"a","parent":"llama"}]}`))
	f.Add([]byte(`{"data":null}`))
	f.Add([]byte(`{"data":[{"parent":"llama"}]}`))
	f.Add([]byte(`{"data":[{"id":"a","parent":""}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(strings.Repeat(`{"data":[`, 100)))
	f.Fuzz(func(t *testing.T, body []byte) {
		adapters, err := parseModels(KindVLLM, http.StatusOK, body)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Reason == "" {
				t.Fatalf("error %v (%T) is not an *Error with a reason", err, err)
			}
			return
		}
		if !slices.IsSortedFunc(adapters, func(a, b Adapter) int { return strings.Compare(a.Name, b.Name) }) {
			t.Fatalf("adapters not sorted: %v", adapters)
		}
		for i, a := range adapters {
			if a.Name == "" || (i > 0 && adapters[i-1].Name == a.Name) {
				t.Fatalf("adapter %d of %v: empty or repeated name", i, adapters)
			}
		}
	})
}

// FuzzOutcome: any status and body for a load or unload of any engine kind → nil or an *Error
// with a reason, never a panic, the key never shown.
func FuzzOutcome(f *testing.F) {
	for _, s := range messageSeeds {
		for _, status := range []int{200, 400, 404, 500, 503} {
			f.Add(uint8(0), status, []byte(s))
		}
	}
	f.Add(uint8(2), 200, []byte(`{"success":true}`))
	f.Add(uint8(3), 200, []byte(`{"success":null}`))
	f.Add(uint8(3), 200, []byte(`{"success":false,"error_message":"sk-123"}`))
	f.Fuzz(func(t *testing.T, which uint8, status int, body []byte) {
		ep := Endpoint{Host: "127.0.0.1", APIKey: "sk-123"}
		r := &reply{status: status, header: http.Header{}, body: body}
		var err error
		switch which % 4 {
		case 0:
			err = loadOutcome(KindVLLM, ep, r, vllmLoadPath)
		case 1:
			err = unloadOutcome(KindVLLM, ep, r)
		case 2:
			err = sglangOutcome(OpLoad, ep, r, alreadyLoaded)
		case 3:
			err = sglangOutcome(OpUnload, ep, r, unknownAdapter)
		}
		if err == nil {
			return
		}
		var e *Error
		if !errors.As(err, &e) || e.Reason == "" {
			t.Fatalf("error %v (%T) is not an *Error with a reason", err, err)
		}
		if strings.Contains(err.Error(), ep.APIKey) {
			t.Fatalf("error %q shows the key", err)
		}
	})
}

// FuzzResolveArtifact: any artifact URL for any kind → a non-empty target or an *Error whose
// message shows neither the URL's user information nor its query.
func FuzzResolveArtifact(f *testing.F) {
	for _, u := range []string{
		"huggingface://org/repo", "hf://org/repo", "s3://bucket/key", "gs://b/k", "/models/local",
		"https://user:secret@host/path?token=secret", "huggingface://org/../x", " hf://org/r", "",
		"huggingface://" + strings.Repeat("a", 300), "file:///tmp/x", "\x00", "hf://org/re po",
	} {
		for kind := range uint8(3) {
			f.Add(kind, u)
		}
	}
	kinds := []Kind{KindVLLM, KindSGLang, KindRuntime}
	f.Fuzz(func(t *testing.T, which uint8, url string) {
		kind := kinds[int(which)%len(kinds)]
		target, err := ResolveArtifact(kind, url)
		if err == nil {
			if target == "" {
				t.Fatalf("%s %q: empty target without error", kind, url)
			}
			return
		}
		var e *Error
		if !errors.As(err, &e) || e.Reason == "" {
			t.Fatalf("error %v (%T) is not an *Error with a reason", err, err)
		}
		// The password of a URL with user information never shows (when it is not also
		// part of the rest of the URL).
		if u, perr := neturl.Parse(url); perr == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && len(pw) >= 4 && !strings.Contains(strings.Replace(url, u.User.String(), "", 1), pw) &&
				strings.Contains(e.Message, pw) {
				t.Fatalf("error %q shows the password of %q", e.Message, url)
			}
		}
	})
}
