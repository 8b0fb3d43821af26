#!/usr/bin/env bash
# make e2e-local: the e2e suite against the local stack (hack/stack.sh), then a query of the
# real Prometheus for both controllers' sync metrics. Everything is torn down at the end,
# even on failure; logs stay in _artifacts/e2e-local/.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib.sh"
art=$root/_artifacts/e2e-local
stack=$root/hack/stack.sh
PROMETHEUS=127.0.0.1:19090

rm -rf "$art"
mkdir -p "$art"
cleanup() {
  local status=$?
  "$stack" down "$art"
  "$root/hack/cluster.sh" logs "$art/cluster" || true
  "$root/bin/kubectl" --kubeconfig "$("$root/hack/cluster.sh" kubeconfig)" \
    get modeladapters,httproutes,referencegrants -A -o wide >"$art/objects.txt" 2>&1 || true
  "$root/hack/cluster.sh" down >/dev/null 2>&1 || true
  echo "e2e-local: logs and objects in ${art#"$root"/}"
  exit "$status"
}
trap cleanup EXIT

"$stack" up "$art"

# The Helm chart as the API server sees it: its defaults and a namespaced install, rendered and
# applied with --dry-run=server (admission, schemas, Pod Security "restricted" of the namespace).
echo "Applying the rendered Helm chart with --dry-run=server"
kc=("$root/bin/kubectl" --kubeconfig "$("$root/hack/cluster.sh" kubeconfig)")
for variant in defaults namespaced; do
  set -- --include-crds
  [ "$variant" = namespaced ] && set -- --set 'watchNamespaces={default}' --set routerController.createGatewayNamespace=true
  "$root/bin/helm" template loraplane "$root/deploy/chart/loraplane" --namespace loraplane-system "$@" >"$art/chart-$variant.yaml"
  "${kc[@]}" apply --server-side --force-conflicts --dry-run=server -f "$art/chart-$variant.yaml" 2>&1 | tee "$art/chart-$variant-dry-run.log"
  if grep -q "violate PodSecurity" "$art/chart-$variant-dry-run.log"; then echo "the chart ($variant) violates Pod Security restricted" >&2; exit 1; fi
  echo "chart ($variant): $(grep -c '(server dry run)' "$art/chart-$variant-dry-run.log") objects accepted by the API server"
done

echo "Running the e2e suite"
export KUBECONFIG
KUBECONFIG=$("$root/hack/cluster.sh" kubeconfig)
export E2E_ENGINE_ADMIN=http://127.0.0.1:19400
export E2E_ADAPTER_METRICS=http://127.0.0.1:18080/metrics E2E_ROUTER_METRICS=http://127.0.0.1:18090/metrics
export E2E_ADAPTER_STANDBY_METRICS=http://127.0.0.1:18082/metrics E2E_ROUTER_STANDBY_METRICS=http://127.0.0.1:18092/metrics
e2e_hooks "$stack" "$art" # the fault hooks (test/e2e/hooks.txt), implemented by hack/stack.sh
export E2E_LEASE_DURATION=12s # hack/stack.sh's --leader-elect-lease-duration
export E2E_INVENTORY_PERIOD=2s # hack/stack.sh's --inventory-period
export E2E_REPO_ROOT=$root
# TestUninstallKeepsFleet installs the chart and deploy/default over the stack and removes them
# (helm uninstall, make undeploy): only here, where the controllers are processes.
export E2E_UNINSTALL_KWOK=1
# Every skip is listed at the end; one that test/e2e/skips/kwok.txt does not expect fails the run.
(cd "$root/test/e2e" && go build -o "$art/skipcheck" ./skipcheck &&
  go test -tags e2e -count=1 -timeout 25m -json -run "${E2E_RUN:-.}" ./ 2>&1 |
  "$art/skipcheck" -expected skips/kwok.txt) | tee "$art/e2e.log"

echo "Querying Prometheus for both controllers' startup stage metrics (informer sync, handler delivery)"
both_scraped() { # family
  jobs=$(curl -fsS "http://$PROMETHEUS/api/v1/query" --data-urlencode "query=count by (job) ($1)" |
    jq -r '.data.result[].metric.job' | sort | tr '\n' ' ')
  [ "$jobs" = "adapter-controller router-controller " ]
}
for family in loraplane_cache_sync_duration_seconds_count loraplane_handler_sync_duration_seconds_count; do
  poll 30 1 both_scraped "$family" || { echo "Prometheus has $family for: '$jobs'; want both controllers" >&2; exit 1; }
done
curl -fsS "http://$PROMETHEUS/api/v1/query" --data-urlencode 'query={__name__=~"loraplane_(cache|handler)_sync_duration_seconds_count"}' |
  jq -r '.data.result[] | "\(.metric.job) \(.metric.__name__) \(.metric.reconciler // "") \(.metric.kind) \(.value[1])"' | sort | tee "$art/prometheus-scrape.txt"
echo "e2e-local: passed"
