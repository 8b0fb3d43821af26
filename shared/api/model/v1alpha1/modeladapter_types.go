package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ModelAdapterSpec is the desired state of a LoRA adapter: which artifact to load onto which
// engine pods, and on how many of them.
type ModelAdapterSpec struct {
	// BaseModel is the model the adapter was trained for. When set, it is checked against the
	// model name label of the selected pods.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	BaseModel *string `json:"baseModel,omitempty"`

	// PodSelector selects the engine pods, in the adapter's namespace, that may load the adapter.
	// It must not be empty: an empty selector would match every pod of the namespace.
	// +required
	// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="podSelector must select something: set matchLabels or matchExpressions"
	PodSelector *metav1.LabelSelector `json:"podSelector"`

	// SchedulerName names the placement policy used when replicas is set: "default" or
	// "least-adapters" (fewest adapters first), "random", or "bin-pack" (most adapters first).
	// An unknown name is reported in a condition and the default policy is used.
	// +optional
	// +kubebuilder:default=default
	// +kubebuilder:validation:MaxLength=63
	SchedulerName string `json:"schedulerName,omitempty"`

	// ArtifactURL is where the adapter weights come from: huggingface://org/repo, hf://org/repo,
	// s3://, gs://, gcs://, tos://, http(s):// or an absolute path on the engine's file system.
	// Object-store and HTTP URLs need the aibrix-runtime sidecar on the engine pod.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('/') || self.matches('^(huggingface|hf|s3|gs|gcs|tos|http|https)://[^/].*$')",message="artifactURL must be an absolute path or start with one of huggingface://, hf://, s3://, gs://, gcs://, tos://, http://, https://"
	ArtifactURL string `json:"artifactURL"`

	// CredentialsSecretRef names a Secret in the adapter's namespace. Its "api-key" entry is
	// sent to the engine as a bearer token; the whole Secret is passed to the runtime sidecar
	// as artifact download credentials.
	// +optional
	CredentialsSecretRef *corev1.LocalObjectReference `json:"credentialsSecretRef,omitempty"`

	// Replicas is the number of pods to load the adapter on. Omitted: every matching pod.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Replicas *int32 `json:"replicas,omitempty"`

	// AdditionalConfig carries engine-specific settings. The key "api-key" is sent to the
	// engine as a bearer token (AIBrix compatibility; prefer credentialsSecretRef).
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 253 && size(self[k]) <= 4096)",message="additionalConfig keys must be at most 253 characters and values at most 4096"
	AdditionalConfig map[string]string `json:"additionalConfig,omitempty"`
}

// ModelAdapterPhase summarises where a ModelAdapter is in its lifecycle.
// +kubebuilder:validation:Enum=Pending;Scheduled;Bound;ResourceCreated;Running;Failed;Unknown;Scaled
type ModelAdapterPhase string

// Phases, as AIBrix names them.
const (
	// ModelAdapterPending: accepted, no pod chosen yet.
	ModelAdapterPending ModelAdapterPhase = "Pending"
	// ModelAdapterScheduled: pods chosen, adapter not loaded yet.
	ModelAdapterScheduled ModelAdapterPhase = "Scheduled"
	// ModelAdapterBound: loaded on at least one chosen pod.
	ModelAdapterBound ModelAdapterPhase = "Bound"
	// ModelAdapterResourceCreated: Service and EndpointSlice exist.
	ModelAdapterResourceCreated ModelAdapterPhase = "ResourceCreated"
	// ModelAdapterRunning: loaded and verified on every chosen pod, and routable.
	ModelAdapterRunning ModelAdapterPhase = "Running"
	// ModelAdapterFailed: loading failed past the retry limit; retries continue slowly.
	ModelAdapterFailed ModelAdapterPhase = "Failed"
	// ModelAdapterUnknown: the state cannot be determined.
	ModelAdapterUnknown ModelAdapterPhase = "Unknown"
	// ModelAdapterScaled: the set of pods is changing.
	ModelAdapterScaled ModelAdapterPhase = "Scaled"
)

// Condition types of a ModelAdapter.
const (
	ConditionInitialized     = "Initialized"
	ConditionScheduled       = "Scheduled"
	ConditionBound           = "Bound"
	ConditionResourceCreated = "ResourceCreated"
	ConditionReady           = "Ready"
	// ConditionUpToDate is True when every instance serves spec.artifactURL; False (reason
	// Rolling or RolloutFailed) while a changed artifact is rolled out pod by pod.
	ConditionUpToDate = "UpToDate"
)

// ModelAdapterStatus is the observed state of a ModelAdapter.
type ModelAdapterStatus struct {
	// Phase is a one-word summary of the conditions.
	// +optional
	Phase ModelAdapterPhase `json:"phase,omitempty"`

	// Conditions describe each step of the adapter's lifecycle.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Instances are the pods where the adapter is loaded and verified.
	// +optional
	Instances []string `json:"instances,omitempty"`

	// InstanceArtifacts records the artifact each instance serves: spec.artifactURL once the
	// engine has verifiably loaded it, an earlier artifact while a new one is rolled out.
	// +optional
	// +listType=map
	// +listMapKey=pod
	InstanceArtifacts []InstanceArtifact `json:"instanceArtifacts,omitempty"`

	// Candidates is the number of Ready pods matching the selector.
	// +optional
	Candidates int32 `json:"candidates,omitempty"`

	// DesiredReplicas is the number of pods the adapter should be on: spec.replicas capped at
	// the candidates, or every candidate when spec.replicas is omitted.
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas,omitempty"`

	// PlacedReplicas is the number of pods the adapter is placed on: desiredReplicas less
	// the placements waiting for a free adapter slot (waitingReplicas).
	// +optional
	PlacedReplicas int32 `json:"placedReplicas,omitempty"`

	// WaitingReplicas is the number of placements that wait for a free adapter slot: the
	// candidates that could take the adapter are full (their engines' adapter capacity is
	// reached). They are placed, oldest adapter first, as soon as room appears.
	// +optional
	WaitingReplicas int32 `json:"waitingReplicas,omitempty"`

	// ReadyReplicas is the number of instances.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
}

// InstanceArtifact is the artifact one instance serves.
type InstanceArtifact struct {
	// Pod is the name of the instance.
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod"`
	// ArtifactURL is the artifact the pod serves, as spec.artifactURL named it when it was
	// loaded (or, for an adapter loaded before this was recorded, the path the engine reports).
	// +kubebuilder:validation:MaxLength=2048
	ArtifactURL string `json:"artifactURL"`
}

// ModelAdapter loads a LoRA adapter onto the engine pods its selector picks and publishes it
// behind a headless Service named after it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredReplicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Waiting",type=integer,JSONPath=`.status.waitingReplicas`
// +kubebuilder:printcolumn:name="Candidates",type=integer,JSONPath=`.status.candidates`
// +kubebuilder:printcolumn:name="UpToDate",type=string,JSONPath=`.status.conditions[?(@.type=="UpToDate")].status`
// +kubebuilder:printcolumn:name="Artifact",type=string,JSONPath=`.spec.artifactURL`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ModelAdapter struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec   ModelAdapterSpec   `json:"spec"`
	Status ModelAdapterStatus `json:"status,omitempty"`
}

// ModelAdapterList is a list of ModelAdapters.
//
// +kubebuilder:object:root=true
type ModelAdapterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ModelAdapter `json:"items"`
}
