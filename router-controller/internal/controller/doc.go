// Package controller is the router reconciler: it keeps one Gateway API HTTPRoute per model
// name, and the ReferenceGrants those routes need, in line with the model workloads in the
// cluster. The objects themselves are built by package routes; this package decides when,
// and writes them.
//
// # Sources
//
// Deployments, StatefulSets and ModelAdapters, plus optional kinds (LeaderWorkerSet,
// RayClusterFleet, ...) that are skipped while their CRD is absent, all read metadata-only
// through the sync gate. Each cache carries a field index from the model a workload claims
// (and that model's route name) to the workload, so a reconcile reads only the workloads of
// its model.
//
// A ModelAdapter's port is that of the Service the adapter-controller publishes for it
// (adapter_services.go): the router caches those Services only (AdapterServiceSelector),
// declared through the sync gate like the sources, and a Service created, changed or
// deleted enqueues its adapter's model. An adapter whose Service is not there yet claims its
// model but adds no backend.
//
// Optional kinds follow their CRDs (optional_kinds.go): every replica asks discovery whether
// each is served when the gate opens and every Config.KindRecheckPeriod after. A kind that
// became served is activated through the gate (informer created, field index added, sync
// waited for with the gate's timeout), then the controller's watch on it starts, enqueuing
// the model of each of its workloads and of each route of ours naming one; one that is no
// longer served is deactivated. activeKinds answers from the gate each time (the kinds whose
// caches are synced now), watchesKind says whether a Kind is among them. Neither change
// deletes anything by itself.
//
// # Keys
//
// One workqueue of Key values: KeyModel (a model name, which may hold '/' or any other
// header character; a struct key needs no encoding) and KeyGrants (a namespace).
// Map functions turn events on workloads, on HTTPRoutes and on ReferenceGrants into keys;
// they never write.
//
// # Reconciling a model
//
// List the live workloads claiming the model, convert them (problems become Warning events
// on the workload), build the desired route and compare it with the cached one: create when
// missing, update when the spec or our labels and annotations differ, delete when no
// workload is left, and never touch a route of that name that is not ours (Warning event
// RouteConflict on every workload, loraplane_routes{state="conflict"}). At most one write
// per reconcile; errors are retried with per-key exponential backoff.
//
// # Acceptance by the Gateway
//
// A route of ours that is up to date is judged from its status.parents: the entries for the
// configured Gateway (routes.RouteAcceptance). Accepted or ResolvedRefs not True for the
// route's current generation makes the model not-accepted: a Warning event
// RouteNotAccepted (the condition, the gateway's reason and message) on each source, once
// per source and problem, and loraplane_routes{state="not-accepted"}. Accepted again, the
// model is managed again, with one Normal event RouteAccepted. A judgement of an earlier
// generation changes nothing until the Gateway catches up; a route the Gateway does not
// report on at all (no entry in status.parents) counts as managed. The route watch lets
// through the status writes that change this judgement (acceptanceChanged), and no other
// status churn. What was reported lives in memory: after a restart a problem still present
// is reported once more.
//
// # ReferenceGrants
//
// Grants follow the routes rather than the workloads: the grants of a namespace admit
// exactly the Services that our routes send to in that namespace, found through an index on
// the routes' backend namespaces. A route written, changed or deleted enqueues the grants of
// every namespace it sends to (old and new), so a grant is created with the first route to a
// namespace, shrinks with the routes, and is deleted when no route sends there - which is
// when no workload of any kind is left there.
//
// Grant writes follow batches of change, not routes. Route and grant events enqueue the
// grants key of a namespace Config.GrantBatchWindow later (enqueueAfter); the queue keeps
// the earliest ready time of a waiting key, so the routes written within the window cost
// one grant reconcile, and our own grant writes do not trigger an immediate second one.
// A Service stays in the grant that already admits it (routes.AssignReferenceGrants): new
// Services go to grants with room, then to new grants; a grant left empty is deleted. So
// adding or removing a Service rewrites one grant, never its neighbours.
//
// # Garbage collection after sync
//
// A runnable on the gated manager starts only after every declared cache has synced, on the
// leader, and enqueues every model claimed by a workload and every model and namespace of the
// routes and grants we own. Routes whose workloads were deleted while the controller was down
// are removed then, never before: nothing is reconciled on a half-filled cache.
package controller
