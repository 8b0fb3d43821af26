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
	// ScheduledPodsAnnotation, on a ModelAdapter, lists (comma-separated, sorted) the pods of
	// its namespace where a load may have happened. The adapter-controller writes it before
	// it calls an engine's load API, so that after a crash every pod that may hold the adapter
	// is known and gets the unload on deletion. AIBrix writes the same annotation before
	// loading.
	ScheduledPodsAnnotation = "adapter.model.aibrix.ai/scheduled-pods"

	// DefaultEnginePort is the engine port when a pod or workload has no port label.
	DefaultEnginePort = 8000
)
