#!/usr/bin/env bash
# The local loraplane stack on the kwok cluster, shared by make e2e-local and make demo:
# CRDs (ModelAdapter, Gateway API from the gateway-api module), RBAC from deploy/, the test
# admission policy, both controllers as host processes impersonating their ServiceAccounts
# (so the generated RBAC is what is exercised), the fake engine on the pods' loopback IPs,
# and a real Prometheus scraping both controllers.
#
#   hack/stack.sh up DIR            install and start everything; pids and logs in DIR
#   hack/stack.sh down DIR          stop the processes started by up
#   hack/stack.sh stop NAME DIR     stop one process (e.g. router-controller)
#   hack/stack.sh start NAME DIR    start one controller again and wait until ready; NAME may
#                                   be <controller>-standby for a second replica;
#                                   CONTROLLER_KUBECONFIG overrides its kubeconfig (the soak's
#                                   slow proxy)
#   hack/stack.sh kill NAME DIR     SIGKILL one process (a crash: no lease release, no cleanup)
#   hack/stack.sh ensure NAME DIR   start a controller again if its process has exited (what a
#                                   kubelet would do); prints "running" or "restarted"
#   hack/stack.sh ready NAME [DIR]  exit 0 when the controller answers /readyz 200
#   hack/stack.sh restart-apiserver DIR [--compact]
#                                   SIGKILL kube-apiserver and start it again (hack/cluster.sh)
#   hack/stack.sh logs DIR          the controllers' logs are in DIR (they are written there)
#   hack/stack.sh roll NAME BINARY DIR
#                                   a Deployment rollout of one replica (maxSurge 1): BINARY
#                                   starts in the slot NAME does not run in (NAME or
#                                   NAME-standby) and turns ready as a warm standby, the old
#                                   process gets SIGTERM (it releases its Lease), and the
#                                   verb returns once the new one leads (hack/rollout.sh)
#
# The e2e suite's hooks are these verbs: test/e2e/hooks.txt is their contract, which
# hack/e2e-kind-stack.sh implements on kind.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/bin
. "$root/hack/lib.sh"
admin_kc=$("$root/hack/cluster.sh" kubeconfig)
kubectl() { "$bin/kubectl" --kubeconfig "$admin_kc" "$@"; }

ADAPTER_METRICS=127.0.0.1:18080 ADAPTER_PROBE=127.0.0.1:18081
ROUTER_METRICS=127.0.0.1:18090 ROUTER_PROBE=127.0.0.1:18091
# Leader election: a standby acquires an unrenewed lease at its first retry after the lease
# duration has passed since it last saw the record change, so failover takes up to
# lease + ~2.2 x retry period (client-go jitters retries by up to 1.2x). The binaries'
# defaults are 15s / 10s / 2s (failover times: docs/reliability.md); the stack retries every
# 300 ms.
LEASE_DURATION=${LEASE_DURATION:-12s} RENEW_DEADLINE=${RENEW_DEADLINE:-10s} RETRY_PERIOD=${RETRY_PERIOD:-300ms}
# Second replicas (NAME-standby), started by the leader failover test.
ADAPTER_STANDBY_METRICS=127.0.0.1:18082 ADAPTER_STANDBY_PROBE=127.0.0.1:18083
ROUTER_STANDBY_METRICS=127.0.0.1:18092 ROUTER_STANDBY_PROBE=127.0.0.1:18093
ENGINE_ADMIN=127.0.0.1:19400 PROMETHEUS=127.0.0.1:19090

wait_ready() { # name url seconds
  poll "$3" 0.5 curl -fs -o /dev/null "$2" || { echo "$1 did not become ready at $2 within $3s" >&2; return 1; }
}

addresses() { # name: sets metrics and probe, the controller's bind addresses
  case $1 in
  adapter-controller) metrics=$ADAPTER_METRICS probe=$ADAPTER_PROBE ;;
  adapter-controller-standby) metrics=$ADAPTER_STANDBY_METRICS probe=$ADAPTER_STANDBY_PROBE ;;
  router-controller) metrics=$ROUTER_METRICS probe=$ROUTER_PROBE ;;
  router-controller-standby) metrics=$ROUTER_STANDBY_METRICS probe=$ROUTER_STANDBY_PROBE ;;
  *) echo "unknown controller $1" >&2; return 2 ;;
  esac
}

start_controller() { # name dir
  local name=$1 dir=$2 base=${1%-standby} metrics probe extra=()
  addresses "$name"
  [ "$base" = adapter-controller ] && extra=(--inventory-period 2s)
  "${CONTROLLER_BIN:-$bin/$base}" --kubeconfig "${CONTROLLER_KUBECONFIG:-$dir/$base.kubeconfig}" \
    --leader-elect --leader-election-namespace loraplane-system --leader-elect-lease-duration "$LEASE_DURATION" \
    --leader-elect-renew-deadline "$RENEW_DEADLINE" --leader-elect-retry-period "$RETRY_PERIOD" \
    --metrics-bind-address "$metrics" --health-probe-bind-address "$probe" --v=4 "${extra[@]}" \
    >>"$dir/$name.log" 2>&1 &
  echo $! >"$dir/$name.pid"
  wait_ready "$name" "http://$probe/readyz" 120
}

stop() { # name dir
  local f=$2/$1.pid pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  kill "$pid" 2>/dev/null || true
  poll 10 0.1 not_running "$pid" || kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
}

crash() { # name dir
  local f=$2/$1.pid pid
  [ -f "$f" ] || { echo "$1 is not running" >&2; return 1; }
  pid=$(cat "$f")
  kill -9 "$pid"
  poll 10 0.1 not_running "$pid" || true
  rm -f "$f"
}

ensure() { # name dir
  local f=$2/$1.pid
  if [ -f "$f" ] && running "$(cat "$f")"; then
    echo running
    return 0
  fi
  echo "$1 exited; starting it again" >>"$2/$1.log"
  start_controller "$1" "$2" && echo restarted
}

up() { # dir
  local dir=$1 gw
  mkdir -p "$dir"
  "$root/hack/cluster.sh" up
  echo "Installing CRDs, RBAC from deploy/ and the test admission policy"
  gw=$(cd "$root/router-controller" && go list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api)
  kubectl apply --server-side -k "$root/deploy/crds" >/dev/null
  kubectl apply --server-side -f "$gw/config/crd/standard" >/dev/null
  kubectl apply --server-side -k "$root/deploy/namespace" >/dev/null
  kubectl create namespace aibrix-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # The generated roles name their namespaces (loraplane-system; the router's HTTPRoute Role
  # aibrix-system, bound by gateway-rbac.yaml); the bindings leave it to kustomize.
  for b in adapter-controller router-controller; do
    kubectl apply --server-side -f "$root/deploy/$b/rbac/role.yaml" >/dev/null
    kubectl apply --server-side -n loraplane-system -f "$root/deploy/$b/rbac.yaml" >/dev/null
  done
  kubectl apply --server-side -f "$root/deploy/router-controller/gateway-rbac.yaml" >/dev/null
  kubectl apply --server-side -f "$root/hack/testing/loopback-endpointslices.yaml" >/dev/null
  kubectl wait --for condition=established --timeout=60s crd/modeladapters.model.aibrix.ai crd/httproutes.gateway.networking.k8s.io >/dev/null

  # Each controller talks to the API server as its ServiceAccount.
  for b in adapter-controller router-controller; do
    kubectl config view --raw --flatten -o json |
      jq --arg sa "system:serviceaccount:loraplane-system:$b" '.users[].user["as"] = $sa' >"$dir/$b.kubeconfig"
  done

  echo "Starting the fake engine, both controllers and Prometheus"
  "$bin/fake-engine" --kubeconfig "$admin_kc" --admin-address $ENGINE_ADMIN >"$dir/fake-engine.log" 2>&1 &
  echo $! >"$dir/fake-engine.pid"
  wait_ready fake-engine "http://$ENGINE_ADMIN/healthz" 30
  start_controller adapter-controller "$dir"
  start_controller router-controller "$dir"

  cat >"$dir/prometheus.yml" <<YAML
global: {scrape_interval: 2s, evaluation_interval: 2s}
scrape_configs:
- job_name: adapter-controller
  static_configs: [{targets: ["$ADAPTER_METRICS"]}]
- job_name: router-controller
  static_configs: [{targets: ["$ROUTER_METRICS"]}]
YAML
  "$bin/prometheus" --config.file "$dir/prometheus.yml" --storage.tsdb.path "$dir/prometheus-data" \
    --web.listen-address $PROMETHEUS >"$dir/prometheus.log" 2>&1 &
  echo $! >"$dir/prometheus.pid"
  wait_ready prometheus "http://$PROMETHEUS/-/ready" 60
}

down() { # dir
  for p in router-controller-standby router-controller adapter-controller-standby adapter-controller fake-engine prometheus; do
    stop "$p" "$1"
  done
}

# leads NAME: the replica in slot NAME reports leader_election_master_status 1.
leads() {
  local metrics probe
  addresses "$1"
  curl -fsS "http://$metrics/metrics" 2>/dev/null | grep -q '^leader_election_master_status{.*} 1$'
}

roll() { # name binary dir
  local name=$1 binary=$2 dir=$3 old new start
  old=$name new=$name-standby
  if [ ! -f "$dir/$name.pid" ]; then old=$name-standby new=$name; fi
  [ -f "$dir/$old.pid" ] || { echo "$name runs in no slot: nothing to roll" >&2; return 1; }
  [ -x "$binary" ] || { echo "$binary is not an executable" >&2; return 1; }
  start=$SECONDS
  echo "Rolling $name: $binary starts as $new, then $old stops" >>"$dir/$new.log"
  CONTROLLER_BIN=$binary start_controller "$new" "$dir"
  stop "$old" "$dir"
  poll 60 0.2 leads "$new" || { echo "$name: $new did not take the lead within 60s of $old stopping" >&2; return 1; }
  echo "$name rolled to $binary in $((SECONDS - start))s ($old -> $new)"
}

ready() { # name
  local metrics probe
  addresses "$1"
  curl -fs -o /dev/null "http://$probe/readyz"
}

logs() { # dir: the controllers write their logs there (start_controller)
  compgen -G "$1/*-controller*.log" >/dev/null || { echo "no controller logs in $1" >&2; return 1; }
}

case "${1:-}" in
up) up "${2:?dir}" ;;
down) down "${2:?dir}" ;;
stop) stop "${2:?name}" "${3:?dir}" ;;
start) start_controller "${2:?name}" "${3:?dir}" ;;
kill) crash "${2:?name}" "${3:?dir}" ;;
ensure) ensure "${2:?name}" "${3:?dir}" ;;
ready) ready "${2:?name}" ;;
restart-apiserver) "$root/hack/cluster.sh" restart-apiserver ${3:+"$3"} ;;
logs) logs "${2:?dir}" ;;
roll) roll "${2:?name}" "${3:?binary}" "${4:?dir}" ;;
*) echo "usage: $0 up|down|logs DIR | stop|start|kill|ensure NAME DIR | ready NAME | restart-apiserver DIR [--compact] | roll NAME BINARY DIR" >&2; exit 2 ;;
esac
