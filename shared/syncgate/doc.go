// Package syncgate makes "sync-then-start" structural: a controller never acts on a
// half-filled informer cache.
//
// A controller declares the resources it reads (typed, unstructured or metadata-only,
// required or optional) with Gate.Register before the manager starts. Registration creates
// every informer without blocking, fails at once for a required resource whose API is not
// served, and skips an optional one. The gate wraps the manager (Gate.Manage): every
// runnable added through the wrapper - controllers built with the controller-runtime
// builder, garbage collectors, pollers - is started only after the gate opens, and informers
// of undeclared kinds cannot be created later. Starting the wrapped manager starts the
// caches, waits for each declared resource with its own timeout and then opens the gate;
// when a resource does not sync in time, the gate logs one line per unsynced resource with a
// classified cause (forbidden, not-found, unreachable, other) and Start returns an error.
//
// After the gate opened, an optional resource whose API appeared (a CRD installed later)
// can be activated (Gate.Activate): sync-then-start for that one informer, with the same
// timeout and metrics, nothing reading it before it has synced, readiness unaffected; and
// one whose API went can be deactivated (Gate.Deactivate). The gate does not watch
// discovery itself: the controller that reads the resource decides when.
//
// While the gate is closed /readyz fails and /readyz/<resource> names what is pending and
// the last list/watch error; liveness is unaffected. Caches are not subject to leader
// election, so standby replicas sync and become ready too, and fail over warm.
//
// Synced informers are the first stage of a controller's start; the second is its event
// handlers receiving every object of the initial list (controller-runtime waits for that
// before it starts the workers, within its CacheSyncTimeout), which a slow mapping function
// makes long. Once the gate opened, every controller added to the gated manager warms up
// (controller-runtime's EnableWarmup) on every replica, and readiness stays false until its
// handlers have their initial lists; /readyz/<resource> names the controllers still receiving
// that resource's list and how far they got, a handler slower than Options.SlowHandlerSync is
// logged, and a controller that does not start in time fails the process with a
// *DeliveryError naming it and each kind with its cause (delivery.go). Both stages are
// measured per resource: loraplane_cache_sync_duration_seconds (and the same under upstream
// client-go's name, loraplane_informer_initialization_duration_seconds) and
// loraplane_handler_sync_duration_seconds.
//
// Calling cache.WaitForCacheSync before mgr.Start blocks forever, which is the deadlock this
// package exists to prevent: nothing here blocks before Start, and WaitOpen called before
// Start returns ErrNotStarted instead of waiting.
package syncgate
