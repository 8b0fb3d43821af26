#!/usr/bin/env bash
# The e2e suite's fault hooks on kind (test/e2e/hooks.txt is their contract; hack/e2e-kind.sh
# exports them), the counterpart of hack/stack.sh on the kwok cluster. Each controller is a Deployment of two replicas; "the
# controller" is the leader (the Lease holder), "the standby" the other replica.
#
#   kill NAME               SIGKILL the leader's container (crictl stop --timeout 0 on the
#                           node): no graceful shutdown, the lease is not released; the
#                           kubelet restarts the container
#   kill NAME-standby       the same to the standby replica's container
#   stop NAME DIR           scale the Deployment to 0 and wait until its pods are gone
#   start NAME DIR          scale it back to 2 when stopped; wait until both replicas are Ready
#   start NAME-standby DIR  port-forward the standby's metrics port to the port of
#                           $E2E_{ADAPTER,ROUTER}_STANDBY_METRICS
#   stop NAME-standby DIR   end that port-forward
#   ensure NAME DIR         "running" unless a replica's container ended after the last
#                           restart-apiserver (then what ended and why)
#   ready NAME              exit 0 when every replica is Ready
#   restart-apiserver DIR [--compact]
#                           SIGKILL kube-apiserver's container (after compacting etcd at its
#                           current revision with --compact); wait until the API answers
#   logs DIR                kubectl logs of every replica (and of the previous container) into DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib.sh"
cluster=${KIND_CLUSTER:-loraplane-e2e}
context=kind-$cluster
node=$cluster-control-plane
ns=loraplane-system
k() { "$root/bin/kubectl" --context "$context" "$@"; }
api_ready() { k get --raw=/readyz >/dev/null 2>&1; }
api_down() { ! api_ready; }
crictl() { docker exec "$node" crictl --timeout=60s "$@"; } # the default 2 s request timeout is short on a busy node

leader() { # NAME: the leader's pod name
  k -n "$ns" get lease "$1.loraplane.io" -o jsonpath='{.spec.holderIdentity}' | cut -d_ -f1
}
replicas() { # NAME: the pods of the Deployment
  k -n "$ns" get pods -l "app.kubernetes.io/name=$1" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}'
}
standby() { # NAME: a pod of the Deployment that is not the leader, once every replica is Ready
  k -n "$ns" wait --for=condition=Ready pod -l "app.kubernetes.io/name=$1" --timeout=120s >/dev/null
  replicas "$1" | grep -vx "$(leader "$1")" | head -n1
}
metrics_port() { # NAME: the local port of its standby metrics URL
  local var
  case $1 in
  adapter-controller) var=${E2E_ADAPTER_STANDBY_METRICS:-} ;;
  router-controller) var=${E2E_ROUTER_STANDBY_METRICS:-} ;;
  esac
  [ -n "$var" ] || { echo "no standby metrics URL for $1" >&2; exit 2; }
  var=${var#*://*:}
  echo "${var%%/*}"
}

verb=${1:?verb}
case $verb in
restart-apiserver | logs) name='' dir=${2:-$root/_artifacts/e2e-kind/suite} ;;
*) name=${2:?name} dir=${3:-$root/_artifacts/e2e-kind/suite} ;;
esac
case $verb in
kill)
  if [[ $name == *-standby ]]; then pod=$(standby "${name%-standby}"); else pod=$(leader "$name"); fi
  [ -n "$pod" ] || { echo "$name: no such pod" >&2; exit 1; }
  id=$(crictl ps -q --name manager --label "io.kubernetes.pod.name=$pod")
  [ -n "$id" ] || { echo "no running manager container in $pod" >&2; exit 1; }
  crictl stop --timeout 0 "$id" >/dev/null
  echo "SIGKILL to $name's pod $pod (container ${id:0:13})"
  ;;
start)
  if [[ $name == *-standby ]]; then
    ctl=${name%-standby}
    standby=$(standby "$ctl")
    port=$(metrics_port "$ctl")
    mkdir -p "$dir"
    nohup "$root/bin/kubectl" --context "$context" -n "$ns" port-forward --address 127.0.0.1 "pod/$standby" "$port:8443" \
      >"$dir/$name-port-forward.log" 2>&1 </dev/null &
    echo $! >"$dir/$name-port-forward.pid"
    poll 10 0.2 open_port "$port" && { echo "standby $standby: metrics on 127.0.0.1:$port"; exit 0; }
    echo "port-forward to $standby did not open 127.0.0.1:$port" >&2
    cat "$dir/$name-port-forward.log" >&2
    exit 1
  fi
  # A stopped controller is scaled back; a killed container is restarted by the kubelet:
  # wait until it runs and both replicas are Ready.
  if [ "$(k -n "$ns" get deploy "$name" -o jsonpath='{.spec.replicas}')" = 0 ]; then
    k -n "$ns" scale "deploy/$name" --replicas=2 >/dev/null
    k -n "$ns" rollout status "deploy/$name" --timeout=120s >/dev/null
  fi
  poll 120 0.5 quietly "$0" ready "$name" && exit 0
  echo "$name: not every replica Ready within 120 s" >&2
  k -n "$ns" get pods -l "app.kubernetes.io/name=$name" >&2
  exit 1
  ;;
stop)
  if [[ $name != *-standby ]]; then
    k -n "$ns" scale "deploy/$name" --replicas=0 >/dev/null
    k -n "$ns" wait --for=delete pod -l "app.kubernetes.io/name=$name" --timeout=60s >/dev/null
    exit 0
  fi
  pid=$(cat "$dir/$name-port-forward.pid" 2>/dev/null || true)
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -f "$dir/$name-port-forward.pid"
  ;;
ensure)
  since=$(cat "$dir/apiserver-restarted-at" 2>/dev/null || echo 1970-01-01T00:00:00Z)
  ended=$(k -n "$ns" get pods -l "app.kubernetes.io/name=$name" -o json |
    jq -r --arg since "$since" '.items[] | .metadata.name as $p | .status.containerStatuses[]? |
      select(.lastState.terminated != null and .lastState.terminated.finishedAt > $since) |
      "\($p) exited at \(.lastState.terminated.finishedAt): \(.lastState.terminated.reason) (exit \(.lastState.terminated.exitCode))"')
  if [ -z "$ended" ]; then echo running; else echo "$ended"; fi
  ;;
ready)
  want=$(k -n "$ns" get deploy "$name" -o jsonpath='{.spec.replicas}')
  got=$(k -n "$ns" get pods -l "app.kubernetes.io/name=$name" -o json |
    jq '[.items[] | select(.metadata.deletionTimestamp == null) | select(any(.status.conditions[]?; .type == "Ready" and .status == "True"))] | length')
  echo "$got/$want Ready"
  [ "$got" = "$want" ]
  ;;
restart-apiserver)
  mkdir -p "$dir"
  date -u +%Y-%m-%dT%H:%M:%SZ >"$dir/apiserver-restarted-at"
  compacted=""
  if [ "${3:-}" = --compact ]; then
    # Compact etcd at its current revision first (the kubelet restarts the API server too
    # soon to do it in between): no watch can then resume from an older revision.
    etcd() { docker exec "$node" curl -sS --cacert /etc/kubernetes/pki/etcd/ca.crt \
      --cert /etc/kubernetes/pki/apiserver-etcd-client.crt --key /etc/kubernetes/pki/apiserver-etcd-client.key \
      "https://127.0.0.1:2379$1" -d "$2"; }
    rev=$(etcd /v3/kv/range '{"key":"AA==","limit":1}' | jq -r .header.revision)
    [[ $rev =~ ^[0-9]+$ ]] || { echo "etcd answered no revision" >&2; exit 1; }
    etcd /v3/kv/compaction "{\"revision\":\"$rev\",\"physical\":true}" >/dev/null
    compacted="; etcd compacted at revision $rev just before"
  fi
  id=$(crictl ps -q --name kube-apiserver)
  crictl stop --timeout 0 "$id" >/dev/null
  poll 60 0.1 api_down || { echo "kube-apiserver still answers /readyz 60 s after its container was stopped" >&2; exit 1; }
  down=$(date +%s.%N)
  poll 300 0.2 api_ready || { echo "kube-apiserver not ready 300 s after it was SIGKILLed" >&2; exit 1; }
  echo "kube-apiserver SIGKILLed (container ${id:0:13}); API unavailable $(awk -v a="$down" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s$compacted"
  ;;
logs)
  mkdir -p "$dir"
  for ctl in adapter-controller router-controller; do
    for pod in $(replicas "$ctl"); do
      k -n "$ns" logs "$pod" >"$dir/$pod.log" 2>&1 || true
      k -n "$ns" logs --previous "$pod" >"$dir/$pod.previous.log" 2>/dev/null || rm -f "$dir/$pod.previous.log"
    done
  done
  ;;
*)
  echo "unknown verb $verb" >&2
  exit 2
  ;;
esac
