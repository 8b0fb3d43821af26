#!/usr/bin/env bash
# The Helm steps of `E2E_INSTALL=helm make e2e` (hack/e2e-kind.sh runs them after the suite):
#
#   upgrade    helm upgrade with changed values (workers, log level); both Deployments roll:
#              every replica runs the new arguments and comes from a new ReplicaSet
#   uninstall  a model (2 fake-engine pods) with a loaded ModelAdapter, then helm uninstall
#              with the defaults: the adapter stays, loaded on both engines, and the CRD
#              stays; nothing else of the release is left. Reinstalled, the adapter is Running;
#              then the opt-in purge (cleanupOnUninstall on, crds.keep off, helm uninstall):
#              the pre-delete hook deletes the adapter while the adapter-controller still
#              runs, so the engines unload it; afterwards no ModelAdapter and no CRD is left;
#              the release namespace and the model's are then deleted and no namespace stays
#              Terminating
#   undeploy   the same with make undeploy (keeps the adapter loaded and the CRD), a
#              re-apply, and make undeploy PURGE=true (unloads it; the CRD and
#              loraplane-system are gone) after a kustomize install (by hand, not in make e2e)
#
# Environment: KIND_CLUSTER, E2E_IMAGE_TAG and IMAGE_REGISTRY as for hack/e2e-kind.sh
# (E2E_RELEASE_CHART and E2E_RELEASE_VERSION for E2E_INSTALL=release-helm);
# E2E_ENGINE_ADMIN (default http://127.0.0.1:29400) is the fake engines' admin aggregator.
# Timings and outputs go to stdout and _artifacts/e2e-kind/helm-*.txt.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib.sh"
cluster=${KIND_CLUSTER:-loraplane-e2e}
context=kind-$cluster
registry=${IMAGE_REGISTRY:-ghcr.io/loraplane}
tag=${E2E_IMAGE_TAG:-e2e}
admin=${E2E_ENGINE_ADMIN:-http://127.0.0.1:29400}
art=$root/_artifacts/e2e-kind
ns=loraplane-system
# The chart: deploy/chart/loraplane with the e2e images, or (E2E_RELEASE_CHART, E2E_INSTALL=
# release-helm) the release's chart from the registry with its own images.
if [ -n "${E2E_RELEASE_CHART:-}" ]; then
  chart=("$E2E_RELEASE_CHART" --version "${E2E_RELEASE_VERSION:?}" --plain-http) images=()
else
  chart=(deploy/chart/loraplane) images=(--set image.registry="$registry" --set-string image.tag="$tag")
fi
k() { "$root/bin/kubectl" --context "$context" "$@"; }
helm() { "$root/bin/helm" --kube-context "$context" "$@"; }
fail() { echo "e2e-kind-helm: $*" >&2; exit 1; }
cd "$root"

# rs NAME: the ReplicaSets (pod-template-hash) of the Deployment's pods, sorted.
rs() { k -n "$ns" get pods -l "app.kubernetes.io/name=$1" -o jsonpath='{range .items[*]}{.metadata.labels.pod-template-hash}{"\n"}{end}' | sort -u | tr '\n' ' '; }

upgrade() {
  local before_a before_r start
  before_a=$(rs adapter-controller) before_r=$(rs router-controller)
  echo "before: adapter-controller pods from ReplicaSet(s) $before_a; router-controller from $before_r"
  start=$(date +%s)
  helm upgrade loraplane "${chart[@]}" -n "$ns" --reuse-values \
    --set adapterController.flags.max-concurrent-reconciles=4 --set adapterController.flags.v=4 \
    --set routerController.flags.max-concurrent-reconciles=4 --set routerController.flags.v=4 \
    --wait --timeout 5m
  for d in adapter-controller router-controller; do
    k -n "$ns" rollout status "deploy/$d" --timeout 180s
  done
  # Rolled out means the new ReplicaSet's pods are Ready; the old ones may still be shutting
  # down (Terminating pods report phase Running). Wait until they are gone.
  local d h old
  for d in adapter-controller router-controller; do
    old=$before_a
    [ "$d" = router-controller ] && old=$before_r
    for h in $old; do
      k -n "$ns" wait --for=delete pod -l "app.kubernetes.io/name=$d,pod-template-hash=$h" --timeout 120s
    done
  done
  echo "helm upgrade, both rollouts and the old pods' shutdown took $(($(date +%s) - start)) s"
  local pods p args
  for d in adapter-controller router-controller; do
    pods=$(k -n "$ns" get pods -l "app.kubernetes.io/name=$d" -o name)
    [ "$(wc -w <<<"$pods")" -ge 2 ] || fail "$d: $(wc -w <<<"$pods") running pods after the upgrade, want 2"
    for p in $pods; do
      args=$(k -n "$ns" get "$p" -o jsonpath='{.spec.containers[0].args}')
      [[ $args == *'"--max-concurrent-reconciles=4"'* && $args == *'"--v=4"'* ]] || fail "$p runs $args, without the upgraded values"
    done
  done
  local after_a after_r
  after_a=$(rs adapter-controller) after_r=$(rs router-controller)
  echo "after:  adapter-controller pods from ReplicaSet(s) $after_a; router-controller from $after_r"
  [ "$after_a" != "$before_a" ] && [ "$after_r" != "$before_r" ] || fail "a Deployment did not roll"
  helm history loraplane -n "$ns" | tee "$art/helm-history.txt"
}

loaded() { # NAMESPACE ADAPTER: how many engines hold the adapter
  curl -fsS "$admin/engines" | jq --arg ns "$1" --arg a "$2" '[.[] | select(.namespace == $ns) | .loaded[]? | select(. == $a)] | length'
}

# load_adapter NAMESPACE: a model (2 fake-engine pods) in NAMESPACE with the ModelAdapter
# lora-uninstall Running and loaded on both engines.
loaded_on() { # N NAMESPACE ADAPTER: exactly N engines hold the adapter
  [ "$(loaded "$2" "$3")" = "$1" ]
}

load_adapter() {
  local mns=$1 model=helm-uninstall
  k create namespace "$mns" --dry-run=client -o yaml | k apply -f - >/dev/null
  k apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: $model
  namespace: $mns
  labels: {model.aibrix.ai/name: $model, model.aibrix.ai/port: "8000"}
spec:
  replicas: 2
  selector:
    matchLabels: {model.aibrix.ai/name: $model}
  template:
    metadata:
      labels: {model.aibrix.ai/name: $model, model.aibrix.ai/port: "8000", adapter.model.aibrix.ai/enabled: "true"}
    spec:
      containers:
      - name: engine
        image: $registry/fake-engine:$tag
        args: [--serve-pod, --port=8000, --base-model=$model, --pod-admin-address=:9400]
        ports: [{containerPort: 8000}, {name: admin, containerPort: 9400}]
        env:
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
        - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
---
apiVersion: model.aibrix.ai/v1alpha1
kind: ModelAdapter
metadata:
  name: lora-uninstall
  namespace: $mns
spec:
  baseModel: $model
  podSelector:
    matchLabels: {model.aibrix.ai/name: $model}
  artifactURL: huggingface://example/lora-uninstall
YAML
  k -n "$mns" rollout status "deploy/$model" --timeout 120s
  k -n "$mns" wait modeladapter/lora-uninstall --for=jsonpath='{.status.phase}'=Running --timeout 120s
  local n
  poll 60 1 loaded_on 2 "$mns" lora-uninstall || true
  n=$(loaded "$mns" lora-uninstall)
  [ "$n" = 2 ] || fail "lora-uninstall is loaded on $n engines before the removal, want 2"
  echo "before the removal: lora-uninstall Running, loaded on $n engines"
  k get modeladapters -A -o wide
}

# no_terminating: fail when a namespace is left Terminating.
no_terminating() {
  local terminating
  terminating=$(k get namespaces -o jsonpath='{range .items[?(@.status.phase=="Terminating")]}{.metadata.name} {end}')
  [ -z "$terminating" ] || fail "namespaces left Terminating: $terminating"
  echo "namespaces afterwards:"; k get namespaces
}

# kept MNS: after a removal with the defaults, the adapter is still there, not being
# deleted, loaded on both engines, and the CRD is still installed.
kept() {
  local n
  n=$(loaded "$1" lora-uninstall)
  [ "$n" = 2 ] || fail "lora-uninstall is loaded on $n engines after the removal, want 2 (kept)"
  k -n "$1" get modeladapter lora-uninstall -o jsonpath='{.metadata.deletionTimestamp}' | grep -q . &&
    fail "lora-uninstall is being deleted after the removal"
  k get crd modeladapters.model.aibrix.ai >/dev/null || fail "the CRD is gone after the removal"
  echo "after the removal with the defaults: lora-uninstall kept, loaded on $n engines; the CRD kept"
}

# purged MNS: after an opted-in purge, the adapter was unloaded and no ModelAdapter is left.
purged() {
  local n left
  n=$(loaded "$1" lora-uninstall)
  [ "$n" = 0 ] || fail "lora-uninstall is still loaded on $n engines after the purge"
  if k get crd modeladapters.model.aibrix.ai >/dev/null 2>&1; then
    left=$(k get modeladapters -A -o json | jq '.items | length')
    [ "$left" = 0 ] || { k get modeladapters -A -o yaml; fail "$left ModelAdapters left after the purge"; }
  fi
}

install_release() {
  helm install loraplane "${chart[@]}" -n "$ns" --create-namespace --take-ownership --force-conflicts \
    "${images[@]}" --set routerController.createGatewayNamespace=true \
    --wait --timeout 5m
}

uninstall() {
  local mns=helm-uninstall start
  load_adapter "$mns"
  start=$(date +%s)
  helm uninstall loraplane -n "$ns" --wait --timeout 5m
  echo "helm uninstall (defaults) took $(($(date +%s) - start)) s"
  kept "$mns"
  # Nothing of the release but the CRD (kept by policy) is left.
  local inside remains
  inside=$(k -n "$ns" get deployments,replicasets,pods,services,serviceaccounts,roles,rolebindings,jobs -l app.kubernetes.io/instance=loraplane,app.kubernetes.io/managed-by!=prometheus-operator -o name)
  [ -z "$inside" ] || fail "left in $ns: $inside"
  remains=$(k get all,serviceaccounts,roles,rolebindings,poddisruptionbudgets,jobs,clusterroles,clusterrolebindings -A \
    -l app.kubernetes.io/instance=loraplane,app.kubernetes.io/managed-by!=prometheus-operator -o name)
  [ -z "$remains" ] || fail "objects of the release left: $remains"

  echo "reinstalling: the kept adapter is Running again"
  install_release
  k -n "$mns" wait modeladapter/lora-uninstall --for=jsonpath='{.status.phase}'=Running --timeout 120s
  echo "opt-in purge: cleanupOnUninstall on, crds.keep off, then helm uninstall"
  helm upgrade loraplane "${chart[@]}" -n "$ns" --reuse-values \
    --set adapterController.cleanupOnUninstall.enabled=true --set crds.keep=false --wait --timeout 5m
  start=$(date +%s)
  helm uninstall loraplane -n "$ns" --wait --timeout 5m
  echo "helm uninstall (purge) took $(($(date +%s) - start)) s"
  purged "$mns"
  if k get crd modeladapters.model.aibrix.ai >/dev/null 2>&1; then fail "crds.keep=false: the CRD is still there"; fi
  k delete namespace "$ns" "$mns" --wait --timeout 180s
  no_terminating
  echo "helm uninstall kept the adapter by default; the opted-in purge unloaded it and removed the CRD"
}

# undeploy: the kustomize counterpart (not part of make e2e; run it by hand on a cluster
# where `make e2e` installed deploy/default): make undeploy with a loaded adapter, then again
# with PURGE=true.
undeploy() {
  local mns=undeploy-check start kc
  load_adapter "$mns"
  kc=$(mktemp)
  k config view --minify --flatten >"$kc"
  start=$(date +%s)
  KUBECONFIG=$kc make --no-print-directory undeploy
  echo "make undeploy took $(($(date +%s) - start)) s"
  kept "$mns"
  k apply --server-side -f "$art/deploy.yaml"
  k -n "$ns" rollout status deploy/adapter-controller --timeout 180s
  k -n "$mns" wait modeladapter/lora-uninstall --for=jsonpath='{.status.phase}'=Running --timeout 120s
  KUBECONFIG=$kc make --no-print-directory undeploy PURGE=true
  rm -f "$kc"
  purged "$mns"
  if k get crd modeladapters.model.aibrix.ai >/dev/null 2>&1; then fail "the CRD is still there"; fi
  k wait --for=delete "namespace/$ns" --timeout 180s || fail "namespace $ns is still there"
  k delete namespace "$mns" --wait --timeout 180s
  no_terminating
  echo "make undeploy kept the adapter; make undeploy PURGE=true removed it (unloaded), the controllers, the CRD and $ns"
}

case ${1:?verb: upgrade, uninstall or undeploy} in
upgrade) upgrade 2>&1 | tee "$art/helm-upgrade.txt" ;;
uninstall) uninstall 2>&1 | tee "$art/helm-uninstall.txt" ;;
undeploy) undeploy 2>&1 | tee "$art/undeploy.txt" ;;
*) fail "unknown verb $1" ;;
esac
