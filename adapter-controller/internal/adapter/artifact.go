package adapter

// Which artifact an instance serves.

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// servedArtifact tells which artifact the adapter on pod (loaded and verified) serves, and
// whether it is spec.artifactURL. What this process loaded and verified there (while the
// engine still lists it, from that path where it lists paths) is known from memory.
// Otherwise vLLM and SGLang list the lora_path they loaded, which is compared with the path spec.artifactURL resolves to; behind the runtime sidecar (and for
// engines that report no path) the artifact recorded in the status when the load was
// verified is compared. An instance without a record (loaded before artifacts were recorded)
// is taken as current; any other pod without one is reloaded.
func (r *Reconciler) servedArtifact(pod *corev1.Pod, a *v1alpha1.ModelAdapter) (artifact string, current bool) {
	want := a.Spec.ArtifactURL
	recorded := ""
	for _, ia := range a.Status.InstanceArtifacts {
		if ia.Pod == pod.Name {
			recorded = ia.ArtifactURL
		}
	}
	ep, epErr := r.endpoint(pod, "")
	listsPath := epErr == nil && engine.ListsLoadPath(ep.Kind)
	if artifact, ok := r.inventory.Artifact(pod, a.Name); ok {
		// What this process verified holds while the engine lists the path it loaded; a
		// listing from another path (the engine was changed behind its back) decides below.
		path, loaded, known := r.inventory.Served(pod, a.Name)
		resolved, err := engine.ResolveArtifact(ep.Kind, artifact)
		if !listsPath || !known || !loaded || path == "" || err != nil || resolved == path {
			return artifact, artifact == want
		}
	}
	if listsPath {
		if path, loaded, known := r.inventory.Served(pod, a.Name); known && loaded && path != "" {
			if wantPath, err := engine.ResolveArtifact(ep.Kind, want); err == nil && wantPath == path {
				return want, true
			}
			if old, err := engine.ResolveArtifact(ep.Kind, recorded); recorded != "" && err == nil && old == path {
				return recorded, false
			}
			return path, false
		}
	}
	switch {
	case recorded == want:
		return want, true
	case recorded != "":
		return recorded, false
	case slices.Contains(a.Status.Instances, pod.Name):
		return want, true // an instance from before artifacts were recorded
	default:
		return "", false // unknown (e.g. taken out for its reload): load it again
	}
}
