// Package engine talks to the LLM inference engines that serve LoRA adapters:
// it loads, unloads and lists adapters on one engine pod over HTTP.
//
// Three engine kinds are supported, each with its own small implementation
// of [Client]:
//
//   - vLLM (the default): POST /v1/load_lora_adapter and
//     /v1/unload_lora_adapter; the engine must run with
//     VLLM_ALLOW_RUNTIME_LORA_UPDATING enabled.
//   - SGLang (pod label model.aibrix.ai/engine=sglang): POST
//     /load_lora_adapter and /unload_lora_adapter, answering
//     {"success": bool, "error_message": string}.
//   - The AIBrix runtime sidecar (a container named aibrix-runtime, port
//     8080, when [EndpointOptions] RuntimeSidecar is set):
//     POST /v1/lora_adapter/load and /v1/lora_adapter/unload. The
//     sidecar downloads artifacts (s3://, gs://, https://, ...) before it asks
//     the engine to load them.
//
// All kinds list adapters with GET /v1/models on the engine itself: adapters
// are the entries with a non-empty "parent".
//
// [EndpointForPod] turns a Pod into an [Endpoint] (kind, pod IP, ports, API
// key) and [New] builds an [*HTTPClient] that drives any kind. Only the pod IP
// from the Pod's status is ever dialled; redirects are never followed and
// response bodies are read up to a fixed limit.
//
// Every failure is an [*Error] carrying a [Reason] (a PascalCase string fit
// for a Kubernetes condition) and whether retrying the same request may
// succeed. Retry decisions come from the HTTP status or the transport error,
// never from message text; message text is consulted only where the engines
// signal nothing else, to recognise "already loaded" on load and "unknown
// adapter" on unload as success. The API key never appears in errors.
//
// The package does not log and does not register metrics: [Options.Observer]
// receives one call per HTTP request for the caller to record.
package engine
