#!/usr/bin/env bash
# make e2e: the e2e suite on kind with built images. E2E_DRY_RUN=1 prints every command
# instead of running it (this machine has no Docker engine).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cluster=${KIND_CLUSTER:-modelplane}
kind=${KIND:-kind}
tag=e2e
run() { if [ -n "${E2E_DRY_RUN:-}" ]; then printf '+ %s\n' "$*"; else "$@"; fi; }

cd "$root"
if [ -n "${E2E_DRY_RUN:-}" ] || ! "$kind" get clusters 2>/dev/null | grep -qx "$cluster"; then
  run "$kind" create cluster --name "$cluster" --wait 120s
fi
gw=$(cd router-controller && go list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api)
run bin/kubectl apply --server-side -f "$gw/config/crd/standard"
for b in adapter-controller router-controller; do
  run docker build --build-arg BINARY=$b -t ghcr.io/modelplane/$b:$tag .
  run "$kind" load docker-image --name "$cluster" ghcr.io/modelplane/$b:$tag
done
run docker build -f test/fakeengine.Dockerfile -t ghcr.io/modelplane/fake-engine:$tag .
run "$kind" load docker-image --name "$cluster" ghcr.io/modelplane/fake-engine:$tag
run bin/kubectl kustomize deploy/default -o _artifacts/e2e-kind.yaml
run sed -i "s#:latest#:$tag#" _artifacts/e2e-kind.yaml
run bin/kubectl apply --server-side -f _artifacts/e2e-kind.yaml
run bin/kubectl create namespace aibrix-system
run bin/kubectl -n modelplane-system rollout status deploy/adapter-controller deploy/router-controller --timeout 180s
run bin/kubectl -n modelplane-system port-forward svc/adapter-controller-metrics 18443:8443 &
echo "Note: on kind the fake engine runs inside each model pod (image fake-engine:$tag); engine admin checks are skipped"
run env E2E_ENGINE_IMAGE=ghcr.io/modelplane/fake-engine:$tag E2E_RESTART_ROUTER="bin/kubectl -n modelplane-system delete pod -l app.kubernetes.io/name=router-controller" \
  bash -c "cd test && go test -tags e2e -count=1 -timeout 20m -v ./e2e/"
echo "Clean up with: $kind delete cluster --name $cluster"
