package engine

import (
	"context"
	"encoding/json"
	"net/http"
)

type sglangResult struct {
	Success      *bool  `json:"success"`
	ErrorMessage string `json:"error_message"`
}

// Load calls POST /load_lora_adapter. An "already loaded" failure is success.
func (c *sglangClient) Load(ctx context.Context, ep Endpoint, req LoadRequest) error {
	path, err := loadTarget(KindSGLang, req)
	if err != nil {
		return err
	}
	r, err := c.t.post(ctx, KindSGLang, OpLoad, ep, sglangLoadPath, loraLoadBody{LoraName: req.Name, LoraPath: path})
	if err != nil {
		return err
	}
	if r.status == http.StatusNotFound {
		return loraUpdatingDisabled(KindSGLang, sglangLoadPath, r.message(ep))
	}
	return sglangOutcome(OpLoad, ep, r, alreadyLoaded)
}

// Unload calls POST /unload_lora_adapter. A "does not exist" failure is
// success, and so is 404: without the route nothing can have been loaded.
func (c *sglangClient) Unload(ctx context.Context, ep Endpoint, adapterName string) error {
	r, err := c.t.unload(ctx, KindSGLang, ep, adapterName, sglangUnloadPath, loraUnloadBody{LoraName: adapterName})
	if err != nil {
		return err
	}
	if r.status == http.StatusNotFound {
		return nil
	}
	return sglangOutcome(OpUnload, ep, r, unknownAdapter)
}

// ListAdapters calls GET /v1/models.
func (c *sglangClient) ListAdapters(ctx context.Context, ep Endpoint) ([]Adapter, error) {
	return listModels(ctx, c.t, KindSGLang, ep, ep.enginePort())
}

// sglangOutcome interprets a load or unload answer. done recognises the
// failure message that means the desired state is already reached.
func sglangOutcome(op Op, ep Endpoint, r *reply, done func(string) bool) error {
	switch {
	case r.ok():
		var res sglangResult
		if err := json.Unmarshal(r.body, &res); err != nil {
			e := badResponse(KindSGLang, op, r.status, "the answer is not valid JSON")
			e.Err = err
			return e
		}
		if res.Success == nil {
			return badResponse(KindSGLang, op, r.status, `the answer has no "success" field`)
		}
		if *res.Success {
			return nil
		}
		msg := clean(res.ErrorMessage, ep.APIKey)
		if done(msg) {
			return nil
		}
		if msg == "" {
			msg = "the engine reported success=false without a message"
		}
		return &Error{Reason: ReasonEngineRejected, Engine: KindSGLang, Op: op, Status: r.status, Message: msg}
	case r.status == http.StatusBadRequest:
		msg := r.message(ep)
		if done(msg) {
			return nil
		}
		return statusError(KindSGLang, op, r.status, r.header, msg)
	default:
		return statusError(KindSGLang, op, r.status, r.header, r.message(ep))
	}
}
