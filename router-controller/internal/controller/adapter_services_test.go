package controller_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/loraplane/loraplane/router-controller/internal/controller"
	"github.com/loraplane/loraplane/router-controller/internal/routes"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
	"github.com/loraplane/loraplane/shared/objmeta"
	"github.com/loraplane/loraplane/test/testenv"
)

// createAdapter creates a ModelAdapter of base model base, without a port label.
func createAdapter(t *testing.T, ns, name, base string) *v1alpha1.ModelAdapter {
	t.Helper()
	a := &v1alpha1.ModelAdapter{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ModelAdapterSpec{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{nameKey: base}},
			ArtifactURL: "huggingface://org/lora",
		},
	}
	if err := k8s.Create(context.Background(), a); err != nil {
		t.Fatalf("creating ModelAdapter %s/%s: %v", ns, name, err)
	}
	return a
}

// adapterService is the headless Service the adapter-controller writes for adapter on the
// engines' port (adapter-controller internal/adapter desiredService): its labels, port
// "http", and the adapter as controller.
func adapterService(a *v1alpha1.ModelAdapter, port int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: a.Namespace, Name: a.Name,
			Labels: map[string]string{objmeta.ManagedByLabel: objmeta.AdapterControllerManagedBy, v1alpha1.ModelNameLabel: a.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "ModelAdapter", Name: a.Name, UID: a.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Ports:     []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(port)}},
		},
	}
}

// TestAdapterRoutedOnServicePort: the adapters of an SGLang model (engine port 30000) are
// routed on the port of the Service the adapter-controller published, not on a port label
// of the ModelAdapter (it has none) or the default 8000; the route follows a port change of
// the Service and goes when the Service goes.
func TestAdapterRoutedOnServicePort(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	startRouter(t, env.Config, gw, []string{ns})
	base, name := "sglang-"+ns, "lora-"+ns

	createDeployment(t, ns, "sglang", modelLabels(base, portKey, "30000", v1alpha1.EngineLabel, "sglang"), nil)
	waitRoute(t, gw, base, wantBackends(fmt.Sprintf("0:%s/%s:30000", ns, base)))

	adapter := createAdapter(t, ns, name, base)
	svc := adapterService(adapter, 30000)
	if err := k8s.Create(ctx, svc); err != nil {
		t.Fatalf("creating the adapter's Service: %v", err)
	}
	waitRoute(t, gw, name, wantBackends(fmt.Sprintf("0:%s/%s:30000", ns, name)))
	waitGrant(t, gw, ns, name, base) // sorted: "lora-" < "sglang-"

	// The adapter-controller moves the Service to the port of its first instance.
	svc.Spec.Ports[0].Port, svc.Spec.Ports[0].TargetPort = 30001, intstr.FromInt32(30001)
	if err := k8s.Update(ctx, svc); err != nil {
		t.Fatalf("changing the port of the adapter's Service: %v", err)
	}
	waitRoute(t, gw, name, wantBackends(fmt.Sprintf("0:%s/%s:30001", ns, name)))

	// The Service gone while the adapter still claims its model: the live route is kept as
	// it is (the adapter-controller publishes the Service again); the adapter deleted: the
	// route goes, and the grant shrinks to the base model's Service.
	deleteObject(t, svc)
	waitEvent(t, ns, name, "InvalidSource")
	consistently(t, time.Second, "the adapter's route while the adapter claims it", func() error {
		if r := getRoute(t, gw, routes.RouteName(name)); r == nil {
			return fmt.Errorf("deleted")
		}
		return nil
	})
	deleteObject(t, adapter)
	waitRouteGone(t, gw, name)
	waitGrant(t, gw, ns, base)
	waitRoute(t, gw, base, wantBackends(fmt.Sprintf("0:%s/%s:30000", ns, base)))
}

// TestAdapterWaitsForItsService: a ModelAdapter whose Service the adapter-controller has not
// published gets no route (never one to a missing Service) and a Warning saying what it waits
// for; a Service of its name and labels that it does not control (left by an earlier adapter
// of that name) is not its Service either. The route comes with the adapter's own Service.
func TestAdapterWaitsForItsService(t *testing.T) {
	needEnv(t)
	ctx := context.Background()
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	startRouter(t, env.Config, gw, []string{ns})
	name := "lora-" + ns

	adapter := createAdapter(t, ns, name, "base")
	e := waitEvent(t, ns, name, controller.ReasonInvalidSource)
	if want := fmt.Sprintf("waiting for the adapter-controller to publish Service %s/%s", ns, name); !strings.Contains(strings.ToLower(e.Note), strings.ToLower(want)) {
		t.Errorf("InvalidSource event %q, want it to say %q", e.Note, want)
	}
	if r := getRoute(t, gw, routes.RouteName(name)); r != nil {
		t.Fatalf("HTTPRoute %s written before the adapter's Service exists, backends %v", r.Name, backends(r))
	}

	stale := adapterService(adapter, 30000)
	stale.OwnerReferences[0].UID = "0a1b2c3d-0000-4000-8000-000000000000"
	reconciles := testenv.ReconcileCount(controller.ControllerName)
	if err := k8s.Create(ctx, stale); err != nil {
		t.Fatalf("creating a Service the adapter does not control: %v", err)
	}
	eventually(t, "a reconcile after the Service was created", func() error {
		if testenv.ReconcileCount(controller.ControllerName) <= reconciles {
			return errors.New("no reconcile counted yet")
		}
		return nil
	})
	if r := getRoute(t, gw, routes.RouteName(name)); r != nil {
		t.Fatalf("HTTPRoute %s written to a Service the adapter does not control, backends %v", r.Name, backends(r))
	}

	// The adapter-controller would replace it; here it takes it over (its controller
	// reference): the Service is the adapter's from then on.
	stale.OwnerReferences[0].UID = adapter.UID
	if err := k8s.Update(ctx, stale); err != nil {
		t.Fatalf("making the adapter the Service's controller: %v", err)
	}
	waitRoute(t, gw, name, wantBackends(fmt.Sprintf("0:%s/%s:30000", ns, name)))
	waitGrant(t, gw, ns, name)
}
