#!/usr/bin/env bash
# Upgrade and rollback on the local stack (hack/stack.sh), as make e2e-local's
# TestUpgradeRollback drives them (E2E_ROLLOUT_PREVIOUS, E2E_ROLLOUT_CURRENT).
#
#   hack/rollout.sh build          build the previous release's binaries (cached by commit)
#   hack/rollout.sh to RELEASE DIR roll the cluster to RELEASE (previous or current): apply its
#                                  install manifest with kubectl and upgrade its chart with
#                                  helm (release loraplane in loraplane-system, taking over the
#                                  objects the manifest applied, as a switch between the two
#                                  would), then roll the adapter-controller and then the
#                                  router-controller to its binaries, one replica at a time with
#                                  leader election handover (hack/stack.sh roll)
#
# The previous release: until v0.1.0 is tagged, PREVIOUS_COMMIT, a commit of main whose
# ModelAdapter CRD is today's and whose route defaults are older (11 paths, 2m: the upgrade
# rewrites every route in place, the rollback writes them back). Its tree comes from
# `git archive`, its binaries are built with -trimpath into _artifacts/previous/<commit>/,
# and a rerun reuses them.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/bin
. "$root/hack/lib.sh"
PREVIOUS_COMMIT=${PREVIOUS_COMMIT:-1c1ce1bdbee1}
kc=("$bin/kubectl" --kubeconfig "$("$root/hack/cluster.sh" kubeconfig)")
BINARIES=(adapter-controller router-controller)

# previous_dir: the previous release's directory (src/ its tree, bin/ its binaries).
previous_dir() {
  local commit
  commit=$(git -C "$root" rev-parse --verify --quiet "$PREVIOUS_COMMIT^{commit}") ||
    { echo "PREVIOUS_COMMIT $PREVIOUS_COMMIT is not in this clone (a shallow clone? fetch main's history)" >&2; exit 1; }
  echo "$root/_artifacts/previous/${commit:0:12}"
}

build() {
  local dir b
  dir=$(previous_dir)
  if [ -x "$dir/bin/router-controller" ] && [ -x "$dir/bin/adapter-controller" ]; then
    echo "The previous release ($PREVIOUS_COMMIT) is built in ${dir#"$root"/}"
    return
  fi
  echo "Building the previous release ($PREVIOUS_COMMIT) into ${dir#"$root"/}"
  rm -rf "$dir" && mkdir -p "$dir/src" "$dir/bin"
  git -C "$root" archive "$PREVIOUS_COMMIT" | tar -x -C "$dir/src"
  for b in "${BINARIES[@]}"; do
    (cd "$dir/src/$b" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$dir/bin/$b.tmp" . && mv "$dir/bin/$b.tmp" "$dir/bin/$b")
  done
}

# install_manifest TREE: the release's install manifest (CRD, namespace, RBAC, both
# controllers). Until make release writes dist/install.yaml, it is deploy/default rendered
# the way make release renders it.
install_manifest() {
  "${kc[@]}" kustomize "$1/deploy/default"
}

to() { # release dir
  local tree binaries start=$SECONDS
  case $1 in
  previous) tree=$(previous_dir)/src binaries=$(previous_dir)/bin ;;
  current) tree=$root binaries=$bin ;;
  *) echo "unknown release $1: previous or current" >&2; return 2 ;;
  esac
  [ -x "$binaries/adapter-controller" ] || { echo "$binaries/adapter-controller is missing (hack/rollout.sh build, make build)" >&2; return 1; }
  echo "Rolling to the $1 release: kubectl apply of its install manifest, helm upgrade of its chart"
  install_manifest "$tree" | "${kc[@]}" apply --server-side --force-conflicts -f - >"$2/rollout-$1-apply.log"
  # kwok runs no image: the chart's Deployments get Pending pods (the fake nodes are tainted),
  # so helm does not --wait; the controllers are the host processes rolled below.
  "$bin/helm" --kubeconfig "$("$root/hack/cluster.sh" kubeconfig)" upgrade --install loraplane "$tree/deploy/chart/loraplane" \
    --namespace loraplane-system --take-ownership --force-conflicts >"$2/rollout-$1-helm.log"
  for b in "${BINARIES[@]}"; do
    "$root/hack/stack.sh" roll "$b" "$binaries/$b" "$2"
  done
  echo "Rolled to the $1 release in $((SECONDS - start))s"
}

case "${1:-}" in
build) build ;;
to) to "${2:?release}" "${3:?dir}" ;;
*) echo "usage: $0 build | to previous|current DIR" >&2; exit 2 ;;
esac
