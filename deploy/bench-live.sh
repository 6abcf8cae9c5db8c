#!/usr/bin/env bash
# deploy/bench-live.sh: what Redis pays per published message as the partitions the nodes follow
# grow (issue 38, the cluster's live path), in one sitting.
#
# NODES nodes (3) and one Redis on this machine; TOPICS topics (1,000, named t.0 ... t.999)
# published at RATE msg/s (2,000) through one node's admin API. Every run has the same
# measured subscribers: one SSE connection per node on 60 topics (herald-loadgen: delivery,
# missing, duplicates, publish→receive p50/p99). What changes is what else each node follows:
#
#   interest-60      nothing else: each node follows ~60 partitions
#   interest-1000    each node also holds 17 SSE clients on 60 topics each (every topic: ~1,000
#                    partitions per node)
#   interest-all     each node also holds one SSE client on the pattern `t.*` (every partition)
#   broadcast-16     routing = "broadcast", redis_shards = 16: the layout before interest
#                    routing, every node reading everything (the reference)
#
# For each run: the rate published, delivered, missing and duplicate messages, p50/p99, the
# partitions each node follows, Redis's CPU per published message (its own CPU time, from
# /proc) and the nodes' CPU per message. The summary is printed and written to
# $OUT/summary.json.
#
#   deploy/bench-live.sh [SHAPES...]   (default: interest-60 interest-1000 interest-all broadcast-16)
#   env: NODES (3), TOPICS (1000), RATE (2000), DURATION (20s), ROUNDS (1: the shapes are
#        alternated ROUNDS times), OUT (a temp dir), HERALD_BIN / LOADGEN_BIN (target/release/...)
#
# Needs release binaries (cargo build --release -p herald-gateway -p herald-loadgen),
# redis-server, curl and python3. Everything runs on 127.0.0.1 free ports and is stopped at
# the end; a fresh Redis and fresh nodes per run.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
herald=${HERALD_BIN:-$target/release/herald}
loadgen=${LOADGEN_BIN:-$target/release/herald-loadgen}
SHAPES=("${@:-interest-60 interest-1000 interest-all broadcast-16}")
read -r -a SHAPES <<<"${SHAPES[*]}"
NODES=${NODES:-3}
TOPICS=${TOPICS:-1000}
RATE=${RATE:-2000}
DURATION=${DURATION:-20s}
ROUNDS=${ROUNDS:-1}
OUT=${OUT:-$(mktemp -d /tmp/herald-bench-live.XXXXXX)}
mkdir -p "$OUT"
[[ -x $herald && -x $loadgen ]] || {
    echo "build first: cargo build --release -p herald-gateway -p herald-loadgen" >&2
    exit 1
}

# shellcheck source=deploy/bench/cluster-lib.sh
source "$repo/deploy/bench/cluster-lib.sh"
# An SSE client that only makes its node follow: QUERY, output discarded.
follower() { # PUBLIC-PORT QUERY
    curl -sN "http://127.0.0.1:$1/v1/sse?$2" >/dev/null 2>&1 &
    pids+=("$!")
}

run() { # SHAPE ROUND
    local shape=$1 name="$1-r$2" routing=interest partitions="" i k
    case $shape in
        broadcast-*) routing=broadcast partitions=${shape#broadcast-} ;;
    esac
    mkdir -p "$OUT/$name"
    {
        echo "[cluster]"
        if [[ -n $partitions ]]; then echo "redis_shards = $partitions"; fi
        echo "[limits]"
        echo "max_subscriptions = 100"
    } >"$OUT/$name/herald.toml"
    start_cluster "$OUT/$name" "$routing" "$NODES"
    case $shape in
        interest-1000)
            for public in "${publics[@]}"; do
                for ((k = 0; k < 17; k++)); do
                    local q="" t
                    for ((t = k * 60; t < k * 60 + 60 && t < TOPICS; t++)); do q+="topic=t.$t&"; done
                    follower "$public" "${q%&}"
                done
            done
            ;;
        interest-all)
            for public in "${publics[@]}"; do follower "$public" "topic=t.*"; done
            ;;
    esac
    # Wait until every node follows what its clients asked for (the backfills are done).
    sleep 3
    echo "== $shape (round $2) at $RATE msg/s" >&2
    "$loadgen" sse "${urls[@]}" --conns "$NODES" --topics "$TOPICS" --topics-per-conn 60 \
        --topic-prefix t. --ramp 0 --publish-url "http://127.0.0.1:${admins[0]}" \
        --publish-mode round-robin --publish-rate "$RATE" --publish-concurrency 32 \
        --duration "$DURATION" --drain 3s "${servers[@]}" \
        --json "$OUT/$name/loadgen.json" >"$OUT/$name/loadgen.txt" 2>&1 || true
    record_nodes "$OUT/$name/nodes.txt"
    cleanup
}

for ((round = 1; round <= ROUNDS; round++)); do
    for shape in "${SHAPES[@]}"; do
        run "$shape" "$round"
    done
done

python3 "$repo/deploy/bench/cluster-summary.py" "$OUT" live
