#!/usr/bin/env bash
# make demo: the local stack (hack/stack.sh) with deploy/samples applied; waits until the
# adapter is Running and the routes exist, prints a summary and keeps running until Ctrl-C.
# make demo-down deletes everything.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib.sh"
dir=$root/_artifacts/demo
stack=$root/hack/stack.sh
kc=$("$root/hack/cluster.sh" kubeconfig)
kubectl() { "$root/bin/kubectl" --kubeconfig "$kc" "$@"; }

case "${1:-up}" in
down)
  "$stack" down "$dir"
  "$root/hack/cluster.sh" down
  exit 0
  ;;
up) ;;
*) echo "usage: $0 [up|down]" >&2; exit 2 ;;
esac

"$stack" down "$dir" 2>/dev/null || true
mkdir -p "$dir"
"$stack" up "$dir"
kubectl apply -k "$root/hack/demo" >/dev/null
echo "Applied deploy/samples: a 3-pod vLLM Deployment and the ModelAdapter qwen-code-lora"

samples_up() {
  [ "$(kubectl get modeladapter qwen-code-lora -o jsonpath='{.status.phase}' 2>/dev/null)" = Running ] &&
    kubectl -n aibrix-system get httproute qwen-code-lora-router qwen-coder-1-5b-instruct-router >/dev/null 2>&1
}
poll 120 1 samples_up || { echo "The adapter or the routes did not come up within 120s; logs in $dir" >&2; exit 1; }

sync_durations() { # metrics-url
  curl -fsS "$1" | awk '/^loraplane_cache_sync_duration_seconds_sum/ {
    match($0, /kind="[^"]*"/); kind = substr($0, RSTART + 6, RLENGTH - 7); printf "    %-16s %.3fs\n", kind, $2 }'
}

cat <<TXT

================ loraplane demo ================
ModelAdapters:
$(kubectl get modeladapters -A | sed 's/^/  /')

HTTPRoutes (gateway namespace aibrix-system) and ReferenceGrants:
$(kubectl get httproutes -n aibrix-system | sed 's/^/  /')
$(kubectl get referencegrants -A | sed 's/^/  /')

Engines (fake vLLM on the pods' loopback IPs):
$(curl -fsS http://127.0.0.1:19400/engines | jq -r '.[] | "  \(.pod) \(.ip):\(.port) loaded=\(.loaded)"')

Cache sync per resource:
  adapter-controller (startup $(curl -fsS http://127.0.0.1:18080/metrics | awk '/^loraplane_startup_duration_seconds/ {printf "%.2fs", $2}')):
$(sync_durations http://127.0.0.1:18080/metrics)
  router-controller (startup $(curl -fsS http://127.0.0.1:18090/metrics | awk '/^loraplane_startup_duration_seconds/ {printf "%.2fs", $2}')):
$(sync_durations http://127.0.0.1:18090/metrics)

Prometheus API:  curl 'http://127.0.0.1:19090/api/v1/query?query=loraplane_cache_sync_duration_seconds_sum'
                 (built from its Go module without the web UI)
Metrics:         http://127.0.0.1:18080/metrics (adapter), http://127.0.0.1:18090/metrics (router)
Readiness:       http://127.0.0.1:18081/readyz?verbose, http://127.0.0.1:18091/readyz?verbose
Kubeconfig:      $kc
Logs:            ${dir#"$root"/}/
Running until Ctrl-C; then 'make demo-down' deletes the cluster.
=================================================
TXT

trap '"$stack" down "$dir"; echo; echo "Stopped the controllers, fake engine and Prometheus; the cluster is still up (make demo-down)"; exit 0' INT TERM
while :; do sleep 3600 & wait $!; done
