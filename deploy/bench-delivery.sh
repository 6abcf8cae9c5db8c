#!/usr/bin/env bash
# W2 (SSE) and W3 (WebSocket) fan-out beside the floor server, in one sitting: 15,000
# subscribers of one topic, 2 publishes/s for 60 s (BENCHMARKS.md). Runs each server fresh,
# alternating Herald and the floor server (bare blocking writes of the same frames: SSE events,
# or WebSocket text frames of Herald's `message` JSON, read by the same client), and prints one
# line a run: delivered / expected,
# latency p50/p99, server CPU µs per delivery, RSS per connection. Reports (JSON) go to $OUT.
#
#   deploy/bench-delivery.sh                  # W2 and W3, 2 rounds, release builds of this tree
#   ROUNDS=1 WORKLOADS="sse" deploy/bench-delivery.sh
#   HERALD_BIN=/path/to/other/herald deploy/bench-delivery.sh   # compare another build
#
# Measure on an idle machine: other load skews the many-task runtime more than the floor
# server's one loop. Traffic goes to loopback only; every run is bounded (60 s + drain).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
ROUNDS=${ROUNDS:-2}
WORKLOADS=${WORKLOADS:-"sse ws"}
CONNS=${CONNS:-15000}
DURATION=${DURATION:-60s}
OUT=${OUT:-$repo/target/bench/delivery-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
if [ -z "${HERALD_BIN:-}" ] || [ -z "${LOADGEN_BIN:-}" ]; then
  cargo build --release -q -p herald-gateway -p herald-loadgen
fi
HERALD_BIN=${HERALD_BIN:-$repo/target/release/herald}
LOADGEN_BIN=${LOADGEN_BIN:-$repo/target/release/herald-loadgen}
FLOOR_BIN=${FLOOR_BIN:-$repo/target/release/herald-floor-server}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run() { # run <name> <server: herald|floor> <workload: sse|ws>
  local name=$1 server=$2 workload=$3 port admin pid
  port=$(free_port); admin=$(free_port)
  case $server in
    herald) "$HERALD_BIN" --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin" --log-filter warn & ;;
    floor) "$FLOOR_BIN" --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin" & ;;
  esac
  pid=$!
  python3 - "$port" "$admin" <<'PY'
import socket, sys, time
for port in sys.argv[1:]:
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", int(port)), 0.2).close(); break
        except OSError:
            time.sleep(0.1)
    else:
        sys.exit(f"nothing listens on {port}")
PY
  "$LOADGEN_BIN" "$workload" --url "http://127.0.0.1:$port" --conns "$CONNS" --source-ips 4 --topics 1 \
    --publish-url "http://127.0.0.1:$admin" --publish-rate 2 --duration "$DURATION" \
    --server-pid "$pid" --json "$OUT/$name.json" >"$OUT/$name.txt" 2>&1 || true
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  python3 - "$OUT/$name.json" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); d = r["delivery"]; s = r["servers"][0]
lat = d["latency_ms"]
rss = s.get("rss_growth_per_conn_bytes")
print(f'{sys.argv[2]:<14} {d["delivered"]:>9,} / {d["expected"]:<9,} missing {d["missing"]} dup {d["duplicates"]}'
      f'  p50 {lat["p50_ms"]:6.1f} p99 {lat["p99_ms"]:6.1f} ms'
      f'  cpu {100 * s["cpu_fraction_of_machine"]:4.1f} %  {s["cpu_us_per_delivery"] or 0:6.2f} µs/delivery'
      + (f'  rss {rss / 1000:.2f} KB/conn' if rss else ''))
PY
}

echo "reports in $OUT"
for round in $(seq "$ROUNDS"); do
  for w in $WORKLOADS; do
    run "${w}_floor_$round" floor "$w"
    run "${w}_herald_$round" herald "$w"
  done
done
