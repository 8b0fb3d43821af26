package engine

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSGLangLoad(t *testing.T) {
	cases := map[string]struct {
		status      int
		contentType string
		body        string
		want        *errView
	}{
		"success": {status: 200, contentType: jsonType, body: `{"success":true,"error_message":""}`},
		"already loaded": {
			status: 400, contentType: jsonType,
			body: `{"success":false,"error_message":"Failed to load LoRA adapter sql-lora: LoRA with name sql-lora already exists. Loaded LoRAs: dict_keys(['sql-lora'])"}`,
		},
		"already loaded, other wording": {
			status: 400, contentType: jsonType,
			body: `{"success":false,"error_message":"LoRA adapter sql-lora is already loaded"}`,
		},
		"failure 400": {
			status: 400, contentType: jsonType,
			body: `{"success":false,"error_message":"Failed to load LoRA adapter sql-lora: Can't find lora path org/sql-lora"}`,
			want: &errView{Reason: ReasonEngineRejected, Status: 400, Message: "Failed to load LoRA adapter sql-lora: Can't find lora path org/sql-lora"},
		},
		"200 with success=false is a failure": {
			status: 200, contentType: jsonType,
			body: `{"success":false,"error_message":"Maximum number of LoRA adapters loaded"}`,
			want: &errView{Reason: ReasonEngineRejected, Status: 200, Message: "Maximum number of LoRA adapters loaded"},
		},
		"200 with success=false and no message": {
			status: 200, contentType: jsonType, body: `{"success":false}`,
			want: &errView{Reason: ReasonEngineRejected, Status: 200, Message: "the engine reported success=false without a message"},
		},
		"200 with a body that is not JSON": {
			status: 200, contentType: textType, body: "OK",
			want: &errView{Reason: ReasonEngineBadResponse, Status: 200, Message: "the answer is not valid JSON"},
		},
		"200 without success": {
			status: 200, contentType: jsonType, body: `{}`,
			want: &errView{Reason: ReasonEngineBadResponse, Status: 200, Message: `the answer has no "success" field`},
		},
		"route missing": {
			status: 404, contentType: jsonType, body: `{"detail":"Not Found"}`,
			want: &errView{Reason: ReasonLoRAUpdatingDisabled, Status: 404,
				Message: "the engine has no /load_lora_adapter route: this SGLang version cannot load LoRA adapters at runtime: Not Found"},
		},
		"500": {
			status: 500, contentType: textType, body: "Internal Server Error",
			want: &errView{Reason: ReasonEngineServerError, Status: 500, Message: "Internal Server Error", Retryable: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFakeEngine(t, map[string]http.HandlerFunc{
				"POST /load_lora_adapter": answer(tc.status, tc.contentType, tc.body),
			})
			c := newTestClient(t, Options{})
			err := c.Load(context.Background(), f.endpoint(t, KindSGLang, ""), LoadRequest{Name: "sql-lora", ArtifactURL: "hf://org/sql-lora"})
			if diff := cmp.Diff(tc.want, viewOf(err)); diff != "" {
				t.Errorf("Load() error mismatch (-want +got):\n%s\nerror: %v", diff, err)
			}
			wantReqs := []recorded{{
				Method: "POST", Path: "/load_lora_adapter", ContentType: "application/json",
				Body: map[string]any{"lora_name": "sql-lora", "lora_path": "org/sql-lora"},
			}}
			if diff := cmp.Diff(wantReqs, f.requests()); diff != "" {
				t.Errorf("Requests mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSGLangUnload(t *testing.T) {
	cases := map[string]struct {
		status      int
		contentType string
		body        string
		want        *errView
	}{
		"success": {status: 200, contentType: jsonType, body: `{"success":true,"error_message":""}`},
		"unknown adapter, 400": {
			status: 400, contentType: jsonType,
			body: `{"success":false,"error_message":"LoRA with name sql-lora does not exist. Loaded LoRAs: dict_keys([])"}`,
		},
		"unknown adapter, 200 with success=false": {
			status: 200, contentType: jsonType,
			body: `{"success":false,"error_message":"LoRA adapter sql-lora not found"}`,
		},
		"route missing": {status: 404, contentType: jsonType, body: `{"detail":"Not Found"}`},
		"failure 400": {
			status: 400, contentType: jsonType, body: `{"success":false,"error_message":"Unloading is disabled while pinned"}`,
			want: &errView{Reason: ReasonEngineRejected, Status: 400, Message: "Unloading is disabled while pinned"},
		},
		"failure 200 with success=false": {
			status: 200, contentType: jsonType, body: `{"success":false,"error_message":"scheduler busy"}`,
			want: &errView{Reason: ReasonEngineRejected, Status: 200, Message: "scheduler busy"},
		},
		"503": {
			status: 503, contentType: jsonType, body: `{"error":{"message":"overloaded"}}`,
			want: &errView{Reason: ReasonEngineServerError, Status: 503, Message: "overloaded", Retryable: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFakeEngine(t, map[string]http.HandlerFunc{
				"POST /unload_lora_adapter": answer(tc.status, tc.contentType, tc.body),
			})
			c := newTestClient(t, Options{})
			err := c.Unload(context.Background(), f.endpoint(t, KindSGLang, ""), "sql-lora")
			if diff := cmp.Diff(tc.want, viewOf(err)); diff != "" {
				t.Errorf("Unload() error mismatch (-want +got):\n%s\nerror: %v", diff, err)
			}
			wantReqs := []recorded{{
				Method: "POST", Path: "/unload_lora_adapter", ContentType: "application/json",
				Body: map[string]any{"lora_name": "sql-lora"},
			}}
			if diff := cmp.Diff(wantReqs, f.requests()); diff != "" {
				t.Errorf("Requests mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
