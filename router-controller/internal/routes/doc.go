// Package routes turns model workloads into Gateway API objects.
//
// Everything here is a pure function of its arguments: no API calls, no clock, no randomness.
// The router reconciler reads sources (Deployments, StatefulSets, ModelAdapters and optional
// kinds) from its caches, converts each with SourceFromObject and groups them by model name:
// BuildRoute gives the desired HTTPRoute of each model. ReferenceGrants are reconciled per
// source namespace (other than the gateway namespace), batched over a short window:
// AssignReferenceGrants gives the grants that admit exactly the Services routed to there,
// given the grants that exist.
//
// # Sources
//
// A workload is a model workload when it carries the model name in the label
// model.aibrix.ai/name, or else in the annotation of that key. A ModelAdapter is always
// routed under its own name, the name engines load it under and AIBrix's gateway plugin looks
// it up by; a label or annotation that says otherwise is reported, not followed. Its Service
// comes from the annotation model.aibrix.ai/service-name, else the model name; its port from
// the label model.aibrix.ai/port (default 8000). A ModelAdapter always routes to its own
// headless Service, named after it, on the port of that Service (AdapterPort): the
// adapter-controller publishes it on the engines' port, so the reconciler passes the port of
// the Service it finds in its cache, and an adapter without one is not routed yet. Extra path
// prefixes come from the comma-separated annotation
// model.aibrix.ai/model-router-custom-paths. Bad values that can be recovered from
// (a bad port, an invalid custom path) are dropped and reported as problems for a Warning
// event; values that would make the route invalid (a Service that is not a DNS-1035 label, a
// model name that cannot be a header value) exclude the source, also with a problem.
//
// # Engine endpoints stay inside the cluster
//
// A custom path that would forward an engine's adapter or admin endpoint through the gateway
// is dropped with a problem: the endpoints are listed per engine (vLLM, SGLang, AIBrix's
// runtime sidecar) in EngineAdminEndpoints, and ReachesEngineAdmin refuses a path prefix that
// equals one, lies below one, or is a path-segment prefix of one ("/", "/v1"; a PathPrefix
// match forwards everything under it), compared case-insensitively, without trailing
// slashes, after decoding percent-encoded unreserved characters and resolving dot segments.
// Otherwise any workload owner could load adapters onto, or put to sleep, engines shared with
// other teams.
//
// # Routes
//
// One HTTPRoute per model name, named by RouteName, in the gateway namespace. Each path prefix
// (Config.Paths plus every source's custom paths) becomes one match that also requires the
// header "model" to equal the model name exactly. Backends are the union of the sources'
// (namespace, Service, port). Output is canonical: sources given in any order produce the same
// object, and every field the API server would default is set explicitly, so a stored route can
// be compared with a built one without spurious differences.
//
// # Taking over from AIBrix
//
// AIBrixRouteShape and AIBrixGrantShape recognise the routes and grants AIBrix's model router
// made, exactly as it writes them, so that only those are adopted or retired; each refusal
// comes with a reason for an event. ForeignManager recognises the marks of anything else
// that keeps an object (Helm, Argo CD, Flux, kubectl, another field manager), which would
// write it back. AdoptionChanges says what adopting a route changes.
//
// # Gateway API limits
//
// The limits below come from the v1.6.3 HTTPRoute and ReferenceGrant CRDs
// (config/crd/standard in sigs.k8s.io/gateway-api): 64 matches per rule, 16 rules, 128 matches
// per route in total, 16 backendRefs per rule, 16 "to" entries per ReferenceGrant. Matches are
// split across rules (with identical backends) when a rule would overflow. A route that cannot
// fit at all is an error, never an invalid object. A namespace with more than 16 routed
// Services gets several ReferenceGrants; AssignReferenceGrants keeps every Service in the
// grant that already admits it, so a change rewrites as few grants as it can.
package routes
