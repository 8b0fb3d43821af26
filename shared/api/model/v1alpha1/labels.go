package v1alpha1

// Labels and annotations shared with AIBrix. Manifests written for AIBrix use these keys, so
// they are part of the API contract and must never change.
const (
	// ModelNameLabel names the model a workload or pod serves. On workloads the router also
	// accepts it as an annotation.
	ModelNameLabel = "model.aibrix.ai/name"
	// ModelPortLabel is the port the inference engine listens on (default DefaultEnginePort).
	ModelPortLabel = "model.aibrix.ai/port"
	// EngineLabel selects the engine API of a pod: "vllm" (default) or "sglang".
	EngineLabel = "model.aibrix.ai/engine"
	// AdapterEnabledLabel marks pods that accept LoRA adapters.
	AdapterEnabledLabel = "adapter.model.aibrix.ai/enabled"
	// ServiceNameAnnotation overrides the Service a workload's route points at.
	ServiceNameAnnotation = "model.aibrix.ai/service-name"
	// CustomPathsAnnotation adds comma-separated path prefixes to a workload's route.
	CustomPathsAnnotation = "model.aibrix.ai/model-router-custom-paths"

	// DefaultEnginePort is the engine port when a pod or workload has no port label.
	DefaultEnginePort = 8000
)
