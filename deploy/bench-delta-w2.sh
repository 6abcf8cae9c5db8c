#!/usr/bin/env bash
# W2 (SSE fan-out: $CONNS subscribers of one topic, 2 publishes/s) with delta compression off
# and on, in one sitting (issue 42; results in docs/benchmarks/delta.md). Each run starts a
# fresh release herald whose namespace `d` has delta = "fossil", and the loadgen's SSE
# subscribers of topic d:load-0 in one of three modes, alternated round by round:
#   off       the default SSE form (data only): W2 as BENCHMARKS.md runs it
#   off-json  format=json (every event a JSON `message` frame), the form deltas come in
#   delta     delta=fossil (JSON form; every message after the first a Fossil delta, applied
#             by the loadgen with herald_core::delta::apply, failures counted as delta_apply)
# and prints one line a run: delivered / expected, latency, server CPU µs per delivery, RSS
# per connection, delta_apply failures. Reports (JSON) go to $OUT.
#
#   deploy/bench-delta-w2.sh                         # 15,000 subscribers, 60 s, 2 rounds
#   CONNS=5000 DURATION=30s ROUNDS=1 deploy/bench-delta-w2.sh
#   MODES="off delta" deploy/bench-delta-w2.sh
#
# Loopback only; every run is bounded (DURATION + drain, and the loadgen's own deadline).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
ROUNDS=${ROUNDS:-2}
CONNS=${CONNS:-15000}
DURATION=${DURATION:-60s}
MODES=${MODES:-"off off-json delta"}
PAYLOAD=${PAYLOAD:-100}
OUT=${OUT:-$repo/target/bench/delta-w2-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
if [ -z "${HERALD_BIN:-}" ] || [ -z "${LOADGEN_BIN:-}" ]; then
  cargo build --release -q -p herald-gateway -p herald-loadgen
fi
HERALD_BIN=${HERALD_BIN:-$repo/target/release/herald}
LOADGEN_BIN=${LOADGEN_BIN:-$repo/target/release/herald-loadgen}
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$repo/deploy/lib.sh"
config=$OUT/herald.toml
printf '[namespaces.d]\ndelta = "fossil"\n' >"$config"

run() { # run <name> <mode: off|off-json|delta>
  local name=$1 mode=$2 port admin pid url extra=()
  take_port port
  take_port admin
  "$HERALD_BIN" --config "$config" --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin" --log-filter warn &
  pid=$!
  for _ in $(seq 100); do port_listening "$port" && port_listening "$admin" && break; sleep 0.1; done
  port_listening "$port" || { echo "herald did not start" >&2; kill "$pid"; return 1; }
  url="http://127.0.0.1:$port/v1/sse"
  case $mode in
    off-json) url="$url?format=json" ;;
    delta) extra=(--delta) ;;
  esac
  "$LOADGEN_BIN" sse --url "$url" --conns "$CONNS" --source-ips 4 --topics 1 --topic-prefix d:load- \
    --payload-size "$PAYLOAD" --publish-url "http://127.0.0.1:$admin" --publish-rate 2 --duration "$DURATION" \
    "${extra[@]}" --server-pid "$pid" --json "$OUT/$name.json" >"$OUT/$name.txt" 2>&1 || true
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  python3 - "$OUT/$name.json" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); d = r["delivery"]; s = r["servers"][0]
lat = d["latency_ms"]
rss = s.get("rss_growth_per_conn_bytes")
errors = r.get("errors") or {}
print(f'{sys.argv[2]:<14} {d["delivered"]:>9,} / {d["expected"]:<9,} missing {d["missing"]} dup {d["duplicates"]}'
      f'  p50 {lat["p50_ms"]:6.1f} p99 {lat["p99_ms"]:6.1f} ms'
      f'  cpu {s["cpu_us_per_delivery"] or 0:6.2f} µs/delivery'
      + (f'  rss {rss / 1000:.2f} KB/conn' if rss else '')
      + f'  delta_apply {errors.get("delta_apply", 0)}')
PY
}

echo "reports in $OUT"
for round in $(seq "$ROUNDS"); do
  for mode in $MODES; do
    run "${mode}_$round" "$mode"
  done
done
