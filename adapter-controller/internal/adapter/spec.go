package adapter

// Reading the spec: the pod selector, the credentials Secret, the engine configuration.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

func selectorOf(a *v1alpha1.ModelAdapter) (labels.Selector, error) {
	if a.Spec.PodSelector == nil {
		return nil, errors.New("spec.podSelector is required")
	}
	sel, err := metav1.LabelSelectorAsSelector(a.Spec.PodSelector)
	if err != nil {
		return nil, fmt.Errorf("spec.podSelector: %w", err)
	}
	if sel.Empty() {
		return nil, errors.New("spec.podSelector must select something")
	}
	return sel, nil
}

// resolveSpec checks what the API schema cannot (selector syntax, the credentials Secret)
// and reads the engine API key. A spec that cannot be acted on is reported in the status
// (p.specErr); an error that a retry may not meet (the API server unavailable, say) is
// returned, for the workqueue's rate-limited retry, and nothing is written.
func (r *Reconciler) resolveSpec(ctx context.Context, p *pass) error {
	if _, err := selectorOf(p.adapter); err != nil {
		p.specErr, p.specReason = err, ReasonInvalidSpec
		return nil //nolint:nilerr // an unusable spec is reported in the status, not retried
	}
	key, creds, err := r.credentials(ctx, p.adapter)
	var missing secretMissingError
	switch {
	case errors.As(err, &missing):
		p.specErr, p.specReason = err, ReasonSecretUnavailable
		p.requeueAfter(time.Minute) // Secrets are not watched: look again later
		return nil
	case err != nil:
		return err
	}
	p.apiKey, p.credentials = key, creds
	return nil
}

// secretMissingError is a credentials Secret that does not exist: a spec problem, reported.
type secretMissingError struct{ name string }

func (e secretMissingError) Error() string {
	return fmt.Sprintf("credentials Secret %s not found", e.name)
}

// credentials returns the engine API key and the artifact credentials of an adapter: from
// credentialsSecretRef (its "api-key" entry is the key; all entries are the credentials),
// else additionalConfig["api-key"] (AIBrix compatibility).
func (r *Reconciler) credentials(ctx context.Context, a *v1alpha1.ModelAdapter) (string, map[string]string, error) {
	key := strings.TrimSpace(a.Spec.AdditionalConfig[APIKeySecretKey])
	if a.Spec.CredentialsSecretRef == nil || a.Spec.CredentialsSecretRef.Name == "" {
		return key, nil, nil
	}
	secret := &corev1.Secret{}
	ref := client.ObjectKey{Namespace: a.Namespace, Name: a.Spec.CredentialsSecretRef.Name}
	if err := r.apiReader.Get(ctx, ref, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil, secretMissingError{ref.Name}
		}
		return "", nil, fmt.Errorf("reading credentials Secret %s: %w", ref.Name, err)
	}
	creds := make(map[string]string, len(secret.Data))
	for k, v := range secret.Data {
		creds[k] = string(v)
	}
	if v, ok := creds[APIKeySecretKey]; ok && strings.TrimSpace(v) != "" {
		key = strings.TrimSpace(v)
	}
	return key, creds, nil
}

// engineConfig is additionalConfig without the API key, which travels as a bearer token.
func engineConfig(in map[string]string) map[string]string {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		if k != APIKeySecretKey {
			out[k] = v
		}
	}
	return out
}
