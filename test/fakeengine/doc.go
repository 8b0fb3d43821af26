// Package fakeengine is an in-memory fake LLM inference engine for tests.
//
// An Engine stands in for one pod: it listens on ip:port (ip must be a loopback address in
// 127.0.0.0/8; on Linux the whole /8 is loopback, so each fake pod can have its own IP and
// all of them can share the real engine port) and serves the LoRA management API of vLLM or
// SGLang, chosen by Options.Kind, with the status codes and bodies the real engines answer:
//
//	vLLM    GET /v1/models, POST /v1/load_lora_adapter, POST /v1/unload_lora_adapter
//	SGLang  GET /v1/models, POST /load_lora_adapter,    POST /unload_lora_adapter
//
// Both kinds also answer the inference API, POST /v1/completions and /v1/chat/completions,
// for the base model and loaded adapters (any other model: 404 NotFoundError, as vLLM),
// naming the model and the engine (Options.Name, also in the X-Fake-Engine-Served-By
// header), so that a test routing requests through a gateway learns who served each.
//
// With Options.Runtime the engine also serves the runtime sidecar on ip:8080
// (POST /v1/lora_adapter/load and /v1/lora_adapter/unload), which loads into and unloads
// from the same adapter state. Both listeners answer GET /health with 200.
//
// When Options.APIKey is set every request except GET /health must carry
// "Authorization: Bearer <key>", or it is answered 401. Unknown paths are answered
// 404 {"detail":"Not Found"} and wrong methods 405 {"detail":"Method Not Allowed"}, as
// FastAPI does.
//
// Faults (Engine.SetFault) make an operation fail with a given status and body, hang, answer
// a huge or malformed body, or lie (answer success without changing state), for a number of
// requests or until cleared. Engine.Restart forgets the adapters loaded through the API, as
// an engine restart does, holds Options.Preload again (vLLM's --lora-modules) and keeps the
// counters. Counters (Engine.Requests, Loads, Unloads, Lists), Engine.Loaded and
// Engine.KeysSeen let tests assert what a controller did; Engine.ForeignUnloads counts
// unload requests naming a preloaded adapter, one the API client did not load.
//
// Options.Capacity bounds the adapters an engine holds as the real engines' arguments do
// (CapacityFromArgs reads them): a vLLM engine keeps --max-cpu-loras adapters (default
// --max-loras, default 1) in an LRU cache and silently evicts the least recently used beyond
// it, still listing it in /v1/models and loading it again when a request names it; an SGLang
// engine refuses loads beyond --max-loaded-loras. Counts.Evictions, Reloads and
// CapacityRefusals count what happened, Engine.Resident tells what the engine holds, and GET
// /metrics (no API key needed, as on vLLM) exports the engine's own LoRA metrics:
// vllm:lora_requests_info{max_lora,running_lora_adapters,waiting_lora_adapters} (once a
// request has been served) and vLLM's residency gauges (vllm:max_gpu_lora_adapters,
// vllm:num_gpu_loaded_lora_adapters, vllm:num_cpu_loaded_lora_adapters,
// vllm:lora_adapter_loaded), or SGLang's sglang:lora_pool_slots_total/_used/_utilization.
// Without a capacity an engine is unlimited and exports no LoRA metrics, as before.
//
// A Fleet holds many engines keyed by pod IP, for tests that run many fake pods.
//
// Everything is safe for concurrent use. Close shuts the listeners down, ends hanging
// requests (their connections are dropped, as when a process dies) and leaves no goroutines
// behind.
package fakeengine
