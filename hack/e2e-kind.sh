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
echo "Note: on kind each model pod runs the fake engine image (fake-engine --serve-pod); the engine"
echo "admin checks (per-engine adapter lists, engine restart) and the metrics scrape test are skipped there."
k="$root/bin/kubectl -n modelplane-system"
run env KUBECONFIG="${KUBECONFIG:-$HOME/.kube/config}" E2E_ENGINE_IMAGE=ghcr.io/modelplane/fake-engine:$tag \
  E2E_STOP_ROUTER="$k scale deploy/router-controller --replicas=0 && $k wait --for=delete pod -l app.kubernetes.io/name=router-controller --timeout=60s" \
  E2E_START_ROUTER="$k scale deploy/router-controller --replicas=2 && $k rollout status deploy/router-controller --timeout=120s" \
  bash -c "cd test/e2e && go test -tags e2e -count=1 -timeout 20m -v ./"
echo "Clean up with: $kind delete cluster --name $cluster"
