package routes

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation"
)

// TestRouteName pins AIBrix's route name rule (see RouteName) with names worked out by hand
// from the rule: the hash part is the first 12 hex digits of `printf %s "$model" | sha256sum`,
// computed outside Go. AIBrix's gateway plugin looks routes up by these names, so a change
// to any row is a break of the data-plane contract.
func TestRouteName(t *testing.T) {
	a := func(n int) string { return strings.Repeat("a", n) }
	cases := map[string]struct {
		model string
		want  string
	}{
		"DNS label kept":                 {model: "llama", want: "llama-router"},
		"dashes and digits kept":         {model: "llama-3-8b", want: "llama-3-8b-router"},
		"dots kept (a subdomain)":        {model: "llama-3.1-8b", want: "llama-3.1-8b-router"},
		"version with dot kept":          {model: "gpt-oss-20b", want: "gpt-oss-20b-router"},
		"capitals":                       {model: "Qwen2.5-7B", want: "qwen2-5-7b-9d7101d42cd9-router"},
		"capital only":                   {model: "Llama", want: "llama-9384f8e757c1-router"},
		"all capitals":                   {model: "MODEL", want: "model-c8b6c094bbbd-router"},
		"capitals and dots":              {model: "Llama-3.1-8B-Instruct", want: "llama-3-1-8b-instruct-f9b45bd93750-router"},
		"capitals, dots, v prefix":       {model: "Mistral-7B-Instruct-v0.3", want: "mistral-7b-instruct-v0-3-f0039c47cca3-router"},
		"slash":                          {model: "Qwen/Qwen2.5-7B-Instruct", want: "qwen-qwen2-5-7b-instruct-0311af13fabf-router"},
		"hugging face id":                {model: "meta-llama/Llama-3.1-8B", want: "meta-llama-llama-3-1-8b-ac8584a01edb-router"},
		"underscore":                     {model: "foo_bar", want: "foo-bar-4928cae8b37b-router"},
		"dot and underscore":             {model: "team.model_v1", want: "team-model-v1-6e92121b7950-router"},
		"leading dash":                   {model: "-foo", want: "foo-04bac3c81959-router"},
		"empty DNS label between dots":   {model: "a..b", want: "a-b-f62b42414c51-router"},
		"only slashes normalise to none": {model: "///", want: "model-732c4e971163-router"},
		"only dots normalise to none":    {model: "...", want: "model-ab5df625bc76-router"},
		"unicode normalises to none":     {model: "模型", want: "model-c98e118e0a43-router"},
		"empty":                          {model: "", want: "model-e3b0c44298fc-router"},
		"longest verbatim (253)":         {model: a(246), want: a(246) + "-router"},
		"one too long, cut to 233":       {model: a(247), want: a(233) + "-d1c97f05a04d-router"},
		"cut at a dash, dash trimmed":    {model: a(232) + "/b", want: a(232) + "-5eb7bcaa2b01-router"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := RouteName(tc.model)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("RouteName(%q) mismatch (-want +got):\n%s", tc.model, diff)
			}
			if msgs := validation.IsDNS1123Subdomain(got); len(msgs) > 0 {
				t.Errorf("RouteName(%q) = %q is not a DNS-1123 subdomain: %v", tc.model, got, msgs)
			}
		})
	}
}

// TestLegacyRouteName pins the rule of earlier releases, whose routes are found and replaced
// by that name.
func TestLegacyRouteName(t *testing.T) {
	cases := map[string]struct {
		model string
		want  string
	}{
		"simple":                 {model: "llama", want: "llama-router"},
		"dashes and digits":      {model: "llama-3-8b", want: "llama-3-8b-router"},
		"dots":                   {model: "llama-3.1-8b", want: "llama-3-1-8b-router-7b633509"},
		"longest verbatim":       {model: strings.Repeat("a", 56), want: strings.Repeat("a", 56) + "-router"},
		"one too long":           {model: strings.Repeat("a", 57), want: strings.Repeat("a", 47) + "-router-f13b2d72"},
		"300 chars":              {model: strings.Repeat("a", 300), want: strings.Repeat("a", 47) + "-router-9835fa6b"},
		"uppercase":              {model: "Llama", want: "llama-router-9384f8e7"},
		"all uppercase":          {model: "MODEL", want: "model-router-c8b6c094"},
		"capitals and dots":      {model: "Qwen2.5-7B", want: "qwen2-5-7b-router-9d7101d4"},
		"slash and dots":         {model: "Qwen/Qwen2.5-7B-Instruct", want: "qwen-qwen2-5-7b-instruct-router-0311af13"},
		"hugging face id":        {model: "meta-llama/Llama-3.1-8B-Instruct", want: "meta-llama-llama-3-1-8b-instruct-router-08a20b29"},
		"dot and underscore":     {model: "team.model_v1", want: "team-model-v1-router-6e92121b"},
		"unicode only":           {model: "模型", want: "router-c98e118e"},
		"empty":                  {model: "", want: "router-e3b0c442"},
		"cut before a separator": {model: strings.Repeat("x", 46) + "/yyyy", want: strings.Repeat("x", 46) + "-router-56291e5d"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, LegacyRouteName(tc.model)); diff != "" {
				t.Errorf("LegacyRouteName(%q) mismatch (-want +got):\n%s", tc.model, diff)
			}
		})
	}
}

func TestRouteNameDistinct(t *testing.T) {
	models := []string{
		"llama", "Llama", "LLAMA", "llama-", "llama_", "llama.", "llama/", "llama-router",
		"Qwen/Qwen2.5-7B", "qwen/qwen2.5-7b", "qwen-qwen2-5-7b", "qwen.qwen2.5.7b",
		strings.Repeat("a", 246), strings.Repeat("a", 247), strings.Repeat("a", 248), strings.Repeat("a", 300),
		strings.Repeat("a", 300) + "b", "模型", "模型2", "", " ", "llama.3", "llama-3", "Llama.3",
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
		"first":       {ns: "aibrix-system", index: 0, want: "loraplane-router-aibrix-system"},
		"second":      {ns: "aibrix-system", index: 1, want: "loraplane-router-aibrix-system-2"},
		"longest ns":  {ns: longNS, index: 11, want: "loraplane-router-" + longNS + "-12"},
		"single char": {ns: "a", index: 0, want: "loraplane-router-a"},
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
