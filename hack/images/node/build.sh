# The kindest/node stand-in, sourced by hack/images/kit.sh (its helpers and variables: rootfs,
# import, quiet, have, log, $work, $bin, kubeadm_images, built): kind's images/base recipe on a
# debootstrap'd Debian, with kubeadm's images preloaded into the node's containerd.
if ! have "$KIND_NODE_IMAGE"; then
  node_pkgs=systemd,systemd-sysv,dbus,iptables,nftables,conntrack,ethtool,socat,iproute2,procps,util-linux,mount,kmod,ca-certificates,libseccomp2,containerd,runc,containernetworking-plugins,pigz,jq,bash,curl,e2fsprogs
  node_tar=$(rootfs node "$node_pkgs")
  node_rootfs=loraplane-kit/node-rootfs:$(basename "$node_tar" .tar | awk -F- '{print $NF}')
  have "$node_rootfs" || import "$node_tar" "$node_rootfs"
  log "$KIND_NODE_IMAGE (kind $KIND_VERSION images/base recipe, preloaded: ${kubeadm_images[*]})"
  kind_dir=$(cd "$work" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Dir)
  ctx=$work/node
  mkdir -p "$ctx/bin"
  cp -r "$kind_dir/images/base/files" "$ctx/files"
  chmod -R u+w "$ctx/files"
  rm -f "$ctx/files/etc/containerd/config.toml" "$ctx/files/etc/systemd/system/containerd-fuse-overlayfs.service"
  cp "$root/hack/images/node/Dockerfile" "$root/hack/images/node/containerd-config.toml" "$ctx/"
  for b in kubelet kubeadm kubectl crictl; do cp "$(readlink -f "$bin/$b")" "$ctx/bin/$b"; done
  base=loraplane-kit/node-base:$KUBE_VERSION
  quiet docker build -q --build-arg "ROOTFS=$node_rootfs" --build-arg "KUBE_VERSION=$KUBE_VERSION" -t "$base" "$ctx"

  # Step 2, as kind's own node-image build does it: containerd in a container of the base
  # image imports the images (content only; containerd unpacks on first use), then commit (the
  # base image's STOPSIGNAL and ENV carry over; ENTRYPOINT and CMD are set back).
  name=loraplane-kit-node-build-$$
  docker rm -f "$name" >/dev/null 2>&1 || true
  docker run -d --init --name "$name" --privileged --entrypoint sleep "$base" infinity >/dev/null
  trap 'docker rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
  docker exec "$name" sh -c 'nohup containerd >/var/log/containerd-build.log 2>&1 &'
  poll 30 1 quietly docker exec "$name" ctr version || true
  for i in "${kubeadm_images[@]}"; do
    docker save "$i" | docker exec -i "$name" ctr --namespace=k8s.io images import --all-platforms --no-unpack --digests - >/dev/null
  done
  docker exec "$name" ctr --namespace=k8s.io images ls -q | sort | grep -v '^sha256:' >"$work/preloaded"
  for i in "${kubeadm_images[@]}"; do
    grep -qx "$i" "$work/preloaded" || { echo "kit: $i is missing from the node's containerd after the import" >&2; exit 1; }
  done
  docker exec "$name" sh -c 'pkill containerd; while pgrep -x containerd >/dev/null; do sleep 0.2; done; rm -f /var/log/containerd-build.log'
  docker commit --change "LABEL $kit_label" \
    --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' --change 'CMD []' \
    --change 'ENV container=docker' \
    "$name" "$KIND_NODE_IMAGE" >/dev/null
  docker rm -f "$name" >/dev/null
  built+=("$KIND_NODE_IMAGE")
fi

