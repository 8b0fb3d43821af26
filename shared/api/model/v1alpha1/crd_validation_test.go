package v1alpha1_test

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/testenv"
)

var k8s client.Client

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	env, err := testenv.Start()
	if err != nil {
		panic(err)
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if k8s, err = client.New(env.Config, client.Options{Scheme: scheme}); err != nil {
		panic(err)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		panic(err)
	}
	os.Exit(code)
}

func aibrixStyle(name string) *v1alpha1.ModelAdapter {
	return &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1alpha1.ModelAdapterSpec{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
				"model.aibrix.ai/name":            "x",
				"adapter.model.aibrix.ai/enabled": "true",
			}},
			ArtifactURL: "huggingface://org/repo",
		},
	}
}

// TestCRDValidation applies ModelAdapters to a real API server with the generated CRD and
// checks what the schema and its CEL rules accept and reject.
func TestCRDValidation(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
	tests := map[string]struct {
		mutate  func(*v1alpha1.ModelAdapter)
		wantErr string // substring of the API server's message; empty: accepted
	}{
		"AIBrix-style adapter is accepted": {},
		"absolute path artifact": {
			mutate: func(a *v1alpha1.ModelAdapter) { a.Spec.ArtifactURL = "/models/lora" },
		},
		"every supported scheme": {
			mutate: func(a *v1alpha1.ModelAdapter) { a.Spec.ArtifactURL = "s3://bucket/lora" },
		},
		"tos artifact (AIBrix's webhook and runtime sidecar accept it)": {
			mutate: func(a *v1alpha1.ModelAdapter) { a.Spec.ArtifactURL = "tos://bucket/lora" },
		},
		"replicas 1 with a matchExpressions-only selector": {
			mutate: func(a *v1alpha1.ModelAdapter) {
				a.Spec.Replicas = ptr.To[int32](1)
				a.Spec.PodSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "model.aibrix.ai/name", Operator: metav1.LabelSelectorOpExists},
				}}
			},
		},
		"missing podSelector": {
			mutate:  func(a *v1alpha1.ModelAdapter) { a.Spec.PodSelector = nil },
			wantErr: "spec.podSelector: Required value",
		},
		"empty podSelector": {
			mutate:  func(a *v1alpha1.ModelAdapter) { a.Spec.PodSelector = &metav1.LabelSelector{} },
			wantErr: "podSelector must select something",
		},
		"ftp artifact": {
			mutate:  func(a *v1alpha1.ModelAdapter) { a.Spec.ArtifactURL = "ftp://x" },
			wantErr: "artifactURL must be an absolute path or start with one of huggingface://",
		},
		"relative path artifact": {
			mutate:  func(a *v1alpha1.ModelAdapter) { a.Spec.ArtifactURL = "models/lora" },
			wantErr: "artifactURL must be an absolute path",
		},
		"scheme without a location": {
			mutate:  func(a *v1alpha1.ModelAdapter) { a.Spec.ArtifactURL = "hf://" },
			wantErr: "artifactURL must be an absolute path",
		},
		"replicas 0": {
			mutate:  func(a *v1alpha1.ModelAdapter) { a.Spec.Replicas = ptr.To[int32](0) },
			wantErr: "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1",
		},
		"negative replicas": {
			mutate:  func(a *v1alpha1.ModelAdapter) { a.Spec.Replicas = ptr.To[int32](-2) },
			wantErr: "should be greater than or equal to 1",
		},
		"300-character additionalConfig key": {
			mutate: func(a *v1alpha1.ModelAdapter) {
				a.Spec.AdditionalConfig = map[string]string{strings.Repeat("k", 300): "v"}
			},
			wantErr: "additionalConfig keys must be at most 253 characters",
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	i := 0
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			i++
			a := aibrixStyle("adapter-" + strings.Repeat("x", i%3) + string(rune('a'+i)))
			if tc.mutate != nil {
				tc.mutate(a)
			}
			err := k8s.Create(ctx, a)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("want the adapter accepted, got %v", err)
				}
				got := &v1alpha1.ModelAdapter{}
				if err := k8s.Get(ctx, client.ObjectKeyFromObject(a), got); err != nil {
					t.Fatalf("reading the adapter back: %v", err)
				}
				if got.Spec.SchedulerName != "default" {
					t.Errorf("schedulerName default: got %q, want %q", got.Spec.SchedulerName, "default")
				}
				return
			}
			if err == nil {
				t.Fatalf("want rejection containing %q, the adapter was accepted", tc.wantErr)
			}
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("want an Invalid error containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}

// TestCRDAcceptsAIBrixManifest applies an AIBrix manifest as raw YAML-shaped data, the way
// users apply it, to prove the API is wire-compatible.
func TestCRDAcceptsAIBrixManifest(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs envtest")
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "model.aibrix.ai/v1alpha1",
		"kind":       "ModelAdapter",
		"metadata":   map[string]any{"name": "qwen-code-lora", "namespace": "default", "labels": map[string]any{"model.aibrix.ai/name": "qwen-code-lora", "model.aibrix.ai/port": "8000"}},
		"spec": map[string]any{
			"baseModel": "qwen-coder-1-5b-instruct",
			"podSelector": map[string]any{"matchLabels": map[string]any{
				"model.aibrix.ai/name": "qwen-coder-1-5b-instruct", "adapter.model.aibrix.ai/enabled": "true",
			}},
			"artifactURL":      "huggingface://ai-blond/Qwen-Qwen2.5-Coder-1.5B-Instruct-lora",
			"schedulerName":    "default",
			"additionalConfig": map[string]any{"api-key": "sk-test"},
		},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := k8s.Create(ctx, u); err != nil {
		t.Fatalf("AIBrix manifest rejected: %v", err)
	}
	got := &v1alpha1.ModelAdapter{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(u), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.BaseModel == nil || *got.Spec.BaseModel != "qwen-coder-1-5b-instruct" || got.Spec.Replicas != nil {
		t.Errorf("decoded spec differs from the manifest: %+v", got.Spec)
	}
}
