package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
)

// notManaged is why a route of the model's name that loraplane does not manage is left alone.
var notManaged = fmt.Sprintf("it is not managed by loraplane (label %s=%s missing)", routes.ManagedByLabel, routes.ManagedByValue)

// adoptOrReport adopts the route of the model's name when it is exactly what AIBrix's model
// router would have written (routes.AIBrixRouteShape), and otherwise leaves it alone and
// reports why it was not adopted.
func (r *RouteReconciler) adoptOrReport(ctx context.Context, m *modelRoutes) error {
	ok, why := routes.AIBrixRouteShape(r.cfg.Routes, m.model, m.existing)
	if ok {
		return r.adoptRoute(ctx, m)
	}
	return r.reportConflict(ctx, m, notManaged+", and it is not adopted as the route AIBrix's model router made: "+why)
}

// adoptionChanges says what adopting existing as updated changes, for the RouteAdopted event.
func adoptionChanges(existing, updated *gatewayv1.HTTPRoute) string {
	changes := routes.AdoptionChanges(existing, updated)
	if len(changes) == 0 {
		return "nothing to change"
	}
	return strings.Join(changes, "; ")
}

// reportNotAIBrixGrant reports, once per grant and reason, that a grant named as AIBrix
// names its grants is not AIBrix's and stays.
func (r *RouteReconciler) reportNotAIBrixGrant(ctx context.Context, g *gatewayv1beta1.ReferenceGrant, why string) {
	if !r.notAIBrixGrants.changed(g.Namespace+"/"+g.Name, string(g.UID)+why) {
		return
	}
	ctrl.LoggerFrom(ctx).Info("Not removing a ReferenceGrant named as AIBrix's: AIBrix did not make it", "grant", klog.KObj(g), "reason", why)
	r.recorder.Eventf(g, nil, corev1.EventTypeWarning, ReasonNotAIBrixGrant, ActionDeleteGrant,
		"Not deleting this ReferenceGrant, although AIBrix's model router names its grants so: %s. Whatever manages it keeps it; remove it there once nothing needs it (loraplane's own grants admit the Services its routes use)", why)
}

// reportedOnce remembers the last reason reported per key, so that each is reported once.
type reportedOnce struct {
	mu   sync.Mutex
	last map[string]string
}

// changed records why for key and reports whether it differs from the last one recorded.
func (o *reportedOnce) changed(key, why string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.last == nil {
		o.last = map[string]string{}
	}
	if o.last[key] == why {
		return false
	}
	o.last[key] = why
	return true
}
