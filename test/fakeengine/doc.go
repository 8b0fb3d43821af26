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
// A Fleet holds many engines keyed by pod IP, for tests that run many fake pods.
//
// Everything is safe for concurrent use. Close shuts the listeners down, ends hanging
// requests (their connections are dropped, as when a process dies) and leaves no goroutines
// behind.
package fakeengine
