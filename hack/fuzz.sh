#!/usr/bin/env bash
# make fuzz: runs every Go fuzz target (func FuzzXxx in a _test.go file) for FUZZTIME each
# (default 60s), one at a time, and prints its executions per second. A failing input is
# written by `go test` to the package's testdata/fuzz/FuzzXxx/: commit it as a corpus entry
# with the fix. `make test` runs every target's seed corpus as ordinary tests.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fuzztime=${FUZZTIME:-60s}
cd "$root"
status=0
summary=()
while IFS=: read -r file name; do
  dir=./$(dirname "$file")
  echo "== $name ($dir, $fuzztime)"
  log=$(mktemp)
  # -short: the packages' integration suites (envtest) are not needed to fuzz.
  if go test -short -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" "$dir" >"$log" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
    cat "$log"
  fi
  last=$(grep -E '^fuzz: elapsed' "$log" | tail -n1 || true)
  execs=$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$last")
  secs=$(sed -nE 's/.*elapsed: (([0-9]+)m)?([0-9]+)s.*/\2 \3/p' <<<"$last" | awk '{ print ($2 == "" ? $1 : $1 * 60 + $2) }')
  rate=$([ -n "$execs" ] && [ "${secs:-0}" -gt 0 ] && echo $((execs / secs)) || echo "?")
  summary+=("$(printf '%-24s %-7s %10s execs %8s/s  %s' "$name" "$result" "${execs:-?}" "$rate" "$dir")")
  rm -f "$log"
done < <(grep -rHoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' shared adapter-controller router-controller test 2>/dev/null |
  sed -E 's/:func /:/' | sort -u)
echo; printf '%s\n' "${summary[@]}"
exit $status
