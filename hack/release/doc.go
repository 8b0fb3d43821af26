// Command release assembles and publishes loraplane's release images without a Docker engine
// (make release, make release-publish, make release-test).
//
//	release image   -name NAME -version V -revision R -epoch S -binary OS/ARCH=PATH... -out DIR
//	release push    -layout DIR -ref REGISTRY/REPO:TAG
//	release verify  -layout DIR -ref REGISTRY/REPO:TAG
//	release values  -in values.yaml -out FILE -set KEY.PATH=VALUE...
//
// image writes an OCI image layout holding one multi-platform image index: per platform a
// static binary cross-compiled by Go (CGO_ENABLED=0) on a scratch root of two layers (the
// nonroot user 65532 and /tmp; then /manager), every timestamp set to the commit's time, so the
// same commit and version give the same digests on any machine. push copies the index to a
// registry; verify pulls it back and checks every digest and blob against the layout. values
// sets scalar values of a Helm values file in place, keeping its comments and layout (the
// packaged chart's image digests).
//
// It is a module of its own outside the workspace (GOWORK=off), so that go-containerregistry
// never reaches the controllers' dependency graph.
package main
