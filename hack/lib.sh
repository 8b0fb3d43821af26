# Sourced by the scripts under hack/: the one definition of what they share. Tools come from
# bin/, where make builds them (never from PATH).
lib_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# jq is gojq, built into bin/ by make (test-deps, e2e-deps, e2e).
jq() { "$lib_root/bin/jq" "$@"; }

# poll TIMEOUT INTERVAL COMMAND...: runs COMMAND every INTERVAL seconds until it succeeds;
# returns 1 when TIMEOUT seconds have passed without success (the caller says what failed).
poll() {
  local deadline=$((SECONDS + $1)) interval=$2
  shift 2
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep "$interval"
  done
}

# running PID: a live process, not a zombie (an exited process may stay a zombie: a
# container's init need not reap the orphaned children of kwokctl or of a script).
running() { [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status"; }

# not_running PID: the negation, for poll.
not_running() { ! running "$1"; }

# quietly COMMAND...: runs COMMAND with its output discarded (for poll).
quietly() { "$@" >/dev/null 2>&1; }

# open_port PORT: something accepts TCP connections on 127.0.0.1:PORT.
open_port() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# e2e_hooks STACK DIR: exports the e2e suite's hook variables for a stack script, as
# test/e2e/hooks.txt (the contract) defines them, with DIR as their log directory; and
# E2E_STACK (the script, for the standby verbs) and E2E_LOG_DIR.
e2e_hooks() {
  local stack=$1 dir=$2 var cmd
  while read -r var cmd; do
    case $var in '' | '#'*) continue ;; esac
    cmd=${cmd%% -- *}
    cmd=${cmd//\$DIR/$dir}
    export "$var=$stack ${cmd%"${cmd##*[![:space:]]}"}"
  done <"$lib_root/test/e2e/hooks.txt"
  export E2E_STACK=$stack E2E_LOG_DIR=$dir
}

# go_free_path DIR: makes DIR/bin hold only helm and kubectl (links to bin/) and prints it: the
# PATH of a machine with only those two, no Go, no make. Installs from a release run as
#   env -i PATH="$(go_free_path DIR)" HOME=DIR helm|kubectl ...
go_free_path() {
  local t
  mkdir -p "$1/bin"
  for t in helm kubectl; do ln -sfn "$(readlink -f "$lib_root/bin/$t")" "$1/bin/$t"; done
  for t in go make gcc; do
    if env -i PATH="$1/bin" /bin/sh -c "command -v $t" >/dev/null 2>&1; then
      echo "go_free_path: $t is on $1/bin" >&2
      return 1
    fi
  done
  echo "$1/bin"
}

# registry_config ROOTDIR ADDR: a configuration of the distribution registry (bin/registry)
# storing its blobs under ROOTDIR and listening on ADDR, without TLS (loopback or a test network).
registry_config() {
  cat <<YAML
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: $1}, delete: {enabled: true}}
http: {addr: "$2"}
YAML
}

# delete_pre_v010_rbac KUBECTL...: deletes what a kubectl apply upgrade from an installation
# of main older than v0.1.0 leaves behind (docs/install.md, "Upgrade"): the roles of their
# older names and their bindings, which still grant the older, wider rules (the router's
# HTTPRoute rights in every namespace). KUBECTL... is the kubectl command to run.
delete_pre_v010_rbac() {
  "$@" delete --ignore-not-found clusterrolebinding loraplane-adapter-controller loraplane-router-controller
  "$@" delete --ignore-not-found clusterrole adapter-controller router-controller
  "$@" -n loraplane-system delete --ignore-not-found rolebinding adapter-controller-leader-election router-controller-leader-election
  "$@" -n loraplane-system delete --ignore-not-found role adapter-controller router-controller
}
