package preflight

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
	v1alpha1 "github.com/loraplane/loraplane/shared/api/model/v1alpha1"
)

// adapters reports the ModelAdapters the adapter-controller would take over, and those whose
// artifact only the runtime sidecar can fetch on pods without it.
func adapters(ctx context.Context, reader client.Reader, _ Options, r *report) error {
	r.section("ModelAdapters")
	var list v1alpha1.ModelAdapterList
	if err := reader.List(ctx, &list); err != nil {
		return fmt.Errorf("listing ModelAdapters: %w", err)
	}
	var aibrixHeld, ours, fresh int
	for i := range list.Items {
		a := &list.Items[i]
		switch {
		case slices.Contains(a.Finalizers, v1alpha1.Finalizer):
			ours++
			continue
		case slices.Contains(a.Finalizers, v1alpha1.AIBrixFinalizer):
			aibrixHeld++
			r.printf("  %s/%s: taken over from AIBrix in place (phase %s, on %s): no unload, no reload\n",
				a.Namespace, a.Name, a.Status.Phase, strings.Join(a.Status.Instances, ","))
		default:
			fresh++
			r.printf("  %s/%s: not loaded by AIBrix: loraplane places and loads it\n", a.Namespace, a.Name)
		}
		if err := checkRuntime(ctx, reader, a, r); err != nil {
			return err
		}
		if a.Spec.CredentialsSecretRef != nil {
			r.warn("%s/%s takes its engine key from Secret %s: after a rollback AIBrix sends only additionalConfig[\"api-key\"]",
				a.Namespace, a.Name, a.Spec.CredentialsSecretRef.Name)
		}
	}
	r.printf("  %d to take over from AIBrix, %d new, %d already loraplane's\n", aibrixHeld, fresh, ours)
	return nil
}

// checkRuntime warns about an adapter whose artifact needs the runtime sidecar while some of
// the pods it selects have none: on those it would fail with ArtifactNeedsRuntime.
func checkRuntime(ctx context.Context, reader client.Reader, a *v1alpha1.ModelAdapter, r *report) error {
	if !slices.ContainsFunc(v1alpha1.RuntimeArtifactSchemes, func(s string) bool {
		return len(a.Spec.ArtifactURL) >= len(s) && strings.EqualFold(a.Spec.ArtifactURL[:len(s)], s)
	}) {
		return nil
	}
	selector, err := metav1.LabelSelectorAsSelector(a.Spec.PodSelector)
	if err != nil {
		return nil //nolint:nilerr // the adapter-controller reports a bad selector on the adapter itself
	}
	var pods corev1.PodList
	if err := reader.List(ctx, &pods, client.InNamespace(a.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return fmt.Errorf("listing the pods of %s/%s: %w", a.Namespace, a.Name, err)
	}
	var without []string
	for _, p := range pods.Items {
		if !slices.ContainsFunc(p.Spec.Containers, func(c corev1.Container) bool { return c.Name == v1alpha1.RuntimeContainerName }) {
			without = append(without, p.Name)
		}
	}
	if len(without) > 0 {
		r.warn("%s/%s: its artifact needs the %s sidecar, which pods %s lack: ArtifactNeedsRuntime on them "+
			"(keep AIBrix's webhooks running so that new pods get the sidecar)", a.Namespace, a.Name, v1alpha1.RuntimeContainerName, strings.Join(without, ","))
	}
	return nil
}

// modelRoutes reports, per model that a Deployment, StatefulSet or ModelAdapter claims, what
// the router would do with its route.
func modelRoutes(ctx context.Context, reader client.Reader, o Options, r *report) error {
	r.section(fmt.Sprintf("HTTPRoutes in %s", o.Routes.GatewayNamespace))
	models, err := claimedModels(ctx, reader)
	if err != nil {
		return err
	}
	var adopt, foreign, created, owned int
	for _, model := range models {
		route := &gatewayv1.HTTPRoute{}
		err := reader.Get(ctx, client.ObjectKey{Namespace: o.Routes.GatewayNamespace, Name: routes.RouteName(model)}, route)
		switch {
		case client.IgnoreNotFound(err) != nil:
			return fmt.Errorf("reading the route of model %q: %w", model, err)
		case err != nil:
			created++
			r.printf("  %q: no route %s yet: created\n", model, routes.RouteName(model))
		case route.Labels[routes.ManagedByLabel] == routes.ManagedByValue:
			owned++
		default:
			if ok, why := routes.AIBrixRouteShape(o.Routes, model, route); ok {
				adopt++
				r.printf("  %q: %s adopted in place\n", model, route.Name)
			} else {
				foreign++
				r.warn("%q: %s stays foreign and the model unrouted by loraplane: %s", model, route.Name, why)
			}
		}
	}
	r.printf("  %d model(s): %d route(s) to adopt, %d to create, %d left foreign, %d already loraplane's\n",
		len(models), adopt, created, foreign, owned)
	return nil
}

// claimedModels returns the sorted model names that Deployments, StatefulSets and
// ModelAdapters claim (routes.ClaimedModel).
func claimedModels(ctx context.Context, reader client.Reader) ([]string, error) {
	var models []string
	add := func(kind string, obj metav1.Object) {
		if m := routes.ClaimedModel(kind, obj); m != "" && !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	var deployments appsv1.DeploymentList
	var sets appsv1.StatefulSetList
	var adapters v1alpha1.ModelAdapterList
	for _, l := range []client.ObjectList{&deployments, &sets, &adapters} {
		if err := reader.List(ctx, l); err != nil {
			return nil, fmt.Errorf("listing model workloads: %w", err)
		}
	}
	for i := range deployments.Items {
		add("Deployment", &deployments.Items[i])
	}
	for i := range sets.Items {
		add("StatefulSet", &sets.Items[i])
	}
	for i := range adapters.Items {
		add(routes.KindModelAdapter, &adapters.Items[i])
	}
	slices.Sort(models)
	return models, nil
}

// grants reports AIBrix's broad ReferenceGrants and what becomes of them.
func grants(ctx context.Context, reader client.Reader, o Options, r *report) error {
	r.section("ReferenceGrants")
	var list gatewayv1beta1.ReferenceGrantList
	if err := reader.List(ctx, &list); err != nil {
		return fmt.Errorf("listing ReferenceGrants: %w", err)
	}
	n := 0
	for i := range list.Items {
		g := &list.Items[i]
		if g.Name != routes.AIBrixGrantName(o.Routes.GatewayNamespace, g.Namespace) {
			continue
		}
		n++
		if ok, why := routes.AIBrixGrantShape(o.Routes, g); ok {
			r.printf("  %s/%s (every Service of %s): replaced by loraplane's grants naming the Services routed to, then deleted\n",
				g.Namespace, g.Name, g.Namespace)
		} else {
			r.printf("  %s/%s: not AIBrix's (%s): kept\n", g.Namespace, g.Name, why)
		}
	}
	r.printf("  %d AIBrix-named grant(s)\n", n)
	return nil
}
