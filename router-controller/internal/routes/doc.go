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
// # Routes
//
// One HTTPRoute per model name, named by RouteName, in the gateway namespace. Each path prefix
// (Config.Paths plus every source's custom paths) becomes one match that also requires the
// header "model" to equal the model name exactly. Backends are the union of the sources'
// (namespace, Service, port). Output is canonical: sources given in any order produce the same
// object, and every field the API server would default is set explicitly, so a stored route can
// be compared with a built one without spurious differences.
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
