#!/usr/bin/env bash
# make test-compat: the envtest suites against the oldest and newest Kubernetes and Gateway API
# CRDs that docs/compatibility.md claims. make test is the newest of both (bin/kube-apiserver,
# the gateway-api module's own CRDs); this runs the other corners of the matrix:
#
#   Kubernetes oldest (bin/k8s-$KUBE_OLDEST)  x  Gateway API CRDs as built (go.mod)   every envtest package
#   Kubernetes oldest                          x  Gateway API CRDs $GATEWAY_API_OLDEST  the packages that install them
#   Kubernetes newest (bin/kube-apiserver)     x  Gateway API CRDs $GATEWAY_API_OLDEST  the packages that install them
#
# Each cell's log and a summary with times are written to _artifacts/compat/.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
: "${KUBE_OLDEST:?the oldest Kubernetes version (make test-compat sets it)}"
: "${GATEWAY_API_OLDEST:?the oldest Gateway API version (make test-compat sets it)}"
art=$root/_artifacts/compat
rm -rf "$art" && mkdir -p "$art"

oldest=$root/bin/k8s-$KUBE_OLDEST newest=$root/bin
for d in "$oldest" "$newest"; do
  [ -x "$d/kube-apiserver" ] && [ -x "$d/etcd" ] || { echo "$d has no kube-apiserver and etcd: run make test-compat (it builds them)" >&2; exit 1; }
done
gw_built=$(cd router-controller && go list -m -f '{{.Version}}' sigs.k8s.io/gateway-api)

# packages_calling FUNC: the packages whose tests call testenv.FUNC.
packages_calling() {
  grep -rlE --include='*_test.go' "testenv\.($1)\(" shared adapter-controller router-controller test |
    xargs -n1 dirname | sort -u | sed 's|^|./|'
}
# Every envtest package: those starting one through test/testenv, and test/testenv itself.
mapfile -t all < <({ packages_calling 'Start|StartWithCRDs'; echo ./test/testenv; } | sort -u)
mapfile -t gateway < <(packages_calling 'GatewayAPICRDDir')

failed=0
summary=$art/summary.txt
printf '%-10s %-12s %-8s %6s  %s\n' kubernetes gateway-api result time packages >"$summary"
cell() { # name assets gateway-version packages...
  local name=$1 assets=$2 gw=$3 start=$SECONDS result=pass version
  shift 3
  version=$("$assets/kube-apiserver" --version | awk '{print $2}')
  echo "== $name: kube-apiserver $version, Gateway API CRDs $gw: $# packages"
  if ! KUBEBUILDER_ASSETS=$assets TEST_GATEWAY_API_VERSION=$gw go test -count=1 -timeout 20m "$@" >"$art/$name.log" 2>&1; then
    result=FAIL failed=1
    grep -E '^(--- FAIL|FAIL|panic)' "$art/$name.log" | head -20 >&2 || true
  fi
  printf '%-10s %-12s %-8s %5ss  %s\n' "$version" "$gw" "$result" $((SECONDS - start)) "$*" >>"$summary"
}

cell kube-oldest "$oldest" "$gw_built" "${all[@]}"
cell kube-oldest-gateway-oldest "$oldest" "$GATEWAY_API_OLDEST" "${gateway[@]}"
cell gateway-oldest "$newest" "$GATEWAY_API_OLDEST" "${gateway[@]}"

cat "$summary"
echo "test-compat: logs in ${art#"$root"/}"
exit "$failed"
