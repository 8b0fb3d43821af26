#!/usr/bin/env bash
# make soak: the chaos soak (test/e2e/soak) on the local stack (hack/stack.sh) with a standby
# replica of each controller. SOAK_DURATION (default 10m) and SOAK_SEED (default: random,
# printed) are passed on. Everything is torn down at the end, even on failure; the report
# (soak.md, soak.json), the driver's log and every process's log stay in _artifacts/soak/.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
art=$root/_artifacts/soak
stack=$root/hack/stack.sh
dir=$art/stack

rm -rf "$art"
mkdir -p "$dir"
cleanup() {
  local status=$?
  "$stack" down "$dir"
  "$root/hack/cluster.sh" logs "$dir/cluster" || true
  "$root/hack/cluster.sh" down >/dev/null 2>&1 || true
  echo "soak: report, logs and objects in ${art#"$root"/}"
  exit "$status"
}
trap cleanup EXIT

(cd "$root/test/e2e" && go build -o "$art/soak" ./soak)
"$stack" up "$dir"
"$stack" start adapter-controller-standby "$dir"
"$stack" start router-controller-standby "$dir"

KUBECONFIG=$("$root/hack/cluster.sh" kubeconfig) "$art/soak" -root "$root" -out "$art" -stack-dir "$dir" "$@"
