package routes

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func deployment(labels, annotations map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{
		Namespace: "team-a", Name: "llama-deploy", Labels: labels, Annotations: annotations,
	}}
}

func TestSourceFromObject(t *testing.T) {
	const (
		nameKey  = "model.aibrix.ai/name"
		portKey  = "model.aibrix.ai/port"
		svcKey   = "model.aibrix.ai/service-name"
		pathsKey = "model.aibrix.ai/model-router-custom-paths"
	)
	manyPaths := make([]string, 200)
	for i := range manyPaths {
		manyPaths[i] = fmt.Sprintf("/p%03d", i)
	}
	base := func(model, service string, port int32, paths ...string) Source {
		return Source{Kind: "Deployment", Namespace: "team-a", Name: "llama-deploy", Model: model, Service: service, Port: port, Paths: paths}
	}

	cases := map[string]struct {
		kind         string
		obj          metav1.Object
		adapterPort  int32 // the port of the adapter's Service, 0 for none
		want         Source
		wantOK       bool
		wantProblems []string
	}{
		"no model name": {
			kind: "Deployment", obj: deployment(map[string]string{"app": "x"}, nil),
		},
		"empty model label and no annotation": {
			kind: "Deployment", obj: deployment(map[string]string{nameKey: ""}, nil),
		},
		"model from label": {
			kind: "Deployment", obj: deployment(map[string]string{nameKey: "llama"}, nil),
			want: base("llama", "llama", 8000), wantOK: true,
		},
		"model from annotation": {
			kind: "Deployment", obj: deployment(nil, map[string]string{nameKey: "llama"}),
			want: base("llama", "llama", 8000), wantOK: true,
		},
		"label wins over annotation": {
			kind: "Deployment", obj: deployment(map[string]string{nameKey: "from-label"}, map[string]string{nameKey: "from-annotation"}),
			want: base("from-label", "from-label", 8000), wantOK: true,
		},
		"service annotation": {
			kind: "Deployment", obj: deployment(map[string]string{nameKey: "llama"}, map[string]string{svcKey: "llama-svc"}),
			want: base("llama", "llama-svc", 8000), wantOK: true,
		},
		"model name with slash and uppercase, explicit service": {
			kind: "Deployment",
			obj:  deployment(nil, map[string]string{nameKey: "Qwen/Qwen2.5-7B-Instruct", svcKey: "qwen"}),
			want: base("Qwen/Qwen2.5-7B-Instruct", "qwen", 8000), wantOK: true,
		},
		"model name with slash is not a service name": {
			kind: "Deployment", obj: deployment(nil, map[string]string{nameKey: "Qwen/Qwen2.5"}),
			wantProblems: []string{`Service name "Qwen/Qwen2.5" for model "Qwen/Qwen2.5" is not a valid Service name: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')`},
		},
		"service starting with a digit": {
			kind: "Deployment", obj: deployment(map[string]string{nameKey: "llama"}, map[string]string{svcKey: "8b-svc"}),
			wantProblems: []string{`Service name "8b-svc" for model "llama" is not a valid Service name: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')`},
		},
		"unicode model name": {
			kind: "Deployment", obj: deployment(nil, map[string]string{nameKey: "模型", svcKey: "svc"}),
			want: base("模型", "svc", 8000), wantOK: true,
		},
		"model name with single spaces": {
			kind: "Deployment", obj: deployment(nil, map[string]string{nameKey: "my model v2", svcKey: "svc"}),
			want: base("my model v2", "svc", 8000), wantOK: true,
		},
		"model name with trailing space": {
			kind: "Deployment", obj: deployment(nil, map[string]string{nameKey: "llama ", svcKey: "svc"}),
			wantProblems: []string{`Model name "llama " cannot be routed: must not start or end with a space or tab, nor have two in a row`},
		},
		"model name too long for a header": {
			kind: "Deployment", obj: deployment(nil, map[string]string{nameKey: strings.Repeat("m", 4097), svcKey: "svc"}),
			wantProblems: []string{fmt.Sprintf("Model name %q cannot be routed: must be at most 4096 bytes", strings.Repeat("m", 4097))},
		},
		"300 char model name is fine": {
			kind: "Deployment", obj: deployment(nil, map[string]string{nameKey: strings.Repeat("m", 300), svcKey: "svc"}),
			want: base(strings.Repeat("m", 300), "svc", 8000), wantOK: true,
		},
		"port label": {
			kind: "Deployment", obj: deployment(map[string]string{nameKey: "llama", portKey: "8080"}, nil),
			want: base("llama", "llama", 8080), wantOK: true,
		},
		"highest port": {
			kind: "Deployment", obj: deployment(map[string]string{nameKey: "llama", portKey: "65535"}, nil),
			want: base("llama", "llama", 65535), wantOK: true,
		},
		"non-numeric port": {
			kind: "Deployment", obj: deployment(map[string]string{nameKey: "llama", portKey: "http"}, nil),
			want: base("llama", "llama", 8000), wantOK: true,
			wantProblems: []string{`Label model.aibrix.ai/port value "http" is not a decimal number; using 8000`},
		},
		"zero port": {
			kind: "Deployment", obj: deployment(map[string]string{nameKey: "llama", portKey: "0"}, nil),
			want: base("llama", "llama", 8000), wantOK: true,
			wantProblems: []string{`Label model.aibrix.ai/port value "0" is out of range 1-65535; using 8000`},
		},
		"port above 65535": {
			kind: "Deployment", obj: deployment(map[string]string{nameKey: "llama", portKey: "65536"}, nil),
			want: base("llama", "llama", 8000), wantOK: true,
			wantProblems: []string{`Label model.aibrix.ai/port value "65536" is out of range 1-65535; using 8000`},
		},
		"port beyond int32": {
			kind: "Deployment", obj: deployment(map[string]string{nameKey: "llama", portKey: "99999999999"}, nil),
			want: base("llama", "llama", 8000), wantOK: true,
			wantProblems: []string{`Label model.aibrix.ai/port value "99999999999" is not a decimal number; using 8000`},
		},
		"custom paths trimmed, deduplicated and sorted": {
			kind: "Deployment",
			obj:  deployment(map[string]string{nameKey: "llama"}, map[string]string{pathsKey: " /v2/b , /v2/a,,/v2/b,\t/v2/a ,  "}),
			want: base("llama", "llama", 8000, "/v2/a", "/v2/b"), wantOK: true,
		},
		"invalid custom paths dropped with problems": {
			kind: "Deployment",
			obj: deployment(map[string]string{nameKey: "llama"}, map[string]string{
				pathsKey: "v1/no-slash,/has space,/ok,/a//b,/q?x=1,/frag#x,/x/../y,/end/.,/enc%2fx,/bad%zz," + "/" + strings.Repeat("l", 1024),
			}),
			want: base("llama", "llama", 8000, "/ok"), wantOK: true,
			wantProblems: []string{
				`Ignoring custom path "v1/no-slash" in annotation model.aibrix.ai/model-router-custom-paths: must start with "/"`,
				`Ignoring custom path "/has space" in annotation model.aibrix.ai/model-router-custom-paths: must contain only URL path characters (no whitespace, '?', '#' or bare '%')`,
				`Ignoring custom path "/a//b" in annotation model.aibrix.ai/model-router-custom-paths: must not contain "//"`,
				`Ignoring custom path "/q?x=1" in annotation model.aibrix.ai/model-router-custom-paths: must contain only URL path characters (no whitespace, '?', '#' or bare '%')`,
				`Ignoring custom path "/frag#x" in annotation model.aibrix.ai/model-router-custom-paths: must contain only URL path characters (no whitespace, '?', '#' or bare '%')`,
				`Ignoring custom path "/x/../y" in annotation model.aibrix.ai/model-router-custom-paths: must not contain "/../"`,
				`Ignoring custom path "/end/." in annotation model.aibrix.ai/model-router-custom-paths: must not end with "/."`,
				`Ignoring custom path "/enc%2fx" in annotation model.aibrix.ai/model-router-custom-paths: must not contain "%2f"`,
				`Ignoring custom path "/bad%zz" in annotation model.aibrix.ai/model-router-custom-paths: must contain only URL path characters (no whitespace, '?', '#' or bare '%')`,
				`Ignoring custom path "/` + strings.Repeat("l", 79) + `…" in annotation model.aibrix.ai/model-router-custom-paths: must be at most 1024 characters`,
			},
		},
		"200 custom paths capped": {
			kind: "Deployment",
			obj:  deployment(map[string]string{nameKey: "llama"}, map[string]string{pathsKey: strings.Join(manyPaths, ",")}),
			want: base("llama", "llama", 8000, manyPaths[:MaxCustomPaths]...), wantOK: true,
			wantProblems: []string{`Ignoring 136 custom paths in annotation model.aibrix.ai/model-router-custom-paths beyond the limit of 64`},
		},
		"problems reported alongside an unroutable service": {
			kind: "Deployment",
			obj:  deployment(map[string]string{nameKey: "llama", portKey: "x"}, map[string]string{svcKey: "Bad_Svc"}),
			wantProblems: []string{
				`Label model.aibrix.ai/port value "x" is not a decimal number; using 8000`,
				`Service name "Bad_Svc" for model "llama" is not a valid Service name: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')`,
			},
		},
		"model adapter without model name uses its own name": {
			kind: KindModelAdapter, adapterPort: 8000,
			obj:  &metav1.ObjectMeta{Namespace: "team-a", Name: "sql-lora"},
			want: Source{Kind: KindModelAdapter, Namespace: "team-a", Name: "sql-lora", Model: "sql-lora", Service: "sql-lora", Port: 8000}, wantOK: true,
		},
		"model adapter is routed under its name, not its label, on its Service's port": {
			// Engines load the adapter, and AIBrix's gateway plugin looks it up, by its name.
			// The adapter-controller publishes its Service on the engines' port.
			kind: KindModelAdapter, adapterPort: 30000,
			obj: &metav1.ObjectMeta{Namespace: "team-a", Name: "sql-lora",
				Labels:      map[string]string{nameKey: "sql-assistant", portKey: "9000"},
				Annotations: map[string]string{svcKey: "elsewhere", pathsKey: "/v1/sql"}},
			want: Source{Kind: KindModelAdapter, Namespace: "team-a", Name: "sql-lora", Model: "sql-lora", Service: "sql-lora", Port: 30000, Paths: []string{"/v1/sql"}}, wantOK: true,
			wantProblems: []string{`Label model.aibrix.ai/name "sql-assistant" differs from the adapter's name; it is routed as "sql-lora", the name engines and AIBrix's gateway use`},
		},
		"model adapter with a differing annotation": {
			kind: KindModelAdapter, adapterPort: 8000,
			obj: &metav1.ObjectMeta{Namespace: "team-a", Name: "sql-lora",
				Labels:      map[string]string{nameKey: "sql-lora"},
				Annotations: map[string]string{nameKey: "sql-assistant"}},
			want: Source{Kind: KindModelAdapter, Namespace: "team-a", Name: "sql-lora", Model: "sql-lora", Service: "sql-lora", Port: 8000}, wantOK: true,
			wantProblems: []string{`Annotation model.aibrix.ai/name "sql-assistant" differs from the adapter's name; it is routed as "sql-lora", the name engines and AIBrix's gateway use`},
		},
		"model adapter whose label is its name": {
			kind: KindModelAdapter, adapterPort: 8000,
			obj:  &metav1.ObjectMeta{Namespace: "team-a", Name: "sql-lora", Labels: map[string]string{nameKey: "sql-lora"}},
			want: Source{Kind: KindModelAdapter, Namespace: "team-a", Name: "sql-lora", Model: "sql-lora", Service: "sql-lora", Port: 8000}, wantOK: true,
		},
		"model adapter's port label is not read": {
			kind: KindModelAdapter, adapterPort: 30000,
			obj:  &metav1.ObjectMeta{Namespace: "team-a", Name: "sql-lora", Labels: map[string]string{portKey: "http"}},
			want: Source{Kind: KindModelAdapter, Namespace: "team-a", Name: "sql-lora", Model: "sql-lora", Service: "sql-lora", Port: 30000}, wantOK: true,
		},
		"model adapter whose Service is not published yet": {
			kind:         KindModelAdapter,
			obj:          &metav1.ObjectMeta{Namespace: "team-a", Name: "sql-lora", Labels: map[string]string{portKey: "8000"}},
			wantProblems: []string{`Waiting for the adapter-controller to publish Service team-a/sql-lora`},
		},
		"a port for an adapter's Service is ignored on other kinds": {
			kind: "Deployment", adapterPort: 30000,
			obj:  deployment(map[string]string{nameKey: "llama"}, nil),
			want: base("llama", "llama", 8000), wantOK: true,
		},
		"model adapter whose name is not a service name": {
			kind:         KindModelAdapter,
			obj:          &metav1.ObjectMeta{Namespace: "team-a", Name: "lora.v1"},
			wantProblems: []string{`Service name "lora.v1" for model "lora.v1" is not a valid Service name: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok, problems := SourceFromObject(tc.kind, tc.obj, tc.adapterPort)
			if ok != tc.wantOK {
				t.Errorf("ok = %v, want %v (problems: %q)", ok, tc.wantOK, problems)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Source mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantProblems, problems, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("problems mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidatePath(t *testing.T) {
	cases := map[string]struct {
		path    string
		wantErr bool
	}{
		"root":                {path: "/"},
		"simple":              {path: "/v1/chat/completions"},
		"sub-delims":          {path: "/a-b_c.d~e!f$g&h'i(j)k*l+m;n=o:p@q"},
		"percent encoded":     {path: "/a%20b"},
		"max length":          {path: "/" + strings.Repeat("a", 1023)},
		"too long":            {path: "/" + strings.Repeat("a", 1024), wantErr: true},
		"empty":               {path: "", wantErr: true},
		"relative":            {path: "v1", wantErr: true},
		"space":               {path: "/a b", wantErr: true},
		"tab":                 {path: "/a\tb", wantErr: true},
		"query":               {path: "/a?b", wantErr: true},
		"fragment":            {path: "/a#b", wantErr: true},
		"double slash":        {path: "//a", wantErr: true},
		"dot segment":         {path: "/a/./b", wantErr: true},
		"dot-dot segment":     {path: "/a/../b", wantErr: true},
		"ends with dot-dot":   {path: "/a/..", wantErr: true},
		"ends with dot":       {path: "/a/.", wantErr: true},
		"encoded slash upper": {path: "/a%2Fb", wantErr: true},
		"bare percent":        {path: "/a%", wantErr: true},
		"unicode":             {path: "/模型", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := ValidatePath(tc.path)
			if (err != nil) != tc.wantErr {
				t.Errorf("ValidatePath(%q) = %v, wantErr %v", tc.path, err, tc.wantErr)
			}
		})
	}
}

// TestValidateModelName: model names are header values: valid UTF-8 (the standard channel
// of the HTTPRoute CRD admits any, AIBrix routes them) without control characters, spaces
// and tabs only singly between other characters.
func TestValidateModelName(t *testing.T) {
	cases := map[string]struct {
		model   string
		wantErr string
	}{
		"ASCII":                        {model: "Qwen/Qwen2.5-7B-Instruct"},
		"CJK":                          {model: "模型"},
		"Cyrillic, CJK and an emoji":   {model: "модель-模型-🦙"},
		"single inner space and tab":   {model: "my model\tv2"},
		"no-break space is a letter":   {model: "a\u00a0b"},
		"at the length limit":          {model: strings.Repeat("模", 1365)},
		"beyond the length limit":      {model: strings.Repeat("模", 1366), wantErr: "must be at most 4096 bytes"},
		"empty":                        {model: "", wantErr: "must not be empty"},
		"invalid UTF-8":                {model: "m\xff", wantErr: "must be valid UTF-8"},
		"NUL":                          {model: "m\x00", wantErr: "must not contain control characters"},
		"newline":                      {model: "a\nb", wantErr: "must not contain control characters"},
		"DEL":                          {model: "a\x7fb", wantErr: "must not contain control characters"},
		"C1 control (NEL)":             {model: "a\u0085b", wantErr: "must not contain control characters"},
		"leading space":                {model: " m", wantErr: "must not start or end with a space or tab"},
		"trailing tab":                 {model: "m\t", wantErr: "must not start or end with a space or tab"},
		"two spaces":                   {model: "a  b", wantErr: "nor have two in a row"},
		"space and tab":                {model: "a \tb", wantErr: "nor have two in a row"},
		"only a space":                 {model: " ", wantErr: "must not start or end with a space or tab"},
		"printable ASCII punctuation":  {model: "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"},
		"unicode line separator":       {model: "a\u2028b", wantErr: "must not contain control characters"},
		"zero width joiner is allowed": {model: "👩\u200d💻"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := ValidateModelName(tc.model)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("ValidateModelName(%.40q) = %v, want nil", tc.model, err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("ValidateModelName(%.40q) = %v, want an error containing %q", tc.model, err, tc.wantErr)
			}
		})
	}
}
