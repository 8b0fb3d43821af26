#!/usr/bin/env bash
# Upgrade and rollback on the kind cluster of make e2e, as TestUpgradeRollback drives them
# (E2E_ROLLOUT_PREVIOUS, E2E_ROLLOUT_CURRENT; hack/rollout.sh is the same on the local kwok
# cluster). Each rollout goes the way the installation at hand is upgraded:
#
#   E2E_INSTALL    kustomize  kubectl apply --server-side of the release's deploy/default
#                  release    ... and to the current release, kubectl apply of dist/install.yaml
#                  helm       helm upgrade of the release's chart
#                  release-helm ... and to the current release, helm upgrade oci://... of the
#                             chart make release-publish pushed
#
#   hack/e2e-kind-rollout.sh build           the previous release's images, loaded into the
#                                            node (cached by commit)
#   hack/e2e-kind-rollout.sh to RELEASE DIR  roll the cluster to RELEASE (previous or current)
#                                            and wait until every replica of both Deployments
#                                            is the new one and the old pods are gone
#
# The previous release is hack/rollout.sh's PREVIOUS_COMMIT; its binaries (hack/rollout.sh
# build: git archive, go build -trimpath) go into an image on the Dockerfile's base image, as
# the Dockerfile puts them (/manager, user 65532), tagged previous-<commit>.
#
# Environment (hack/e2e-kind.sh exports it): KIND_CLUSTER, IMAGE_REGISTRY, E2E_IMAGE_TAG,
# E2E_INSTALL, E2E_HELM_VALUES (the chart's values of the helm modes, one argument per line),
# E2E_RELEASE_CHART and E2E_RELEASE_VERSION (release-helm: the chart's oci:// reference and
# version), BASE_IMAGE.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib.sh"
cluster=${KIND_CLUSTER:-loraplane-e2e}
context=kind-$cluster
registry=${IMAGE_REGISTRY:-ghcr.io/loraplane}
tag=${E2E_IMAGE_TAG:-e2e}
install=${E2E_INSTALL:-kustomize}
art=$root/_artifacts/e2e-kind
ns=loraplane-system
controllers=(adapter-controller router-controller)
k() { "$root/bin/kubectl" --context "$context" "$@"; }
helm() { "$root/bin/helm" --kube-context "$context" "$@"; }
cd "$root"

previous_commit() { git rev-parse --verify --quiet "${PREVIOUS_COMMIT:-1c1ce1bdbee1}^{commit}"; }
previous_dir() { echo "$root/_artifacts/previous/$(previous_commit | cut -c1-12)"; }
previous_tag() { echo "previous-$(previous_commit | cut -c1-12)"; }

build() {
  : "${BASE_IMAGE:?BASE_IMAGE is not set: run this through make e2e}"
  "$root/hack/rollout.sh" build
  local dir b ptag
  dir=$(previous_dir) ptag=$(previous_tag)
  for b in "${controllers[@]}"; do
    if ! docker image inspect "$registry/$b:$ptag" >/dev/null 2>&1; then
      docker build -q -t "$registry/$b:$ptag" -f - "$dir/bin" <<DOCKERFILE >/dev/null
FROM $BASE_IMAGE
COPY $b /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
DOCKERFILE
    fi
    "${KIND:-$root/bin/kind}" load docker-image --name "$cluster" "$registry/$b:$ptag" >/dev/null
  done
  echo "The previous release ($(previous_commit | cut -c1-12)) is $registry/{${controllers[*]// /,}}:$ptag on the node"
}

# kustomized TREE TAG: TREE's deploy/default with the controllers' images at TAG.
kustomized() {
  local dir
  dir=$(mktemp -d "$art/rollout-kustomize.XXXXXX")
  cat >"$dir/kustomization.yaml" <<YAML
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $(realpath --relative-to="$dir" "$1/deploy/default")
images:
- {name: ghcr.io/loraplane/adapter-controller, newName: $registry/adapter-controller, newTag: "$2"}
- {name: ghcr.io/loraplane/router-controller, newName: $registry/router-controller, newTag: "$2"}
YAML
  k kustomize "$dir"
  rm -rf "$dir"
}

# hashes: the pod-template-hash of each controller's pods, for waiting until they are replaced.
hashes() {
  local d
  for d in "${controllers[@]}"; do
    k -n "$ns" get pods -l "app.kubernetes.io/name=$d" -o jsonpath='{range .items[*]}{.metadata.labels.pod-template-hash}{" "}{end}'
  done
}

apply() { k apply --server-side --force-conflicts -f - >"$log.apply"; }

to() {
  local release=$1 start=$SECONDS before h d
  log=$2/rollout-kind-$1
  before=$(hashes)
  case $release/$install in
  previous/kustomize | previous/release) kustomized "$(previous_dir)/src" "$(previous_tag)" | apply ;;
  current/kustomize) kustomized "$root" "$tag" | apply ;;
  current/release) apply <"$root/dist/install.yaml" ;;
  previous/helm | previous/release-helm)
    # The same values, as helm upgrade --reuse-values would pass them: the previous chart
    # ignores what it does not know and renders what it does (its ServiceMonitors and the
    # metrics-reader ClusterRole the suite's token is bound to).
    mapfile -t values <<<"${E2E_HELM_VALUES:-}"
    helm upgrade loraplane "$(previous_dir)/src/deploy/chart/loraplane" -n "$ns" --reset-values --take-ownership --force-conflicts \
      --set image.registry="$registry" --set-string image.tag="$(previous_tag)" "${values[@]}" --wait --timeout 5m >"$log.helm" ;;
  current/helm)
    mapfile -t values <<<"${E2E_HELM_VALUES:-}"
    helm upgrade loraplane deploy/chart/loraplane -n "$ns" --reset-values --take-ownership --force-conflicts \
      --set image.registry="$registry" --set-string image.tag="$tag" "${values[@]}" --wait --timeout 5m >"$log.helm" ;;
  current/release-helm)
    mapfile -t values <<<"${E2E_HELM_VALUES:-}"
    helm upgrade loraplane "${E2E_RELEASE_CHART:?}" --version "${E2E_RELEASE_VERSION:?}" --plain-http -n "$ns" --take-ownership --force-conflicts \
      --reset-values "${values[@]}" --wait --timeout 5m >"$log.helm" ;;
  *) echo "unknown release $release (previous or current) or E2E_INSTALL $install" >&2; return 2 ;;
  esac
  # What a kubectl apply upgrade from an install older than v0.1.0 leaves (docs/install.md,
  # "Upgrade"); helm removes them itself.
  [ "$release" = previous ] || delete_pre_v010_rbac k
  for d in "${controllers[@]}"; do
    k -n "$ns" rollout status "deploy/$d" --timeout 180s >/dev/null
  done
  for h in $before; do
    k -n "$ns" wait --for=delete pod -l "pod-template-hash=$h" --timeout 120s >/dev/null
  done
  echo "Rolled to the $release release ($install) in $((SECONDS - start))s: pods $(hashes| xargs) (were $(xargs <<<"$before"))"
}

case "${1:-}" in
build) build ;;
to) to "${2:?release}" "${3:?dir}" ;;
*) echo "usage: $0 build | to previous|current DIR" >&2; exit 2 ;;
esac
