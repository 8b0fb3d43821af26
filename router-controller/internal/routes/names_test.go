package routes

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Golden values: hashes computed independently (sha256 of the model name, hex). Changing any
// of these breaks upgrades, because existing routes would be orphaned.
func TestRouteName(t *testing.T) {
	cases := map[string]struct {
		model string
		want  string
	}{
		"simple":                 {model: "llama", want: "llama-router"},
		"dashes and digits":      {model: "llama-3-8b", want: "llama-3-8b-router"},
		"longest verbatim":       {model: strings.Repeat("a", 56), want: strings.Repeat("a", 56) + "-router"},
		"one too long":           {model: strings.Repeat("a", 57), want: strings.Repeat("a", 47) + "-router-f13b2d72"},
		"300 chars":              {model: strings.Repeat("a", 300), want: strings.Repeat("a", 47) + "-router-9835fa6b"},
		"uppercase":              {model: "Llama", want: "llama-router-9384f8e7"},
		"all uppercase":          {model: "MODEL", want: "model-router-c8b6c094"},
		"slash and dots":         {model: "Qwen/Qwen2.5-7B-Instruct", want: "qwen-qwen2-5-7b-instruct-router-0311af13"},
		"hugging face id":        {model: "meta-llama/Llama-3.1-8B-Instruct", want: "meta-llama-llama-3-1-8b-instruct-router-08a20b29"},
		"dot and underscore":     {model: "team.model_v1", want: "team-model-v1-router-6e92121b"},
		"unicode only":           {model: "模型", want: "router-c98e118e"},
		"empty":                  {model: "", want: "router-e3b0c442"},
		"cut before a separator": {model: strings.Repeat("x", 46) + "/yyyy", want: strings.Repeat("x", 46) + "-router-56291e5d"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := RouteName(tc.model)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("RouteName(%q) mismatch (-want +got):\n%s", tc.model, diff)
			}
			if msgs := validation.IsDNS1123Label(got); len(msgs) > 0 {
				t.Errorf("RouteName(%q) = %q is not a DNS-1123 label: %v", tc.model, got, msgs)
			}
		})
	}
}

func TestRouteNameDistinct(t *testing.T) {
	models := []string{
		"llama", "Llama", "LLAMA", "llama-", "llama_", "llama.", "llama/", "llama-router",
		"Qwen/Qwen2.5-7B", "qwen/qwen2.5-7b", "qwen-qwen2-5-7b", "qwen.qwen2.5.7b",
		strings.Repeat("a", 56), strings.Repeat("a", 57), strings.Repeat("a", 58), strings.Repeat("a", 300),
		strings.Repeat("a", 300) + "b", "模型", "模型2", "", " ",
	}
	seen := map[string]string{}
	for _, m := range models {
		name := RouteName(m)
		if other, dup := seen[name]; dup {
			t.Errorf("RouteName(%q) = RouteName(%q) = %q", m, other, name)
		}
		seen[name] = m
		if RouteName(m) != name {
			t.Errorf("RouteName(%q) is not stable", m)
		}
	}
}

func TestModelHash(t *testing.T) {
	cases := map[string]struct{ model, want string }{
		"lowercase": {model: "llama", want: "fc5a1047f5919892fcdf8aa79ea5d6bb"},
		"uppercase": {model: "Llama", want: "9384f8e757c11b1672198ceb44887d6c"},
		"unicode":   {model: "模型", want: "c98e118e0a43f078bac8043a1ac8ccac"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ModelHash(tc.model)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ModelHash(%q) mismatch (-want +got):\n%s", tc.model, diff)
			}
			if msgs := validation.IsValidLabelValue(got); len(msgs) > 0 {
				t.Errorf("ModelHash(%q) = %q is not a label value: %v", tc.model, got, msgs)
			}
		})
	}
}

func TestReferenceGrantName(t *testing.T) {
	longNS := strings.Repeat("n", 63)
	cases := map[string]struct {
		ns    string
		index int
		want  string
	}{
		"first":       {ns: "aibrix-system", index: 0, want: "modelplane-router-aibrix-system"},
		"second":      {ns: "aibrix-system", index: 1, want: "modelplane-router-aibrix-system-2"},
		"longest ns":  {ns: longNS, index: 11, want: "modelplane-router-" + longNS + "-12"},
		"single char": {ns: "a", index: 0, want: "modelplane-router-a"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := ReferenceGrantName(tc.ns, tc.index)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ReferenceGrantName mismatch (-want +got):\n%s", diff)
			}
			if msgs := validation.IsDNS1123Subdomain(got); len(msgs) > 0 {
				t.Errorf("%q is not a DNS-1123 subdomain: %v", got, msgs)
			}
		})
	}
}
