package engine

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestResolveArtifact(t *testing.T) {
	const needsRuntime = ` needs the aibrix-runtime sidecar on the pod: vllm cannot fetch `
	cases := map[string]struct {
		kind       Kind
		url        string
		want       string
		wantReason Reason
		wantInMsg  string
	}{
		"huggingface scheme":            {kind: KindVLLM, url: "huggingface://org/repo", want: "org/repo"},
		"hf scheme":                     {kind: KindVLLM, url: "hf://org/repo", want: "org/repo"},
		"hf scheme, upper case":         {kind: KindVLLM, url: "HF://Org/Repo-1.5_b", want: "Org/Repo-1.5_b"},
		"hf for sglang":                 {kind: KindSGLang, url: "hf://org/repo", want: "org/repo"},
		"empty kind means vLLM":         {kind: "", url: "hf://org/repo", want: "org/repo"},
		"absolute path":                 {kind: KindVLLM, url: "/models/sql-lora", want: "/models/sql-lora"},
		"absolute path for sglang":      {kind: KindSGLang, url: "/models/sql-lora", want: "/models/sql-lora"},
		"hf without repo":               {kind: KindVLLM, url: "hf://", wantReason: ReasonArtifactUnsupported, wantInMsg: "the repository is empty"},
		"hf with empty repo":            {kind: KindVLLM, url: "hf://org/", wantReason: ReasonArtifactUnsupported, wantInMsg: "empty segment"},
		"hf with empty org":             {kind: KindVLLM, url: "huggingface:///repo", wantReason: ReasonArtifactUnsupported, wantInMsg: "empty segment"},
		"hf with org only":              {kind: KindVLLM, url: "hf://org", wantReason: ReasonArtifactUnsupported, wantInMsg: "exactly two path segments"},
		"hf with three segments":        {kind: KindVLLM, url: "hf://org/repo/sub", wantReason: ReasonArtifactUnsupported, wantInMsg: "exactly two path segments"},
		"hf with dot-dot":               {kind: KindVLLM, url: "hf://../repo", wantReason: ReasonArtifactUnsupported, wantInMsg: `segment ".." is not allowed`},
		"hf with revision":              {kind: KindVLLM, url: "hf://org/repo@main", wantReason: ReasonArtifactUnsupported, wantInMsg: "segment 2 has a character other than"},
		"s3 needs runtime":              {kind: KindVLLM, url: "s3://bucket/sql-lora", wantReason: ReasonArtifactNeedsRuntime, wantInMsg: needsRuntime + "s3 artifacts"},
		"gs needs runtime":              {kind: KindVLLM, url: "gs://bucket/sql-lora", wantReason: ReasonArtifactNeedsRuntime, wantInMsg: needsRuntime + "gs artifacts"},
		"gcs needs runtime":             {kind: KindVLLM, url: "gcs://bucket/sql-lora", wantReason: ReasonArtifactNeedsRuntime, wantInMsg: needsRuntime + "gcs artifacts"},
		"tos needs runtime":             {kind: KindSGLang, url: "tos://bucket/sql-lora", wantReason: ReasonArtifactNeedsRuntime, wantInMsg: "sglang cannot fetch tos artifacts"},
		"runtime: tos passes through":   {kind: KindRuntime, url: "tos://bucket/sql-lora", want: "tos://bucket/sql-lora"},
		"http needs runtime":            {kind: KindVLLM, url: "http://host/sql-lora.tar", wantReason: ReasonArtifactNeedsRuntime, wantInMsg: needsRuntime + "http artifacts"},
		"https needs runtime (sglang)":  {kind: KindSGLang, url: "HTTPS://host/sql-lora.tar", wantReason: ReasonArtifactNeedsRuntime, wantInMsg: "sglang cannot fetch https artifacts"},
		"relative path is unsupported":  {kind: KindVLLM, url: "models/sql-lora", wantReason: ReasonArtifactUnsupported, wantInMsg: "is not supported"},
		"file scheme is unsupported":    {kind: KindVLLM, url: "file:///models/sql-lora", wantReason: ReasonArtifactUnsupported, wantInMsg: "is not supported"},
		"unknown scheme is unsupported": {kind: KindSGLang, url: "ftp://host/x", wantReason: ReasonArtifactUnsupported, wantInMsg: "is not supported"},
		"empty":                         {kind: KindVLLM, url: "", wantReason: ReasonArtifactUnsupported, wantInMsg: "the artifact URL is empty"},
		"white space":                   {kind: KindVLLM, url: " hf://org/repo", wantReason: ReasonArtifactUnsupported, wantInMsg: "white space"},
		"runtime: s3 passes through":    {kind: KindRuntime, url: "s3://bucket/sql-lora", want: "s3://bucket/sql-lora"},
		"runtime: hf passes through":    {kind: KindRuntime, url: "hf://org/repo", want: "hf://org/repo"},
		"runtime: any scheme":           {kind: KindRuntime, url: "https://host/x?token=abc", want: "https://host/x?token=abc"},
		"runtime: empty":                {kind: KindRuntime, url: "", wantReason: ReasonArtifactUnsupported, wantInMsg: "the artifact URL is empty"},
		"unknown kind":                  {kind: "tgi", url: "hf://org/repo", wantReason: ReasonEngineUnsupported, wantInMsg: `unknown engine kind "tgi"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ResolveArtifact(tc.kind, tc.url)
			if got != tc.want {
				t.Errorf("ResolveArtifact(%q, %q) = %q, want %q", tc.kind, tc.url, got, tc.want)
			}
			if tc.wantReason == "" {
				if err != nil {
					t.Errorf("ResolveArtifact(%q, %q) failed: %v", tc.kind, tc.url, err)
				}
				return
			}
			if got := ReasonOf(err); got != tc.wantReason {
				t.Errorf("Reason = %q, want %q (error: %v)", got, tc.wantReason, err)
			}
			if IsRetryable(err) {
				t.Errorf("Error %v is retryable, want not retryable", err)
			}
			if err != nil && !strings.Contains(err.Error(), tc.wantInMsg) {
				t.Errorf("Error %q does not contain %q", err, tc.wantInMsg)
			}
		})
	}
}

func TestResolveArtifactHidesCredentials(t *testing.T) {
	for _, u := range []string{
		"https://user:hunter2@host/sql-lora.tar?X-Amz-Signature=s3cr3t",
		"s3://AKIA:hunter2@bucket/sql-lora?s3cr3t",
		"hf://user:hunter2@org/repo",
		"weird:hunter2@host?s3cr3t",
	} {
		_, err := ResolveArtifact(KindVLLM, u)
		if err == nil {
			t.Fatalf("ResolveArtifact(%q) succeeded, want an error", u)
		}
		if msg := err.Error(); strings.Contains(msg, "hunter2") || strings.Contains(msg, "s3cr3t") {
			t.Errorf("Error for %q shows credentials: %s", u, msg)
		}
	}
}

func TestRedactURL(t *testing.T) {
	cases := map[string]string{
		"https://user:pw@host:8443/a/b?sig=1#frag": "https://host:8443/a/b",
		"s3://bucket/key":                          "s3://bucket/key",
		"/models/x":                                "/models/x",
		"not a url with @ in it":                   "<redacted>",
		"mailto:user:pw@host":                      "<redacted>",
	}
	for in, want := range cases {
		if diff := cmp.Diff(want, redactURL(in)); diff != "" {
			t.Errorf("redactURL(%q) mismatch (-want +got):\n%s", in, diff)
		}
	}
}
