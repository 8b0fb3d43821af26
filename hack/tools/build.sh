#!/usr/bin/env bash
# Builds one pinned tool from the Go module proxy into bin/, keyed by version.
#
#   hack/tools/build.sh <tool> <version>
#
# The binary lands in bin/<name>-<version> and bin/<name> becomes a symlink to it, so a
# version bump rebuilds and a warm run does nothing. Each tool has its own build (its own
# module or `go install pkg@version`), so their dependency graphs never mix with each other
# or with the controllers' workspace.
set -euo pipefail

tool=${1:?tool}
version=${2:?version}
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$root/bin
mkdir -p "$bin"
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0

link() { # name: point bin/<name> at bin/<name>-<version>
  ln -sfn "$1-$version" "$bin/$1"
}

have() { # all named versioned binaries exist
  local n
  for n in "$@"; do [ -x "$bin/$n-$version" ] || return 1; done
}

goinstall() { # name package [go install flags...]
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  GOBIN=$tmp go install "${@:3}" "$2@$version"
  mv "$tmp/$1" "$bin/$1-$version"
}

# module_copy MODULE@VERSION: a writable copy of a module in $src, for modules whose replace
# directives make `go install` refuse them (removed on exit).
module_copy() {
  tmp=$(mktemp -d)
  trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
  local dir
  dir=$(cd "$tmp" && go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -d "$dir" ] || { echo "go mod download $1 named no directory" >&2; exit 1; }
  src=$tmp/src
  cp -r "$dir" "$src" && chmod -R u+w "$src"
}

# kube_ldflags: the -ldflags that stamp $version into a Kubernetes binary (its --version and
# the version the API server reports).
kube_ldflags() {
  local f="-s -w" minor=${version#v1.} p
  minor=${minor%%.*}
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    f+=" -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    f+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$f"
}

# prometheus_ldflags RELEASE: the -ldflags that stamp github.com/prometheus/common/version.
prometheus_ldflags() {
  local f="-s -w" v
  for v in "Version=${1#v}" "Revision=$version" "Branch=$1" BuildUser=loraplane BuildDate=1970-01-01T00:00:00Z; do
    f+=" -X github.com/prometheus/common/version.$v"
  done
  echo "$f"
}

case "$tool" in
kube|kube-node)
  # kube: what a local (kwok) cluster and the tests run on the host. kube-node: what a kind
  # node runs on top (kubelet, kubeadm, kube-proxy); the offline image kit (hack/images) uses both.
  names=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  [ "$tool" = kube-node ] && names=(kubelet kubeadm kube-proxy)
  if ! have "${names[@]}"; then
    echo "Building Kubernetes ${version} (${names[*]}); a cold build takes several minutes"
    ldflags=$(kube_ldflags)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    (cd "$root/hack/tools/kube" && go build -ldflags "$ldflags" -o "$tmp/" \
      $(printf 'k8s.io/kubernetes/cmd/%s ' "${names[@]}"))
    for n in "${names[@]}"; do mv "$tmp/$n" "$bin/$n-$version"; done
  fi
  for n in "${names[@]}"; do link "$n"; done
  ;;
kube-compat)
  # kube-compat: the oldest kube-apiserver the chart claims, from hack/tools/kube-compat (its
  # own module, pinned there), for make test-compat. It goes to bin/k8s-<version>/ beside a
  # link to bin/etcd, a KUBEBUILDER_ASSETS directory of its own: bin/kube-apiserver (the
  # pinned KUBE_VERSION) is never touched.
  pinned=$(cd "$root/hack/tools/kube-compat" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
  [ "$pinned" = "$version" ] || { echo "hack/tools/kube-compat pins k8s.io/kubernetes $pinned, not $version" >&2; exit 1; }
  dir=$bin/k8s-$version
  if [ ! -x "$dir/kube-apiserver" ]; then
    echo "Building kube-apiserver ${version} into ${dir#"$root"/}; a cold build takes several minutes"
    ldflags=$(kube_ldflags)
    mkdir -p "$dir"
    (cd "$root/hack/tools/kube-compat" && go build -trimpath -ldflags "$ldflags" -o "$dir/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
    mv "$dir/kube-apiserver.tmp" "$dir/kube-apiserver"
  fi
  ln -sfn ../etcd "$dir/etcd"
  ;;
etcd)
  if ! have etcd; then
    echo "Building etcd ${version}"
    (cd "$root/hack/tools/etcd" && go build -ldflags "-s -w" -o "$bin/etcd-$version" .)
  fi
  link etcd
  ;;
kwok)
  for n in kwok kwokctl; do
    have "$n" || { echo "Building $n ${version}"; goinstall "$n" "sigs.k8s.io/kwok/cmd/$n"; }
    link "$n"
  done
  ;;
coredns)
  have coredns || { echo "Building coredns ${version}"; goinstall coredns github.com/coredns/coredns; }
  link coredns
  ;;
crictl)
  have crictl || { echo "Building crictl ${version}"; goinstall crictl sigs.k8s.io/cri-tools/cmd/crictl; }
  link crictl
  ;;
kind)
  have kind || { echo "Building kind ${version}"; goinstall kind sigs.k8s.io/kind; }
  link kind
  ;;
helm)
  # Helm v4: renders, lints and installs deploy/chart/loraplane (make test, make e2e-local,
  # E2E_INSTALL=helm make e2e).
  have helm || { echo "Building helm ${version}"; goinstall helm helm.sh/helm/v4/cmd/helm \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version -X helm.sh/helm/v4/internal/version.metadata="; }
  link helm
  ;;
traefik)
  # Traefik's go.mod has replace directives, so `go install` refuses it: build in a copy of
  # the module (downloaded by version) with its own go.mod and go.sum.
  if ! have traefik; then
    echo "Building traefik ${version} (a cold build takes several minutes)"
    module_copy "github.com/traefik/traefik/v3@$version"
    (cd "$src" && go build -trimpath -o "$bin/traefik-$version" \
      -ldflags "-s -w -X github.com/traefik/traefik/v3/pkg/version.Version=$version" ./cmd/traefik)
  fi
  link traefik
  ;;
prometheus-operator)
  # The operator and its config reloader (the Prometheus pods' sidecar), from one module that
  # has replace directives (go install refuses it): built in a copy of the module.
  names=(prometheus-operator prometheus-config-reloader)
  if ! have "${names[@]}"; then
    echo "Building prometheus-operator ${version} (operator, prometheus-config-reloader)"
    module_copy "github.com/prometheus-operator/prometheus-operator@$version"
    # Its replaces point at nested modules that the module zip leaves out: use their releases.
    (cd "$src" && go mod edit -dropreplace github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring \
      -dropreplace github.com/prometheus-operator/prometheus-operator/pkg/client)
    ldflags=$(prometheus_ldflags "$version")
    (cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$bin/prometheus-operator-$version" ./cmd/operator &&
      go build -trimpath -ldflags "$ldflags" -o "$bin/prometheus-config-reloader-$version" ./cmd/prometheus-config-reloader)
  fi
  for n in "${names[@]}"; do link "$n"; done
  ;;
prometheus)
  # The Prometheus server and promtool: the local stack scrapes with this server (make
  # e2e-local, make soak, make demo), make test checks the alert rules with promtool, and the
  # offline image kit puts the server in make e2e's Prometheus image. The module's version is
  # v0.3xx.y for Prometheus v3.xx.y; PROMETHEUS_RELEASE names the release for --version. The
  # module has a replace directive (go install refuses it): built in a copy. Without the
  # builtinassets tag the web UI is not served (it needs assets on disk); the HTTP API is all
  # the tests and the demo use.
  names=(prometheus promtool)
  if ! have "${names[@]}"; then
    echo "Building prometheus and promtool ${version} (a cold build takes several minutes)"
    module_copy "github.com/prometheus/prometheus@$version"
    release=${PROMETHEUS_RELEASE:-$version}
    ldflags=$(prometheus_ldflags "$release")
    (cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$bin/prometheus-$version" ./cmd/prometheus &&
      go build -trimpath -ldflags "$ldflags" -o "$bin/promtool-$version" ./cmd/promtool)
  fi
  for n in "${names[@]}"; do link "$n"; done
  ;;
jq)
  # gojq (github.com/itchyny/gojq), a jq in Go, as bin/jq: the scripts' JSON filters.
  if ! have jq; then
    echo "Building jq (gojq ${version})"
    goinstall gojq github.com/itchyny/gojq/cmd/gojq
    mv "$bin/gojq-$version" "$bin/jq-$version"
  fi
  link jq
  ;;
registry)
  # The CNCF distribution registry (github.com/distribution/distribution/v3, cmd/registry): a
  # real OCI registry on loopback that make release-test publishes the release to and pulls
  # it back from.
  have registry || { echo "Building registry (distribution ${version})"; goinstall registry github.com/distribution/distribution/v3/cmd/registry \
    -trimpath -ldflags "-s -w -X github.com/distribution/distribution/v3/version.version=$version"; }
  link registry
  ;;
cyclonedx-gomod)
  # CycloneDX SBOMs from the Go module graph: make release writes one per image.
  have cyclonedx-gomod || { echo "Building cyclonedx-gomod ${version}"; goinstall cyclonedx-gomod github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod -trimpath -ldflags "-s -w"; }
  link cyclonedx-gomod
  ;;
controller-gen)
  have controller-gen || { echo "Building controller-gen ${version}"; goinstall controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen; }
  link controller-gen
  ;;
golangci-lint)
  have golangci-lint || { echo "Building golangci-lint ${version}"; goinstall golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint; }
  link golangci-lint
  ;;
*)
  echo "unknown tool: $tool" >&2
  exit 2
  ;;
esac
