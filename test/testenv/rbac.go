package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ServiceAccountUser is the user name of a ServiceAccount, e.g.
// system:serviceaccount:loraplane-system:router-controller.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// serviceAccountGroups are the groups the API server gives a ServiceAccount token.
func serviceAccountGroups(namespace string) []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
}

// ImpersonateServiceAccount returns a copy of the admin configuration that acts as the
// ServiceAccount namespace/name (with its groups), so that RBAC decides every request.
func (e *Env) ImpersonateServiceAccount(namespace, name string) *rest.Config {
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: ServiceAccountUser(namespace, name),
		Groups:   serviceAccountGroups(namespace),
	}
	return cfg
}

// EnsureNamespace creates the namespace if it does not exist.
func (e *Env) EnsureNamespace(ctx context.Context, name string) error {
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// Access is one resource request to authorize.
type Access struct {
	Verb, Group, Resource, Subresource, Namespace string
	// Name is the object's name, for rules limited to resourceNames ("" means any).
	Name string
}

func (a Access) String() string {
	r := a.Resource
	if a.Group != "" {
		r += "." + a.Group
	}
	if a.Subresource != "" {
		r += "/" + a.Subresource
	}
	if a.Name != "" {
		r += " " + a.Name
	}
	if a.Namespace != "" {
		r += " in " + a.Namespace
	}
	return a.Verb + " " + r
}

// Allowed asks the API server (SubjectAccessReview) whether the ServiceAccount
// namespace/name may make the request.
func (e *Env) Allowed(ctx context.Context, namespace, name string, a Access) (bool, error) {
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return false, err
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   ServiceAccountUser(namespace, name),
		Groups: serviceAccountGroups(namespace),
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.Verb, Group: a.Group, Resource: a.Resource, Subresource: a.Subresource, Namespace: a.Namespace, Name: a.Name,
		},
	}}
	got, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("SubjectAccessReview for %s: %w", a, err)
	}
	return got.Status.Allowed, nil
}

// ApplyInNamespace is Apply for manifests that leave the namespace to kustomize: namespaced
// objects without one are created in namespace (when it is not empty).
func (e *Env) ApplyInNamespace(ctx context.Context, path, namespace string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	c, err := client.New(e.Config, client.Options{})
	if err != nil {
		return err
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("decoding %s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if namespace != "" && u.GetNamespace() == "" {
			namespaced, err := c.IsObjectNamespaced(u)
			if err != nil {
				return fmt.Errorf("%s %s from %s: %w", u.GetKind(), u.GetName(), path, err)
			}
			if namespaced {
				u.SetNamespace(namespace)
			}
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("loraplane-tests"), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s from %s: %w", u.GetKind(), u.GetName(), path, err)
		}
	}
}

// Forbidden records the requests the API server refused (403) on a configuration.
type Forbidden struct {
	mu       sync.Mutex
	requests []string
}

// Watch makes cfg record its refused requests in f and returns cfg.
func (f *Forbidden) Watch(cfg *rest.Config) *rest.Config {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && resp.StatusCode == http.StatusForbidden {
				f.mu.Lock()
				f.requests = append(f.requests, r.Method+" "+r.URL.Path)
				f.mu.Unlock()
			}
			return resp, err
		})
	})
	return cfg
}

// Requests are the refused requests so far, as "METHOD path".
func (f *Forbidden) Requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
