#!/usr/bin/env bash
# Every WebSocket delivery comparison (BENCHMARKS.md, "WebSocket delivery at the floor") in
# one go, for a many-core machine lent for minutes: W3 (15,000 WebSocket subscribers of one
# topic, 2 publishes/s) beside the floor server, W2 (the same over SSE) beside it, and W4 (the
# echo, 10,000 connections at 40k and 160k msg/s) beside the Go gateway Herald replaces — each
# server fresh, alternated, one sitting. Records the machine (kernel, CPU model, cores, memory,
# open-file limit, the binaries' sha256) and leaves three files in $OUT: machine.txt,
# summary.txt (one line a run, then the ratios) and results.tar.gz (every run's JSON report
# and log).
#
# Runs from prebuilt binaries, as a machine without a network or a toolchain needs:
#
#   cargo build --release -p herald-gateway -p herald-loadgen
#   (cd deploy/bench/ws-echo-go && go build -o ../../../target/bench/ws-echo-go .)
#   mkdir -p target/bench/bin && cp target/release/{herald,herald-loadgen,herald-floor-server} \
#     target/bench/ws-echo-go target/bench/bin/ && strip target/bench/bin/*
#   BIN_DIR=target/bench/bin PORT_RANGE="20000 60999" OUT=/tmp/out deploy/bench-16core.sh  # ~7 min
#
#   On a lent machine that receives the repository and the paths it carries, carry
#   target/bench/bin (~32 MB stripped) and run the command above with OUT=$OUT.
#
#   HERALD_ALT_BIN=... [HERALD_ALT_ARGS=...] deploy/bench-16core.sh
#                                   # another build (or flags) of Herald alternated with it
#   W3_ROUNDS=1 W2_ROUNDS=0 ECHO_RATES=40000 deploy/bench-16core.sh   # a shorter sitting
#   SCALE=small deploy/bench-16core.sh          # the same script at a size a 2-vCPU box takes
#
# With PORT_RANGE (say "20000 60999", as root) it sets net.ipv4.ip_local_port_range for the
# sitting (the old range is put back at the end) and the servers listen on ports 10000-19999
# (PORT_BASE), so that no client socket takes a port a server is about to bind.
# Traffic goes to loopback only; every run is bounded (DURATION + drain).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
BIN_DIR=${BIN_DIR:-$repo/target/release}
OUT=${OUT:-$repo/target/bench/16core-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
runs=$(mktemp -d "${TMPDIR:-/tmp}/bench-16core.XXXXXX")
range_file=/proc/sys/net/ipv4/ip_local_port_range
old_range=$(tr '\t' ' ' <"$range_file")
cleanup() {
  rm -rf "$runs"
  if [ -n "${PORT_RANGE:-}" ]; then echo "$old_range" >"$range_file" || true; fi
}
trap cleanup EXIT

GO_ECHO_BIN=${GO_ECHO_BIN:-}
if [ -z "$GO_ECHO_BIN" ]; then
  if [ -x "$BIN_DIR/ws-echo-go" ]; then
    GO_ECHO_BIN=$BIN_DIR/ws-echo-go
  elif command -v go >/dev/null; then
    GO_ECHO_BIN=$repo/target/bench/ws-echo-go
    (cd deploy/bench/ws-echo-go && go build -o "$GO_ECHO_BIN" .)
  else
    echo "no Go gateway: put ws-echo-go in BIN_DIR or set GO_ECHO_BIN (see the header)" >&2
    exit 2
  fi
fi
for bin in herald herald-loadgen herald-floor-server; do
  [ -x "$BIN_DIR/$bin" ] || { echo "missing $BIN_DIR/$bin (see the header)" >&2; exit 2; }
done

case ${SCALE:-full} in
  full) conns=15000 echo_conns=10000 duration=30s rates="40000 160000" ;;
  small) conns=2000 echo_conns=1000 duration=10s rates="5000 20000" ;;
  *) echo "SCALE is full or small" >&2; exit 2 ;;
esac
W3_ROUNDS=${W3_ROUNDS:-2}
W2_ROUNDS=${W2_ROUNDS:-1}
ECHO_ROUNDS=${ECHO_ROUNDS:-1}
ECHO_RATES=${ECHO_RATES:-$rates}
alt=""
[ -n "${HERALD_ALT_BIN:-}" ] && alt=" herald-alt"

# The servers below the client ports, when asked (the kernel's own choice otherwise).
if [ -n "${PORT_RANGE:-}" ]; then
  echo "$PORT_RANGE" >"$range_file"
  export PORT_BASE=10000
fi

{
  echo "date: $(date -u +%FT%TZ)"
  echo "kernel: $(uname -srm)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "cores: $(nproc) of $(grep -c ^processor /proc/cpuinfo)"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "open files: $(ulimit -n)"
  echo "ephemeral ports: $(tr '\t' ' ' <"$range_file")"
  echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  for bin in "$BIN_DIR"/herald "$BIN_DIR"/herald-loadgen "$BIN_DIR"/herald-floor-server "$GO_ECHO_BIN" ${HERALD_ALT_BIN:-}; do
    echo "sha256: $(sha256sum "$bin" | cut -c1-16) $bin"
  done
  [ -n "${HERALD_ALT_BIN:-}" ] && echo "herald-alt: $HERALD_ALT_BIN ${HERALD_ALT_ARGS:-}"
  echo "scale: ${SCALE:-full} (W3/W2 $conns subscribers, echo $echo_conns connections at $ECHO_RATES msg/s, $duration a run)"
} | tee "$OUT/machine.txt"

common=(HERALD_BIN="$BIN_DIR/herald" LOADGEN_BIN="$BIN_DIR/herald-loadgen"
  FLOOR_BIN="$BIN_DIR/herald-floor-server" GO_ECHO_BIN="$GO_ECHO_BIN" OUT="$runs"
  CONNS="$conns" DURATION="$duration" ECHO_DURATION="$duration" ECHO_CONNS="$echo_conns"
  ECHO_RATES="$ECHO_RATES" HERALD_ALT_BIN="${HERALD_ALT_BIN:-}" HERALD_ALT_ARGS="${HERALD_ALT_ARGS:-}")
delivery() { env "${common[@]}" "$@" deploy/bench-delivery.sh 2>&1 | grep -v '^herald-floor-server:' | tee -a "$OUT/summary.txt"; }

: >"$OUT/summary.txt"
[ "$W3_ROUNDS" -gt 0 ] && delivery WORKLOADS=ws SERVERS="floor herald$alt" ROUNDS="$W3_ROUNDS"
[ "$W2_ROUNDS" -gt 0 ] && delivery WORKLOADS=sse SERVERS="floor herald$alt" ROUNDS="$W2_ROUNDS"
[ "$ECHO_ROUNDS" -gt 0 ] && delivery WORKLOADS=echo ECHO_SERVERS="go-inline herald$alt" ROUNDS="$ECHO_ROUNDS"

# The ratios: each Herald run against the floor run before it (same round), and each Herald
# echo against the Go gateway's at the same rate and round.
python3 - "$runs" <<'PY' | tee -a "$OUT/summary.txt"
import glob, json, os, re, sys
runs = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    name = os.path.basename(path)[:-5]
    try:
        r = json.load(open(path))
    except ValueError:
        continue
    runs[name] = r["servers"][0].get("cpu_us_per_delivery")
print("\nratios (CPU µs per delivery or echo; < 1.00 is cheaper than the reference):")
for name, us in sorted(runs.items()):
    m = re.match(r"(ws|sse)_(herald(?:-alt)?)_(\d+)$", name)
    if m and us and runs.get(f"{m[1]}_floor_{m[3]}"):
        print(f"  {name:<24} {us:7.2f} / floor {runs[f'{m[1]}_floor_{m[3]}']:7.2f} = {us / runs[f'{m[1]}_floor_{m[3]}']:.2f}x")
    m = re.match(r"echo(\d+)_(herald(?:-alt)?)_(\d+)$", name)
    if m and us and runs.get(f"echo{m[1]}_go-inline_{m[3]}"):
        go = runs[f"echo{m[1]}_go-inline_{m[3]}"]
        print(f"  {name:<24} {us:7.2f} vs Go {go:7.2f}: {go / us:.2f}x Go's messages per CPU-second")
PY
tar -czf "$OUT/results.tar.gz" -C "$runs" .
echo "results in $OUT (machine.txt, summary.txt, results.tar.gz)"
