#!/usr/bin/env bash
# make e2e-deps, first half: a running Docker engine. Where `docker info` already answers, this
# changes nothing. Otherwise, on Debian as root (a CI machine, a sandbox), it installs Debian's
# docker.io and starts dockerd by hand (such machines have no systemd):
#   - docker's bridge and every network it creates lie in 198.18.0.0/15 (RFC 2544 benchmarking
#     range), never in the private ranges, with no IPv6;
#   - when this machine's capability bounding set lacks capabilities that `--privileged` asks
#     for (kind's nodes are privileged), dockerd's default runtime is capshim, which drops them
#     from the OCI spec and execs runc (hack/images/capshim). Elsewhere it is not installed.
#
#   docker-up.sh --managed   exit 0 when the running dockerd is one this script started (the
#                            machine has no registry access: make e2e-deps builds the image kit)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/hack/lib.sh"
log=${DOCKERD_LOG:-/var/log/loraplane-dockerd.log}
pidfile=/run/loraplane-dockerd.pid

if [ "${1:-}" = --managed ]; then
  pid=$(cat "$pidfile" 2>/dev/null) && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]
  exit
fi

if docker info >/dev/null 2>&1; then
  echo "Docker engine: running ($(docker info -f '{{.ServerVersion}}'))"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "No Docker engine answers 'docker info', and this is not Debian as root: start Docker, then rerun." >&2
  exit 1
fi
if ! command -v dockerd >/dev/null; then
  echo "Installing Debian's docker.io"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >/dev/null
fi

args=(--bip 198.18.0.1/24 --default-address-pool base=198.18.16.0/20,size=24 --ipv6=false)
# Bit 24 of CapBnd is CAP_SYS_RESOURCE, the capability these sandboxes lack; capshim drops
# whatever is missing, so the check is the same for any other.
bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
if [ "$bnd" != "$(printf '%016x' $(( (1 << ($(cat /proc/sys/kernel/cap_last_cap) + 1)) - 1 )))" ]; then
  shim=/usr/local/sbin/loraplane-capshim
  echo "Capability bounding set $bnd lacks capabilities: runtime capshim ($shim) drops them for --privileged"
  (cd "$root/hack/images/capshim" && GOWORK=off CGO_ENABLED=0 go build -o "$shim.new" main.go && mv "$shim.new" "$shim")
  args+=(--add-runtime "capshim=$shim" --default-runtime capshim)
fi
echo "Starting dockerd ${args[*]} (log: $log)"
# dockerd outlives this script: it must not inherit any descriptor beyond stdio. One that is a
# lock (this script run as `flock /tmp/loraplane-heavy.lock make e2e-deps`) would stay held
# by dockerd, and by containerd after it, for as long as they run, and every later flock on
# that file would wait forever.
(
  for fd in /proc/$BASHPID/fd/*; do
    fd=${fd##*/}
    if [ "$fd" -gt 2 ]; then eval "exec $fd>&-"; fi
  done
  exec nohup dockerd "${args[@]}" >>"$log" 2>&1 </dev/null
) &
echo $! >"$pidfile"
poll 60 1 quietly docker info && { echo "Docker engine: running ($(docker info -f '{{.ServerVersion}}'))"; exit 0; }
echo "dockerd did not answer within 60 s; its log:" >&2
tail -n 30 "$log" >&2
exit 1
