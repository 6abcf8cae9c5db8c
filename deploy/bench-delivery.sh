#!/usr/bin/env bash
# W2 (SSE) and W3 (WebSocket) fan-out beside the floor server, in one sitting: 15,000
# subscribers of one topic, 2 publishes/s for 60 s (BENCHMARKS.md). Runs each server fresh,
# alternating Herald and the floor server (bare blocking writes of the same frames: SSE events,
# or WebSocket text frames of Herald's `message` JSON, read by the same client), and prints one
# line a run: delivered / expected,
# latency p50/p99, server CPU µs per delivery, RSS per connection. Reports (JSON) go to $OUT.
#
# W4 (`echo`: $ECHO_CONNS (5,000) WebSocket clients sending 256-byte `ping`s at $ECHO_RATES msg/s for 30 s,
# answered by `pong`s) alternates Herald with deploy/bench/ws-echo-go, a Go gateway of the
# gorilla/websocket design Herald replaces (built with `go`), in both its shapes (a writer
# goroutine per connection fed by a channel; `--inline`, answers written by the reader), and
# prints answered / sent, the round trip p50/p99 and server CPU µs per echo.
#
#   deploy/bench-delivery.sh                  # W2 and W3, 2 rounds, release builds of this tree
#   ROUNDS=1 WORKLOADS="sse" deploy/bench-delivery.sh
#   WORKLOADS=echo ROUNDS=3 deploy/bench-delivery.sh   # W4 at 20k and 40k msg/s beside Go
#   HERALD_BIN=/path/to/other/herald deploy/bench-delivery.sh   # compare another build
#   HERALD_ALT_BIN=/path/to/other/herald SERVERS="floor herald herald-alt" \
#     ECHO_SERVERS="go-inline herald herald-alt" deploy/bench-delivery.sh
#                                             # two builds alternated in one sitting
#   HERALD_ALT_BIN=$PWD/target/release/herald HERALD_ALT_ARGS="--worker-threads 1" ...
#                                             # the same build with other flags
#   SERVERS="herald herald-traced" TRACE_OTLP=http://127.0.0.1:4317 WORKLOADS=sse \
#     deploy/bench-delivery.sh                # W2 untraced against every publish traced
#                                             # (OTLP/gRPC to TRACE_OTLP), in one sitting
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
ECHO_RATES=${ECHO_RATES:-"20000 40000"}
# The servers each round of W2/W3 runs, in order: floor, herald, herald-traced (herald with
# telemetry.trace_sample_ratio = 1, its spans sent to $TRACE_OTLP).
SERVERS=${SERVERS:-"floor herald"}
case " $SERVERS " in
  *" herald-traced "*) [ -n "${TRACE_OTLP:-}" ] || { echo "herald-traced needs TRACE_OTLP (an OTLP/gRPC collector URL)" >&2; exit 2; } ;;
esac
# The servers each round of W4 runs, in order: go (the chat shape), go-inline, herald,
# herald-alt ($HERALD_ALT_BIN, another build run the same way).
ECHO_SERVERS=${ECHO_SERVERS:-"go go-inline herald"}
# Flags herald-alt gets besides the listeners' (a list, split on spaces).
read -r -a alt_args <<<"${HERALD_ALT_ARGS:-}"
case " $SERVERS $ECHO_SERVERS " in
  *" herald-alt "*) [ -x "${HERALD_ALT_BIN:-}" ] || { echo "herald-alt needs HERALD_ALT_BIN (another herald binary)" >&2; exit 2; } ;;
esac
ECHO_DURATION=${ECHO_DURATION:-30s}
ECHO_CONNS=${ECHO_CONNS:-5000}
# Built from this tree each time (go's build cache makes that quick), unless given.
if [ -z "${GO_ECHO_BIN:-}" ]; then
  GO_ECHO_BIN=$repo/target/bench/ws-echo-go
  case " $WORKLOADS " in
    *" echo "*) (cd deploy/bench/ws-echo-go && go build -o "$GO_ECHO_BIN" .) ;;
  esac
fi

# Free ports for the servers (deploy/lib.sh): below the ephemeral range, or with PORT_BASE
# in PORT_BASE..+9999 (for a machine whose ephemeral range is set to start above the
# servers' ports, so that tens of thousands of client sockets never take a port a server is
# about to bind).
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$repo/deploy/lib.sh"
server_port() { # VAR
  if [ -n "${PORT_BASE:-}" ]; then take_port "$1" "$PORT_BASE" $((PORT_BASE + 9999)); else take_port "$1"; fi
}

run() { # run <name> <server: herald|herald-alt|herald-traced|floor|go|go-inline> <workload: sse|ws|echo> [echo rate]
  local name=$1 server=$2 workload=$3 rate=${4:-} port admin pid
  server_port port; server_port admin
  case $server in
    herald) "$HERALD_BIN" --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin" --log-filter warn & ;;
    herald-alt) "$HERALD_ALT_BIN" --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin" --log-filter warn "${alt_args[@]}" & ;;
    herald-traced) "$HERALD_BIN" --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin" --log-filter warn \
      --otlp-endpoint "$TRACE_OTLP" --trace-sample-ratio 1 & ;;
    floor) "$FLOOR_BIN" --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin" & ;;
    go) "$GO_ECHO_BIN" --listen "127.0.0.1:$port" >/dev/null & admin=$port ;;
    go-inline) "$GO_ECHO_BIN" --listen "127.0.0.1:$port" --inline >/dev/null & admin=$port ;;
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
  if [ "$workload" = echo ]; then
    "$LOADGEN_BIN" echo --url "http://127.0.0.1:$port" --conns "$ECHO_CONNS" --rate "$rate" --size 256 \
      --source-ips 4 --duration "$ECHO_DURATION" --server-pid "$pid" --json "$OUT/$name.json" >"$OUT/$name.txt" 2>&1 || true
  else
    "$LOADGEN_BIN" "$workload" --url "http://127.0.0.1:$port" --conns "$CONNS" --source-ips 4 --topics 1 \
      --publish-url "http://127.0.0.1:$admin" --publish-rate 2 --duration "$DURATION" \
      --server-pid "$pid" --json "$OUT/$name.json" >"$OUT/$name.txt" 2>&1 || true
  fi
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  python3 - "$OUT/$name.json" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); d = r["delivery"]; s = r["servers"][0]
if r.get("echo"):
    e = r["echo"]; lat = e["rtt_ms"]
    print(f'{sys.argv[2]:<18} {e["answered"]:>9,} / {e["sent"]:<9,} answered'
          f'  rtt p50 {lat["p50_ms"]:5.2f} p99 {lat["p99_ms"]:6.2f} ms'
          f'  cpu {100 * s["cpu_fraction_of_machine"]:4.1f} %  {s["cpu_us_per_delivery"] or 0:6.2f} µs/echo')
    sys.exit()
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
    if [ "$w" = echo ]; then
      for rate in $ECHO_RATES; do
        for server in $ECHO_SERVERS; do
          run "echo${rate}_${server}_$round" "$server" echo "$rate"
        done
      done
      continue
    fi
    for server in $SERVERS; do
      run "${w}_${server}_$round" "$server" "$w"
    done
  done
done
