#!/usr/bin/env bash
# deploy/bench-interest.sh: interest routing against broadcast, in one sitting (issue 30).
#
# NODES nodes (four) and one Redis on this machine; 4,000 SSE subscribers on 4,000 topics, spread so
# that each node holds the subscribers of a quarter of the topics (herald-loadgen's
# round-robin: connection i, on topic i, goes to node i % 4); messages published round-robin
# through the four nodes' admin APIs at each rate of RATES, alternating the routing modes.
# For each run: the cluster-wide rate published and delivered, missing and duplicate
# messages, publish→receive p50/p99, each node's messages read from Redis against the total
# published (herald_bridge_messages_total{direction="in"}), the groups each node follows,
# the four nodes' CPU per message published, and Redis's CPU.
#
#   deploy/bench-interest.sh [RATES...]     (default: 1000 2000 4000 6000 8000)
#   env: MODES ("interest broadcast"; MODE:GROUPS sets redis_shards for that mode, e.g.
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

run() { # MODE[:GROUPS] RATE
    local mode=${1%%:*} groups=${SHARDS:-} rate=$2 name="${1/:/-}-$2" i
    [[ $1 == *:* ]] && groups=${1#*:}
    mkdir -p "$OUT/$name"
    {
        echo "[cluster]"
        if [[ -n $groups ]]; then echo "redis_shards = $groups"; fi
    } >"$OUT/$name/herald.toml"
    start_cluster "$OUT/$name" "$mode" "$NODES"
    echo "== $mode at $rate msg/s" >&2
    "$loadgen" sse "${urls[@]}" --conns "$CONNS" --topics "$CONNS" --ramp 0 \
        "${publish[@]}" --publish-mode round-robin --publish-rate "$rate" \
        --publish-concurrency 32 --duration "$DURATION" --drain 3s "${servers[@]}" \
        --json "$OUT/$name/loadgen.json" >"$OUT/$name/loadgen.txt" 2>&1 || true
    : >"$OUT/$name/nodes.txt"
    for ((i = 0; i < NODES; i++)); do
        echo "n$i $(metric "${admins[$i]}" herald_bridge_messages_total 'direction="in"') $(metric "${admins[$i]}" herald_bridge_groups_followed 'bridge="redis"')" \
            >>"$OUT/$name/nodes.txt"
    done
    cleanup
}

for rate in "${RATES[@]}"; do
    for mode in $MODES; do
        run "$mode" "$rate"
    done
done

python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
rows = []
for name in sorted(os.listdir(out)):
    path = os.path.join(out, name, "loadgen.json")
    if not os.path.exists(path):
        continue
    mode, rate = name.rsplit("-", 1)
    mode = mode.replace("-", ":")
    r = json.load(open(path))
    d = r.get("delivery") or {}
    o = d
    lat = d.get("latency_ms") or {}
    secs = r["phases"]["measured_secs"] + r["phases"]["drain_secs"]
    published = d.get("published", 0)
    nodes = [l.split() for l in open(os.path.join(out, name, "nodes.txt"))]
    ingest = [int(n[1]) for n in nodes]
    groups = [int(n[2]) for n in nodes]
    servers = r.get("servers", [])
    cpu = sum(s["cpu_seconds_measured"] for s in servers if "redis" not in s["name"])
    redis_cpu = sum(s["cpu_seconds_measured"] for s in servers if "redis" in s["name"])
    rows.append({
        "mode": mode, "rate": int(rate), "published": published,
        "published_per_sec": round(published / r["phases"]["measured_secs"]),
        "delivered": o.get("delivered"), "missing": o.get("missing"), "duplicates": o.get("duplicates"),
        "p50_ms": lat.get("p50_ms"), "p99_ms": lat.get("p99_ms"),
        "ingest_per_node": ingest,
        "ingest_ratio_max": round(max(ingest) / published, 3) if published else None,
        "groups_per_node": groups,
        "nodes_cpu_s": round(cpu, 2),
        "nodes_cpu_us_per_message": round(cpu * 1e6 / published, 1) if published else None,
        "nodes_cores": round(cpu / secs, 2),
        "redis_cpu_fraction": round(redis_cpu / secs, 2),
    })
rows.sort(key=lambda x: (x["rate"], x["mode"]))
json.dump(rows, open(os.path.join(out, "summary.json"), "w"), indent=1)
print("| mode | rate asked | published/s | missing | dups | p50 ms | p99 ms | max node ingest / published | groups per node | nodes' CPU µs per message | nodes' cores | Redis cores |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for x in rows:
    print(f"| {x['mode']} | {x['rate']} | {x['published_per_sec']} | {x['missing']} | {x['duplicates']} | {x['p50_ms']} | {x['p99_ms']} | {x['ingest_ratio_max']} | {'/'.join(map(str, x['groups_per_node']))} | {x['nodes_cpu_us_per_message']} | {x['nodes_cores']} | {x['redis_cpu_fraction']} |")
print(f"reports in {out}")
EOF
