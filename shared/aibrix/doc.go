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
//
// A Lease the list does not name cannot hold anything back: AIBrix's Helm chart puts it in
// the release namespace, a --leader-election-id or a standalone install renames it. So at
// start each controller also looks for AIBrix's controller-manager among the Deployments
// (Discover: its image, or its labels and /manager command), reads from its flags the Lease
// it holds and the controllers it runs, and refuses to start (CheckCovered) while one runs
// loraplane's counterpart with a Lease the list does not name, or without leader election.
package aibrix
