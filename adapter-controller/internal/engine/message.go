package engine

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/loraplane/loraplane/shared/text"
)

// maxMessageBytes bounds engine messages copied into errors (and from there
// into conditions and events).
const maxMessageBytes = 512

// engineMessage extracts the human-readable message from an engine's error
// body. It understands the shapes the engines use:
//
//	{"error": {"message": "...", "type": "...", "code": 400}}  (vLLM, OpenAI)
//	{"error": "..."}
//	{"object": "error", "message": "...", ...}                  (older vLLM)
//	{"message": "..."}
//	{"success": false, "error_message": "..."}                  (SGLang)
//	{"detail": "..."} or {"detail": [{"msg": "...", ...}]}      (FastAPI)
//
// and otherwise falls back to the body as text. apiKey, if not empty, is
// redacted before the result is cut to at most maxMessageBytes of valid UTF-8.
func engineMessage(body []byte, apiKey string) string {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return ""
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal(body, &doc) == nil {
		for _, key := range []string{"error", "message", "error_message", "detail"} {
			if msg := jsonText(doc[key], 0); msg != "" {
				return clean(msg, apiKey)
			}
		}
	}
	return clean(string(body), apiKey)
}

// withheld replaces an engine message that would show the API key even after redaction
// (a key that the redaction marker, truncation or UTF-8 repair puts back together).
const withheld = "(engine message withheld: it would show the API key)"

// clean is what an engine message becomes before it goes into an error: the API key
// redacted, at most maxMessageBytes of valid UTF-8, and never the key itself.
func clean(msg, apiKey string) string {
	msg = truncate(redact(msg, apiKey))
	switch {
	case apiKey == "" || !strings.Contains(msg, apiKey):
		return msg
	case !strings.Contains(withheld, apiKey):
		return withheld
	default:
		return ""
	}
}

// jsonText renders a JSON value as message text: strings as they are,
// objects by their "message" or "msg" member, arrays joined by "; ". Other
// values give "", so that the caller can try another member or fall back to
// the raw body.
func jsonText(raw json.RawMessage, depth int) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) || depth > 3 {
		return ""
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return strings.TrimSpace(s)
		}
	case '{':
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) == nil {
			for _, key := range []string{"message", "msg"} {
				if msg := jsonText(obj[key], depth+1); msg != "" {
					return msg
				}
			}
		}
	case '[':
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) == nil {
			var parts []string
			for _, item := range items {
				if msg := jsonText(item, depth+1); msg != "" {
					parts = append(parts, msg)
				}
			}
			return strings.Join(parts, "; ")
		}
	}
	return ""
}

// isOpenAIError reports whether body is an OpenAI-style error object, as
// vLLM writes for errors it raises itself, in contrast to the web
// framework's {"detail": "Not Found"} for a route that does not exist.
func isOpenAIError(body []byte) bool {
	var doc struct {
		Object string `json:"object"`
		Error  *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(bytes.TrimSpace(body), &doc) != nil {
		return false
	}
	return doc.Object == "error" || (doc.Error != nil && doc.Error.Message != "")
}

func truncate(s string) string {
	return text.Truncate(strings.TrimSpace(strings.ToValidUTF8(s, "\uFFFD")), maxMessageBytes)
}

// redact removes the API key from text an engine sent back.
func redact(s, apiKey string) string {
	if apiKey == "" {
		return s
	}
	return strings.ReplaceAll(s, apiKey, "<redacted>")
}

// The engines tell "already loaded" and "no such adapter" apart from other
// failures only in their message text, so these two checks read it. They
// decide only whether an answer means the desired state is already reached;
// retrying is decided from status codes and transport errors alone.

// alreadyLoaded recognises the load failure that means the adapter name is
// already loaded: vLLM "The lora adapter 'x' has already been loaded", SGLang
// "... already loaded" / "LoRA with name x already exists".
func alreadyLoaded(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "already been loaded") ||
		strings.Contains(m, "already loaded") ||
		strings.Contains(m, "already exists")
}

// unknownAdapter recognises the unload failure that means no adapter of that
// name is loaded: vLLM "The lora adapter 'x' cannot be found", SGLang "LoRA
// with name x does not exist".
func unknownAdapter(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "cannot be found") ||
		strings.Contains(m, "not found") ||
		strings.Contains(m, "does not exist") ||
		strings.Contains(m, "not loaded")
}
