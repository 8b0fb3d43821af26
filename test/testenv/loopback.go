package testenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// loopbackPolicy is the test clusters' rewrite of loopback EndpointSlice addresses: a
// MutatingAdmissionPolicy, which kube-apiserver serves as admissionregistration.k8s.io/v1 from
// Kubernetes 1.36. On an older API server (make test-compat) the same rewrite (TestAddress) is
// a mutating webhook served by the test process.
const loopbackPolicy = "hack/testing/loopback-endpointslices.yaml"

// installLoopbackRewrite applies the policy, or, where the API server does not serve it,
// starts the webhook and registers it; the returned function stops what was started.
func installLoopbackRewrite(e *Env, policy string) (stop func(), err error) {
	err = e.Apply(policy)
	if err == nil {
		return func() {}, nil
	}
	if !meta.IsNoMatchError(err) {
		return nil, err
	}
	return startLoopbackWebhook(e)
}

const loopbackWebhookPath = "loopback-endpointslices"

func startLoopbackWebhook(e *Env) (func(), error) {
	opts := &envtest.WebhookInstallOptions{MutatingWebhooks: []*admissionv1.MutatingWebhookConfiguration{{
		ObjectMeta: metav1.ObjectMeta{Name: "loraplane-test-loopback-endpointslices"},
		Webhooks: []admissionv1.MutatingWebhook{{
			Name: "loopback-endpointslices.test.loraplane.io",
			// envtest turns the Service path into a URL of the local server.
			ClientConfig: admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Path: ptr.To(loopbackWebhookPath)}},
			Rules: []admissionv1.RuleWithOperations{{
				Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
				Rule:       admissionv1.Rule{APIGroups: []string{discoveryv1.GroupName}, APIVersions: []string{"v1"}, Resources: []string{"endpointslices"}},
			}},
			FailurePolicy:           ptr.To(admissionv1.Fail),
			SideEffects:             ptr.To(admissionv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}}}
	if err := opts.PrepWithoutInstalling(); err != nil {
		return nil, fmt.Errorf("preparing the loopback EndpointSlice webhook: %w", err)
	}
	srv := webhook.NewServer(webhook.Options{Host: opts.LocalServingHost, Port: opts.LocalServingPort, CertDir: opts.LocalServingCertDir})
	srv.Register("/"+loopbackWebhookPath, &webhook.Admission{Handler: admission.HandlerFunc(rewriteLoopback)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A server that cannot listen fails every EndpointSlice write (failurePolicy Fail),
		// which the tests report; its error after the stop is its shutdown's.
		_ = srv.Start(ctx)
	}()
	stop := func() {
		cancel()
		<-done
		_ = opts.Cleanup()
	}
	if err := opts.Install(e.Config); err != nil {
		stop()
		return nil, fmt.Errorf("installing the loopback EndpointSlice webhook: %w", err)
	}
	return stop, nil
}

// rewriteLoopback answers an EndpointSlice's admission with its loopback addresses rewritten
// as TestAddress maps them.
func rewriteLoopback(_ context.Context, req admission.Request) admission.Response {
	var slice discoveryv1.EndpointSlice
	if err := json.Unmarshal(req.Object.Raw, &slice); err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	for i := range slice.Endpoints {
		for j, a := range slice.Endpoints[i].Addresses {
			slice.Endpoints[i].Addresses[j] = TestAddress(a)
		}
	}
	patched, err := json.Marshal(&slice)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, errors.Join(errors.New("encoding the EndpointSlice"), err))
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, patched)
}
