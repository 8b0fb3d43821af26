#!/usr/bin/env bash
# Local kwok cluster (binary runtime) from the pinned binaries in bin/.
#
#   hack/cluster.sh up     create or start the cluster, add fake nodes; prints the kubeconfig path
#   hack/cluster.sh down   delete the cluster
#   hack/cluster.sh kubeconfig   print the kubeconfig path
#   hack/cluster.sh restart-apiserver   kill kube-apiserver (SIGKILL), start it again with the
#                                       same command line once its port is free, wait until
#                                       /readyz answers
#   hack/cluster.sh logs DIR   copy the cluster components' logs into DIR
#
# Environment: CLUSTER_NAME (loraplane), CLUSTER_NODES (4; 250 pods each, podCIDR 127.0.N.0/24).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/bin
. "$root/hack/lib.sh"
name=${CLUSTER_NAME:-loraplane}
nodes=${CLUSTER_NODES:-4}
export KWOK_WORKDIR=$root/_artifacts/kwok
kubeconfig=$KWOK_WORKDIR/clusters/$name/kubeconfig.yaml
kubectl() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }

exists() { "$bin/kwokctl" get clusters 2>/dev/null | grep -qx "$name"; }

up() {
  for b in kwokctl kwok etcd kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    [ -x "$bin/$b" ] || { echo "bin/$b is missing: run 'make tools'" >&2; exit 1; }
  done
  if exists; then
    echo "Cluster $name exists; starting it if stopped"
    "$bin/kwokctl" start cluster --name "$name" >/dev/null 2>&1
  else
    echo "Creating kwok cluster $name (binary runtime, pinned binaries)"
    "$bin/kwokctl" create cluster --name "$name" --runtime binary \
      --config "$root/hack/cluster/kwok.yaml" \
      --kubeconfig "$KWOK_WORKDIR/kubeconfig.merged" \
      --etcd-binary "$bin/etcd" \
      --kube-apiserver-binary "$bin/kube-apiserver" \
      --kube-controller-manager-binary "$bin/kube-controller-manager" \
      --kube-scheduler-binary "$bin/kube-scheduler" \
      --kwok-controller-binary "$bin/kwok" \
      --wait 2m
  fi
  for i in $(seq 1 "$nodes"); do
    node "$i"
  done | kubectl apply -f - >/dev/null
  kubectl wait --for=condition=Ready node --all --timeout=60s >/dev/null
  echo "Cluster $name is up with $nodes fake nodes (pod CIDRs 127.0.1.0/24 .. 127.0.$nodes.0/24)"
  echo "KUBECONFIG=$kubeconfig"
}

# node prints a fake node whose pods get loopback IPs from 127.0.N.0/24.
node() {
  cat <<YAML
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$1
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: kwok-node-$1
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
spec:
  podCIDR: 127.0.$1.0/24
  podCIDRs: [127.0.$1.0/24]
  taints:
  - key: kwok.x-k8s.io/node
    value: fake
    effect: NoSchedule
status:
  allocatable: {cpu: "64", memory: 256Gi, pods: "250"}
  capacity: {cpu: "64", memory: 256Gi, pods: "250"}
YAML
}

down() {
  if exists; then
    "$bin/kwokctl" delete cluster --name "$name" --kubeconfig "$KWOK_WORKDIR/kubeconfig.merged"
  else
    echo "Cluster $name does not exist"
  fi
  reap
}

# reap SIGKILLs what is left of the cluster's processes: a kube-apiserver that lost its etcd
# does not finish its SIGTERM shutdown, and would hold its port into the next cluster.
reap() {
  local dir=$KWOK_WORKDIR/clusters/$name/bin pid exe
  for pid in $(find /proc -mindepth 1 -maxdepth 1 -name '[0-9]*' -printf '%f\n'); do
    exe=$( (tr '\0' '\n' <"/proc/$pid/cmdline") 2>/dev/null | head -n 1) || continue
    case $exe in "$dir"/*)
      echo "Killing leftover ${exe##*/} (pid $pid)"
      kill -9 "$pid" 2>/dev/null || true
      ;;
    esac
  done
}

# gone reports whether pid and every thread of it have exited. A SIGKILLed Go process whose
# thread-group leader is already a zombie can still have threads, which hold its listening
# socket: "not running" is not enough before the port is reused.
gone() {
  [ -d "/proc/$1" ] || return 0
  grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null || return 1
  [ "$(find "/proc/$1/task" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)" -le 1 ]
}

# listening reports whether some socket listens on the TCP port (IPv4 or IPv6).
listening() {
  local hex
  hex=$(printf ':%04X' "$1")
  awk -v p="$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# released PID PORT: the killed process is gone and nothing listens on its port any more.
released() { gone "$1" && ! listening "$2"; }

# ready_or_exited PID: the API server answers /readyz, or the process PID has exited.
ready_or_exited() { kubectl get --raw /readyz >/dev/null 2>&1 || ! running "$1"; }

# etcd_post BASE-URL PATH JSON: a POST to etcd's JSON gateway (bash's /dev/tcp: no curl
# needed), printing the answer's body.
etcd_post() {
  local hostport=${1#http://} body
  exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}"
  printf 'POST %s HTTP/1.0\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' \
    "$2" "$hostport" "${#3}" "$3" >&3
  body=$(sed '1,/^\r$/d' <&3)
  exec 3<&-
  echo "$body"
}

# compact_etcd compacts the cluster's etcd at its current revision (physically), so that no
# watch can resume from an older one: it must relist after "410 Gone". Prints the revision.
compact_etcd() {
  local dir=$KWOK_WORKDIR/clusters/$name pid url rev
  pid=$(cat "$dir/pids/etcd.pid")
  url=$(tr '\0' '\n' <"/proc/$pid/cmdline" | sed -n 's/^--listen-client-urls=//p' | cut -d, -f1)
  [ -n "$url" ] || { echo "etcd (pid $pid) has no --listen-client-urls" >&2; exit 1; }
  rev=$(etcd_post "$url" /v3/kv/range '{"key":"AA==","limit":1}' | jq -r .header.revision)
  [[ $rev =~ ^[0-9]+$ ]] || { echo "etcd at $url answered no revision" >&2; exit 1; }
  etcd_post "$url" /v3/kv/compaction "{\"revision\":\"$rev\",\"physical\":true}" >/dev/null
  echo "$rev"
}

# restart_apiserver restarts the cluster's kube-apiserver process as kwokctl started it
# (kwokctl has no per-component restart): same command line, working directory and log,
# and the pid file updated so that "down" still stops it. The old process must be gone and
# its port free before the new one starts; a start that exits (it lost a race for the port)
# is retried. Prints the downtime.
restart_apiserver() {
  local dir=$KWOK_WORKDIR/clusters/$name pidfile pid newpid args=() start port="" compacted=""
  pidfile=$dir/pids/kube-apiserver.pid
  pid=$(cat "$pidfile")
  [ -r "/proc/$pid/cmdline" ] || { echo "kube-apiserver (pid $pid) is not running" >&2; exit 1; }
  mapfile -d '' -t args <"/proc/$pid/cmdline"
  for a in "${args[@]}"; do
    case $a in --secure-port=*) port=${a#--secure-port=} ;; esac
  done
  [ -n "$port" ] || { echo "kube-apiserver has no --secure-port in its command line" >&2; exit 1; }
  start=$(date +%s.%N)
  # SIGKILL: a crash. (On SIGTERM this kube-apiserver stops serving at once but its
  # process lingers in shutdown for more than 30 s.)
  kill -9 "$pid"
  for attempt in 1 2 3; do
    if ! poll 30 0.1 released "$pid" "$port"; then
      echo "kube-apiserver (pid $pid) still holds port $port after 30s" >&2
      exit 1
    fi
    if [ "${1:-}" = --compact ] && [ -z "$compacted" ]; then
      compacted="; etcd compacted at revision $(compact_etcd) while it was down"
    fi
    (cd "$dir" && exec setsid "${args[@]}" >>"$dir/logs/kube-apiserver.log" 2>&1 </dev/null) &
    newpid=$!
    echo "$newpid" >"$pidfile"
    if ! poll 60 0.1 ready_or_exited "$newpid"; then
      echo "kube-apiserver (pid $newpid) did not become ready within 60s after the restart" >&2
      exit 1
    fi
    if running "$newpid"; then
      echo "kube-apiserver restarted (pid $pid -> $newpid, attempt $attempt): $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s without a ready API server$compacted"
      return 0
    fi
    echo "kube-apiserver (pid $newpid) exited while starting (attempt $attempt); see $dir/logs/kube-apiserver.log" >&2
    pid=$newpid
  done
  echo "kube-apiserver could not be restarted in 3 attempts" >&2
  exit 1
}

# logs copies the cluster components' logs into a directory (kept after "down").
logs() {
  local dir=$KWOK_WORKDIR/clusters/$name/logs
  [ -d "$dir" ] || return 0
  mkdir -p "$1"
  cp "$dir"/*.log "$1"/ 2>/dev/null || true
}

case "${1:-}" in
up) up ;;
down) down ;;
kubeconfig) echo "$kubeconfig" ;;
restart-apiserver) restart_apiserver "${2:-}" ;;
logs) logs "${2:?usage: $0 logs DIR}" ;;
*) echo "usage: $0 up|down|kubeconfig|restart-apiserver [--compact]|logs DIR" >&2; exit 2 ;;
esac
