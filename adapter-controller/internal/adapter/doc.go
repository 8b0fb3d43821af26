// Package adapter reconciles ModelAdapters: it picks engine pods, loads and unloads the LoRA
// adapter through the engines' HTTP APIs, keeps a headless Service and EndpointSlice per
// adapter and reports AIBrix-compatible status.
//
// The reconciler is level-triggered: each pass computes the candidates from the Pod cache,
// leaves out the pods whose engine cannot take runtime adapters, chooses the pods among those
// with room for one more adapter (placement.go, capacity.go: one ledger of placements and of
// the adapters waiting for room, oldest first, shared by every reconcile), compares with what
// the engines report (inventory.go) and loads or unloads the difference, with a backoff per
// (adapter, pod). Drift - an engine that
// restarted and forgot its adapters - is found by one periodic GET /v1/models per engine pod,
// shared by every adapter, which enqueues the adapters missing there. Each load is verified
// by a listing of the pod that started after the load returned; loads onto the same pod at
// about the same time share it (listings.go).
package adapter
