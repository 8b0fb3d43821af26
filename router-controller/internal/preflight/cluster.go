package preflight

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
)

// readLease says who holds the Lease, as of its last renewal.
func readLease(ctx context.Context, reader client.Reader, key types.NamespacedName) (string, error) {
	var l coordinationv1.Lease
	switch err := reader.Get(ctx, key, &l); {
	case apierrors.IsNotFound(err):
		return "absent", nil
	case err != nil:
		return "", fmt.Errorf("reading the Lease %s: %w", key, err)
	}
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	if holder == "" {
		return "released (no holder)", nil
	}
	renewed := "never renewed"
	if l.Spec.RenewTime != nil {
		renewed = "last renewed " + l.Spec.RenewTime.UTC().Format("2006-01-02T15:04:05Z")
	}
	return fmt.Sprintf("held by %s, %s (the take-over waits while it is renewed)", holder, renewed), nil
}

// deploymentManager says which other manager (Helm, Argo CD, Flux, kubectl apply) keeps the
// Deployment, or "".
func deploymentManager(ctx context.Context, reader client.Reader, key types.NamespacedName) (string, error) {
	var d appsv1.Deployment
	if err := reader.Get(ctx, key, &d); err != nil {
		return "", fmt.Errorf("reading the Deployment %s: %w", key, err)
	}
	return routes.ForeignManager(&d), nil
}

// crdName is the ModelAdapter CRD's name, AIBrix's and loraplane's.
const crdName = "modeladapters.model.aibrix.ai"

// crd reports which ModelAdapter CRD is installed and the differences from loraplane's that
// matter to a switch.
func crd(ctx context.Context, reader client.Reader, _ Options, r *report) error {
	r.section("ModelAdapter CRD")
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apiextensions.k8s.io/v1")
	u.SetKind("CustomResourceDefinition")
	switch err := reader.Get(ctx, types.NamespacedName{Name: crdName}, u); {
	case apierrors.IsNotFound(err):
		r.printf("  %s is not installed: loraplane's install creates it\n", crdName)
		return nil
	case err != nil:
		return fmt.Errorf("reading the CRD %s: %w", crdName, err)
	}
	v1 := crdVersion(u, "v1alpha1")
	if v1 == nil {
		r.block("%s serves no version v1alpha1", crdName)
		return nil
	}
	schema := func(path ...string) (map[string]any, bool) {
		m, ok, _ := unstructured.NestedMap(v1, append([]string{"schema", "openAPIV3Schema", "properties"}, path...)...)
		return m, ok
	}
	_, ours := schema("status", "properties", "instanceArtifacts")
	if ours {
		r.printf("  installed: loraplane's (status.instanceArtifacts present)\n")
	} else {
		r.printf("  installed: AIBrix's (or an older loraplane's): replace it with loraplane's before the switch (kubectl apply --server-side --force-conflicts)\n")
		r.warn("with this CRD the API server prunes status.instanceArtifacts: the adapter-controller reports CRDOutdated and rewrites status on every pass")
	}
	if replicas, ok := schema("spec", "properties", "replicas"); ok {
		if limit := replicasLimit(replicas); limit != "" {
			r.printf("  spec.replicas: only 1 is accepted (%s, as AIBrix's CRD); loraplane's accepts any number from 1\n", limit)
		}
	}
	if artifact, ok := schema("spec", "properties", "artifactURL"); ok {
		rules, _ := artifact["x-kubernetes-validations"].([]any)
		switch {
		case len(rules) == 0:
			r.printf("  spec.artifactURL: no CEL rule (AIBrix's: any string; its webhook checks the scheme)\n")
		case !strings.Contains(fmt.Sprint(rules), "tos"):
			r.warn("this CRD refuses tos:// artifacts (a loraplane before tos:// support): apply loraplane's CRD")
		}
	}
	crdManagers(u, r)
	return nil
}

// replicasLimit says how a spec.replicas schema limits it to 1 (AIBrix's newest CRD: enum [1];
// its releases: maximum 1), or returns "".
func replicasLimit(schema map[string]any) string {
	if enum, ok := schema["enum"].([]any); ok {
		return fmt.Sprintf("enum %v", enum)
	}
	if limit, ok := schema["maximum"]; ok {
		return fmt.Sprintf("maximum %v", limit)
	}
	return ""
}

func crdVersion(u *unstructured.Unstructured, name string) map[string]any {
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	for _, v := range versions {
		if m, ok := v.(map[string]any); ok && m["name"] == name {
			return m
		}
	}
	return nil
}

// crdManagers reports who writes the CRD: a GitOps tool or an AIBrix upgrade puts AIBrix's
// CRD back over loraplane's.
func crdManagers(u *unstructured.Unstructured, r *report) {
	var managers []string
	for _, f := range u.GetManagedFields() {
		if !slices.Contains(managers, f.Manager) {
			managers = append(managers, f.Manager)
		}
	}
	slices.Sort(managers)
	r.printf("  written by (field managers): %s\n", strings.Join(managers, ", "))
	if why := routes.ForeignManager(u); why != "" {
		r.printf("  marks of a manager: %s: whatever applies it (AIBrix's chart or manifests on an AIBrix upgrade, a GitOps sync) "+
			"puts its CRD back; make it apply loraplane's\n", why)
	}
}
