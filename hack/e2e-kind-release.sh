# Sourced by hack/e2e-kind.sh for E2E_INSTALL=release and release-helm: make e2e installing the
# release from an OCI registry instead of images built from the Dockerfile (.ci/run runs both;
# make release-test runs the same publication and installs on kwok).
#
#   - make release VERSION=$RELEASE_VERSION (default the newest CHANGELOG.md section) writes
#     dist/ on this host;
#   - the distribution registry (bin/registry, built from its Go module) runs as the container
#     $release_registry on the kind network, published on 127.0.0.1:$release_port;
#   - make release-publish pushes both image indexes and the chart to it;
#   - the node's containerd mirrors the release's registry host (ghcr.io for the default
#     IMAGE_REGISTRY) from that container (/etc/containerd/certs.d/<host>/hosts.toml), so
#     install.yaml's references, by tag and digest, are pulled from it unchanged;
#   - release_install installs with only kubectl (release) or helm (release-helm) on PATH.
# shellcheck shell=bash
release_version=${RELEASE_VERSION:-$("$root/hack/release.sh" latest)}
release_registry=loraplane-kind-registry
release_port=${KIND_REGISTRY_PORT:-25000}
release_repo=127.0.0.1:$release_port/${registry#*/}
release_host=${registry%%/*}
release_chart=oci://$release_repo/loraplane

step "release $release_version: make release, registry $release_registry on $network, make release-publish"
run make --no-print-directory release-tools
run make --no-print-directory release VERSION="$release_version"
registry_config /tmp/registry 0.0.0.0:5000 >"$art/registry.yml"
# The build context holds only the registry binary (a copy: bin/ may hold links to it, which
# Docker does not follow out of the context, and all of bin/ is hundreds of MB).
registry_ctx=$art/registry-image
rm -rf "$registry_ctx" && mkdir -p "$registry_ctx" && cp -L "$REGISTRY_SERVER" "$registry_ctx/registry"
run docker build -q -t "$release_registry:$DISTRIBUTION_VERSION" -f - "$registry_ctx" <<DOCKERFILE
FROM $BASE_IMAGE
COPY registry /registry
ENTRYPOINT ["/registry"]
DOCKERFILE
run docker rm -f "$release_registry" >/dev/null 2>&1 || true
run docker run -d --name "$release_registry" --network "$network" -p "127.0.0.1:$release_port:5000" \
  -v "$art/registry.yml:/etc/registry.yml:ro" "$release_registry:$DISTRIBUTION_VERSION" serve /etc/registry.yml
if [ -z "$dry" ]; then
  poll 60 1 quietly curl -fsS "http://127.0.0.1:$release_port/v2/" ||
    { echo "the registry $release_registry did not answer on 127.0.0.1:$release_port" >&2; exit 1; }
fi
run make --no-print-directory release-publish REGISTRY="$release_repo"
if [ -z "$dry" ] && ! docker exec "$node" grep -q 'config_path *= *"/etc/containerd/certs.d"' /etc/containerd/config.toml; then
  echo "the node's containerd reads no /etc/containerd/certs.d: it cannot mirror $release_host" >&2
  exit 1
fi
run docker exec -i "$node" sh -c "mkdir -p /etc/containerd/certs.d/$release_host && cat > /etc/containerd/certs.d/$release_host/hosts.toml" <<TOML
server = "https://$release_host"
[host."http://$release_registry:5000"]
  capabilities = ["pull", "resolve"]
TOML

release_install() {
  local nogo as_user
  nogo=$(go_free_path "$art/nogo")
  mkdir -p "$art/home"
  as_user=(env -i PATH="$nogo" HOME="$art/home")
  if [ "$install" = release ]; then
    step "kubectl apply --server-side -f dist/install.yaml (PATH: helm, kubectl)"
    run "${as_user[@]}" kubectl --kubeconfig "${KUBECONFIG:-$HOME/.kube/config}" --context "$context" \
      apply --server-side --force-conflicts -f "$root/dist/install.yaml"
  else
    step "helm install $release_chart --version ${release_version#v} (PATH: helm, kubectl)"
    run "${as_user[@]}" helm install loraplane "$release_chart" --version "${release_version#v}" --plain-http \
      --kubeconfig "${KUBECONFIG:-$HOME/.kube/config}" --kube-context "$context" -n loraplane-system --create-namespace \
      --take-ownership --force-conflicts "${helm_values[@]}" --wait --timeout 5m
  fi
}
