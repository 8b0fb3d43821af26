package testenv

import (
	"context"
	"fmt"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// CRD returns a namespaced CRD of group and kind (plural: lower-case kind + "s") serving
// versions, the first one stored. Its objects are free-form: enough for controllers that
// read metadata, and for installing a CRD while a test runs.
func CRD(group, kind string, versions ...string) *apiextensionsv1.CustomResourceDefinition {
	plural := strings.ToLower(kind) + "s"
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: plural, Singular: strings.ToLower(kind), Kind: kind, ListKind: kind + "List",
			},
			Scope: apiextensionsv1.NamespaceScoped,
		},
	}
	for i, v := range versions {
		crd.Spec.Versions = append(crd.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{
			Name: v, Served: true, Storage: i == 0,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object", XPreserveUnknownFields: ptr.To(true),
			}},
		})
	}
	return crd
}

// LeaderWorkerSetCRD stands in for the CRD of LeaderWorkerSet (leaderworkerset.x-k8s.io/v1),
// free-form.
func LeaderWorkerSetCRD() *apiextensionsv1.CustomResourceDefinition {
	return CRD("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "v1")
}

// InstallCRD creates crd, or updates it to crd, and waits until each of its served versions
// is served (at most 10s).
func (e *Env) InstallCRD(crd *apiextensionsv1.CustomResourceDefinition) error {
	if _, err := envtest.InstallCRDs(e.Config, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{crd.DeepCopy()}}); err != nil {
		return fmt.Errorf("installing CRD %s: %w", crd.Name, err)
	}
	return nil
}

// UninstallCRD deletes the CRD named name and waits, at most timeout, until it is gone: its
// objects deleted, the CRD removed and none of its group versions serving its Kind.
func (e *Env) UninstallCRD(ctx context.Context, name string, timeout time.Duration) error {
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return err
	}
	c, err := client.New(e.Config, client.Options{Scheme: s})
	if err != nil {
		return err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
		return client.IgnoreNotFound(err)
	}
	if err := c.Delete(ctx, crd); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting CRD %s: %w", name, err)
	}
	d, err := discovery.NewDiscoveryClientForConfig(e.Config)
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{}); !apierrors.IsNotFound(err) {
			return false, nil
		}
		for _, v := range crd.Spec.Versions {
			list, err := d.ServerResourcesForGroupVersion(crd.Spec.Group + "/" + v.Name)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return false, nil //nolint:nilerr // discovery hiccup: ask again
			}
			for _, r := range list.APIResources {
				if r.Kind == crd.Spec.Names.Kind {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for CRD %s to be gone: %w", name, err)
	}
	return nil
}
