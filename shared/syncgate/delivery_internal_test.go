package syncgate

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestControllerFields pins the fields of controller-runtime's (internal) controller type
// the gate reads: a controller-runtime upgrade that renames them fails here.
func TestControllerFields(t *testing.T) {
	nop := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) { return reconcile.Result{}, nil })
	type key string
	typed, err := controller.NewTypedUnmanaged("typed-fields", controller.TypedOptions[key]{
		Reconciler:         reconcile.TypedFunc[key](func(context.Context, key) (reconcile.Result, error) { return reconcile.Result{}, nil }),
		CacheSyncTimeout:   3 * time.Second,
		EnableWarmup:       ptr.To(true),
		SkipNameValidation: ptr.To(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := controller.NewUnmanaged("plain-fields", controller.Options{Reconciler: nop, SkipNameValidation: ptr.To(true)})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		r           manager.Runnable
		wantName    string
		wantTimeout time.Duration
		wantWarmup  bool
		wantOK      bool
	}{
		"typed controller with warmup":     {r: typed, wantName: "typed-fields", wantTimeout: 3 * time.Second, wantWarmup: true, wantOK: true},
		"controller with defaults":         {r: plain, wantName: "plain-fields", wantTimeout: 2 * time.Minute, wantOK: true},
		"a runnable that is no controller": {r: manager.RunnableFunc(func(context.Context) error { return nil })},
	} {
		t.Run(name, func(t *testing.T) {
			n, timeout, warmup, ok := controllerFields(tc.r)
			if n != tc.wantName || timeout != tc.wantTimeout || warmup != tc.wantWarmup || ok != tc.wantOK {
				t.Errorf("controllerFields = %q, %s, %v, %v; want %q, %s, %v, %v", n, timeout, warmup, ok, tc.wantName, tc.wantTimeout, tc.wantWarmup, tc.wantOK)
			}
		})
	}
}

func TestDeliveryErrorMessage(t *testing.T) {
	configMaps := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	routes := schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"}
	cause := errors.New("timed out waiting for cache to be synced")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: routes.Group, Resource: "httproutes"}, "", errors.New("no"))
	for name, tc := range map[string]struct {
		err  *DeliveryError
		want string
	}{
		"slow handler and a failing informer": {
			err: &DeliveryError{Controller: "router-controller", Reconciler: "router", Timeout: 2 * time.Minute, Err: cause, Pending: []PendingHandler{
				{GVK: configMaps, Reason: ReasonSlowHandler, Delivered: 120, Objects: 300},
				{GVK: routes, Reason: ReasonForbidden, Err: forbidden},
			}},
			want: "controller router of router-controller did not receive the initial lists of its watched kinds within 2m0s: " +
				"v1/ConfigMap (slow-handler: 120 of 300 initial objects delivered); gateway.networking.k8s.io/v1/HTTPRoute (forbidden: " + forbidden.Error() + ")",
		},
		"nothing pending names controller-runtime's error": {
			err:  &DeliveryError{Controller: "adapter-controller", Reconciler: "modeladapter", Timeout: time.Second, Err: cause},
			want: "controller modeladapter of adapter-controller did not start within 1s: timed out waiting for cache to be synced",
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error() =\n  %s\nwant\n  %s", got, tc.want)
			}
			if !errors.Is(tc.err, cause) {
				t.Error("the error does not wrap controller-runtime's")
			}
		})
	}
}
