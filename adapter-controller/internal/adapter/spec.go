package adapter

// Reading the spec: the pod selector, the credentials Secret, the engine configuration.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loraplane/loraplane/adapter-controller/internal/engine"
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
	rank, err := rankOf(p.adapter)
	if err != nil {
		p.specErr, p.specReason = err, ReasonInvalidSpec
		return nil //nolint:nilerr // an unusable spec is reported in the status, not retried
	}
	p.rank = rank
	key, creds, err := r.credentials(ctx, p.adapter)
	var missing secretMissingError
	var notSelected secretNotSelectedError
	switch {
	case errors.As(err, &missing):
		p.specErr, p.specReason = err, ReasonSecretUnavailable
		p.requeueAfter(time.Minute) // Secrets are not watched: look again later
		return nil
	case errors.As(err, &notSelected):
		p.specErr, p.specReason = err, ReasonSecretNotSelected
		p.requeueAfter(time.Minute) // a label added later is seen then
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

// secretNotSelectedError is a credentials Secret whose labels do not match
// --secret-label-selector: a spec problem, reported; nothing of the Secret is used or kept.
type secretNotSelectedError struct{ name, selector string }

func (e secretNotSelectedError) Error() string {
	return fmt.Sprintf("credentials Secret %s does not carry the labels this controller requires of credentials Secrets (--secret-label-selector=%s): nothing of it is used; label it to opt it in",
		e.name, e.selector)
}

// credentials returns the engine API key and the artifact credentials of an adapter: from
// credentialsSecretRef (its "api-key" entry is the key; all entries are the credentials),
// else additionalConfig["api-key"] (AIBrix compatibility).
func (r *Reconciler) credentials(ctx context.Context, a *v1alpha1.ModelAdapter) (string, map[string]string, error) {
	key := strings.TrimSpace(a.Spec.AdditionalConfig[APIKeySecretKey])
	if a.Spec.CredentialsSecretRef == nil || a.Spec.CredentialsSecretRef.Name == "" {
		return key, nil, nil
	}
	ref := client.ObjectKey{Namespace: a.Namespace, Name: a.Spec.CredentialsSecretRef.Name}
	data, err := r.secrets.get(ctx, ref)
	if err != nil {
		var notSelected secretNotSelectedError
		switch {
		case apierrors.IsNotFound(err):
			return "", nil, secretMissingError{ref.Name}
		case errors.As(err, &notSelected):
			return "", nil, err
		}
		return "", nil, fmt.Errorf("reading credentials Secret %s: %w", ref.Name, err)
	}
	creds := make(map[string]string, len(data))
	for k, v := range data {
		creds[k] = string(v)
	}
	if v, ok := creds[APIKeySecretKey]; ok && strings.TrimSpace(v) != "" {
		key = strings.TrimSpace(v)
	}
	return key, creds, nil
}

// secretTTL is how long a credentials Secret read is used: a changed Secret (a rotated key)
// reaches the engine calls within it, and an engine's 401 drops it at once.
const secretTTL = 30 * time.Second

// secretCache keeps the credentials Secrets adapters name for secretTTL, so that a reconcile
// reads its Secret from the API server only once per TTL however many adapters share it
// (10,000 adapters reconciled after a failover made 10,000 GETs: 200 s of a 50 QPS client). A
// watch would need list and watch on Secrets, which the controller's RBAC does not grant: it
// may only get the Secrets adapters name. A missing Secret is not kept, nor one whose labels
// do not match the selector (--secret-label-selector; nil: every Secret).
type secretCache struct {
	reader   client.Reader
	clock    clock.PassiveClock
	selector labels.Selector
	mu       sync.Mutex
	byKey    map[client.ObjectKey]secretEntry
}

type secretEntry struct {
	data   map[string][]byte // shared, read only
	readAt time.Time
}

func newSecretCache(reader client.Reader, clk clock.PassiveClock, selector labels.Selector) *secretCache {
	return &secretCache{reader: reader, clock: clk, selector: selector, byKey: map[client.ObjectKey]secretEntry{}}
}

// get returns the data of the Secret, read at most secretTTL ago; the caller must not
// change it.
func (c *secretCache) get(ctx context.Context, key client.ObjectKey) (map[string][]byte, error) {
	now := c.clock.Now()
	c.mu.Lock()
	e, ok := c.byKey[key]
	c.mu.Unlock()
	if ok && now.Sub(e.readAt) < secretTTL {
		return e.data, nil
	}
	secret := &corev1.Secret{}
	if err := c.reader.Get(ctx, key, secret); err != nil {
		c.forget(key)
		return nil, err
	}
	if c.selector != nil && !c.selector.Matches(labels.Set(secret.Labels)) {
		c.forget(key)
		return nil, secretNotSelectedError{name: key.Name, selector: c.selector.String()}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.byKey { // drop expired entries: Secrets no adapter names any more go
		if now.Sub(e.readAt) >= secretTTL {
			delete(c.byKey, k)
		}
	}
	c.byKey[key] = secretEntry{data: secret.Data, readAt: now}
	return secret.Data, nil
}

// forget drops the Secret, so that the next use reads it again.
func (c *secretCache) forget(key client.ObjectKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byKey, key)
}

// forgetCredentials drops the adapter's credentials Secret after an engine refused its key
// (a rotated key is then read at the next attempt, not after secretTTL).
func (r *Reconciler) forgetCredentials(a *v1alpha1.ModelAdapter, err error) {
	if engine.ReasonOf(err) == engine.ReasonEngineUnauthorized && a.Spec.CredentialsSecretRef != nil {
		r.secrets.forget(client.ObjectKey{Namespace: a.Namespace, Name: a.Spec.CredentialsSecretRef.Name})
	}
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
