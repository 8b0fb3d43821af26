#!/usr/bin/env bash
# The offline image kit: stand-ins, under their upstream names and tags, for every public image
# that `make e2e` needs, built on this machine from the Go module proxy and Debian's packages
# (no registry is ever asked):
#
#   gcr.io/distroless/static:nonroot   users root/nobody/nonroot(65532), CA certificates, /tmp
#   golang:1.26                        Debian + this machine's Go toolchain (the builders' base)
#   registry.k8s.io/pause              kubernetes' own pause.c, static
#   registry.k8s.io/kube-{apiserver,controller-manager,scheduler,proxy}, etcd, coredns/coredns
#                                      binaries built from their Go modules (hack/tools/build.sh)
#   traefik, quay.io/prometheus-operator/{prometheus-operator,prometheus-config-reloader}
#                                      built from their Go modules (hack/tools/build.sh)
#   quay.io/prometheus/prometheus      github.com/prometheus/prometheus (module v0.3xx = v3.xx)
#   kindest/node:<kubernetes version>  kind's images/base recipe on a debootstrap'd Debian with
#                                      the images above preloaded (hack/images/node)
#
# `make e2e` knows nothing of the kit: it names the upstream images, and Docker finds these.
# Each image is built once: one that `docker image inspect` finds is kept; the root file
# systems are cached as tarballs in $LORAPLANE_IMAGE_CACHE (default ~/.cache/loraplane/images),
# outside the clone. A second run builds nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/hack/lib.sh"
# Versions and image names come from the Makefile (their one definition); run through make.
for v in KUBE_VERSION ETCD_VERSION COREDNS_VERSION CRICTL_VERSION KIND_VERSION TRAEFIK_VERSION \
  PROMETHEUS_OPERATOR_VERSION PROMETHEUS_VERSION PROMETHEUS_MODULE_VERSION BUILDER_IMAGE BASE_IMAGE KIND_NODE_IMAGE; do
  [ -n "${!v:-}" ] || { echo "kit: $v is not set: run this through make (make e2e-deps), which defines every version" >&2; exit 2; }
done
export PROMETHEUS_RELEASE=$PROMETHEUS_VERSION
cache=${LORAPLANE_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/loraplane/images}
bin=$root/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$cache"
built=()

have() { docker image inspect "$1" >/dev/null 2>&1; }
quiet() { # run a docker command without its output or the CLI's legacy-builder notice
  local out rc
  out=$("$@" 2>&1 >/dev/null) && rc=0 || rc=$?
  grep -v -e 'legacy builder is deprecated' -e 'Install the buildx' -e 'docs.docker.com/go/buildx' -e '^$' <<<"$out" >&2 || true
  return "$rc"
}
log() { echo "kit: $*"; }
tool() { "$root/hack/tools/build.sh" "$@" >&2; }

# kit.sh --present: exit 0 when every image that make e2e uses from the kit is already here (the
# node image holds the Kubernetes images), else list the missing ones and exit 1. Builds nothing;
# .ci/run uses it through make kit-present (which defines the versions) to tell what the kind
# stages will cost.
if [ "${1:-}" = --present ]; then
  docker info >/dev/null 2>&1 || { echo "kit: no Docker engine answers" >&2; exit 1; }
  missing=()
  for i in "$BASE_IMAGE" "$BUILDER_IMAGE" "$KIND_NODE_IMAGE" "traefik:$TRAEFIK_VERSION" \
    "quay.io/prometheus-operator/prometheus-operator:$PROMETHEUS_OPERATOR_VERSION" \
    "quay.io/prometheus-operator/prometheus-config-reloader:$PROMETHEUS_OPERATOR_VERSION" \
    "quay.io/prometheus/prometheus:$PROMETHEUS_VERSION"; do
    have "$i" || missing+=("$i")
  done
  [ ${#missing[@]} = 0 ] && { log "every image present"; exit 0; }
  log "missing: ${missing[*]}"
  exit 1
fi

# kubeadm names the images and their tags; the kit follows it rather than a list of its own.
tool kube "$KUBE_VERSION"
tool kube-node "$KUBE_VERSION"
mapfile -t kubeadm_images < <("$bin/kubeadm" config images list --kubernetes-version "$KUBE_VERSION" 2>/dev/null)
image_of() { # component: kubeadm's image reference for it
  local i
  for i in "${kubeadm_images[@]}"; do
    case "${i##*/}" in "$1":*) echo "$i"; return ;; esac
  done
  echo "kubeadm lists no image for $1" >&2
  exit 1
}

# Debian mirror and suite: the ones apt on this machine already uses.
debian_mirror() {
  local m
  m=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$m" ] || m=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  echo "${m:-http://deb.debian.org/debian}"
}
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")

# rootfs NAME PACKAGES: a debootstrap'd root file system as a tarball in the cache, keyed by
# suite and package list; prints its path.
rootfs() {
  local name=$1 pkgs=$2 key tar dir
  key=$(printf '%s %s' "$suite" "$pkgs" | sha256sum | cut -c1-12)
  tar=$cache/rootfs-$name-$suite-$key.tar
  if [ ! -s "$tar" ]; then
    command -v debootstrap >/dev/null || {
      [ "$(id -u)" = 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
    } || { echo "kit: debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
    dir=$work/rootfs-$name
    log "debootstrap $suite ($name: $pkgs) from $(debian_mirror)" >&2
    debootstrap --variant=minbase --include="$pkgs" "$suite" "$dir" "$(debian_mirror)" >"$work/debootstrap-$name.log" 2>&1 \
      || { tail -n 20 "$work/debootstrap-$name.log" >&2; exit 1; }
    rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/archives/*.deb "$dir"/var/log/* "$dir"/etc/machine-id
    : >"$dir/etc/machine-id"
    tar -C "$dir" --numeric-owner -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
    rm -rf "$dir"
  fi
  echo "$tar"
}

# Every kit image carries this label, so that what builds on one can tell (make docker-build
# warns that it builds on a stand-in).
kit_label=io.loraplane.kit=stand-in

# import TAR IMAGE [docker import --change ...]: a root file system as an image.
import() {
  local tar=$1 image=$2
  shift 2
  docker import --change "LABEL $kit_label" "$@" "$tar" "$image" >/dev/null
}

# build IMAGE CONTEXT [docker build args]: the context's Dockerfile.
build() {
  local image=$1 ctx=$2
  shift 2
  quiet docker build -q --label "$kit_label" "$@" -t "$image" "$ctx"
  built+=("$image")
}

# --- distroless static (nonroot) -------------------------------------------------------------
if ! have "$BASE_IMAGE"; then
  log "$BASE_IMAGE"
  d=$work/distroless
  mkdir -p "$d"/etc/ssl/certs "$d"/tmp "$d"/home/nonroot "$d"/root "$d"/var
  printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
    'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$d/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'tty:x:5:' 'staff:x:50:' 'nonroot:x:65532:' >"$d/etc/group"
  echo 'hosts: files dns' >"$d/etc/nsswitch.conf"
  cp /etc/ssl/certs/ca-certificates.crt "$d/etc/ssl/certs/"
  chmod 1777 "$d/tmp"
  chmod 0700 "$d/root" "$d/home/nonroot"
  chown 65532:65532 "$d/home/nonroot"
  tar -C "$d" --numeric-owner -cf "$work/distroless.tar" .
  import "$work/distroless.tar" "$BASE_IMAGE" \
    --change 'USER 65532:65532' --change 'WORKDIR /home/nonroot' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt'
  built+=("$BASE_IMAGE")
fi

# --- Debian base of the builder and kube-proxy images ------------------------------------------
debian=loraplane-kit/debian:$suite
debian_pkgs=ca-certificates,git,iptables,nftables,conntrack,ipset,kmod
debian_tar=$(rootfs debian "$debian_pkgs")
debian_image=$debian-$(basename "$debian_tar" .tar | awk -F- '{print $NF}')
if ! have "$debian_image"; then
  import "$debian_tar" "$debian_image" --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
fi

# --- golang -----------------------------------------------------------------------------------
goversion=$(go env GOVERSION)
if ! have "$BUILDER_IMAGE"; then
  log "$BUILDER_IMAGE ($goversion, this machine's toolchain)"
  ctx=$work/golang
  mkdir -p "$ctx"
  tar -C "$(dirname "$(go env GOROOT)")" -cf "$ctx/go.tar" "$(basename "$(go env GOROOT)")"
  # The builder downloads modules like this machine does, so it trusts what this machine
  # trusts (a sandbox's egress CA, for one).
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/"
  cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM $debian_image
ADD go.tar /usr/local/
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV GOLANG_VERSION=${goversion#go} GOTOOLCHAIN=local GOPATH=/go \
    PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN mkdir -p /go/bin /go/src && chmod -R 1777 /go && go version
WORKDIR /go
DOCKERFILE
  build "$BUILDER_IMAGE" "$ctx" -t "golang:${goversion#go}"
fi

# --- control-plane images ---------------------------------------------------------------------
tool etcd "$ETCD_VERSION"
tool coredns "$COREDNS_VERSION"
tool crictl "$CRICTL_VERSION"

binary_image() { # image binary entrypoint-path [base]
  local image=$1 binary=$2 path=$3 base=${4:-$BASE_IMAGE} ctx
  have "$image" && return
  log "$image"
  ctx=$work/$(basename "$path")
  mkdir -p "$ctx"
  cp "$(readlink -f "$binary")" "$ctx/binary"
  cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM $base
COPY binary $path
USER 0:0
ENTRYPOINT ["$path"]
DOCKERFILE
  build "$image" "$ctx"
}
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  binary_image "$(image_of $c)" "$bin/$c" "/usr/local/bin/$c"
done
binary_image "$(image_of kube-proxy)" "$bin/kube-proxy" /usr/local/bin/kube-proxy "$debian_image"
binary_image "$(image_of etcd)" "$bin/etcd" /usr/local/bin/etcd
binary_image "$(image_of coredns)" "$bin/coredns" /coredns

pause=$(image_of pause)
if ! have "$pause"; then
  log "$pause (kubernetes build/pause/linux/pause.c)"
  src=$(cd "$root/hack/tools/kube" && GOWORK=off go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
  ctx=$work/pause
  mkdir -p "$ctx"
  gcc -Os -Wall -Werror -static -DVERSION="${pause##*:}" -o "$ctx/pause" "$src"
  strip "$ctx/pause"
  printf '%s\n' 'FROM scratch' 'COPY pause /pause' 'USER 65535:65535' 'ENTRYPOINT ["/pause"]' >"$ctx/Dockerfile"
  build "$pause" "$ctx"
fi

# --- the gateway and monitoring stack of make e2e --------------------------------------------
# Traefik (the Gateway API implementation), Prometheus Operator and its config reloader, and
# the Prometheus server, built from their Go modules (hack/tools/build.sh).
# Each tool is built only for an image that is missing (a cold build takes minutes).
have "traefik:$TRAEFIK_VERSION" || tool traefik "$TRAEFIK_VERSION"
binary_image "traefik:$TRAEFIK_VERSION" "$bin/traefik" /usr/local/bin/traefik
have "quay.io/prometheus-operator/prometheus-operator:$PROMETHEUS_OPERATOR_VERSION" &&
  have "quay.io/prometheus-operator/prometheus-config-reloader:$PROMETHEUS_OPERATOR_VERSION" ||
  tool prometheus-operator "$PROMETHEUS_OPERATOR_VERSION"
binary_image "quay.io/prometheus-operator/prometheus-operator:$PROMETHEUS_OPERATOR_VERSION" \
  "$bin/prometheus-operator" /bin/operator
binary_image "quay.io/prometheus-operator/prometheus-config-reloader:$PROMETHEUS_OPERATOR_VERSION" \
  "$bin/prometheus-config-reloader" /bin/prometheus-config-reloader
# The Prometheus server from its Go module (Debian's package leaves out Kubernetes service
# discovery, which every configuration the operator writes uses).
have "quay.io/prometheus/prometheus:$PROMETHEUS_VERSION" || tool prometheus "$PROMETHEUS_MODULE_VERSION"
binary_image "quay.io/prometheus/prometheus:$PROMETHEUS_VERSION" "$bin/prometheus" /bin/prometheus

# --- kindest/node -----------------------------------------------------------------------------
. "$root/hack/images/node/build.sh"

if [ ${#built[@]} -eq 0 ]; then
  log "every image is present; nothing built"
else
  log "built ${built[*]}"
fi
