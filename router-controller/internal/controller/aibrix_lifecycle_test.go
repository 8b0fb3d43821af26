package controller_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/loraplane/loraplane/router-controller/internal/controller"
	"github.com/loraplane/loraplane/router-controller/internal/routes"
	"github.com/loraplane/loraplane/router-controller/internal/setup"
	"github.com/loraplane/loraplane/test/aibrixfixture"
)

// The route behaviours an AIBrix user relies on, as AIBrix's newest model router
// (pkg/controller/modelrouter) and its ModelRouter lifecycle e2e suite
// (test/e2e/controller/modelrouter) show them, each checked against this router with its
// default flags. docs/compatibility.md#modelrouter lists them beside AIBrix's.

// aibrixNewestPaths are the path prefixes of AIBrix's newest model routes, written out (not
// routes.DefaultPaths) so that a changed default fails here.
var aibrixNewestPaths = []string{
	"/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/embeddings",
	"/v1/rerank", "/v1/classify", "/v1/decisions", "/generate", "/generatevideo", "/v1/video",
	"/v1/videos", "/v1/audio/transcriptions", "/v1/audio/translations", "/tokenize", "/pooling",
}

// TestAIBrixRouteOfAnnotatedModel: a Deployment whose model name only a label cannot hold
// (meta-llama/Llama-3.1-8B-Instruct) names it in the model.aibrix.ai/name annotation and adds
// custom paths; its route, with the router's defaults, is the one AIBrix's gateway plugin
// looks up: AIBrix's name for the model, AIBrix's newest 16 path prefixes plus the custom
// ones, each requiring exactly the header model, and AIBrix's newest request timeout (600 s).
func TestAIBrixRouteOfAnnotatedModel(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	startRouter(t, env.Config, gw, []string{ns})
	const model = "meta-llama/Llama-3.1-8B-Instruct"
	const name = "meta-llama-llama-3-1-8b-instruct-08a20b291e44-router" // AIBrix's ModelRouterName, by hand

	createDeployment(t, ns, "llama", nil, map[string]string{nameKey: model, svcKey: "llama", pathsKey: "/score, /version"})
	route := waitRoute(t, gw, model, wantBackends(fmt.Sprintf("0:%s/llama:8000", ns)))
	if route.Name != name {
		t.Errorf("route name %q, want AIBrix's %q", route.Name, name)
	}
	if err := checkShape(route, gw, model, append(slices.Clone(aibrixNewestPaths), "/score", "/version")); err != nil {
		t.Errorf("route: %v", err)
	}
	waitGrant(t, gw, ns, "llama")
}

// TestAIBrixV070RouteAdoptedWithItsTimeout: a route AIBrix v0.7.0 wrote (11 paths, 120 s) is
// adopted by a router started with that release's timeout, --route-timeout=2m, as the
// switching guide says: in place, with AIBrix's five newer path prefixes added, which the
// RouteAdopted event says, and the timeout kept.
func TestAIBrixV070RouteAdoptedWithItsTimeout(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	createDeployment(t, ns, "qwen", modelLabels(qwenModel), map[string]string{svcKey: "qwen"})
	made := createAIBrixRoute(t, aibrixfixture.Route{Name: qwenRoute, Model: qwenModel, Namespace: ns, Service: "qwen", GatewayNamespace: gw,
		Paths: aibrixfixture.V070Paths, Timeout: aibrixfixture.V070Timeout}, nil)

	startRouter(t, env.Config, gw, []string{ns}, noAIBrixCheck, func(o *setup.Options) { o.RouteTimeout = 2 * time.Minute })
	route := waitRoute(t, gw, qwenModel, func(r *gatewayv1.HTTPRoute) error {
		if !routes.IsManaged(r) {
			return errors.New("not adopted yet")
		}
		return nil
	})
	if route.UID != made.UID {
		t.Fatalf("route %s was re-created (uid %s), not adopted (uid %s)", route.Name, route.UID, made.UID)
	}
	if got, want := paths(route), slices.Sorted(slices.Values(aibrixNewestPaths)); !slices.Equal(got, want) {
		t.Errorf("paths %v, want %v", got, want)
	}
	if got := ptr.Deref(route.Spec.Rules[0].Timeouts.Request, ""); got != "2m" {
		t.Errorf("request timeout %q, want 2m (AIBrix v0.7.0's 120s)", got)
	}
	const added = "paths added: /pooling, /tokenize, /v1/decisions, /v1/video, /v1/videos"
	if e := waitEvent(t, ns, "qwen", controller.ReasonRouteAdopted); !strings.Contains(e.Note, added) || strings.Contains(e.Note, "timeout") {
		t.Errorf("RouteAdopted event %q, want it to say %q and nothing of the timeout", e.Note, added)
	}
}

// TestModelAdapterRouteRemovedAlone: a ModelAdapter gets a route of its own beside its base
// model's; deleting the adapter removes its route only: the base model's route is neither
// deleted nor rewritten, and the grant keeps admitting the base model's Service.
func TestModelAdapterRouteRemovedAlone(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	startRouter(t, env.Config, gw, []string{ns})
	base, name := "base-"+ns, "lora-"+ns

	createDeployment(t, ns, "base", modelLabels(base), nil)
	baseRoute := waitRoute(t, gw, base, wantBackends(fmt.Sprintf("0:%s/%s:8000", ns, base)))
	adapter := createAdapter(t, ns, name, base)
	if err := k8s.Create(context.Background(), adapterService(adapter, 8000)); err != nil {
		t.Fatalf("creating the adapter's Service: %v", err)
	}
	waitRoute(t, gw, name, wantBackends(fmt.Sprintf("0:%s/%s:8000", ns, name)))
	waitGrant(t, gw, ns, base, name)
	deletions := watchDeletions(t, &gatewayv1.HTTPRouteList{})

	deleteObject(t, adapter)
	waitRouteGone(t, gw, name)
	waitGrant(t, gw, ns, base)
	if r := getRoute(t, gw, baseRoute.Name); r == nil || r.UID != baseRoute.UID || r.ResourceVersion != baseRoute.ResourceVersion {
		t.Errorf("the base model's route was replaced or rewritten: before uid %s rv %s, now %+v", baseRoute.UID, baseRoute.ResourceVersion, r)
	}
	if at, ok := deletions.when(baseRoute); ok {
		t.Errorf("the base model's route was deleted at %s", at.Format(time.RFC3339Nano))
	}
}

// TestRouterRestartKeepsRoutes: after the router restarts, a workload created since gets its
// route, and the route made before the restart survives as the same object, managed by the
// new process (a port change reaches it), the only route of its model.
func TestRouterRestartKeepsRoutes(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	before, after := "before-"+ns, "after-"+ns
	deletions := watchDeletions(t, &gatewayv1.HTTPRouteList{})

	first := startRouter(t, env.Config, gw, []string{ns})
	d := createDeployment(t, ns, "before", modelLabels(before), nil)
	kept := waitRoute(t, gw, before, wantBackends(fmt.Sprintf("0:%s/%s:8000", ns, before)))
	first.stop()

	startRouter(t, env.Config, gw, []string{ns}).waitOpen(t)
	createDeployment(t, ns, "after", modelLabels(after), nil)
	waitRoute(t, gw, after, wantBackends(fmt.Sprintf("0:%s/%s:8000", ns, after)))
	patchMeta(t, d, map[string]*string{portKey: ptr.To("8001")}, nil)
	if r := waitRoute(t, gw, before, wantBackends(fmt.Sprintf("0:%s/%s:8001", ns, before))); r.UID != kept.UID {
		t.Errorf("the route made before the restart was replaced: uid %s, was %s", r.UID, kept.UID)
	}
	if at, ok := deletions.when(kept); ok {
		t.Errorf("the route made before the restart was deleted at %s", at.Format(time.RFC3339Nano))
	}
	if got := routesMatching(t, gw, before); !slices.Equal(got, []string{kept.Name}) {
		t.Errorf("routes matching model %q: %v, want only %s", before, got, kept.Name)
	}
}

// TestSharedModelRouteStaysWhileServed: two workloads of one namespace serve one model: the
// route stays, the same object, while either is left (its backends follow), and goes with
// the last, taking the grant with it.
func TestSharedModelRouteStaysWhileServed(t *testing.T) {
	needEnv(t)
	gw, ns := newNamespace(t, "gw"), newNamespace(t, "src")
	startRouter(t, env.Config, gw, []string{ns})
	model := "shared-" + ns
	deletions := watchDeletions(t, &gatewayv1.HTTPRouteList{})

	a := createDeployment(t, ns, "engine-a", modelLabels(model), map[string]string{svcKey: "svc-a"})
	b := createDeployment(t, ns, "engine-b", modelLabels(model), map[string]string{svcKey: "svc-b"})
	route := waitRoute(t, gw, model, wantBackends("0:"+ns+"/svc-a:8000", "0:"+ns+"/svc-b:8000"))
	waitGrant(t, gw, ns, "svc-a", "svc-b")

	deleteObject(t, a)
	if r := waitRoute(t, gw, model, wantBackends("0:"+ns+"/svc-b:8000")); r.UID != route.UID {
		t.Errorf("the route was replaced while engine-b still serves the model: uid %s, was %s", r.UID, route.UID)
	}
	waitGrant(t, gw, ns, "svc-b")
	if at, ok := deletions.when(route); ok {
		t.Errorf("the route was deleted at %s while engine-b still serves the model", at.Format(time.RFC3339Nano))
	}

	deleteObject(t, b)
	waitRouteGone(t, gw, model)
	waitGrant(t, gw, ns)
}
