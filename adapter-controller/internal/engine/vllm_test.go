package engine

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const vllmDisabledMessage = "the engine has no /v1/load_lora_adapter route: runtime LoRA updating is disabled (vLLM needs VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora)"

func TestVLLMLoad(t *testing.T) {
	cases := map[string]struct {
		artifact     string
		replace      bool
		status       int
		contentType  string
		body         string
		wantLoraPath string
		want         *errView
	}{
		"plain-text success": {
			status: 200, contentType: textType,
			body: "Success: LoRA adapter 'sql-lora' added successfully.",
		},
		"absolute path passes through": {
			artifact: "/models/sql-lora", wantLoraPath: "/models/sql-lora",
			status: 200, contentType: textType, body: "Success",
		},
		"already loaded, nested error": {
			status: 400, contentType: jsonType,
			body: `{"error":{"message":"The lora adapter 'sql-lora' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.","type":"InvalidUserInput","param":null,"code":400}}`,
		},
		"already loaded, flat error": {
			status: 400, contentType: jsonType,
			body: `{"object":"error","message":"The lora adapter 'sql-lora' has already been loaded.","type":"InvalidUserInput","param":null,"code":400}`,
		},
		"in-place reload": {
			replace: true, status: 200, contentType: textType, body: "Success: LoRA adapter 'sql-lora' added successfully.",
		},
		"in-place reload ignored by an older vLLM": {
			replace: true, status: 400, contentType: jsonType,
			body: `{"error":{"message":"The lora adapter 'sql-lora' has already been loaded.","type":"InvalidUserInput","code":400}}`,
			want: &errView{Reason: ReasonReloadUnsupported, Status: 400, Message: "the engine answered that the adapter is already loaded: it does not support load_inplace"},
		},
		"route missing means runtime updating disabled": {
			status: 404, contentType: jsonType, body: `{"detail":"Not Found"}`,
			want: &errView{Reason: ReasonLoRAUpdatingDisabled, Status: 404, Message: vllmDisabledMessage + ": Not Found"},
		},
		"route missing, empty body": {
			status: 404,
			want:   &errView{Reason: ReasonLoRAUpdatingDisabled, Status: 404, Message: vllmDisabledMessage},
		},
		"404 from vLLM itself means the adapter files were not found": {
			status: 404, contentType: jsonType,
			body: `{"error":{"message":"No adapter found for /models/missing","type":"NotFoundError","param":null,"code":404}}`,
			want: &errView{Reason: ReasonEngineRejected, Status: 404, Message: "No adapter found for /models/missing"},
		},
		"other 400, nested error": {
			status: 400, contentType: jsonType,
			body: `{"error":{"message":"Loading lora sql-lora failed: rank 128 exceeds max_lora_rank 64","type":"BadRequestError","code":400}}`,
			want: &errView{Reason: ReasonEngineRejected, Status: 400, Message: "Loading lora sql-lora failed: rank 128 exceeds max_lora_rank 64"},
		},
		"other 400, flat message": {
			status: 400, contentType: jsonType, body: `{"message":"Both 'lora_name' and 'lora_path' must be provided."}`,
			want: &errView{Reason: ReasonEngineRejected, Status: 400, Message: "Both 'lora_name' and 'lora_path' must be provided."},
		},
		"422 with FastAPI detail list": {
			status: 422, contentType: jsonType,
			body: `{"detail":[{"type":"missing","loc":["body","lora_path"],"msg":"Field required","input":{}}]}`,
			want: &errView{Reason: ReasonEngineRejected, Status: 422, Message: "Field required"},
		},
		"500 with detail": {
			status: 500, contentType: jsonType, body: `{"detail":"CUDA out of memory"}`,
			want: &errView{Reason: ReasonEngineServerError, Status: 500, Message: "CUDA out of memory", Retryable: true},
		},
		"502 plain text": {
			status: 502, contentType: textType, body: "upstream connect error\n",
			want: &errView{Reason: ReasonEngineServerError, Status: 502, Message: "upstream connect error", Retryable: true},
		},
		"503 long text is truncated": {
			status: 503, contentType: textType, body: strings.Repeat("x", 2000),
			want: &errView{Reason: ReasonEngineServerError, Status: 503, Message: strings.Repeat("x", maxMessageBytes) + "…", Retryable: true},
		},
		"503 without body": {
			status: 503,
			want:   &errView{Reason: ReasonEngineServerError, Status: 503, Message: "Service Unavailable", Retryable: true},
		},
		"429 is retryable": {
			status: 429, contentType: jsonType, body: `{"error":{"message":"too many requests"}}`,
			want: &errView{Reason: ReasonEngineRejected, Status: 429, Message: "too many requests", Retryable: true},
		},
		"403 is unauthorized": {
			status: 403, contentType: jsonType, body: `{"error":"Forbidden"}`,
			want: &errView{Reason: ReasonEngineUnauthorized, Status: 403, Message: "Forbidden"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFakeEngine(t, map[string]http.HandlerFunc{
				"POST /v1/load_lora_adapter": answer(tc.status, tc.contentType, tc.body),
			})
			c := newTestClient(t, Options{})
			artifact, wantPath := tc.artifact, tc.wantLoraPath
			if artifact == "" {
				artifact, wantPath = "huggingface://org/sql-lora", "org/sql-lora"
			}
			err := c.Load(context.Background(), f.endpoint(t, KindVLLM, ""), LoadRequest{Name: "sql-lora", ArtifactURL: artifact, Replace: tc.replace})
			if diff := cmp.Diff(tc.want, viewOf(err)); diff != "" {
				t.Errorf("Load() error mismatch (-want +got):\n%s\nerror: %v", diff, err)
			}
			body := map[string]any{"lora_name": "sql-lora", "lora_path": wantPath}
			if tc.replace {
				body["load_inplace"] = true
			}
			wantReqs := []recorded{{
				Method: "POST", Path: "/v1/load_lora_adapter", ContentType: "application/json", Body: body,
			}}
			if diff := cmp.Diff(wantReqs, f.requests()); diff != "" {
				t.Errorf("Requests mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestVLLMUnload(t *testing.T) {
	cases := map[string]struct {
		status      int
		contentType string
		body        string
		want        *errView
	}{
		"success": {status: 200, contentType: textType, body: "Success: LoRA adapter 'sql-lora' removed successfully."},
		"unknown adapter, 404 (newer vLLM)": {
			status: 404, contentType: jsonType,
			body: `{"error":{"message":"The lora adapter 'sql-lora' cannot be found.","type":"NotFoundError","param":null,"code":404}}`,
		},
		"route missing, 404": {status: 404, contentType: jsonType, body: `{"detail":"Not Found"}`},
		"unknown adapter, 400 (older vLLM)": {
			status: 400, contentType: jsonType,
			body: `{"object":"error","message":"The lora adapter 'sql-lora' cannot be found.","type":"InvalidUserInput","param":null,"code":400}`,
		},
		"other 400": {
			status: 400, contentType: jsonType, body: `{"object":"error","message":"'lora_name' must be provided.","code":400}`,
			want: &errView{Reason: ReasonEngineRejected, Status: 400, Message: "'lora_name' must be provided."},
		},
		"500": {
			status: 500, contentType: textType, body: "Internal Server Error",
			want: &errView{Reason: ReasonEngineServerError, Status: 500, Message: "Internal Server Error", Retryable: true},
		},
		"401": {
			status: 401, contentType: jsonType, body: `{"error":"Unauthorized"}`,
			want: &errView{Reason: ReasonEngineUnauthorized, Status: 401, Message: "Unauthorized"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFakeEngine(t, map[string]http.HandlerFunc{
				"POST /v1/unload_lora_adapter": answer(tc.status, tc.contentType, tc.body),
			})
			c := newTestClient(t, Options{})
			err := c.Unload(context.Background(), f.endpoint(t, KindVLLM, ""), "sql-lora")
			if diff := cmp.Diff(tc.want, viewOf(err)); diff != "" {
				t.Errorf("Unload() error mismatch (-want +got):\n%s\nerror: %v", diff, err)
			}
			wantReqs := []recorded{{
				Method: "POST", Path: "/v1/unload_lora_adapter", ContentType: "application/json",
				Body: map[string]any{"lora_name": "sql-lora"},
			}}
			if diff := cmp.Diff(wantReqs, f.requests()); diff != "" {
				t.Errorf("Requests mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// listCases are GET /v1/models answers; vLLM and SGLang share the format.
var listCases = map[string]struct {
	status      int
	contentType string
	body        string
	want        []Adapter
	wantErr     *errView
}{
	"adapters are the entries with a parent": {
		status: 200, contentType: jsonType,
		body: `{"object":"list","data":[
			{"id":"meta-llama/Llama-3.1-8B","object":"model","root":"meta-llama/Llama-3.1-8B","parent":null},
			{"id":"sql-lora","object":"model","root":"/models/sql","parent":"meta-llama/Llama-3.1-8B"},
			{"id":"chat-lora","object":"model","parent":"base"},
			{"id":"chat-lora","object":"model","parent":"base"},
			{"id":"other-base","object":"model","parent":""},
			{"id":"no-parent-field","object":"model"}]}`,
		want: []Adapter{{Name: "chat-lora"}, {Name: "sql-lora", Path: "/models/sql"}},
	},
	"no adapters": {
		status: 200, contentType: jsonType, body: `{"object":"list","data":[{"id":"base","parent":null}]}`,
		want: []Adapter{},
	},
	"malformed JSON": {
		status: 200, contentType: jsonType, body: `{"object":"list","data":[{"id":"sql-lora",`,
		wantErr: &errView{Reason: ReasonEngineBadResponse, Status: 200, Message: "the model list is not valid JSON"},
	},
	"not JSON at all": {
		status: 200, contentType: "text/html", body: `<html>hello</html>`,
		wantErr: &errView{Reason: ReasonEngineBadResponse, Status: 200, Message: "the model list is not valid JSON"},
	},
	"JSON without data": {
		status: 200, contentType: jsonType, body: `{"object":"list"}`,
		wantErr: &errView{Reason: ReasonEngineBadResponse, Status: 200, Message: `the model list has no "data" array`},
	},
	"entry without id": {
		status: 200, contentType: jsonType, body: `{"data":[{"id":"base"},{"parent":"base"}]}`,
		wantErr: &errView{Reason: ReasonEngineBadResponse, Status: 200, Message: "model list entry 1 has no id"},
	},
	"500": {
		status: 500, contentType: jsonType, body: `{"error":{"message":"engine dead","type":"InternalServerError","code":500}}`,
		wantErr: &errView{Reason: ReasonEngineServerError, Status: 500, Message: "engine dead", Retryable: true},
	},
	"401": {
		status: 401, contentType: jsonType, body: `{"error":"Unauthorized"}`,
		wantErr: &errView{Reason: ReasonEngineUnauthorized, Status: 401, Message: "Unauthorized"},
	},
}

func TestListAdapters(t *testing.T) {
	for _, kind := range []Kind{KindVLLM, KindSGLang} {
		for name, tc := range listCases {
			t.Run(string(kind)+"/"+name, func(t *testing.T) {
				f := newFakeEngine(t, map[string]http.HandlerFunc{
					"GET /v1/models": answer(tc.status, tc.contentType, tc.body),
				})
				c := newTestClient(t, Options{})
				got, err := c.ListAdapters(context.Background(), f.endpoint(t, kind, ""))
				if diff := cmp.Diff(tc.wantErr, viewOf(err)); diff != "" {
					t.Errorf("ListAdapters() error mismatch (-want +got):\n%s\nerror: %v", diff, err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("ListAdapters() mismatch (-want +got):\n%s", diff)
				}
				wantReqs := []recorded{{Method: "GET", Path: "/v1/models"}}
				if diff := cmp.Diff(wantReqs, f.requests()); diff != "" {
					t.Errorf("Requests mismatch (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestLoadArtifactNeedsRuntime checks that vLLM and SGLang pods are never
// asked to load artifacts they cannot fetch.
func TestLoadArtifactNeedsRuntime(t *testing.T) {
	for _, kind := range []Kind{KindVLLM, KindSGLang} {
		for _, artifact := range []string{"s3://bucket/sql-lora", "gs://bucket/sql-lora", "https://example.com/sql-lora.tar"} {
			t.Run(string(kind)+"/"+artifact, func(t *testing.T) {
				f := newFakeEngine(t, nil)
				c := newTestClient(t, Options{})
				err := c.Load(context.Background(), f.endpoint(t, kind, ""), LoadRequest{Name: "sql-lora", ArtifactURL: artifact})
				if got := ReasonOf(err); got != ReasonArtifactNeedsRuntime {
					t.Errorf("Load() reason = %q, want %q (error: %v)", got, ReasonArtifactNeedsRuntime, err)
				}
				if IsRetryable(err) {
					t.Errorf("Load() error is retryable, want not retryable")
				}
				if got := f.requests(); len(got) != 0 {
					t.Errorf("Engine received %d requests, want none: %+v", len(got), got)
				}
			})
		}
	}
}
