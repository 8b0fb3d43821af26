package aibrix

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/loraplane/loraplane/test/aibrixfixture"
)

func deployment(t *testing.T, c aibrixfixture.ControllerManager) *appsv1.Deployment {
	t.Helper()
	u, err := aibrixfixture.ControllerManagerDeployment(c)
	if err != nil {
		t.Fatal(err)
	}
	d := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, d); err != nil {
		t.Fatal(err)
	}
	return d
}

func nn(ns, name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }

// TestControllerManagerOf reads AIBrix's controller-manager from each way AIBrix installs it.
func TestControllerManagerOf(t *testing.T) {
	both := []string{AdapterController, RouteController}
	tests := map[string]struct {
		in   aibrixfixture.ControllerManager
		want ControllerManager
	}{
		"kustomize install (config/default)": {
			in:   aibrixfixture.ControllerManager{Replicas: 1},
			want: ControllerManager{Replicas: 1, LeaderElect: true, Lease: nn("aibrix-system", "aibrix-controller-manager"), Replaces: both},
		},
		"standalone model-adapter-controller (config/standalone)": {
			in: aibrixfixture.ControllerManager{Name: "aibrix-lora-controller-manager", Replicas: 1, Args: []string{
				"--leader-elect", "--leader-election-id=aibrix-model-adapter-controller", "--health-probe-bind-address=:8081",
				"--metrics-bind-address=0", "--controllers=model-adapter-controller"}},
			want: ControllerManager{Replicas: 1, LeaderElect: true, Lease: nn("aibrix-system", "aibrix-model-adapter-controller"),
				Replaces: []string{AdapterController}},
		},
		"Helm release renamed, in another namespace, mirrored image": {
			in: aibrixfixture.ControllerManager{Namespace: "ml-serving", Name: "prod-aibrix-controller-manager", Replicas: 2,
				Image: "registry.example.com:5000/mirror/aibrix/controller-manager@sha256:0123",
				Args:  []string{"--leader-elect", "--leader-election-namespace=ml-serving", "--enable-runtime-sidecar"}},
			want: ControllerManager{Replicas: 2, LeaderElect: true, Lease: nn("ml-serving", "aibrix-controller-manager"), Replaces: both},
		},
		"empty --leader-election-namespace: the pod's namespace; separate flag values": {
			in: aibrixfixture.ControllerManager{Namespace: "team-a", Replicas: 1,
				Args: []string{"-leader-elect=true", "--leader-election-namespace=", "--leader-election-id", "custom-id"}},
			want: ControllerManager{Replicas: 1, LeaderElect: true, Lease: nn("team-a", "custom-id"), Replaces: both},
		},
		"both controllers disabled, webhooks kept": {
			in: aibrixfixture.ControllerManager{Replicas: 1,
				Args: []string{"--leader-elect", "--controllers=*,-model-adapter-controller,-model-route-controller"}},
			want: ControllerManager{Replicas: 1, LeaderElect: true, Lease: nn("aibrix-system", "aibrix-controller-manager")},
		},
		"disabled then enabled again (left to right)": {
			in:   aibrixfixture.ControllerManager{Replicas: 1, Args: []string{"--leader-elect", "--controllers=-model-route-controller,*"}},
			want: ControllerManager{Replicas: 1, LeaderElect: true, Lease: nn("aibrix-system", "aibrix-controller-manager"), Replaces: both},
		},
		"scaled to zero, no leader election": {
			in:   aibrixfixture.ControllerManager{Args: []string{}},
			want: ControllerManager{Lease: nn("aibrix-system", "aibrix-controller-manager"), Replaces: both},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := deployment(t, tc.in)
			got, ok := controllerManagerOf(d)
			if !ok {
				t.Fatal("not recognised as AIBrix's controller-manager")
			}
			tc.want.Deployment = types.NamespacedName{Namespace: d.Namespace, Name: d.Name}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}

	other := deployment(t, aibrixfixture.ControllerManager{Image: "example.com/other/controller-manager:v1"})
	other.Labels = nil
	if _, ok := controllerManagerOf(other); ok {
		t.Error("another operator's controller-manager was taken for AIBrix's")
	}
}

func TestUncovered(t *testing.T) {
	running := ControllerManager{Deployment: nn("ml", "prod-aibrix-controller-manager"), Replicas: 1, LeaderElect: true,
		Lease: nn("ml", "aibrix-controller-manager"), Replaces: []string{AdapterController, RouteController}}
	standalone := ControllerManager{Deployment: nn("aibrix-system", "aibrix-lora-controller-manager"), Replicas: 1, LeaderElect: true,
		Lease: nn("aibrix-system", "aibrix-model-adapter-controller"), Replaces: []string{AdapterController}}
	noElection := running
	noElection.LeaderElect = false
	stopped := running
	stopped.Replicas = 0
	defaults := []types.NamespacedName{nn("aibrix-system", "aibrix-controller-manager"), nn("aibrix-system", "aibrix-model-adapter-controller")}
	tests := map[string]struct {
		found      []ControllerManager
		leases     []types.NamespacedName
		controller string
		want       []string // substrings, one per reason
	}{
		"Lease in another namespace, not listed": {found: []ControllerManager{running}, leases: defaults, controller: AdapterController,
			want: []string{"Deployment ml/prod-aibrix-controller-manager runs AIBrix's model-adapter-controller holding the Lease ml/aibrix-controller-manager, which --aibrix-controller-leases does not list"}},
		"listed": {found: []ControllerManager{running}, leases: []types.NamespacedName{nn("ml", "aibrix-controller-manager")}, controller: RouteController},
		"check off while AIBrix runs": {found: []ControllerManager{running}, controller: RouteController,
			want: []string{"runs AIBrix's model-route-controller holding the Lease ml/aibrix-controller-manager"}},
		"standalone adapter controller is no route controller": {found: []ControllerManager{standalone}, controller: RouteController},
		"standalone adapter controller, default Leases":        {found: []ControllerManager{standalone}, leases: defaults, controller: AdapterController},
		"no leader election": {found: []ControllerManager{noElection}, leases: []types.NamespacedName{nn("ml", "aibrix-controller-manager")}, controller: AdapterController,
			want: []string{"without --leader-elect"}},
		"scaled to zero": {found: []ControllerManager{stopped}, controller: AdapterController},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Uncovered(tc.found, tc.leases, tc.controller)
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %d reasons", got, len(tc.want))
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("reason %q does not contain %q", got[i], tc.want[i])
				}
			}
		})
	}
}

func TestCheckCovered(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := appsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	helm := deployment(t, aibrixfixture.ControllerManager{Namespace: "ml", Replicas: 1, Args: []string{"--leader-elect", "--leader-election-namespace=ml"}})
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(helm).Build()
	err := CheckCovered(context.Background(), c, []types.NamespacedName{nn("aibrix-system", "aibrix-controller-manager")}, RouteController, nil)
	if err == nil || !strings.Contains(err.Error(), "refusing to start") || !strings.Contains(err.Error(), "ml/aibrix-controller-manager") {
		t.Errorf("want a refusal naming the Lease ml/aibrix-controller-manager, got %v", err)
	}
	if err := CheckCovered(context.Background(), c, []types.NamespacedName{nn("ml", "aibrix-controller-manager")}, RouteController, nil); err != nil {
		t.Errorf("with the Lease listed: %v", err)
	}

	forbidden := fake.NewClientBuilder().WithScheme(scheme).WithObjects(helm).WithInterceptorFuncs(interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "", nil)
		},
	}).Build()
	if err := CheckCovered(context.Background(), forbidden, nil, RouteController, nil); err != nil {
		t.Errorf("an install that may not list Deployments must start: %v", err)
	}
	if err := CheckCovered(context.Background(), c, nil, RouteController, []string{"team-a"}); err != nil {
		t.Errorf("a namespaced install does not look: %v", err)
	}
}
