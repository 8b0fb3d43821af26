package fakeengine

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestInference: completions and chat completions answer for the base model and loaded
// adapters only, naming the model and the engine; an adapter unloaded is 404 again.
func TestInference(t *testing.T) {
	for _, kind := range []Kind{VLLM, SGLang} {
		t.Run(string(kind), func(t *testing.T) {
			e := start(t, Options{Kind: kind, BaseModel: "base", Name: "pod-a", Preload: map[string]string{"pre": "/p"}})
			loadPath, loadBody := "/v1/load_lora_adapter", `{"lora_name":"sql","lora_path":"org/sql"}`
			if kind == SGLang {
				loadPath = "/load_lora_adapter"
			}
			for _, tc := range []struct {
				name, path, body string
				wantStatus       int
				wantText         string // the choice's text or message content
			}{
				{"base completion", "/v1/completions", `{"model":"base","prompt":"hi"}`, 200, "base served by pod-a"},
				{"base chat", "/v1/chat/completions", `{"model":"base","messages":[]}`, 200, "base served by pod-a"},
				{"preloaded adapter", "/v1/completions", `{"model":"pre"}`, 200, "pre served by pod-a"},
				{"adapter not loaded", "/v1/completions", `{"model":"sql"}`, 404, ""},
				{"adapter not loaded, chat", "/v1/chat/completions", `{"model":"sql"}`, 404, ""},
				{"no model", "/v1/completions", `{"prompt":"hi"}`, 400, ""},
				{"bad JSON", "/v1/completions", `{`, 400, ""},
			} {
				a := must(t, http.MethodPost, url(e, tc.path), tc.body)
				if a.status != tc.wantStatus {
					t.Fatalf("%s: status %d, want %d: %s", tc.name, a.status, tc.wantStatus, a.body)
				}
				if tc.wantStatus == 404 && a.body != `{"error":{"message":"The model `+"`sql`"+` does not exist.","type":"NotFoundError","code":404}}` {
					t.Fatalf("%s: body %s", tc.name, a.body)
				}
				if tc.wantText != "" {
					if got := completionText(t, a.body); got != tc.wantText {
						t.Fatalf("%s: text %q, want %q", tc.name, got, tc.wantText)
					}
				}
			}
			if a := must(t, http.MethodPost, url(e, loadPath), loadBody); a.status != 200 {
				t.Fatalf("load: %d %s", a.status, a.body)
			}
			a := must(t, http.MethodPost, url(e, "/v1/chat/completions"), `{"model":"sql"}`)
			if a.status != 200 || completionText(t, a.body) != "sql served by pod-a" {
				t.Fatalf("loaded adapter: %d %s", a.status, a.body)
			}
			var c Completion
			if err := json.Unmarshal([]byte(a.body), &c); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(Completion{ID: "cmpl-fake", Object: "chat.completion", Created: c.Created, Model: "sql", ServedBy: "pod-a",
				Choices: []CompletionChoice{{FinishReason: "stop", Message: &ChatMessage{Role: "assistant", Content: "sql served by pod-a"}}}}, c); diff != "" {
				t.Fatalf("chat completion (-want +got):\n%s", diff)
			}
			e.Restart()
			if a := must(t, http.MethodPost, url(e, "/v1/completions"), `{"model":"sql"}`); a.status != 404 {
				t.Fatalf("after a restart the adapter is gone: %d %s", a.status, a.body)
			}
			if n := e.Requests()["POST /v1/completions"]; n != 6 {
				t.Fatalf("POST /v1/completions counted %d times, want 6", n)
			}
		})
	}
}

// TestInferenceServedByHeader: the answering engine is in a header too, and defaults to the
// engine's address; faults of the LoRA API (even OpAll) leave inference alone.
func TestInferenceServedByHeader(t *testing.T) {
	e := start(t, Options{})
	e.SetFault(Fault{Op: OpAll, Status: http.StatusInternalServerError})
	req, err := http.NewRequest(http.MethodPost, url(e, "/v1/completions"), strings.NewReader(`{"model":"`+DefaultBaseModel+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(ServedByHeader) != e.Addr() {
		t.Fatalf("status %d, %s %q, want 200 and %q", resp.StatusCode, ServedByHeader, resp.Header.Get(ServedByHeader), e.Addr())
	}
	if a := must(t, http.MethodGet, url(e, "/v1/models"), ""); a.status != 500 {
		t.Fatalf("the OpAll fault still applies to /v1/models: %d", a.status)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("SetFault(OpInfer) did not panic")
		}
	}()
	e.SetFault(Fault{Op: OpInfer, Status: 500})
}

func completionText(t *testing.T, body string) string {
	t.Helper()
	var c Completion
	if err := json.Unmarshal([]byte(body), &c); err != nil || len(c.Choices) != 1 {
		t.Fatalf("bad completion %q: %v", body, err)
	}
	if m := c.Choices[0].Message; m != nil {
		return m.Content
	}
	return c.Choices[0].Text
}
