// Package aibrix holds what both controllers need to take over a fleet from AIBrix's own
// controller-manager: whether that controller-manager is still running, and the metrics of
// the take-over.
//
// # The failure it prevents
//
// AIBrix's model-adapter-controller and model-route-controller act on the same objects as
// loraplane's controllers: both would load and unload the same adapters on the same
// engines, and AIBrix would re-create the broad ReferenceGrant loraplane removes. Running
// both at once is refused rather than raced: while the Lease of AIBrix's controller-manager
// is held and renewed, the take-over steps wait (the adapter-controller acts on no
// ModelAdapter, the router adopts no AIBrix route and removes no AIBrix grant), each with a
// Warning event and a log line saying why. The documented order is to stop AIBrix's
// model-adapter-controller and model-route-controller first (docs/switching-from-aibrix.md).
//
// AIBrix's controller-manager elects its leader with the Lease aibrix-controller-manager in
// aibrix-system (its --leader-election-id and --leader-election-namespace defaults); its
// manifests enable leader election. A controller-manager kept running for AIBrix's other
// controllers, with --controllers=*,-model-adapter-controller,-model-route-controller, still
// renews that Lease: loraplane's controllers are then started with an empty
// --aibrix-controller-lease, which turns the check off.
package aibrix
