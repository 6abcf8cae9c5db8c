#!/usr/bin/env bash
# deploy/bench-ingest.sh: what it costs one node to ingest the cluster's messages (Redis
# bridge → registry, no subscribers), measured two ways on loopback:
#
#   1. steady: herald-loadgen publishes to node P as fast as --concurrency allows; node I
#      (no subscribers) reads every message back from the streams. Node I's CPU per message
#      comes from the loadgen's /proc sampling (--server-pid).
#   2. catch-up: N messages are appended straight into the streams (redis-benchmark XADD, the
#      same fields Herald writes), then node I starts and reads them flat out. The rate it
#      ingests at is the most one node's bridge reader can take; CPU per message is its
#      process CPU over the messages.
#
#   deploy/bench-ingest.sh [MESSAGES] [TOPICS]      (defaults 400000, 1000)
#
# Needs release binaries (cargo build --release -p herald-gateway -p herald-loadgen) and
# redis-server / redis-benchmark (and curl, python3). Everything runs on 127.0.0.1 free ports and is stopped at
# the end. Results are printed and the loadgen's JSON report is kept in $OUT.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
herald=$target/release/herald
loadgen=$target/release/herald-loadgen
MESSAGES=${1:-400000}
TOPICS=${2:-1000}
SHARDS=4
OUT=${OUT:-$(mktemp -d /tmp/herald-bench-ingest.XXXXXX)}
[[ -x $herald && -x $loadgen ]] || {
    echo "build first: cargo build --release -p herald-gateway -p herald-loadgen" >&2
    exit 1
}

# take_port, pids and cleanup (on exit), ready.
# shellcheck source-path=SCRIPTDIR source=bench/cluster-lib.sh
source "$repo/deploy/bench/cluster-lib.sh"

rport="" node_pid="" node_admin="" # set by take_port and node
take_port rport
mkdir -p "$OUT/redis"
redis-server --bind 127.0.0.1 --port "$rport" --save "" --appendonly no --dir "$OUT/redis" \
    --logfile "$OUT/redis/redis.log" &
rpid=$!
pids+=("$rpid")
until [[ $(redis-cli -p "$rport" ping 2>/dev/null) == PONG ]]; do sleep 0.05; done

# Broadcast routing: node I, with no subscribers, reads every message (what this measures).
printf '[cluster]\nrouting = "broadcast"\nredis_shards = %s\nredis_prefix = "bench"\n' "$SHARDS" >"$OUT/herald.toml"
node() { # ID → starts a node; sets node_pid and node_admin (in this shell, so that the next
    # node's ports are picked knowing this one's)
    local public
    take_port public
    take_port node_admin
    "$herald" --config "$OUT/herald.toml" --listen "127.0.0.1:$public" \
        --admin-listen "127.0.0.1:$node_admin" --redis-url "redis://127.0.0.1:$rport" \
        --node-id "$1" --log-filter warn >"$OUT/$1.log" 2>&1 &
    node_pid=$!
}
ingested() { # ADMIN → messages the node read from Redis
    curl -s "http://127.0.0.1:$1/metrics" |
        awk '/^herald_bridge_messages_total\{/ && /bridge="redis"/ && /direction="in"/ { n += $2 } END { printf "%d\n", n }'
}
cpu_seconds() { # PID → user+system CPU seconds
    awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}

# ---- 1. steady
node publisher
ppid=$node_pid padmin=$node_admin
pids+=("$ppid")
node ingest
ipid=$node_pid iadmin=$node_admin
pids+=("$ipid")
ready "$padmin"
ready "$iadmin"
echo "== steady: loadgen → node P (HTTP publish) → Redis → node I (no subscribers)"
"$loadgen" publish --url "http://127.0.0.1:$padmin" --rate 0 --concurrency 64 \
    --topics "$TOPICS" --duration 20s --server-pid "$ipid" --server-pid "$ppid" \
    --json "$OUT/steady.json" | tee "$OUT/steady.txt"
echo "node I ingested $(ingested "$iadmin") messages"
kill "$ipid" "$ppid"
wait "$ipid" "$ppid" 2>/dev/null || true

# ---- 2. catch-up
redis-cli -p "$rport" flushall >/dev/null
per_shard=$((MESSAGES / SHARDS))
pad=$(printf 'x%.0s' $(seq 1 64))
echo "== catch-up: $MESSAGES messages over $TOPICS topics appended with redis-benchmark"
for ((s = 0; s < SHARDS; s++)); do
    redis-benchmark -p "$rport" -q -n "$per_shard" -r "$TOPICS" -P 64 -c 4 \
        XADD "bench:stream:$s" '*' t "t__rand_int__" d "{\"n\":\"__rand_int__\",\"pad\":\"$pad\"}" \
        n bench ts 0 >/dev/null
done
total=0
for ((s = 0; s < SHARDS; s++)); do
    total=$((total + $(redis-cli -p "$rport" xlen "bench:stream:$s")))
done
node catchup
ipid=$node_pid iadmin=$node_admin
pids+=("$ipid")
until curl -s -o /dev/null "http://127.0.0.1:$iadmin/healthz"; do sleep 0.01; done
start_cpu=$(cpu_seconds "$ipid")
start_rcpu=$(cpu_seconds "$rpid")
start_ns=$(date +%s%N)
deadline=$(($(date +%s) + 600))
while [[ $(ingested "$iadmin") -lt $total ]]; do
    [[ $(date +%s) -lt $deadline ]] || { echo "node I ingested only $(ingested "$iadmin") of $total" >&2; exit 1; }
    sleep 0.05
done
end_ns=$(date +%s%N)
end_cpu=$(cpu_seconds "$ipid")
end_rcpu=$(cpu_seconds "$rpid")
rss_kb=$(awk '/^VmRSS/ { print $2 }' "/proc/$ipid/status")
awk -v n="$total" -v t0="$start_ns" -v t1="$end_ns" -v c0="$start_cpu" -v c1="$end_cpu" -v rss="$rss_kb" \
    -v r0="$start_rcpu" -v r1="$end_rcpu" 'BEGIN {
    secs = (t1 - t0) / 1e9; cpu = c1 - c0; rcpu = r1 - r0;
    printf "catch-up: %d messages in %.2f s = %.0f msg/s; node CPU %.2f s = %.2f µs per message (%.0f%% of one core); RSS %.0f MiB; redis CPU %.2f s (%.0f%% of one core)\n",
        n, secs, n / secs, cpu, cpu * 1e6 / n, 100 * cpu / secs, rss / 1024, rcpu, 100 * rcpu / secs
}' | tee "$OUT/catchup.txt"
echo "reports in $OUT"
