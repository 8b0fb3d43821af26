package engine

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRuntimeLoad(t *testing.T) {
	const disabled = "the runtime sidecar got 404 from /v1/lora_adapter/load: runtime LoRA updating is disabled on the sidecar or its engine (vLLM needs VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora)"
	cases := map[string]struct {
		req         LoadRequest
		status      int
		contentType string
		body        string
		wantBody    map[string]any
		want        *errView
	}{
		"s3 artifact with credentials and additional config": {
			req: LoadRequest{
				Name: "sql-lora", ArtifactURL: "s3://bucket/loras/sql-lora",
				Credentials:      map[string]string{"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"},
				AdditionalConfig: map[string]string{"region": "us-west-2"},
			},
			status: 200, contentType: textType, body: "Success: LoRA adapter 'sql-lora' added successfully.",
			wantBody: map[string]any{
				"lora_name": "sql-lora", "artifact_url": "s3://bucket/loras/sql-lora",
				"credentials":       map[string]any{"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"},
				"additional_config": map[string]any{"region": "us-west-2"},
			},
		},
		"hf artifact passes through unchanged, optional fields omitted": {
			req:    LoadRequest{Name: "sql-lora", ArtifactURL: "hf://org/sql-lora"},
			status: 200, contentType: textType, body: "Success",
			wantBody: map[string]any{"lora_name": "sql-lora", "artifact_url": "hf://org/sql-lora"},
		},
		"already loaded": {
			req:    LoadRequest{Name: "sql-lora", ArtifactURL: "gs://bucket/sql-lora"},
			status: 400, contentType: jsonType,
			body:     `{"object":"error","message":"The lora adapter 'sql-lora' has already been loaded.","type":"InvalidUserInput","code":400}`,
			wantBody: map[string]any{"lora_name": "sql-lora", "artifact_url": "gs://bucket/sql-lora"},
		},
		"engine has runtime updating disabled": {
			req:    LoadRequest{Name: "sql-lora", ArtifactURL: "/models/sql-lora"},
			status: 404, contentType: jsonType, body: `{"detail":"Not Found"}`,
			wantBody: map[string]any{"lora_name": "sql-lora", "artifact_url": "/models/sql-lora"},
			want:     &errView{Reason: ReasonLoRAUpdatingDisabled, Status: 404, Message: disabled + ": Not Found"},
		},
		"download failed": {
			req:    LoadRequest{Name: "sql-lora", ArtifactURL: "s3://bucket/missing"},
			status: 500, contentType: jsonType,
			body:     `{"object":"error","message":"Failed to download s3://bucket/missing: NoSuchKey","type":"ServerError","code":500}`,
			wantBody: map[string]any{"lora_name": "sql-lora", "artifact_url": "s3://bucket/missing"},
			want:     &errView{Reason: ReasonEngineServerError, Status: 500, Message: "Failed to download s3://bucket/missing: NoSuchKey", Retryable: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFakeEngine(t, map[string]http.HandlerFunc{
				"POST /v1/lora_adapter/load": answer(tc.status, tc.contentType, tc.body),
			})
			c := newTestClient(t, Options{})
			err := c.Load(context.Background(), f.endpoint(t, KindRuntime, ""), tc.req)
			if diff := cmp.Diff(tc.want, viewOf(err)); diff != "" {
				t.Errorf("Load() error mismatch (-want +got):\n%s\nerror: %v", diff, err)
			}
			wantReqs := []recorded{{Method: "POST", Path: "/v1/lora_adapter/load", ContentType: "application/json", Body: tc.wantBody}}
			if diff := cmp.Diff(wantReqs, f.requests()); diff != "" {
				t.Errorf("Requests mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRuntimeUnload(t *testing.T) {
	cases := map[string]struct {
		status      int
		contentType string
		body        string
		want        *errView
	}{
		"success":                {status: 200, contentType: textType, body: "Success"},
		"unknown adapter, 404":   {status: 404, contentType: jsonType, body: `{"object":"error","message":"The lora adapter 'sql-lora' cannot be found.","code":404}`},
		"unknown adapter, 400":   {status: 400, contentType: jsonType, body: `{"object":"error","message":"The lora adapter 'sql-lora' cannot be found.","code":400}`},
		"other 400 is rejected":  {status: 400, contentType: jsonType, body: `{"message":"bad request"}`, want: &errView{Reason: ReasonEngineRejected, Status: 400, Message: "bad request"}},
		"500 is a server error":  {status: 500, want: &errView{Reason: ReasonEngineServerError, Status: 500, Message: "Internal Server Error", Retryable: true}},
		"401 is an auth failure": {status: 401, want: &errView{Reason: ReasonEngineUnauthorized, Status: 401, Message: "Unauthorized"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFakeEngine(t, map[string]http.HandlerFunc{
				"POST /v1/lora_adapter/unload": answer(tc.status, tc.contentType, tc.body),
			})
			c := newTestClient(t, Options{})
			err := c.Unload(context.Background(), f.endpoint(t, KindRuntime, ""), "sql-lora")
			if diff := cmp.Diff(tc.want, viewOf(err)); diff != "" {
				t.Errorf("Unload() error mismatch (-want +got):\n%s\nerror: %v", diff, err)
			}
			wantReqs := []recorded{{
				Method: "POST", Path: "/v1/lora_adapter/unload", ContentType: "application/json",
				Body: map[string]any{"lora_name": "sql-lora", "cleanup_local": true},
			}}
			if diff := cmp.Diff(wantReqs, f.requests()); diff != "" {
				t.Errorf("Requests mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRuntimeListAdaptersAsksTheEngine checks that listing on a runtime pod
// goes to the engine port, not to the sidecar.
func TestRuntimeListAdaptersAsksTheEngine(t *testing.T) {
	sidecar := newFakeEngine(t, nil)
	engine := newFakeEngine(t, map[string]http.HandlerFunc{
		"GET /v1/models": answer(200, jsonType, `{"data":[{"id":"base","parent":null},{"id":"sql-lora","parent":"base"}]}`),
	})
	ep := sidecar.endpoint(t, KindRuntime, "key")
	ep.EnginePort = engine.endpoint(t, KindVLLM, "").Port

	c := newTestClient(t, Options{})
	got, err := c.ListAdapters(context.Background(), ep)
	if err != nil {
		t.Fatalf("ListAdapters() failed: %v", err)
	}
	if diff := cmp.Diff([]Adapter{{Name: "sql-lora"}}, got); diff != "" {
		t.Errorf("ListAdapters() mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]recorded{{Method: "GET", Path: "/v1/models", Auth: "Bearer key"}}, engine.requests()); diff != "" {
		t.Errorf("Engine requests mismatch (-want +got):\n%s", diff)
	}
	if got := sidecar.requests(); len(got) != 0 {
		t.Errorf("Sidecar received %d requests, want none: %+v", len(got), got)
	}
}
