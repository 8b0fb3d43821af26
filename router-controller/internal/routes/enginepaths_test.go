package routes

import (
	"slices"
	"strings"
	"testing"
)

// TestCustomPathsRefuseEngineAdmin: a custom path that would forward an engine's adapter or
// admin endpoint through the gateway is dropped with a problem, whatever its case, trailing
// slash or percent-encoding, and also when it is a path-segment prefix of such an endpoint
// (a PathPrefix match forwards everything below it). Paths beside it in the annotation still
// apply.
func TestCustomPathsRefuseEngineAdmin(t *testing.T) {
	cases := map[string]struct {
		path string
		keep bool
	}{
		"vLLM load":                         {path: "/v1/load_lora_adapter"},
		"vLLM load, other case and slash":   {path: "/V1/Load_LoRA_Adapter/"},
		"vLLM unload":                       {path: "/v1/unload_lora_adapter"},
		"prefix of vLLM's load":             {path: "/v1"},
		"prefix of vLLM's load, with slash": {path: "/V1/"},
		"root":                              {path: "/"},
		"AIBrix sidecar unload":             {path: "/v1/lora_adapter/unload"},
		"prefix of the sidecar's endpoints": {path: "/v1/lora_adapter"},
		"AIBrix sidecar download":           {path: "/v1/model/download"},
		"percent-encoded v":                 {path: "/%761/load_lora_adapter"},
		"percent-encoded lower hex":         {path: "/v1/load%5flora%5fadapter"},
		"SGLang load":                       {path: "/load_lora_adapter"},
		"SGLang weights from disk":          {path: "/update_weights_from_disk"},
		"SGLang flush cache":                {path: "/FLUSH_CACHE"},
		"vLLM sleep":                        {path: "/sleep"},
		"vLLM collective RPC":               {path: "/collective_rpc/"},
		"below an admin endpoint":           {path: "/v1/load_lora_adapter/x"},
		"below vLLM's pause":                {path: "/pause/step"},
		"an inference path stays":           {path: "/v1/custom", keep: true},
		"another version stays":             {path: "/v2/generate", keep: true},
		"a longer segment stays":            {path: "/sleeping-beauty", keep: true},
		"a sibling of an admin path stays":  {path: "/v1/load_lora_adapters", keep: true},
		"encoded reserved character stays":  {path: "/v1/load_lora_adapter%21", keep: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			paths, problems := parseCustomPaths(tc.path + ",/v1/kept")
			if !slices.Contains(paths, "/v1/kept") {
				t.Errorf("paths %q: the other entry of the annotation was dropped", paths)
			}
			kept := slices.Contains(paths, tc.path)
			switch {
			case tc.keep && !kept:
				t.Errorf("paths %q: %q was dropped (problems %q)", paths, tc.path, problems)
			case tc.keep && len(problems) > 0:
				t.Errorf("problems %q for a path that may be routed", problems)
			case !tc.keep && kept:
				t.Errorf("paths %q: %q reaches an engine admin endpoint through the gateway", paths, tc.path)
			case !tc.keep && (len(problems) != 1 || !strings.Contains(problems[0], "engine")):
				t.Errorf("problems %q, want one naming the engine endpoint it reaches", problems)
			}
		})
	}
}

// TestEngineAdminEndpoints: the list is well formed, every endpoint is refused as itself, and
// the default paths reach none of them.
func TestEngineAdminEndpoints(t *testing.T) {
	for _, e := range EngineAdminEndpoints {
		seen := map[string]bool{}
		for _, p := range e.Paths {
			if err := ValidatePath(p); err != nil || p != strings.ToLower(p) || strings.HasSuffix(p, "/") {
				t.Errorf("%s endpoint %q: not a lower-case path prefix without trailing slash (%v)", e.Engine, p, err)
			}
			if seen[p] {
				t.Errorf("%s endpoint %q listed twice", e.Engine, p)
			}
			seen[p] = true
			if _, _, reaches := ReachesEngineAdmin(p); !reaches {
				t.Errorf("%s endpoint %q is not refused", e.Engine, p)
			}
		}
	}
	for _, p := range DefaultPaths {
		if engine, endpoint, reaches := ReachesEngineAdmin(p); reaches {
			t.Errorf("default path %q reaches %s's %s", p, engine, endpoint)
		}
	}
	if engine, endpoint, _ := ReachesEngineAdmin("/%2e%2e/x/%2E%2E/V1/Load_LoRA_Adapter"); engine != "vLLM" || endpoint != "/v1/load_lora_adapter" {
		t.Errorf("encoded dot segments: reaches %q %q, want vLLM's /v1/load_lora_adapter", engine, endpoint)
	}
}
