package engine

import (
	"context"
	"errors"
	"net/http"
)

// loraLoadBody is the load request of vLLM and SGLang: both take the adapter's name and
// path.
type loraLoadBody struct {
	LoraName string `json:"lora_name"`
	LoraPath string `json:"lora_path"`
	// LoadInplace replaces the weights of a loaded adapter of that name
	// (vLLM's LoadLoRAAdapterRequest.load_inplace); vLLM versions without
	// it ignore the field and answer "already loaded". Never sent to SGLang.
	LoadInplace bool `json:"load_inplace,omitempty"`
}

// loraUnloadBody is the unload request of vLLM and SGLang.
type loraUnloadBody struct {
	LoraName string `json:"lora_name"`
}

// Load calls POST /v1/load_lora_adapter. vLLM answers 200 with a plain-text
// body on success and 400 "has already been loaded" when the name is taken.
// A 404 without vLLM's own error object means the route does not exist:
// runtime LoRA updating is disabled. With req.Replace the request carries
// load_inplace, and "already loaded" means the engine cannot replace.
func (c *vllmClient) Load(ctx context.Context, ep Endpoint, req LoadRequest) error {
	path, err := loadTarget(KindVLLM, req)
	if err != nil {
		return err
	}
	r, err := c.t.post(ctx, KindVLLM, OpLoad, ep, vllmLoadPath, loraLoadBody{LoraName: req.Name, LoraPath: path, LoadInplace: req.Replace})
	if err != nil {
		return err
	}
	if req.Replace && r.status == http.StatusBadRequest && alreadyLoaded(r.message(ep)) {
		return &Error{Reason: ReasonReloadUnsupported, Engine: KindVLLM, Op: OpLoad, Status: r.status,
			Message: "the engine answered that the adapter is already loaded: it does not support load_inplace"}
	}
	return loadOutcome(KindVLLM, ep, r, vllmLoadPath)
}

// Unload calls POST /v1/unload_lora_adapter. An unknown adapter is answered
// 404 by newer vLLM and 400 "cannot be found" by older versions; both mean
// the adapter is not loaded.
func (c *vllmClient) Unload(ctx context.Context, ep Endpoint, adapterName string) error {
	r, err := c.t.unload(ctx, KindVLLM, ep, adapterName, vllmUnloadPath, loraUnloadBody{LoraName: adapterName})
	if err != nil {
		return err
	}
	return unloadOutcome(KindVLLM, ep, r)
}

// ListAdapters calls GET /v1/models.
func (c *vllmClient) ListAdapters(ctx context.Context, ep Endpoint) ([]Adapter, error) {
	return listModels(ctx, c.t, KindVLLM, ep, ep.enginePort())
}

// loadOutcome interprets a vLLM-style load answer (vLLM, and the runtime
// sidecar, which relays the engine's answer).
func loadOutcome(engine Kind, ep Endpoint, r *reply, route string) error {
	msg := r.message(ep)
	switch {
	case r.ok():
		return nil
	case r.status == http.StatusBadRequest && alreadyLoaded(msg):
		return nil
	case r.status == http.StatusNotFound && !isOpenAIError(r.body):
		return loraUpdatingDisabled(engine, route, msg)
	default:
		return statusError(engine, OpLoad, r.status, r.header, msg)
	}
}

// unloadOutcome interprets a vLLM-style unload answer.
func unloadOutcome(engine Kind, ep Endpoint, r *reply) error {
	msg := r.message(ep)
	switch {
	case r.ok():
		return nil
	case r.status == http.StatusNotFound:
		// Either vLLM does not know the adapter, or it has no runtime LoRA
		// routes, in which case nothing can have been loaded through them.
		return nil
	case r.status == http.StatusBadRequest && unknownAdapter(msg):
		return nil
	default:
		return statusError(engine, OpUnload, r.status, r.header, msg)
	}
}

func loraUpdatingDisabled(engine Kind, route, msg string) *Error {
	var text string
	switch engine {
	case KindSGLang:
		text = "the engine has no " + route + " route: this SGLang version cannot load LoRA adapters at runtime"
	case KindRuntime:
		text = "the runtime sidecar got 404 from " + route + ": runtime LoRA updating is disabled on the sidecar or its engine (vLLM needs VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora)"
	default:
		text = "the engine has no " + route + " route: runtime LoRA updating is disabled (vLLM needs VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora)"
	}
	if msg != "" {
		text += ": " + msg
	}
	return &Error{Reason: ReasonLoRAUpdatingDisabled, Engine: engine, Op: OpLoad, Status: http.StatusNotFound, Message: text}
}

// withOp records op on an *Error that was built without one.
func withOp(err error, op Op) error {
	var e *Error
	if errors.As(err, &e) && e.Op == "" {
		e.Op = op
	}
	return err
}
