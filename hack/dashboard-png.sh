#!/usr/bin/env bash
# Draws key panels of deploy/grafana/loraplane.json from a real Prometheus into a PNG: the
# Prometheus graph page (one per panel, side by side in one page) in headless Chromium.
#
#   hack/dashboard-png.sh [PROMETHEUS_URL] [OUT]
#
# PROMETHEUS_URL defaults to http://127.0.0.1:29090 (make e2e's Prometheus on kind), OUT to
# docs/dashboard.png. RANGE (default 30m) is the time range shown. Needs chromium (Debian:
# apt-get install chromium). The classic UI of Debian's prometheus (2.42) serves
# /classic/graph; a Prometheus with the React UI serves /graph with the same parameters. A
# Prometheus without UI (built from its Go module, as make e2e's) is read remotely by a
# local Debian prometheus whose classic UI draws the graphs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib.sh"
prom=${1:-http://127.0.0.1:29090}
out=${2:-$root/docs/dashboard.png}
range=${RANGE:-30m}
command -v chromium >/dev/null || { echo "dashboard-png: chromium is needed (apt-get install chromium)" >&2; exit 1; }
tmp=$(mktemp -d)
ui_pid=''
trap '[ -n "$ui_pid" ] && kill "$ui_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
graph=''
for g in "$prom/classic/graph" "$prom/graph"; do
  if curl -fsS -o "$tmp/page" "$g" 2>/dev/null && grep -qi '<html' "$tmp/page"; then graph=$g; break; fi
done
if [ -z "$graph" ]; then
  # No web UI there (a Prometheus built from its Go module has no UI assets): draw with this
  # machine's Debian prometheus (classic UI), reading the data remotely (remote_read).
  command -v prometheus >/dev/null || { echo "dashboard-png: $prom has no web UI and Debian's prometheus is not installed" >&2; exit 1; }
  ui=127.0.0.1:${UI_PORT:-29191}
  printf 'global: {evaluation_interval: 1m}\nremote_read:\n- url: %s/api/v1/read\n  read_recent: true\n' "$prom" >"$tmp/ui.yml"
  prometheus --config.file="$tmp/ui.yml" --storage.tsdb.path="$tmp/data" --web.listen-address="$ui" >"$tmp/ui.log" 2>&1 &
  ui_pid=$!
  poll 10 0.2 quietly curl -fsS -o /dev/null "http://$ui/-/ready" || true
  graph=http://$ui/classic/graph
  echo "dashboard-png: $prom has no web UI; drawing with Debian's prometheus on $ui (remote_read from $prom)"
fi

# Panel title and expression, as in the dashboard ($__range and $__rate_interval fixed).
panels=(
  "Cache sync duration p99 by resource (s)|histogram_quantile(0.99, sum by (controller, kind, le) (increase(loraplane_cache_sync_duration_seconds_bucket[$range])))"
  "Caches synced (0 = the sync gate is closed)|min by (controller, kind) (loraplane_cache_synced)"
  "Objects per cache|max by (controller, kind) (loraplane_cache_objects)"
  "Adapters by phase, routes by state|max by (phase) (loraplane_adapters) or max by (state) (loraplane_routes)"
)
# One screenshot per panel (the graph page with that expression), then one page of the four.
n=0
tiles=''
for p in "${panels[@]}"; do
  n=$((n + 1))
  title=${p%%|*}
  q=$(python3 -c 'import sys, urllib.parse as u; print(u.urlencode({"g0.expr": sys.argv[1], "g0.tab": "0", "g0.range_input": sys.argv[2]}))' "${p#*|}" "$range")
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,900 \
    --virtual-time-budget=10000 --screenshot="$tmp/panel$n.png" "$graph?$q" 2>/dev/null >/dev/null
  tiles+="<div class=p><h3>$title</h3><div class=c><img src=\"panel$n.png\"></div></div>"
done
cat >"$tmp/panels.html" <<HTML
<!doctype html><html><head><meta charset="utf-8"><style>
body{margin:0;font:15px sans-serif;background:#fff}
.g{display:grid;grid-template-columns:1fr 1fr;gap:10px;padding:10px}
.p{border:1px solid #ccc} .p h3{margin:6px 10px;font-size:16px}
.c{height:430px;overflow:hidden} .c img{width:100%;margin-top:-118px}
</style></head><body><div class=g>$tiles</div></body></html>
HTML
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,980 \
  --allow-file-access-from-files --screenshot="$out" "file://$tmp/panels.html" 2>/dev/null >/dev/null
echo "dashboard-png: $out from $prom (last $range)"
