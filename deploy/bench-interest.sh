#!/usr/bin/env bash
# deploy/bench-interest.sh: interest routing against broadcast, in one sitting (issue 30).
#
# NODES nodes (four) and one Redis on this machine; 4,000 SSE subscribers on 4,000 topics, spread so
# that each node holds the subscribers of a quarter of the topics (herald-loadgen's
# round-robin: connection i, on topic i, goes to node i % 4); messages published round-robin
# through the four nodes' admin APIs at each rate of RATES, alternating the routing modes.
# For each run: the cluster-wide rate published and delivered, missing and duplicate
# messages, publish→receive p50/p99, each node's messages read from Redis against the total
# published (herald_bridge_messages_total{direction="in"}), the partitions each node follows,
# the four nodes' CPU per message published, and Redis's CPU.
#
#   deploy/bench-interest.sh [RATES...]     (default: 1000 2000 4000 6000 8000)
#   env: MODES ("interest broadcast"; MODE:PARTITIONS sets redis_shards for that mode, e.g.
#        "broadcast:16", the layout before interest routing), DURATION (20s), CONNS (4000),
#        OUT (a temp dir), HERALD_BIN / LOADGEN_BIN (target/release/...), SHARDS (every
#        mode's redis_shards when not given; default: Herald's, 16,384), NODES (4: how many
#        nodes share the subscribers, each holding CONNS / NODES of them)
#
# Needs release binaries (cargo build --release -p herald-gateway -p herald-loadgen),
# redis-server, curl and python3. Everything runs on 127.0.0.1 free ports and is stopped at
# the end; a fresh Redis and fresh nodes per run. The summary is printed and written to
# $OUT/summary.json, with each run's loadgen JSON beside it.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
herald=${HERALD_BIN:-$target/release/herald}
loadgen=${LOADGEN_BIN:-$target/release/herald-loadgen}
RATES=("${@:-1000 2000 4000 6000 8000}")
read -r -a RATES <<<"${RATES[*]}"
MODES=${MODES:-interest broadcast}
DURATION=${DURATION:-20s}
CONNS=${CONNS:-4000}
NODES=${NODES:-4}
OUT=${OUT:-$(mktemp -d /tmp/herald-bench-interest.XXXXXX)}
mkdir -p "$OUT"
[[ -x $herald && -x $loadgen ]] || {
    echo "build first: cargo build --release -p herald-gateway -p herald-loadgen" >&2
    exit 1
}

# shellcheck source=deploy/bench/cluster-lib.sh
source "$repo/deploy/bench/cluster-lib.sh"

run() { # MODE[:PARTITIONS] RATE
    local mode=${1%%:*} partitions=${SHARDS:-} rate=$2 name="${1/:/-}-$2" i
    [[ $1 == *:* ]] && partitions=${1#*:}
    mkdir -p "$OUT/$name"
    {
        echo "[cluster]"
        if [[ -n $partitions ]]; then echo "redis_shards = $partitions"; fi
    } >"$OUT/$name/herald.toml"
    start_cluster "$OUT/$name" "$mode" "$NODES"
    echo "== $mode at $rate msg/s" >&2
    "$loadgen" sse "${urls[@]}" --conns "$CONNS" --topics "$CONNS" --ramp 0 \
        "${publish[@]}" --publish-mode round-robin --publish-rate "$rate" \
        --publish-concurrency 32 --duration "$DURATION" --drain 3s "${servers[@]}" \
        --json "$OUT/$name/loadgen.json" >"$OUT/$name/loadgen.txt" 2>&1 || true
    record_nodes "$OUT/$name/nodes.txt"
    cleanup
}

for rate in "${RATES[@]}"; do
    for mode in $MODES; do
        run "$mode" "$rate"
    done
done

python3 "$repo/deploy/bench/cluster-summary.py" "$OUT" interest
