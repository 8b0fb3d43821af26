package v1alpha1

import (
	"fmt"
	"strconv"
)

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
	// AdapterNameLabel, on the Service the adapter-controller publishes for a ModelAdapter,
	// is the adapter's name (as on AIBrix's).
	AdapterNameLabel = "adapter.model.aibrix.ai/name"
	// ServiceNameAnnotation overrides the Service a workload's route points at.
	ServiceNameAnnotation = "model.aibrix.ai/service-name"
	// CustomPathsAnnotation adds comma-separated path prefixes to a workload's route.
	CustomPathsAnnotation = "model.aibrix.ai/model-router-custom-paths"
	// ScheduledPodsAnnotation, on a ModelAdapter, lists (comma-separated, sorted) the pods of
	// its namespace where a load may have happened; past 64 KiB the adapter-controller writes
	// pods sharing a prefix up to their last "-" once, as prefix{suffix|suffix}. The adapter-controller writes it before
	// it calls an engine's load API, so that after a crash every pod that may hold the adapter
	// is known and gets the unload on deletion. AIBrix writes the same annotation before
	// loading.
	ScheduledPodsAnnotation = "adapter.model.aibrix.ai/scheduled-pods"
	// AIBrixFinalizer is the finalizer AIBrix's model-adapter-controller puts on every
	// ModelAdapter. The adapter-controller handles it like its own: an adapter being deleted
	// is unloaded from every pod that may hold it, then both are released. AIBrix's per-pod
	// retry annotations ("adapter.model.aibrix.ai/retry-count.<pod>",
	// "adapter.model.aibrix.ai/last-retry-time.<pod>") are not read.
	AIBrixFinalizer = "adapter.model.aibrix.ai/finalizer"
	// Finalizer is loraplane's adapter-controller's: it holds a ModelAdapter until the adapter
	// is unloaded from its pods.
	Finalizer = "loraplane.io/unload-adapter"
	// RuntimeContainerName is the container name of AIBrix's runtime sidecar: a pod with it
	// is loaded through the sidecar, which downloads the artifacts of RuntimeArtifactSchemes.
	RuntimeContainerName = "aibrix-runtime"

	// DefaultEnginePort is the engine port when a pod or workload has no port label.
	DefaultEnginePort = 8000
)

// RuntimeArtifactSchemes are the artifact URL schemes only the runtime sidecar can fetch
// (AIBrix's runtime downloaders); engines load huggingface://, hf:// and absolute paths
// themselves. Schemes are case-insensitive. Callers must not modify the slice.
var RuntimeArtifactSchemes = []string{"s3://", "gs://", "gcs://", "tos://", "http://", "https://"}

// EnginePort returns the engine port a pod or workload declares with ModelPortLabel:
// DefaultEnginePort when the label is absent, the label's value when it is a decimal port
// number in 1-65535, and otherwise DefaultEnginePort with an error naming the label and its
// value. Callers decide what a bad value means for them: the adapter-controller does not
// address such a pod, the router-controller routes to the default port with a Warning.
func EnginePort(labels map[string]string) (int32, error) {
	v, ok := labels[ModelPortLabel]
	if !ok {
		return DefaultEnginePort, nil
	}
	p, err := strconv.ParseInt(v, 10, 32)
	switch {
	case err != nil:
		return DefaultEnginePort, fmt.Errorf("label %s value %q is not a decimal number", ModelPortLabel, v)
	case p < 1 || p > 65535:
		return DefaultEnginePort, fmt.Errorf("label %s value %q is out of range 1-65535", ModelPortLabel, v)
	}
	return int32(p), nil
}

// loraplane's own annotations (not AIBrix's).
const (
	// AdapterCapacityAnnotation, on an engine pod, is how many runtime-loaded LoRA adapters
	// its engine holds (a non-negative integer). It overrides what the engine's metrics and
	// arguments say; an invalid value is reported and the capacity is then unknown
	// (unlimited).
	AdapterCapacityAnnotation = "loraplane.io/adapter-capacity"
	// LoRARankAnnotation, on a ModelAdapter, is the rank of the adapter (a positive
	// integer). Pods whose engine accepts lower ranks only (--max-lora-rank) are not
	// placed on. AIBrix's ModelAdapter has no field for it.
	LoRARankAnnotation = "loraplane.io/lora-rank"
)
