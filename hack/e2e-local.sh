#!/usr/bin/env bash
# make e2e-local: the e2e suite on the local kwok cluster with both controllers as host
# processes impersonating their ServiceAccounts (so deploy/ RBAC is what is tested), the fake
# engine serving every model pod's loopback IP, and a real Prometheus scraping both
# controllers. Everything is torn down at the end, even on failure; logs stay in
# _artifacts/e2e-local/.
#
#   hack/e2e-local.sh               run everything
#   hack/e2e-local.sh stop-router   (used by the suite) stop the router-controller
#   hack/e2e-local.sh start-router  (used by the suite) start it again and wait until ready
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/bin
art=$root/_artifacts/e2e-local
admin_kc=$("$root/hack/cluster.sh" kubeconfig)
kubectl() { "$bin/kubectl" --kubeconfig "$admin_kc" "$@"; }

ADAPTER_METRICS=127.0.0.1:18080 ADAPTER_PROBE=127.0.0.1:18081
ROUTER_METRICS=127.0.0.1:18090 ROUTER_PROBE=127.0.0.1:18091
ENGINE_ADMIN=127.0.0.1:19400 PROMETHEUS=127.0.0.1:19090

wait_ready() { # name url seconds
  local deadline=$((SECONDS + $3))
  until curl -fsS -o /dev/null "$2"; do
    if ((SECONDS > deadline)); then echo "$1 did not become ready at $2 within $3s" >&2; return 1; fi
    sleep 0.5
  done
}

start_controller() { # name metrics probe extra-args...
  local name=$1 metrics=$2 probe=$3
  shift 3
  "$bin/$name" --kubeconfig "$art/$name.kubeconfig" \
    --leader-elect --leader-election-namespace modelplane-system \
    --metrics-bind-address "$metrics" --health-probe-bind-address "$probe" "$@" \
    >>"$art/$name.log" 2>&1 &
  echo $! >"$art/$name.pid"
  wait_ready "$name" "http://$probe/readyz" 120
}

stop_pidfile() { # name
  local f=$art/$1.pid
  [ -f "$f" ] || return 0
  local pid
  pid=$(cat "$f")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
}

case "${1:-run}" in
stop-router) stop_pidfile router-controller; exit 0 ;;
start-router) start_controller router-controller $ROUTER_METRICS $ROUTER_PROBE; exit 0 ;;
run) ;;
*) echo "usage: $0 [run|stop-router|start-router]" >&2; exit 2 ;;
esac

rm -rf "$art"
mkdir -p "$art"
cleanup() {
  local status=$?
  for p in router-controller adapter-controller fake-engine prometheus; do stop_pidfile "$p"; done
  if [ -f "$admin_kc" ]; then
    kubectl get modeladapters,httproutes,referencegrants -A -o wide >"$art/objects.txt" 2>&1 || true
  fi
  "$root/hack/cluster.sh" down >/dev/null 2>&1 || true
  echo "e2e-local: logs and objects in ${art#"$root"/}"
  exit "$status"
}
trap cleanup EXIT

"$root/hack/cluster.sh" up
echo "Installing CRDs (ModelAdapter, Gateway API from the gateway-api module), RBAC from deploy/, the test admission policy"
gw=$(cd "$root/router-controller" && go list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api)
kubectl apply --server-side -k "$root/deploy/crds" >/dev/null
kubectl apply --server-side -f "$gw/config/crd/standard" >/dev/null
kubectl apply --server-side -k "$root/deploy/namespace" >/dev/null
for b in adapter-controller router-controller; do
  kubectl apply --server-side -n modelplane-system -f "$root/deploy/$b/rbac/role.yaml" -f "$root/deploy/$b/rbac.yaml" >/dev/null
done
kubectl apply --server-side -f "$root/hack/testing/loopback-endpointslices.yaml" >/dev/null
kubectl create namespace aibrix-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl wait --for condition=established --timeout=60s crd/modeladapters.model.aibrix.ai crd/httproutes.gateway.networking.k8s.io >/dev/null

# Each controller talks to the API server as its ServiceAccount.
for b in adapter-controller router-controller; do
  kubectl config view --raw --flatten -o json |
    jq --arg sa "system:serviceaccount:modelplane-system:$b" '.users[].user["as"] = $sa' >"$art/$b.kubeconfig"
done

echo "Starting the fake engine, both controllers and Prometheus"
"$bin/fake-engine" --kubeconfig "$admin_kc" --admin-address $ENGINE_ADMIN >"$art/fake-engine.log" 2>&1 &
echo $! >"$art/fake-engine.pid"
wait_ready fake-engine "http://$ENGINE_ADMIN/healthz" 30
start_controller adapter-controller $ADAPTER_METRICS $ADAPTER_PROBE --inventory-period 2s
start_controller router-controller $ROUTER_METRICS $ROUTER_PROBE

cat >"$art/prometheus.yml" <<YAML
global: {scrape_interval: 2s, evaluation_interval: 2s}
scrape_configs:
- job_name: adapter-controller
  static_configs: [{targets: ["$ADAPTER_METRICS"]}]
- job_name: router-controller
  static_configs: [{targets: ["$ROUTER_METRICS"]}]
YAML
prometheus --config.file "$art/prometheus.yml" --storage.tsdb.path "$art/prometheus-data" \
  --web.listen-address $PROMETHEUS >"$art/prometheus.log" 2>&1 &
echo $! >"$art/prometheus.pid"
wait_ready prometheus "http://$PROMETHEUS/-/ready" 60

echo "Running the e2e suite"
export KUBECONFIG=$admin_kc
export E2E_ENGINE_ADMIN=http://$ENGINE_ADMIN
export E2E_ADAPTER_METRICS=http://$ADAPTER_METRICS/metrics E2E_ROUTER_METRICS=http://$ROUTER_METRICS/metrics
export E2E_STOP_ROUTER="$root/hack/e2e-local.sh stop-router" E2E_START_ROUTER="$root/hack/e2e-local.sh start-router"
(cd "$root/test" && go test -tags e2e -count=1 -timeout 15m -v ./e2e/) 2>&1 | tee "$art/e2e.log"

echo "Querying Prometheus for both controllers' cache sync metrics"
deadline=$((SECONDS + 30))
while :; do
  jobs=$(curl -fsS "http://$PROMETHEUS/api/v1/query" --data-urlencode 'query=count by (job) (modelplane_cache_sync_duration_seconds_count)' |
    jq -r '.data.result[].metric.job' | sort | tr '\n' ' ')
  [ "$jobs" = "adapter-controller router-controller " ] && break
  if ((SECONDS > deadline)); then echo "Prometheus has sync metrics for: '$jobs'; want both controllers" >&2; exit 1; fi
  sleep 1
done
curl -fsS "http://$PROMETHEUS/api/v1/query" --data-urlencode 'query=modelplane_cache_sync_duration_seconds_count' |
  jq -r '.data.result[] | "\(.metric.job) \(.metric.kind) \(.value[1])"' | tee "$art/prometheus-scrape.txt"
echo "e2e-local: passed"
