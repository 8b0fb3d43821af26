#!/usr/bin/env bash
# Local kwok cluster (binary runtime) from the pinned binaries in bin/.
#
#   hack/cluster.sh up     create or start the cluster, add fake nodes; prints the kubeconfig path
#   hack/cluster.sh down   delete the cluster
#   hack/cluster.sh kubeconfig   print the kubeconfig path
#   hack/cluster.sh restart-apiserver   kill kube-apiserver (SIGKILL), start it again with the
#                                       same command line, wait until /readyz answers
#
# Environment: CLUSTER_NAME (modelplane), CLUSTER_NODES (4; 250 pods each, podCIDR 127.0.N.0/24).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/bin
name=${CLUSTER_NAME:-modelplane}
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
}

# running reports whether pid is a live process (an exited one may stay a zombie: the
# container's init need not reap kwokctl's orphaned children).
running() { [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status"; }

# restart_apiserver restarts the cluster's kube-apiserver process as kwokctl started it
# (kwokctl has no per-component restart): same command line, working directory and log,
# and the pid file updated so that "down" still stops it. Prints the downtime.
restart_apiserver() {
  local dir=$KWOK_WORKDIR/clusters/$name pidfile pid args=() start
  pidfile=$dir/pids/kube-apiserver.pid
  pid=$(cat "$pidfile")
  [ -r "/proc/$pid/cmdline" ] || { echo "kube-apiserver (pid $pid) is not running" >&2; exit 1; }
  mapfile -d '' -t args <"/proc/$pid/cmdline"
  start=$(date +%s.%N)
  # SIGKILL: a crash. (On SIGTERM this kube-apiserver stops serving at once but its
  # process lingers in shutdown for more than 30 s.)
  kill -9 "$pid"
  for _ in $(seq 1 100); do running "$pid" || break; sleep 0.1; done
  if running "$pid"; then echo "kube-apiserver (pid $pid) did not stop" >&2; exit 1; fi
  (cd "$dir" && exec setsid "${args[@]}" >>"$dir/logs/kube-apiserver.log" 2>&1 </dev/null) &
  echo $! >"$pidfile"
  for _ in $(seq 1 600); do
    if kubectl get --raw /readyz >/dev/null 2>&1; then
      echo "kube-apiserver restarted (pid $pid -> $(cat "$pidfile")): $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s without a ready API server"
      return 0
    fi
    sleep 0.1
  done
  echo "kube-apiserver did not become ready within 60s after the restart" >&2
  exit 1
}

case "${1:-}" in
up) up ;;
down) down ;;
kubeconfig) echo "$kubeconfig" ;;
restart-apiserver) restart_apiserver ;;
*) echo "usage: $0 up|down|kubeconfig|restart-apiserver" >&2; exit 2 ;;
esac
