#!/usr/bin/env bash
# make release-test: the release in dist/ (make release VERSION=$VERSION, which make runs first)
# published to a real OCI registry on loopback and installed from it the way a platform team
# would, with nothing but helm and kubectl:
#   1. the distribution registry (bin/registry) on 127.0.0.1 (RELEASE_TEST_PORT, or a free port)
#   2. hack/release.sh publish (make release-publish) to 127.0.0.1:PORT/loraplane
#   3. both image indexes pulled back: every digest and layer equal to dist/images; the chart
#      pulled back with helm (--plain-http): the bytes of dist/'s .tgz
#   4. a kwok cluster (CLUSTER_NAME=loraplane-release); with PATH holding only helm and kubectl:
#      helm install oci://... → every object of the release exists, the CRD is Established, both
#      Deployments name their image by tag and digest; helm uninstall; then kubectl apply
#      --server-side -f dist/install.yaml → the same checks
#   5. hack/release.sh reproduce: a second build of the same inputs gives dist/ byte for byte
# Pods do not run on kwok (its nodes fake them); what is checked is what the API server holds.
# Logs in _artifacts/release-test/; the cluster and the registry are removed at the end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib.sh"
for v in VERSION IMAGE_REGISTRY BINARIES REGISTRY_SERVER; do
  [ -n "${!v:-}" ] || { echo "$v is not set: run this through make release-test" >&2; exit 2; }
done
art=$root/_artifacts/release-test
dist=$root/dist
# The registry's port: RELEASE_TEST_PORT, or the first free one from 15500 (no fixed port, so the
# test can run beside another on the same machine).
port=${RELEASE_TEST_PORT:-}
if [ -z "$port" ]; then
  for port in $(seq 15500 15599); do open_port "$port" || break; done
fi
registry=127.0.0.1:$port/loraplane
chart_version=${VERSION#v}
export CLUSTER_NAME=loraplane-release CLUSTER_NODES=1
start=$SECONDS
step() { echo "release-test: $* ($((SECONDS - start)) s)"; }
fail() { echo "release-test: FAIL: $*" >&2; exit 1; }

rm -rf "$art"
mkdir -p "$art/home"
registry_pid=
cleanup() {
  local rc=$?
  [ -z "$registry_pid" ] || kill "$registry_pid" 2>/dev/null || true
  "$root/hack/cluster.sh" logs "$art/cluster" >/dev/null 2>&1 || true
  "$root/hack/cluster.sh" down >/dev/null 2>&1 || true
  echo "release-test: $([ $rc = 0 ] && echo passed || echo "failed (exit $rc)") in $((SECONDS - start)) s; logs in ${art#"$root"/}"
  exit $rc
}
trap cleanup EXIT

grep -q "^version=$VERSION " "$dist/.release-inputs" 2>/dev/null || fail "dist/ does not hold $VERSION: run make release VERSION=$VERSION"
digest() { # binary: the index digest of dist/images/<binary>
  jq -r '.manifests[0].digest' "$dist/images/$1/index.json"
}

step "registry (distribution, $("$REGISTRY_SERVER" --version | awk '{print $NF}')) on 127.0.0.1:$port"
open_port "$port" && fail "127.0.0.1:$port is taken (RELEASE_TEST_PORT picks another)"
registry_config "$art/registry" "127.0.0.1:$port" >"$art/registry.yml"
"$REGISTRY_SERVER" serve "$art/registry.yml" >"$art/registry.log" 2>&1 &
registry_pid=$!
poll 30 0.2 quietly curl -fsS "http://127.0.0.1:$port/v2/" || fail "the registry did not answer on 127.0.0.1:$port within 30 s (registry.log)"

step "make release-publish REGISTRY=$registry"
REGISTRY=$registry "$root/hack/release.sh" publish 2>&1 | tee "$art/publish.log"

step "pulling back: image indexes and the chart"
tool=$root/_artifacts/release/release
for b in $BINARIES; do
  "$tool" verify -layout "$dist/images/$b" -ref "$registry/$b:$VERSION" | tee -a "$art/verify.log"
done
nogo=$(go_free_path "$art/nogo")
mkdir -p "$art/pulled"
as_user() { # a machine with only helm and kubectl: no Go, no make, no environment of ours
  env -i PATH="$nogo" HOME="$art/home" "$@"
}
as_user helm pull "oci://$registry/loraplane" --version "$chart_version" --plain-http -d "$art/pulled" >>"$art/verify.log" 2>&1 ||
  fail "helm pull oci://$registry/loraplane --version $chart_version failed: $(tail -n 3 "$art/verify.log")"
cmp "$art/pulled/loraplane-$chart_version.tgz" "$dist/loraplane-$chart_version.tgz" ||
  fail "the chart pulled back differs from dist/loraplane-$chart_version.tgz"
echo "chart oci://$registry/loraplane:$chart_version pulled back: $(sha256sum <"$dist/loraplane-$chart_version.tgz" | cut -c1-16)… as in dist/" | tee -a "$art/verify.log"

step "kwok cluster $CLUSTER_NAME"
"$root/hack/cluster.sh" up >"$art/cluster-up.log" 2>&1 || { cat "$art/cluster-up.log" >&2; fail "the kwok cluster did not start"; }
kubeconfig=$("$root/hack/cluster.sh" kubeconfig)
kc=("$root/bin/kubectl" --kubeconfig "$kubeconfig")

# check_installed HOW MANIFEST: every object of MANIFEST exists, the CRD is Established and both
# Deployments run the release's images by tag and digest.
check_installed() {
  local how=$1 manifest=$2 b want got objects
  objects=$("${kc[@]}" get -f "$manifest" -o name 2>"$art/$how-get.err") ||
    fail "$how: objects of the release are missing: $(grep -m 3 NotFound "$art/$how-get.err")"
  "${kc[@]}" wait --for=condition=Established crd/modeladapters.model.aibrix.ai --timeout=30s >/dev/null ||
    fail "$how: the ModelAdapter CRD is not Established"
  for b in $BINARIES; do
    want="$IMAGE_REGISTRY/$b:$VERSION@$(digest "$b")"
    got=$("${kc[@]}" -n loraplane-system get deployment "$b" -o jsonpath='{.spec.template.spec.containers[0].image}')
    [ "$got" = "$want" ] || fail "$how: deployment/$b runs $got, want $want"
  done
  echo "$how: $(wc -l <<<"$objects") objects present ($(sed 's|/.*||' <<<"$objects" | sort | uniq -c | awk '{printf "%s %s, ", $1, $2}')CRD Established); images by tag and digest" |
    tee -a "$art/installed.txt"
}

# The gateway namespace exists where a Gateway runs (the router's HTTPRoute Role lives there):
# the user's cluster has it before the install, as docs/install.md says.
as_user kubectl --kubeconfig "$kubeconfig" create namespace aibrix-system >"$art/gateway-namespace.log" 2>&1 ||
  { cat "$art/gateway-namespace.log" >&2; fail "creating the gateway namespace failed"; }
step "helm install oci://$registry/loraplane --version $chart_version (PATH: helm, kubectl)"
as_user helm install loraplane "oci://$registry/loraplane" --version "$chart_version" --plain-http \
  --kubeconfig "$kubeconfig" --namespace loraplane-system --create-namespace --take-ownership >"$art/helm-install.log" 2>&1 ||
  { cat "$art/helm-install.log" >&2; fail "helm install from the registry failed"; }
as_user helm get manifest loraplane --kubeconfig "$kubeconfig" --namespace loraplane-system >"$art/helm-manifest.yaml"
{ echo ---; as_user helm show crds "$dist/loraplane-$chart_version.tgz"; } >>"$art/helm-manifest.yaml"
check_installed helm "$art/helm-manifest.yaml"
# Without its hooks: the pre-delete cleanup Job cannot run on kwok. --wait: the release's objects
# are gone before install.yaml is applied (the namespace stays, by its resource policy).
as_user helm uninstall loraplane --kubeconfig "$kubeconfig" --namespace loraplane-system --no-hooks --wait >>"$art/helm-install.log" 2>&1 ||
  fail "helm uninstall failed"

step "kubectl apply --server-side -f dist/install.yaml (PATH: helm, kubectl)"
as_user kubectl --kubeconfig "$kubeconfig" apply --server-side -f "$dist/install.yaml" >"$art/kubectl-apply.log" 2>&1 ||
  { cat "$art/kubectl-apply.log" >&2; fail "kubectl apply of dist/install.yaml failed"; }
check_installed install.yaml "$dist/install.yaml"

step "reproducible: a second build of $VERSION"
"$root/hack/release.sh" reproduce 2>&1 | tee "$art/reproduce.log"
