#!/usr/bin/env bash
# make e2e: the e2e suite on a kind cluster, with the controllers' images built from the
# Dockerfile and deploy/ applied as shipped (an overlay that changes only image references).
#
#   E2E_DRY_RUN=1   print every command instead of running it
#   E2E_INSTALL     kustomize (default: deploy/default as shipped) or helm: helm install of
#                   deploy/chart/loraplane, the suite, helm upgrade with changed values (both
#                   Deployments roll), the suite again (E2E_RUN_UPGRADED, default E2E_RUN), then
#                   helm uninstall with a loaded adapter: it stays loaded (and the CRD); then
#                   the opted-in purge removes it (hack/e2e-kind-helm.sh);
#                   release: the release in dist/ (make release VERSION=$RELEASE_VERSION, default
#                   the newest CHANGELOG.md section) published to a registry on the kind network
#                   (bin/registry in a container, 127.0.0.1:25000 on the host) that the node's
#                   containerd mirrors $IMAGE_REGISTRY from, then installed with only kubectl on
#                   PATH: kubectl apply --server-side -f dist/install.yaml;
#                   release-helm: the same registry, helm install oci://... of the release's
#                   chart, then the Helm steps of helm (upgrade, the suite again, uninstall)
#   KIND_CLUSTER    cluster name (default loraplane-e2e); reused when it exists
#   KIND_NODE_IMAGE node image (default kindest/node:$KUBE_VERSION)
#
# hack/e2e-kind.sh down (make e2e-down) deletes the cluster and its Docker network.
#
# Every kubectl call names the cluster's context; networks lie in 198.18.0.0/15 (RFC 2544):
# the kind network, the pod and the service subnets. The API server listens on 127.0.0.1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib.sh"
cluster=${KIND_CLUSTER:-loraplane-e2e}
context=kind-$cluster
kind=${KIND:-$root/bin/kind}
# Versions and base images come from the Makefile (their one definition).
for v in KIND_NODE_IMAGE TRAEFIK_VERSION PROMETHEUS_OPERATOR_VERSION PROMETHEUS_VERSION BUILDER_IMAGE BASE_IMAGE; do
  [ -n "${!v:-}" ] || { echo "$v is not set: run this through make e2e, which defines every version" >&2; exit 2; }
done
node_image=$KIND_NODE_IMAGE
registry=${IMAGE_REGISTRY:-ghcr.io/loraplane}
tag=${E2E_IMAGE_TAG:-e2e}
network=${KIND_NETWORK:-loraplane-e2e}
network_subnet=${KIND_NETWORK_SUBNET:-198.18.8.0/24}
pod_subnet=${KIND_POD_SUBNET:-198.18.128.0/17}
service_subnet=${KIND_SERVICE_SUBNET:-198.19.0.0/16}
art=$root/_artifacts/e2e-kind
# The upstream images of the gateway and the monitoring stack (the offline kit builds them;
# test/e2e/kind/{gateway,monitoring} name them).
stack_images=("traefik:$TRAEFIK_VERSION"
  "quay.io/prometheus-operator/prometheus-operator:$PROMETHEUS_OPERATOR_VERSION"
  "quay.io/prometheus-operator/prometheus-config-reloader:$PROMETHEUS_OPERATOR_VERSION"
  "quay.io/prometheus/prometheus:$PROMETHEUS_VERSION")
kubectl=("$root/bin/kubectl" --context "$context")
dry=${E2E_DRY_RUN:-}
install=${E2E_INSTALL:-kustomize}
case $install in kustomize | helm | release | release-helm) ;; *) echo "E2E_INSTALL=$install: want kustomize, helm, release or release-helm" >&2; exit 2 ;; esac
helm=("$root/bin/helm" --kube-context "$context")
chart=deploy/chart/loraplane
run() { if [ -n "$dry" ]; then printf '+ %s\n' "$*"; else "$@"; fi; }
step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }
cd "$root"
# make e2e-down: the cluster and its network go; the images stay (Docker's, and the kit's cache).
if [ "${1:-}" = down ]; then
  run "$kind" delete cluster --name "$cluster"
  # The release modes' registry container is on the network too (hack/e2e-kind-release.sh).
  if docker container inspect loraplane-kind-registry >/dev/null 2>&1; then run docker rm -f loraplane-kind-registry >/dev/null; fi
  if docker network inspect "$network" >/dev/null 2>&1; then run docker network rm "$network" >/dev/null; fi
  exit 0
fi
mkdir -p "$art"
start=$(date +%s)

# On failure: kind's logs (nodes, kubelet, containerd, pods) into _artifacts.
on_exit() {
  local rc=$?
  if [ $rc -ne 0 ] && [ -z "$dry" ] && "$kind" get clusters 2>/dev/null | grep -qx "$cluster"; then
    echo "make e2e failed (exit $rc): exporting kind's logs to $art/logs" >&2
    "$kind" export logs --name "$cluster" "$art/logs" >/dev/null 2>&1 || true
  fi
}
trap on_exit EXIT

step "kind network $network ($network_subnet, IPv4 only)"
if [ -n "$dry" ] || ! docker network inspect "$network" >/dev/null 2>&1; then
  run docker network create -d bridge --subnet "$network_subnet" \
    -o com.docker.network.bridge.enable_ip_masquerade=true "$network"
fi

step "cluster $cluster ($node_image)"
# The cluster's configuration (test/e2e/kind/cluster): kind.yaml with the subnets filled in,
# and the patches this host needs appended.
kind_dir=$root/test/e2e/kind/cluster
{
  sed -e "s|@POD_SUBNET@|$pod_subnet|" -e "s|@SERVICE_SUBNET@|$service_subnet|" "$kind_dir/kind.yaml"
  # cgroup v1 host (cgroup2fs otherwise)
  [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" != tmpfs ] || cat "$kind_dir/kubelet-cgroupv1.yaml"
  cat "$kind_dir/containerd.yaml"
  # no CAP_SYS_RESOURCE (bit 24 of the bounding set)
  (((0x$(awk '/^CapBnd:/ {print $2}' /proc/self/status) >> 24 & 1) == 1)) || cat "$kind_dir/containerd-no-oom-adj.yaml"
} >"$art/kind-config.yaml"
node=$cluster-control-plane
if [ -z "$dry" ] && "$kind" get clusters 2>/dev/null | grep -qx "$cluster" &&
  [ "$(docker exec "$node" cat /kind/loraplane-kind-config.yaml 2>/dev/null)" != "$(cat "$art/kind-config.yaml")" ]; then
  echo "cluster $cluster was created from another configuration: recreating it"
  "$kind" delete cluster --name "$cluster"
fi
if [ -n "$dry" ] || ! "$kind" get clusters 2>/dev/null | grep -qx "$cluster"; then
  run env KIND_EXPERIMENTAL_DOCKER_NETWORK="$network" "$kind" create cluster --name "$cluster" \
    --image "$node_image" --config "$art/kind-config.yaml" --retain
  run docker exec -i "$node" sh -c 'cat > /kind/loraplane-kind-config.yaml' <"$art/kind-config.yaml"
else
  echo "reusing cluster $cluster"
fi
# The CNI configuration (cni.conflist): ptp veth pairs with host-local addresses from the
# node's podCIDR (allocated by the controller manager shortly after the node registers) and
# portmap.
cidr='<node podCIDR>'
if [ -z "$dry" ]; then
  pod_cidr() { "${kubectl[@]}" get node "$node" -o jsonpath='{.spec.podCIDR}' 2>/dev/null; }
  has_pod_cidr() { [ -n "$(pod_cidr)" ]; }
  poll 120 1 has_pod_cidr || { echo "node $node got no podCIDR within 120 s" >&2; exit 1; }
  cidr=$(pod_cidr)
fi
conf=$(sed "s|@POD_CIDR@|$cidr|" "$kind_dir/cni.conflist")
if [ -n "$dry" ] || [ "$(docker exec "$node" cat /etc/cni/net.d/10-loraplane.conflist 2>/dev/null)" != "$conf" ]; then
  run docker exec -i "$node" sh -c 'mkdir -p /etc/cni/net.d && cat > /etc/cni/net.d/10-loraplane.conflist' <<<"$conf"
fi
run "${kubectl[@]}" wait --for=condition=Ready node --all --timeout=180s
run "${kubectl[@]}" -n kube-system rollout status deploy/coredns --timeout=180s

step "Gateway API CRDs"
gwv=$(cd router-controller && GOWORK=off go list -m -f '{{.Version}}' sigs.k8s.io/gateway-api)
gw=$(GOWORK=off GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/gateway-api@$gwv" | jq -r .Dir)
run "${kubectl[@]}" apply --server-side -f "$gw/config/crd/standard"

step "Prometheus Operator CRDs ($PROMETHEUS_OPERATOR_VERSION)"
po=$(cd "$art" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" | jq -r .Dir)
run "${kubectl[@]}" apply --server-side -f "$po/example/prometheus-operator-crd"

controllers=(adapter-controller router-controller)
case $install in release*) controllers=(); . "$root/hack/e2e-kind-release.sh" ;; esac
step "images ($registry/*:$tag)"
for b in "${controllers[@]}"; do
  run make --no-print-directory docker-build BINARY=$b IMAGE_REGISTRY="$registry" IMAGE_TAG="$tag"
done
run docker build -q --build-arg BUILDER_IMAGE="$BUILDER_IMAGE" --build-arg BASE_IMAGE="$BASE_IMAGE" \
  -f test/fakeengine.Dockerfile -t "$registry/fake-engine:$tag" .
for b in "${controllers[@]}" fake-engine; do
  run "$kind" load docker-image --name "$cluster" "$registry/$b:$tag"
done
# Loaded only when the node lacks them (they never change under a tag).
for i in "${stack_images[@]}"; do
  if [ -n "$dry" ] || ! docker exec "$node" crictl inspecti "$i" >/dev/null 2>&1; then
    run "$kind" load docker-image --name "$cluster" "$i"
  fi
done

# The chart's values in the helm modes (test/e2e/kind/helm-values.yaml: ServiceMonitors,
# PrometheusRule and NetworkPolicies on), the kind network admitted to the metrics port.
helm_values=(-f test/e2e/kind/helm-values.yaml --set "networkPolicy.metricsFrom[1].ipBlock.cidr=$network_subnet")

overlay=$art/overlay
mkdir -p "$overlay"
overlay() { # kustomize|helm: the suite's overlay (test/e2e/kind/overlay) with the paths, registry and tag filled in
  sed -e "s|@DEPLOY@|$(realpath --relative-to="$overlay" deploy/default)|" -e "s|@SUITE@|$(realpath --relative-to="$overlay" test/e2e/kind)|" \
    -e "s|@REGISTRY@|$registry|" -e "s|@TAG@|$tag|" "test/e2e/kind/overlay/$1.yaml" >"$overlay/kustomization.yaml"
}
# A Helm release left by an earlier run goes first, the way a user would remove it.
if [ -z "$dry" ] && [[ $install == *helm ]] && "${helm[@]}" status loraplane -n loraplane-system >/dev/null 2>&1; then
  step "helm uninstall of the release an earlier run left"
  run "${helm[@]}" uninstall loraplane -n loraplane-system --wait --timeout 5m
  run "${kubectl[@]}" delete namespace loraplane-system --ignore-not-found --wait --timeout 180s
fi
# The controllers' metrics serving certificate (docs/monitoring.md), made once per cluster and
# before the controllers start: they read it at start-up from the optional Secret volume, and
# the ServiceMonitors verify it against its CA (a pod started without it serves a self-signed
# certificate that no scrape can verify).
run bash -c "${kubectl[*]} create namespace loraplane-system --dry-run=client -o yaml | ${kubectl[*]} apply -f -"
if [ -n "$dry" ] || ! "${kubectl[@]}" -n loraplane-system get secret loraplane-metrics-cert >/dev/null 2>&1; then
  run bash -c "KUBECTL=$root/bin/kubectl hack/metrics-cert.sh --print | ${kubectl[*]} apply --server-side -f -"
fi
# A reused cluster may hold an installation of main older than v0.1.0, whose roles had other
# names: an upgrade leaves their bindings, which still grant the older, wider rules (the
# router's HTTPRoute rights in every namespace), so the suite would test them instead of the
# release's. They go the way docs/install.md ("Upgrade") tells a user to remove them.
step "leftovers of an installation older than v0.1.0"
run delete_pre_v010_rbac "${kubectl[@]}"
if [ "$install" = kustomize ]; then
  step "deploy/default with the e2e images"
  overlay kustomize
  run "${kubectl[@]}" kustomize "$overlay" -o "$art/deploy.yaml"
  # The ClusterRole a Prometheus scrapes with (the suite's metrics reader is bound to it).
  run "${kubectl[@]}" apply --server-side -f deploy/prometheus/rbac.yaml
  # The gateway namespace first: the router's HTTPRoute Role and its binding live there.
  run bash -c "${kubectl[*]} create namespace aibrix-system --dry-run=client -o yaml | ${kubectl[*]} apply -f -"
  run "${kubectl[@]}" apply --server-side -f "$art/deploy.yaml"
  # The images keep their tag across runs: restart so the pods run the image just loaded.
  run "${kubectl[@]}" -n loraplane-system rollout restart deploy/adapter-controller deploy/router-controller
  run "${kubectl[@]}" -n fake-engine-system rollout restart deploy/fake-engine-admin
elif [ "$install" != helm ]; then
  # The gateway namespace first: the release's HTTPRoute Role and its binding live there.
  run bash -c "${kubectl[*]} create namespace aibrix-system --dry-run=client -o yaml | ${kubectl[*]} apply -f -"
  release_install # hack/e2e-kind-release.sh
  overlay helm # the suite's objects only: the controllers are the release's
  run "${kubectl[@]}" kustomize "$overlay" -o "$art/deploy.yaml"
  run "${kubectl[@]}" apply --server-side -f deploy/prometheus/rbac.yaml
  run "${kubectl[@]}" apply --server-side -f "$art/deploy.yaml"
  run "${kubectl[@]}" -n fake-engine-system rollout restart deploy/fake-engine-admin
else
  step "helm install $chart with the e2e images"
  # --take-ownership: the release namespace (created by --create-namespace for the release
  # record), the gateway namespace and objects of an earlier kustomize run become the release's;
  # --force-conflicts: fields kubectl applied in that run (e.g. the arguments) become Helm's.
  run "${helm[@]}" install loraplane "$chart" -n loraplane-system --create-namespace --take-ownership --force-conflicts \
    --set image.registry="$registry" --set-string image.tag="$tag" "${helm_values[@]}" --wait --timeout 5m
  run "${helm[@]}" status loraplane -n loraplane-system
  overlay helm
  run "${kubectl[@]}" kustomize "$overlay" -o "$art/deploy.yaml"
  run "${kubectl[@]}" apply --server-side -f deploy/prometheus/rbac.yaml
  run "${kubectl[@]}" apply --server-side -f "$art/deploy.yaml"
  run "${kubectl[@]}" -n fake-engine-system rollout restart deploy/fake-engine-admin
fi
run "${kubectl[@]}" -n loraplane-system rollout status deploy/adapter-controller --timeout 180s
run "${kubectl[@]}" -n loraplane-system rollout status deploy/router-controller --timeout 180s
run "${kubectl[@]}" -n fake-engine-system rollout status deploy/fake-engine-admin --timeout 120s
run "${kubectl[@]}" -n loraplane-system get pods -o wide

step "gateway: Traefik $TRAEFIK_VERSION, Gateway aibrix-system/aibrix-eg"
run "${kubectl[@]}" apply --server-side -k test/e2e/kind/gateway
run "${kubectl[@]}" -n traefik-system rollout status deploy/traefik --timeout 120s
run "${kubectl[@]}" -n aibrix-system wait --for=condition=Programmed gateway/aibrix-eg --timeout 120s

step "monitoring: Prometheus Operator $PROMETHEUS_OPERATOR_VERSION, Prometheus, deploy/prometheus"
run "${kubectl[@]}" apply --server-side -k test/e2e/kind/monitoring
case $install in
helm | release-helm) # the chart renders the ServiceMonitors, the rules and the reader (helm-values.yaml)
  run "${kubectl[@]}" -n loraplane-system get servicemonitor,prometheusrule,networkpolicy ;;
*) run "${kubectl[@]}" apply --server-side -k test/e2e/kind/monitoring/loraplane ;;
esac
run "${kubectl[@]}" -n monitoring rollout status deploy/prometheus-operator --timeout 120s
if [ -z "$dry" ]; then
  poll 120 1 quietly "${kubectl[@]}" -n monitoring get statefulset prometheus-loraplane || true
fi
run "${kubectl[@]}" -n monitoring rollout status statefulset/prometheus-loraplane --timeout 180s

# Metrics as Prometheus scrapes them: HTTPS with the metrics reader's token.
token=$(if [ -n "$dry" ]; then echo '<token>'; else "${kubectl[@]}" -n loraplane-system create token e2e-metrics-reader --duration=2h; fi)

stack="$root/hack/e2e-kind-stack.sh"
suite() { # NAME RUN: the suite (go test -run RUN), logs in $art/NAME; every skip is listed at
  # the end, and one that test/e2e/skips/kind.txt does not expect fails the run
  local suite_dir=$art/$1
  rm -rf "$suite_dir" && mkdir -p "$suite_dir"
  e2e_hooks "$stack" "$suite_dir" # the fault hooks (test/e2e/hooks.txt)
  run env KUBECONFIG="${KUBECONFIG:-$HOME/.kube/config}" E2E_CONTEXT="$context" E2E_REPO_ROOT="$root" KIND_CLUSTER="$cluster" \
    E2E_ENGINE_IMAGE="$registry/fake-engine:$tag" E2E_ENGINE_ADMIN=http://127.0.0.1:29400 \
    E2E_METRICS_TOKEN="$token" E2E_GATEWAY_URL=http://127.0.0.1:28080 E2E_PROMETHEUS_URL=http://127.0.0.1:29090 \
    E2E_ADAPTER_METRICS=https://127.0.0.1:28443/metrics E2E_ROUTER_METRICS=https://127.0.0.1:28444/metrics \
    E2E_ADAPTER_STANDBY_METRICS=https://127.0.0.1:28445/metrics E2E_ROUTER_STANDBY_METRICS=https://127.0.0.1:28446/metrics \
    E2E_LEASE_DURATION=15s E2E_INSTALL="$install" IMAGE_REGISTRY="$registry" E2E_IMAGE_TAG="$tag" \
    E2E_HELM_VALUES="$(printf '%s\n' "${helm_values[@]}")" E2E_RELEASE_CHART="${release_chart:-}" E2E_RELEASE_VERSION="${release_version:+${release_version#v}}" \
    E2E_ROLLOUT_PREVIOUS="$root/hack/e2e-kind-rollout.sh to previous $suite_dir" \
    E2E_ROLLOUT_CURRENT="$root/hack/e2e-kind-rollout.sh to current $suite_dir" \
    bash -c "cd test/e2e && go build -o '$suite_dir/skipcheck' ./skipcheck &&
      go test -tags e2e -count=1 -timeout 40m -json -run '$2' ./ 2>&1 | '$suite_dir/skipcheck' -expected skips/kind.txt | tee '$art/$1.log'
      s=(\${PIPESTATUS[@]}); for c in \${s[@]}; do [ \$c = 0 ] || exit \$c; done"
}

step "the previous release's images (TestUpgradeRollback)"
run env KIND="$kind" hack/e2e-kind-rollout.sh build

step "e2e suite"
suite suite "${E2E_RUN:-.}"

if [ "$install" = helm ] || [ "$install" = release-helm ]; then
  export E2E_RELEASE_CHART="${release_chart:-}" E2E_RELEASE_VERSION="${release_version:+${release_version#v}}"
  step "helm upgrade with changed values"
  run hack/e2e-kind-helm.sh upgrade
  step "e2e suite after helm upgrade"
  suite suite-upgraded "${E2E_RUN_UPGRADED:-${E2E_RUN:-.}}"
  step "helm uninstall with a loaded adapter"
  run hack/e2e-kind-helm.sh uninstall
fi
if [ -n "$dry" ]; then echo "(dry run: nothing was done)"; exit 0; fi
echo "make e2e passed in $(( $(date +%s) - start )) s. Delete the cluster with: make e2e-down"
