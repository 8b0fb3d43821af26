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

# startup_stages METRICS_URL: both stages of startup per kind: the informer's initial list
# (loraplane_cache_sync_duration_seconds) and each controller's event handlers receiving it
# (loraplane_handler_sync_duration_seconds, mean over the controller's handlers of the kind).
startup_stages() {
  curl -fsS "$1" | stage_table
}
stage_table() {
  awk '
    function label(name,   s) {
      if (!match($0, name "=\"[^\"]*\"")) return ""
      s = substr($0, RSTART + length(name) + 2, RLENGTH - length(name) - 3); return s
    }
    /^loraplane_cache_sync_duration_seconds_sum/ { k = label("kind"); inf[k] = $2; kinds[k] = 1 }
    /^loraplane_handler_sync_duration_seconds_sum/ {
      k = label("kind"); r = label("reconciler"); hsum[k, r] += $2; kinds[k] = 1
      if (!((k, r) in seen)) { seen[k, r] = 1; recs[k] = recs[k] (recs[k] != "" ? " " : "") r }
    }
    /^loraplane_handler_sync_duration_seconds_count/ { hcount[label("kind"), label("reconciler")] += $2 }
    END {
      for (k in kinds) {
        h = ""; n = split(recs[k], rs, " ")
        for (i = 1; i <= n; i++) h = h sprintf("%s%.3fs (%s)", i > 1 ? ", " : "", hsum[k, rs[i]] / hcount[k, rs[i]], rs[i])
        printf "    %-16s informer %.3fs   handlers %s\n", k, inf[k], h == "" ? "-" : h
      }
    }' | sort
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

Startup per kind: informer synced (initial list in the cache), then each controller's event
handlers received that list (readiness waits for both):
  adapter-controller (caches synced $(curl -fsS http://127.0.0.1:18080/metrics | awk '/^loraplane_startup_duration_seconds/ {printf "%.2fs", $2}') after process start):
$(startup_stages http://127.0.0.1:18080/metrics)
  router-controller (caches synced $(curl -fsS http://127.0.0.1:18090/metrics | awk '/^loraplane_startup_duration_seconds/ {printf "%.2fs", $2}') after process start):
$(startup_stages http://127.0.0.1:18090/metrics)

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
