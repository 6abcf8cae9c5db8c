# deploy/bench/cluster-lib.sh: what the cluster benchmarks (bench-live.sh, bench-interest.sh)
# and bench-ingest.sh share, sourced by them: free ports (deploy/lib.sh), the processes they
# start and stop, readiness and metrics. Not run on its own.
# shellcheck shell=bash

# Free ports: take_port (deploy/lib.sh).
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

# Processes started by the run; `cleanup` stops them (and runs on exit).
pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    pids=()
}
trap cleanup EXIT

# Waits until the node whose admin listener is on port $1 answers /readyz 200.
ready() { until [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/readyz") == 200 ]]; do sleep 0.05; done; }

# ADMIN NAME LABEL-FILTER → the sum of the metric's series whose labels contain the filter.
metric() {
    curl -s "http://127.0.0.1:$1/metrics" |
        awk -v name="$2" -v filter="$3" 'index($1, name "{") == 1 && index($1, filter) { n += $2 } END { printf "%d\n", n }'
}

# start_cluster DIR ROUTING NODES: a fresh Redis and NODES Herald nodes ("$herald") bridged
# by it, each with DIR/herald.toml and the routing mode ROUTING, logs in DIR; returns once
# every node is ready. Sets, for the loadgen: urls (--url per node's public listener),
# publish (--publish-url per node's admin listener), servers (--server-pid for Redis and each
# node); and admins and publics (the nodes' ports).
start_cluster() {
    local dir=$1 routing=$2 count=$3 rport i public admin
    take_port rport
    redis-server --bind 127.0.0.1 --port "$rport" --save "" --appendonly no \
        --dir "$dir" --logfile "$dir/redis.log" &
    pids+=("$!")
    urls=() publish=() servers=(--server-pid "$!") admins=() publics=()
    until [[ $(redis-cli -p "$rport" ping 2>/dev/null) == PONG ]]; do sleep 0.05; done
    for ((i = 0; i < count; i++)); do
        take_port public
        take_port admin
        "$herald" --config "$dir/herald.toml" --listen "127.0.0.1:$public" \
            --admin-listen "127.0.0.1:$admin" --redis-url "redis://127.0.0.1:$rport" \
            --node-id "n$i" --cluster-routing "$routing" --log-filter warn \
            >"$dir/node$i.log" 2>&1 &
        pids+=("$!")
        servers+=(--server-pid "$!")
        urls+=(--url "http://127.0.0.1:$public")
        publish+=(--publish-url "http://127.0.0.1:$admin")
        admins+=("$admin")
        publics+=("$public")
    done
    for admin in "${admins[@]}"; do ready "$admin"; done
}

# record_nodes FILE: a line per node of the cluster start_cluster made: its name, the
# messages it read from Redis and the partitions it follows (what cluster-summary.py reads).
record_nodes() {
    local i
    : >"$1"
    for ((i = 0; i < ${#admins[@]}; i++)); do
        echo "n$i $(metric "${admins[$i]}" herald_bridge_messages_total 'direction="in"') $(metric "${admins[$i]}" herald_bridge_groups_followed 'bridge="redis"')" \
            >>"$1"
    done
}
