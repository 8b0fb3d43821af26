package routes

import (
	"path"
	"strings"
)

// EngineEndpoints are the adapter and admin endpoints of one engine.
type EngineEndpoints struct {
	// Engine names the engine in problem sentences, e.g. "vLLM".
	Engine string
	// Paths are the endpoints' paths as the engine serves them.
	Paths []string
}

// EngineAdminEndpoints are the HTTP endpoints through which an engine loads or unloads
// adapters, replaces weights, frees memory, sleeps, pauses, profiles, runs code or shows its
// configuration. They serve the controllers and operators inside the cluster, never the
// clients of the gateway: a route path prefix that reaches one of them (see
// ReachesEngineAdmin) is refused. Callers must not modify the slice.
//
// Facts, from each project's source:
//   - vLLM: vllm/entrypoints/openai/api_server.py and the routers it attaches from
//     vllm/entrypoints/serve (lora, profile, sleep, cache, rpc, elastic_ep, admin,
//     fault_tolerance and the dev routers rlhf, server_info, runtime_config); most of them
//     exist only with VLLM_SERVER_DEV_MODE, VLLM_ALLOW_RUNTIME_LORA_UPDATING,
//     VLLM_TORCH_PROFILER_DIR or --enable-admin-api, which an engine may well run with.
//   - SGLang: python/sglang/srt/entrypoints/http_server.py (the native endpoints that change
//     or reveal the server's state).
//   - AIBrix's runtime sidecar (aibrix-runtime): python/aibrix/aibrix/app.py and the router it
//     includes from python/aibrix/aibrix/runtime/model_runtime_api.py.
var EngineAdminEndpoints = []EngineEndpoints{
	{Engine: "vLLM", Paths: []string{
		"/v1/load_lora_adapter", "/v1/unload_lora_adapter",
		"/start_profile", "/stop_profile",
		"/sleep", "/wake_up", "/is_sleeping",
		"/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache",
		"/collective_rpc",
		"/scale_elastic_ep", "/is_scaling_elastic_ep",
		"/pause", "/resume", "/is_paused",
		"/init_weight_transfer_engine", "/start_weight_update", "/update_weights", "/finish_weight_update",
		"/get_world_size", "/server_info", "/v1/runtime_config",
		"/v1/admin", "/fault_tolerance",
	}},
	{Engine: "SGLang", Paths: []string{
		"/load_lora_adapter", "/unload_lora_adapter",
		"/update_weights_from_disk", "/update_weights_from_tensor", "/update_weights_from_distributed",
		"/update_weights_from_ipc", "/update_weight_version", "/get_weights_by_name",
		"/init_weights_update_group", "/destroy_weights_update_group",
		"/init_weights_send_group_for_remote_instance", "/send_weights_to_remote_instance",
		"/release_memory_occupation", "/resume_memory_occupation",
		"/flush_cache", "/clear_hicache_storage_backend", "/freeze_gc",
		"/start_profile", "/stop_profile",
		"/start_expert_distribution_record", "/stop_expert_distribution_record", "/dump_expert_distribution_record",
		"/pause_generation", "/continue_generation", "/abort_request", "/slow_down",
		"/configure_logging", "/set_internal_state", "/get_server_info",
	}},
	{Engine: "AIBrix's runtime sidecar", Paths: []string{
		"/v1/lora_adapter/load", "/v1/lora_adapter/unload",
		"/v1/model/download", "/v1/model/list",
		"/v1/runtime/models",
	}},
}

// ReachesEngineAdmin reports whether a PathPrefix match on p forwards requests for an engine
// endpoint of EngineAdminEndpoints, and which: when p is the endpoint, a path-segment prefix
// of it ("/", "/v1") or below it. Paths are compared as an engine or a normalising gateway
// may read them: percent-encoded unreserved characters decoded, case ignored, dot segments
// resolved and trailing slashes ignored.
func ReachesEngineAdmin(p string) (engine, endpoint string, reaches bool) {
	prefix := normalizeEnginePath(p)
	for _, e := range EngineAdminEndpoints {
		for _, ep := range e.Paths {
			target := strings.ToLower(ep)
			if prefix == "/" || segmentPrefix(prefix, target) || segmentPrefix(target, prefix) {
				return e.Engine, ep, true
			}
		}
	}
	return "", "", false
}

// segmentPrefix reports whether prefix equals p or is made of its leading path segments.
// Neither ends with a slash.
func segmentPrefix(prefix, p string) bool {
	return p == prefix || strings.HasPrefix(p, prefix+"/")
}

// normalizeEnginePath decodes the percent-encoded unreserved characters of p (RFC 3986
// section 2.3), lower-cases it and resolves dot segments; the result has no trailing slash
// unless it is "/".
func normalizeEnginePath(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '%' && i+2 < len(p) {
			if c, ok := unhex(p[i+1], p[i+2]); ok && unreserved(c) {
				b.WriteByte(c)
				i += 2
				continue
			}
		}
		b.WriteByte(p[i])
	}
	return path.Clean("/" + strings.ToLower(b.String()))
}

func unhex(hi, lo byte) (byte, bool) {
	h, ok1 := hexValue(hi)
	l, ok2 := hexValue(lo)
	return h<<4 | l, ok1 && ok2
}

func hexValue(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// unreserved reports whether c is an unreserved URI character, which percent-encoding does
// not change the meaning of.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0
}
