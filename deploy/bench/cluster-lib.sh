# deploy/bench/cluster-lib.sh: what the cluster benchmarks (bench-live.sh, bench-interest.sh)
# share, sourced by them: free ports, the processes they start and stop, readiness and
# metrics. Not run on its own.
# shellcheck shell=bash

# A free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

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
