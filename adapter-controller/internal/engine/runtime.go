package engine

import "context"

type runtimeLoadBody struct {
	LoraName         string            `json:"lora_name"`
	ArtifactURL      string            `json:"artifact_url"`
	Credentials      map[string]string `json:"credentials,omitempty"`
	AdditionalConfig map[string]string `json:"additional_config,omitempty"`
}

type runtimeUnloadBody struct {
	LoraName     string `json:"lora_name"`
	CleanupLocal bool   `json:"cleanup_local"`
}

// Load calls POST /v1/lora_adapter/load on the sidecar with the artifact URL
// unchanged, plus credentials and additional config when given.
func (c *runtimeClient) Load(ctx context.Context, ep Endpoint, req LoadRequest) error {
	artifact, err := loadTarget(KindRuntime, req)
	if err != nil {
		return err
	}
	r, err := c.t.post(ctx, KindRuntime, OpLoad, ep, runtimeLoadPath, runtimeLoadBody{
		LoraName:         req.Name,
		ArtifactURL:      artifact,
		Credentials:      req.Credentials,
		AdditionalConfig: req.AdditionalConfig,
	})
	if err != nil {
		return err
	}
	return loadOutcome(KindRuntime, ep, r, runtimeLoadPath)
}

// Unload calls POST /v1/lora_adapter/unload on the sidecar, asking it to
// delete the downloaded files too.
func (c *runtimeClient) Unload(ctx context.Context, ep Endpoint, adapterName string) error {
	r, err := c.t.unload(ctx, KindRuntime, ep, adapterName, runtimeUnloadPath, runtimeUnloadBody{LoraName: adapterName, CleanupLocal: true})
	if err != nil {
		return err
	}
	return unloadOutcome(KindRuntime, ep, r)
}

// ListAdapters calls GET /v1/models on the engine itself (ep.EnginePort):
// the sidecar has no listing API.
func (c *runtimeClient) ListAdapters(ctx context.Context, ep Endpoint) ([]Adapter, error) {
	return listModels(ctx, c.t, KindRuntime, ep, ep.enginePort())
}
