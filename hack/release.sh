#!/usr/bin/env bash
# make release / make release-publish: loraplane's release, built here without Docker.
#
#   hack/release.sh build     write dist/ for $VERSION (make release VERSION=vX.Y.Z)
#   hack/release.sh publish   push dist/'s images and chart to $REGISTRY (make release-publish)
#   hack/release.sh reproduce build the release again elsewhere, at another time, into another
#                             directory; its SHA256SUMS must be dist/'s (make release-test)
#   hack/release.sh notes V   print CHANGELOG.md's section of version V (fails when there is none)
#   hack/release.sh latest    print the newest version that has a CHANGELOG.md section
#
# dist/ after build:
#   install.yaml              CRD, namespace, both controllers, RBAC, Services; images as
#                             $IMAGE_REGISTRY/<binary>:$VERSION@sha256:<index digest>
#   crds.yaml                 the CRD alone
#   loraplane-X.Y.Z.tgz       the chart: version X.Y.Z, appVersion vX.Y.Z, the digests in values
#   images/<binary>/          OCI image layout: one index, linux/amd64 + linux/arm64
#   sbom/<binary>_<os>_<arch>.cdx.json   CycloneDX SBOM of each binary's Go modules
#   RELEASE-NOTES.md          CHANGELOG.md's section, the images and how to install
#   SHA256SUMS                every file above
# Every timestamp is the commit's (SOURCE_DATE_EPOCH), so one commit and version give the same
# bytes, digests and checksums anywhere. A dist/ already built from the same inputs is kept.
#
# Environment (the Makefile sets it): VERSION, REVISION, LDFLAGS, IMAGE_REGISTRY, PLATFORMS,
# BINARIES; publish: REGISTRY (host:port/namespace). RELEASE_REBUILD=1 rebuilds a kept dist/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/bin
dist=${RELEASE_DIST:-$root/dist}
work=${RELEASE_WORK:-$root/_artifacts/release}
stamp=$dist/.release-inputs

log() { echo "release: $*"; }
die() { echo "release: $*" >&2; exit 1; }

# notes VERSION: the lines of CHANGELOG.md between "## [VERSION]" and the next "## [".
# Leading and trailing blank lines are left out.
notes() {
  awk -v v="$1" '
    /^## \[/ { inside = (index($0, "## [" v "]") == 1); next }
    inside && (n || NF) { line[++n] = $0 }
    END { while (n && line[n] == "") n--; for (i = 1; i <= n; i++) print line[i] }' "$root/CHANGELOG.md"
}

latest() {
  sed -n 's/^## \[\(v[0-9][0-9.]*[^]]*\)\].*/\1/p' "$root/CHANGELOG.md" | head -n 1
}

check_version() {
  [[ ${VERSION:-} =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
    die "VERSION='${VERSION:-}' is not a release version: make release VERSION=vX.Y.Z (semver with a v)"
  [ -n "$(notes "$VERSION")" ] ||
    die "CHANGELOG.md has no section '## [$VERSION]' (or it is empty): write the release's changes there first"
}

# inputs: what dist/ is made from; equal inputs give an equal dist/.
inputs() {
  echo "version=$VERSION revision=$REVISION registry=$IMAGE_REGISTRY platforms=$PLATFORMS epoch=$SOURCE_DATE_EPOCH"
  echo "ldflags=$LDFLAGS"
  go version
  echo "changes=$(git -C "$root" status --porcelain --untracked-files=no | sha256sum | cut -c1-16) $(git -C "$root" diff HEAD | sha256sum | cut -c1-16)"
}

build_binaries() { # into $work/bin/<os>_<arch>/<binary>
  local b p
  for p in ${PLATFORMS//,/ }; do
    for b in $BINARIES; do
      log "go build $b for $p"
      (cd "$root/$b" && GOWORK=off CGO_ENABLED=0 GOOS=${p%/*} GOARCH=${p#*/} \
        go build -trimpath -buildvcs=false -ldflags "$LDFLAGS" -o "$work/bin/${p/\//_}/$b" .)
    done
  done
  (cd "$root/hack/release" && GOWORK=off go build -o "$work/release" .)
}

build_images() { # dist/images/<binary>, dist/sbom; sets digest_<binary>
  local b p args d
  mkdir -p "$dist/images" "$dist/sbom"
  for b in $BINARIES; do
    args=()
    for p in ${PLATFORMS//,/ }; do
      args+=(-binary "$p=$work/bin/${p/\//_}/$b")
      "${CYCLONEDX_GOMOD:-$bin/cyclonedx-gomod}" bin -json -std -noserial -notimestamp -version "$VERSION" \
        -output "$dist/sbom/${b}_${p/\//_}.cdx.json" "$work/bin/${p/\//_}/$b" 2>"$work/sbom.log" ||
        { cat "$work/sbom.log" >&2; die "cyclonedx-gomod failed for $b $p"; }
    done
    d=$("$work/release" image -name "$b" -version "$VERSION" -revision "$REVISION" \
      -epoch "$SOURCE_DATE_EPOCH" -out "$dist/images/$b" "${args[@]}")
    printf -v "digest_${b//-/_}" %s "$d"
    log "$IMAGE_REGISTRY/$b:$VERSION@$d"
  done
}

digest_of() { local v="digest_${1//-/_}"; echo "${!v}"; }

build_manifests() { # dist/install.yaml, dist/crds.yaml
  local overlay=$work/overlay b
  mkdir -p "$overlay"
  {
    printf '%s\n' 'apiVersion: kustomize.config.k8s.io/v1beta1' 'kind: Kustomization' 'resources:' \
      "- $(realpath --relative-to="$overlay" "$root/deploy/default")" 'images:'
    for b in $BINARIES; do
      printf '%s\n' "- name: ghcr.io/loraplane/$b" "  newName: $IMAGE_REGISTRY/$b" "  newTag: \"$VERSION\"" "  digest: $(digest_of "$b")"
    done
  } >"$overlay/kustomization.yaml"
  {
    echo "# loraplane $VERSION ($REVISION): the CRD, the namespace and both controllers."
    echo "# kubectl apply --server-side -f install.yaml"
    "$bin/kubectl" kustomize "$overlay"
  } >"$dist/install.yaml"
  {
    echo "# loraplane $VERSION ($REVISION): the ModelAdapter CRD alone."
    "$bin/kubectl" kustomize "$root/deploy/crds"
  } >"$dist/crds.yaml"
  for b in $BINARIES; do
    grep -qF "image: $IMAGE_REGISTRY/$b:$VERSION@$(digest_of "$b")" "$dist/install.yaml" ||
      die "install.yaml names no image $IMAGE_REGISTRY/$b:$VERSION@$(digest_of "$b")"
  done
}

build_chart() { # dist/loraplane-X.Y.Z.tgz
  local chart=$work/chart/loraplane sets=()
  mkdir -p "$work/chart"
  cp -r "$root/deploy/chart/loraplane" "$chart"
  sets=(-set "image.registry=$IMAGE_REGISTRY")
  sets+=(-set "adapterController.image.digest=$(digest_of adapter-controller)")
  sets+=(-set "routerController.image.digest=$(digest_of router-controller)")
  "$work/release" values -in "$chart/values.yaml" -out "$chart/values.yaml" "${sets[@]}"
  # helm package stamps the archive's entries with SOURCE_DATE_EPOCH (exported by build; without
  # it, each file's modification time).
  "$bin/helm" package "$chart" --version "${VERSION#v}" --app-version "$VERSION" -d "$dist" >/dev/null
  "$bin/helm" template loraplane "$dist/loraplane-${VERSION#v}.tgz" --namespace loraplane-system >"$work/chart.yaml"
  for b in $BINARIES; do
    grep -qF "image: $IMAGE_REGISTRY/$b:$VERSION@$(digest_of "$b")" "$work/chart.yaml" ||
      die "the packaged chart renders no image $IMAGE_REGISTRY/$b:$VERSION@$(digest_of "$b")"
  done
}

write_notes() { # dist/RELEASE-NOTES.md
  local b
  {
    echo "# loraplane $VERSION"
    echo
    notes "$VERSION"
    echo
    echo "## Images"
    echo
    for b in $BINARIES; do echo "- \`$IMAGE_REGISTRY/$b:$VERSION@$(digest_of "$b")\` (${PLATFORMS//,/, })"; done
    echo
    echo "## Install"
    echo
    echo '```sh'
    echo "kubectl apply --server-side -f install.yaml"
    echo "# or"
    echo "helm install loraplane oci://$IMAGE_REGISTRY/loraplane --version ${VERSION#v} \\"
    echo "  --namespace loraplane-system --create-namespace --take-ownership"
    echo '```'
    echo
    echo "Built from $REVISION; \`sha256sum -c SHA256SUMS\` checks every file."
  } >"$dist/RELEASE-NOTES.md"
}

build() {
  check_version
  REVISION=$(git -C "$root" rev-parse HEAD)
  SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct)}
  export REVISION SOURCE_DATE_EPOCH
  if [ -n "$(git -C "$root" status --porcelain --untracked-files=no)" ]; then
    echo "release: WARNING: the work tree has uncommitted changes: dist/ is not the release of $REVISION alone" >&2
  fi
  if [ -z "${RELEASE_REBUILD:-}" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$(inputs)" ] &&
    (cd "$dist" && sha256sum --quiet -c SHA256SUMS); then
    log "dist/ is already $VERSION of $REVISION (same inputs, SHA256SUMS verified): kept (RELEASE_REBUILD=1 rebuilds)"
    return
  fi
  local start=$SECONDS
  rm -rf "$dist" "$work"
  mkdir -p "$dist" "$work"
  build_binaries
  build_images
  build_manifests
  build_chart
  write_notes
  (cd "$dist" && find . -type f ! -name SHA256SUMS ! -name .release-inputs | sed 's|^\./||' | LC_ALL=C sort |
    xargs sha256sum >SHA256SUMS)
  inputs >"$stamp"
  log "dist/ holds $VERSION of $REVISION ($((SECONDS - start)) s): $(wc -l <"$dist/SHA256SUMS") files in SHA256SUMS"
}

publish() {
  [ -n "${REGISTRY:-}" ] || die "REGISTRY is not set: make release-publish REGISTRY=host:port/namespace"
  [ -f "$stamp" ] || die "dist/ holds no release: run make release VERSION=vX.Y.Z first"
  (cd "$dist" && sha256sum --quiet -c SHA256SUMS) || die "dist/ does not match its SHA256SUMS"
  local version b chart plain=()
  version=$(sed -n 's/^version=\([^ ]*\) .*/\1/p' "$stamp")
  chart=$dist/loraplane-${version#v}.tgz
  mkdir -p "$work"
  (cd "$root/hack/release" && GOWORK=off go build -o "$work/release" .)
  for b in $BINARIES; do
    log "pushing $REGISTRY/$b:$version"
    "$work/release" push -layout "$dist/images/$b" -ref "$REGISTRY/$b:$version"
  done
  case ${REGISTRY%%/*} in 127.*|localhost|localhost:*|\[::1\]*) plain=(--plain-http) ;; esac
  log "pushing the chart to oci://$REGISTRY"
  "$bin/helm" push "$chart" "oci://$REGISTRY" "${plain[@]}"
}

# reproduce: a second build of dist/'s inputs from nothing (another output directory, another wall
# time; the Go build cache is shared unless GOCACHE says otherwise) must give every byte again.
reproduce() {
  [ -f "$stamp" ] || die "dist/ holds no release: run make release VERSION=vX.Y.Z first"
  VERSION=$(sed -n 's/^version=\([^ ]*\) .*/\1/p' "$stamp")
  export VERSION
  REVISION=$(git -C "$root" rev-parse HEAD)
  SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct)
  [ "$(cat "$stamp")" = "$(inputs)" ] || die "dist/ was built from other inputs than this tree's: run make release VERSION=$VERSION first"
  local again=$work-reproduce start=$SECONDS
  rm -rf "$again"
  RELEASE_DIST=$again/dist RELEASE_WORK=$again/work RELEASE_REBUILD=1 "$0" build >"$work-reproduce.log" 2>&1 ||
    { cat "$work-reproduce.log" >&2; die "the second build failed"; }
  diff -u "$dist/SHA256SUMS" "$again/dist/SHA256SUMS" >&2 ||
    die "a second build of $VERSION gave other bytes (the lines above; builds in $again/dist)"
  log "a second build of $VERSION ($((SECONDS - start)) s) gave the same $(wc -l <"$dist/SHA256SUMS") files, byte for byte: reproducible"
  rm -rf "$again"
}

case ${1:-} in
build) build ;;
publish) publish ;;
reproduce) reproduce ;;
notes) VERSION=${2:?version}; check_version; notes "$VERSION" ;;
latest) latest ;;
*) echo "usage: $0 build|publish|reproduce|notes VERSION|latest" >&2; exit 2 ;;
esac
