package engine

import (
	"context"
	"net/http"
)

// AIBrix runtime sidecar routes.
const (
	runtimeLoadPath   = "/v1/lora_adapter/load"
	runtimeUnloadPath = "/v1/lora_adapter/unload"
)

// runtimeClient drives the AIBrix runtime sidecar, which downloads the
// artifact and then asks its engine to load it, relaying the engine's answer.
type runtimeClient struct{ t *transport }

var _ Client = (*runtimeClient)(nil)

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
	if err := checkName(KindRuntime, OpLoad, req.Name); err != nil {
		return err
	}
	artifact, err := ResolveArtifact(KindRuntime, req.ArtifactURL)
	if err != nil {
		return withOp(err, OpLoad)
	}
	r, err := c.t.do(ctx, call{
		engine: KindRuntime, op: OpLoad, ep: ep, port: ep.port(),
		method: http.MethodPost, path: runtimeLoadPath,
		body: runtimeLoadBody{
			LoraName:         req.Name,
			ArtifactURL:      artifact,
			Credentials:      req.Credentials,
			AdditionalConfig: req.AdditionalConfig,
		},
	})
	if err != nil {
		return err
	}
	return loadOutcome(KindRuntime, ep, r, runtimeLoadPath)
}

// Unload calls POST /v1/lora_adapter/unload on the sidecar, asking it to
// delete the downloaded files too.
func (c *runtimeClient) Unload(ctx context.Context, ep Endpoint, adapterName string) error {
	if err := checkName(KindRuntime, OpUnload, adapterName); err != nil {
		return err
	}
	r, err := c.t.do(ctx, call{
		engine: KindRuntime, op: OpUnload, ep: ep, port: ep.port(),
		method: http.MethodPost, path: runtimeUnloadPath,
		body: runtimeUnloadBody{LoraName: adapterName, CleanupLocal: true},
	})
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
