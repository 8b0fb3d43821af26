package cleanup

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/test/testenv"
)

const finalizer = "loraplane.io/unload-adapter"

func adapter(ns, name string) *v1alpha1.ModelAdapter {
	return &v1alpha1.ModelAdapter{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: []string{finalizer}}}
}

// releaser plays the adapter-controller: it removes the finalizer of every adapter being
// deleted in the given namespaces, until ctx ends.
func releaser(ctx context.Context, t *testing.T, c client.Client, namespaces ...string) {
	go func() {
		for ctx.Err() == nil {
			for _, ns := range namespaces {
				var l v1alpha1.ModelAdapterList
				if err := c.List(ctx, &l, client.InNamespace(ns)); err != nil {
					continue
				}
				for i := range l.Items {
					a := &l.Items[i]
					if a.DeletionTimestamp != nil && len(a.Finalizers) > 0 {
						a.Finalizers = nil
						if err := c.Update(ctx, a); err != nil {
							t.Logf("releasing %s/%s: %v", a.Namespace, a.Name, err)
						}
					}
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
}

func names(t *testing.T, c client.Client) []string {
	t.Helper()
	var l v1alpha1.ModelAdapterList
	if err := c.List(context.Background(), &l); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range l.Items {
		s := a.Namespace + "/" + a.Name
		if a.DeletionTimestamp != nil {
			s += " (deleting)"
		}
		out = append(out, s)
	}
	return out
}

func TestRun(t *testing.T) {
	cases := map[string]struct {
		namespaces []string
		// released are the namespaces whose finalizers the controller releases.
		released []string
		wantErr  []string
		wantLeft []string
	}{
		"every namespace, every finalizer released": {
			released: []string{"a", "b"},
		},
		"only the watched namespace": {
			namespaces: []string{"a"},
			released:   []string{"a", "b"},
			wantLeft:   []string{"b/lora-1", "b/lora-2"},
		},
		"no controller releases the finalizers": {
			released: []string{"b"},
			wantErr:  []string{"2 left", "a/lora-1 (finalizers [" + finalizer + "])", "a/lora-2 (finalizers [" + finalizer + "])", "is the adapter-controller running?"},
			wantLeft: []string{"a/lora-1 (deleting)", "a/lora-2 (deleting)"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := runtime.NewScheme()
			utilruntime.Must(v1alpha1.AddToScheme(s))
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(
				adapter("a", "lora-1"), adapter("a", "lora-2"), adapter("b", "lora-1"), adapter("b", "lora-2")).Build()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			releaser(ctx, t, c, tc.released...)

			err := Run(ctx, c, Options{Namespaces: tc.namespaces, Timeout: 500 * time.Millisecond, Poll: 10 * time.Millisecond})
			switch {
			case len(tc.wantErr) == 0 && err != nil:
				t.Fatalf("Run: %v", err)
			case len(tc.wantErr) > 0 && err == nil:
				t.Fatalf("Run succeeded, want an error saying %q", tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			cancel()
			if diff := cmp.Diff(tc.wantLeft, names(t, c)); diff != "" {
				t.Errorf("ModelAdapters left (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunNothingToDo(t *testing.T) {
	s := runtime.NewScheme()
	utilruntime.Must(v1alpha1.AddToScheme(s))
	c := fake.NewClientBuilder().WithScheme(s).Build()
	if err := Run(context.Background(), c, Options{Timeout: time.Second}); err != nil {
		t.Fatalf("Run with no adapters: %v", err)
	}
	if err := Run(context.Background(), c, Options{}); err == nil {
		t.Error("Run with no timeout succeeded, want an error")
	}
}

// TestRunSaysWhatItUnloads: before deleting anything, the cleanup logs each adapter it will
// unload (with the pods holding it), so an opted-in uninstall says what it takes away.
func TestRunSaysWhatItUnloads(t *testing.T) {
	logs := testenv.CaptureKlog(t)
	s := runtime.NewScheme()
	utilruntime.Must(v1alpha1.AddToScheme(s))
	held := adapter("a", "lora-1")
	held.Status.Instances = []string{"engine-0", "engine-1"}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(held, adapter("b", "lora-2")).Build()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	releaser(ctx, t, c, "a", "b")
	if err := Run(ctx, c, Options{Timeout: 5 * time.Second, Poll: 10 * time.Millisecond}); err != nil {
		t.Fatalf("Run: %v", err)
	}
	klog.Flush()
	for _, want := range [][]string{
		{"Will unload and delete ModelAdapter", `adapter="a/lora-1"`, "engine-0", "engine-1"},
		{"Will unload and delete ModelAdapter", `adapter="b/lora-2"`},
		{"Deleting ModelAdapters", "count=2"},
	} {
		if len(logs.Lines(want...)) != 1 {
			t.Errorf("no single log line with %q", want)
		}
	}
}
