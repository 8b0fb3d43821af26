package controller

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/loraplane/loraplane/router-controller/internal/routes"
)

func desiredRoute(t *testing.T, port int32, paths ...string) *gatewayv1.HTTPRoute {
	t.Helper()
	src := routes.Source{Kind: "Deployment", Namespace: "team-a", Name: "llama", Model: "llama", Service: "llama", Port: port, Paths: paths}
	r, err := routes.BuildRoute(routesConfig(), "llama", []routes.Source{src})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// stored is what the cache would hold: desired plus server fields and others' metadata.
func stored(r *gatewayv1.HTTPRoute, mutate func(*gatewayv1.HTTPRoute)) *gatewayv1.HTTPRoute {
	out := r.DeepCopy()
	out.ResourceVersion = "42"
	out.UID = "uid-1"
	out.Generation = 3
	if mutate != nil {
		mutate(out)
	}
	return out
}

func TestRouteUpToDate(t *testing.T) {
	desired := desiredRoute(t, 8000)
	cases := map[string]struct {
		existing *gatewayv1.HTTPRoute
		want     bool
	}{
		"same": {existing: stored(desired, nil), want: true},
		"others' labels and annotations are ignored": {existing: stored(desired, func(r *gatewayv1.HTTPRoute) {
			r.Labels["team"] = "x"
			r.Annotations["note"] = "hello"
		}), want: true},
		"status is ignored": {existing: stored(desired, func(r *gatewayv1.HTTPRoute) {
			r.Status.Parents = []gatewayv1.RouteParentStatus{{ControllerName: "example.com/gw"}}
		}), want: true},
		"port drift":    {existing: desiredRoute(t, 9000)},
		"paths drift":   {existing: desiredRoute(t, 8000, "/custom")},
		"timeout drift": {existing: stored(desired, func(r *gatewayv1.HTTPRoute) { r.Spec.Rules[0].Timeouts = nil })},
		"scopes annotation drift": {existing: stored(desired, func(r *gatewayv1.HTTPRoute) {
			r.Annotations[routes.ScopesAnnotation] = "Deployment/team-b"
		})},
		"legacy sources annotation to remove": {existing: stored(desired, func(r *gatewayv1.HTTPRoute) {
			r.Annotations[routes.LegacySourcesAnnotation] = "Deployment/team-a/llama"
		})},
		"install label of another value": {existing: stored(desired, func(r *gatewayv1.HTTPRoute) {
			r.Labels[routes.InstallLabel] = "other"
		})},
		"model hash label removed": {existing: stored(desired, func(r *gatewayv1.HTTPRoute) {
			delete(r.Labels, routes.ModelHashLabel)
		})},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := routeUpToDate(tc.existing, desired); got != tc.want {
				t.Errorf("routeUpToDate = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMergeRoute(t *testing.T) {
	desired := desiredRoute(t, 9000, "/custom")
	existing := stored(desiredRoute(t, 8000), func(r *gatewayv1.HTTPRoute) {
		r.Labels["team"] = "x"
		r.Annotations[routes.ScopesAnnotation] = "stale"
		r.Annotations[routes.LegacySourcesAnnotation] = "Deployment/team-a/llama"
	})
	got := mergeRoute(existing, desired)

	if !routeUpToDate(got, desired) {
		t.Error("the merged route is not up to date")
	}
	if got.ResourceVersion != "42" || got.UID != "uid-1" {
		t.Errorf("merged route lost the server fields: resourceVersion %q uid %q", got.ResourceVersion, got.UID)
	}
	if got.Labels["team"] != "x" {
		t.Errorf("merged route lost a label others added: %v", got.Labels)
	}
	if diff := cmp.Diff(desired.Spec, got.Spec); diff != "" {
		t.Errorf("merged spec (-want +got):\n%s", diff)
	}
	if _, ok := got.Annotations[routes.LegacySourcesAnnotation]; ok {
		t.Errorf("merged route kept the legacy sources annotation: %v", got.Annotations)
	}
	if existing.Annotations[routes.ScopesAnnotation] != "stale" || existing.Labels["team"] != "x" ||
		existing.Annotations[routes.LegacySourcesAnnotation] == "" {
		t.Error("mergeRoute modified the cached object")
	}
}

func TestGrantUpToDate(t *testing.T) {
	cfg := routesConfig()
	build := func(services ...string) *gatewayv1beta1.ReferenceGrant {
		gs, err := routes.AssignReferenceGrants(cfg, "team-a", services, nil, nil)
		if err != nil || len(gs) != 1 {
			t.Fatalf("building grants: %v (%d grants)", err, len(gs))
		}
		return gs[0]
	}
	desired := build("a", "b")
	cases := map[string]struct {
		existing *gatewayv1beta1.ReferenceGrant
		want     bool
	}{
		"same":             {existing: build("b", "a"), want: true},
		"service missing":  {existing: build("a")},
		"service too many": {existing: build("a", "b", "c")},
		"label removed": {existing: func() *gatewayv1beta1.ReferenceGrant {
			g := build("a", "b")
			delete(g.Labels, routes.GatewayNamespaceLabel)
			return g
		}()},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := grantUpToDate(tc.existing, desired); got != tc.want {
				t.Errorf("grantUpToDate = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestOwnsGrantAndMapping(t *testing.T) {
	r := &RouteReconciler{cfg: Config{Routes: routesConfig()}}
	grant := func(name string, labels map[string]string) *gatewayv1beta1.ReferenceGrant {
		return &gatewayv1beta1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, Labels: labels}}
	}
	ours := map[string]string{routes.ManagedByLabel: routes.ManagedByValue, routes.GatewayNamespaceLabel: routes.DefaultGatewayNamespace}
	otherGateway := map[string]string{routes.ManagedByLabel: routes.ManagedByValue, routes.GatewayNamespaceLabel: "other-gw"}
	cases := map[string]struct {
		grant    *gatewayv1beta1.ReferenceGrant
		wantOwns bool
		wantKeys []Key
	}{
		"ours":                  {grant: grant(routes.ReferenceGrantName(routes.DefaultGatewayNamespace, 0), ours), wantOwns: true, wantKeys: []Key{GrantsKey("team-a")}},
		"ours, second":          {grant: grant(routes.ReferenceGrantName(routes.DefaultGatewayNamespace, 1), ours), wantOwns: true, wantKeys: []Key{GrantsKey("team-a")}},
		"foreign with our name": {grant: grant(routes.ReferenceGrantName(routes.DefaultGatewayNamespace, 0), nil), wantKeys: []Key{GrantsKey("team-a")}},
		"another gateway's":     {grant: grant(routes.ReferenceGrantName("other-gw", 0), otherGateway)},
		"unrelated foreign":     {grant: grant("allow-all", nil)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := r.ownsGrant(tc.grant); got != tc.wantOwns {
				t.Errorf("ownsGrant = %v, want %v", got, tc.wantOwns)
			}
			if diff := cmp.Diff(tc.wantKeys, r.grantToNamespace(t.Context(), tc.grant)); diff != "" {
				t.Errorf("grantToNamespace (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWorkloadToModel(t *testing.T) {
	r := &RouteReconciler{}
	deploy := r.workloadToModel(DefaultSourceKinds()[0])
	adapter := r.workloadToModel(DefaultSourceKinds()[2])
	if got := deploy(t.Context(), meta("d", nil, nil)); got != nil {
		t.Errorf("a workload without a model maps to %v", got)
	}
	if diff := cmp.Diff([]Key{ModelKey("a/b")}, deploy(t.Context(), meta("d", map[string]string{nameKey: "a/b"}, nil))); diff != "" {
		t.Errorf("deployment keys (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Key{ModelKey("lora")}, adapter(t.Context(), meta("lora", nil, nil))); diff != "" {
		t.Errorf("adapter keys (-want +got):\n%s", diff)
	}
}

func TestRoutingChanged(t *testing.T) {
	base := meta("d", map[string]string{nameKey: "m"}, map[string]string{"a": "1"})
	now := metav1.NewTime(time.Unix(100, 0))
	cases := map[string]struct {
		mutate func(*metav1.PartialObjectMetadata)
		want   bool
	}{
		"status churn only":  {mutate: func(o *metav1.PartialObjectMetadata) { o.ResourceVersion = "2"; o.Generation = 5 }},
		"label changed":      {mutate: func(o *metav1.PartialObjectMetadata) { o.Labels[portKey] = "9000" }, want: true},
		"label removed":      {mutate: func(o *metav1.PartialObjectMetadata) { delete(o.Labels, nameKey) }, want: true},
		"annotation changed": {mutate: func(o *metav1.PartialObjectMetadata) { o.Annotations[pathsKey] = "/x" }, want: true},
		"deletion started":   {mutate: func(o *metav1.PartialObjectMetadata) { o.DeletionTimestamp = &now }, want: true},
	}
	p := routingChanged()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n := base.DeepCopy()
			tc.mutate(n)
			if got := p.Update(event.TypedUpdateEvent[*metav1.PartialObjectMetadata]{ObjectOld: base, ObjectNew: n}); got != tc.want {
				t.Errorf("Update = %v, want %v", got, tc.want)
			}
		})
	}
	if !p.Create(event.TypedCreateEvent[*metav1.PartialObjectMetadata]{Object: base}) || !p.Delete(event.TypedDeleteEvent[*metav1.PartialObjectMetadata]{Object: base}) {
		t.Error("creations and deletions must always pass")
	}
}

func TestSpecOrMetadataChanged(t *testing.T) {
	base := desiredRoute(t, 8000)
	base.Generation = 1
	p := specOrMetadataChanged[*gatewayv1.HTTPRoute]()
	cases := map[string]struct {
		mutate func(*gatewayv1.HTTPRoute)
		want   bool
	}{
		"status write": {mutate: func(r *gatewayv1.HTTPRoute) {
			r.ResourceVersion = "9"
			r.Status.Parents = []gatewayv1.RouteParentStatus{{}}
		}},
		"spec edited":        {mutate: func(r *gatewayv1.HTTPRoute) { r.Generation = 2 }, want: true},
		"managed-by removed": {mutate: func(r *gatewayv1.HTTPRoute) { delete(r.Labels, routes.ManagedByLabel) }, want: true},
		"annotation edited":  {mutate: func(r *gatewayv1.HTTPRoute) { r.Annotations[routes.ModelAnnotation] = "x" }, want: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n := base.DeepCopy()
			tc.mutate(n)
			if got := p.Update(event.TypedUpdateEvent[*gatewayv1.HTTPRoute]{ObjectOld: base, ObjectNew: n}); got != tc.want {
				t.Errorf("Update = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSortedKeys(t *testing.T) {
	got := sortedKeys(map[Key]bool{GrantsKey("b"): true, ModelKey("z"): true, GrantsKey("a"): true, ModelKey("a/b"): true})
	want := []Key{ModelKey("a/b"), ModelKey("z"), GrantsKey("a"), GrantsKey("b")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sortedKeys (-want +got):\n%s", diff)
	}
}

func TestRouteStatesMetric(t *testing.T) {
	Register()
	s := newRouteStates()
	steps := []struct {
		do                     func()
		wantManaged, wantConfl float64
	}{
		{do: func() { s.set("a", RouteStateManaged) }, wantManaged: 1},
		{do: func() { s.set("b", RouteStateConflict) }, wantManaged: 1, wantConfl: 1},
		{do: func() { s.set("b", RouteStateManaged) }, wantManaged: 2},
		{do: func() { s.set("b", RouteStateManaged) }, wantManaged: 2},
		{do: func() { s.clear("a") }, wantManaged: 1},
		{do: func() { s.clear("missing") }, wantManaged: 1},
		{do: func() { s.clear("b") }},
	}
	for i, st := range steps {
		st.do()
		if got := testutil.ToFloat64(Routes.WithLabelValues(string(RouteStateManaged))); got != st.wantManaged {
			t.Errorf("step %d: loraplane_routes{state=managed} = %v, want %v", i, got, st.wantManaged)
		}
		if got := testutil.ToFloat64(Routes.WithLabelValues(string(RouteStateConflict))); got != st.wantConfl {
			t.Errorf("step %d: loraplane_routes{state=conflict} = %v, want %v", i, got, st.wantConfl)
		}
	}
}

func TestMetricsHelp(t *testing.T) {
	Register()
	Register() // idempotent
	for _, name := range []string{"loraplane_routes", "loraplane_route_reconcile_errors_total"} {
		n, err := testutil.GatherAndCount(crmetrics.Registry, name)
		if err != nil || n == 0 {
			t.Errorf("%s: %d series, err %v; want it registered on controller-runtime's registry", name, n, err)
		}
	}
}

func TestIsNamespaceNotFound(t *testing.T) {
	cases := map[string]struct {
		err  error
		want bool
	}{
		"the gateway namespace is missing": {err: apierrors.NewNotFound(corev1.Resource("namespaces"), "aibrix-system"), want: true},
		"wrapped":                          {err: fmt.Errorf("creating: %w", apierrors.NewNotFound(corev1.Resource("namespaces"), "aibrix-system")), want: true},
		"another namespace is missing":     {err: apierrors.NewNotFound(corev1.Resource("namespaces"), "other"), want: false},
		"a route is missing":               {err: apierrors.NewNotFound(gatewayv1.Resource("httproutes"), "aibrix-system"), want: false},
		"forbidden":                        {err: apierrors.NewForbidden(corev1.Resource("namespaces"), "aibrix-system", errors.New("no")), want: false},
		"not an API error":                 {err: errors.New(`namespaces "aibrix-system" not found`), want: false},
		"nil":                              {err: nil, want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := isNamespaceNotFound(tc.err, "aibrix-system"); got != tc.want {
				t.Errorf("isNamespaceNotFound(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
