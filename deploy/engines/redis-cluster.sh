#!/usr/bin/env bash
# deploy/engines/redis-cluster.sh: a Redis Cluster over TLS (clients, replication and the
# cluster bus, with tls.sh's material): 3 masters and 3 replicas with a password, created
# with redis-cli --cluster create.
#
#   deploy/engines/redis-cluster.sh start           start it fresh; prints
#                                                   export HERALD_TEST_REDIS_CLUSTER_URL=rediss://:PASS@127.0.0.1:C1,127.0.0.1:C2,127.0.0.1:C3
#                                                   and (tls.sh) the HERALD_TEST_TLS_* files
#   deploy/engines/redis-cluster.sh stop            stop the six nodes, remove their dirs
#   deploy/engines/redis-cluster.sh status          whether each node (rx/c1..rx/c6) runs,
#                                                   its pid and port
#   deploy/engines/redis-cluster.sh env             print its export lines
#   deploy/engines/redis-cluster.sh master-of KEY   the node (c1..c6) serving KEY's slot (as
#                                                   engines.sh cluster-master-of)
#
# deploy/engines.sh kill-node|start-node c1..c6: fault injection on one node.

# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PART_LOADED["redis-cluster"]=1
PART_NEEDS["redis-cluster"]=tls

CLUSTER_NODES=(c1 c2 c3 c4 c5 c6)

cluster_ok() {
    local name
    for name in "${CLUSTER_NODES[@]}"; do
        rx_cli "$name" cluster info | tr -d '\r' | grep -qx 'cluster_state:ok' || return 1
    done
    [[ $(rx_cli c1 cluster nodes | grep -c ' slave ') -eq 3 ]]
}

redis_cluster_prepare() { ensure_redis; }

redis_cluster_start() {
    local name seeds=()
    for name in "${CLUSTER_NODES[@]}"; do
        rx_prepare "$name"
        pick_port >"$RX_DIR/$name/bus_port"
        printf '%s\n' --port 0 --tls-port "$(rx_port "$name")" --tls-cluster yes \
            --tls-replication yes --tls-cert-file "$TLS_DIR/server.pem" \
            --tls-key-file "$TLS_DIR/server.key" --tls-ca-cert-file "$TLS_DIR/ca.pem" \
            --tls-auth-clients optional --cluster-enabled yes \
            --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
            --cluster-port "$(recorded_port "rx/$name" bus_port)" \
            --requirepass "$REDIS_SECRET" --masterauth "$REDIS_SECRET" >"$RX_DIR/$name/args"
        printf '%s\n' --tls --cacert "$TLS_DIR/ca.pem" -a "$REDIS_SECRET" --no-auth-warning \
            >"$RX_DIR/$name/cli"
        rx_launch "$name"
        seeds+=("127.0.0.1:$(rx_port "$name")")
    done
    log "creating the Redis Cluster"
    timeout 60 redis-cli --tls --cacert "$TLS_DIR/ca.pem" -a "$REDIS_SECRET" --no-auth-warning \
        --cluster create "${seeds[@]}" \
        --cluster-replicas 1 --cluster-yes </dev/null >"$RX_DIR/create.log" 2>&1 ||
        { tail_log "$RX_DIR/create.log"; die "redis-cli --cluster create failed"; }
    wait_for 30 "the Redis Cluster to be ok" cluster_ok
    log "redis cluster ready"
}

# Print the name (c1..c6) of the cluster master serving KEY's slot.
cmd_cluster_master_of() {
    local key=$1 slot="" name line
    for name in "${CLUSTER_NODES[@]}"; do # ask any node that runs
        running_pid "rx/$name" >/dev/null || continue
        slot=$(rx_cli "$name" cluster keyslot "$key" | tr -dc '0-9') && [[ -n $slot ]] && break
    done
    [[ -n $slot ]] || die "no cluster node answers"
    for name in "${CLUSTER_NODES[@]}"; do
        running_pid "rx/$name" >/dev/null || continue
        line=$(rx_cli "$name" cluster nodes | grep 'myself' | grep 'master') || continue
        # Slot ranges are the fields after the 8th: "a-b" or "a".
        if awk -v slot="$slot" '{
                for (i = 9; i <= NF; i++) {
                    n = split($i, r, "-"); lo = r[1]; hi = (n == 2 ? r[2] : r[1]);
                    if (slot + 0 >= lo + 0 && slot + 0 <= hi + 0) found = 1
                }
            } END { exit !found }' <<<"$line"; then
            printf '%s\n' "$name"
            return 0
        fi
    done
    die "no running master serves slot $slot (key $key)"
}

redis_cluster_cmd_master_of() {
    [[ $# -eq 1 ]] || die "cluster-master-of: give one key"
    cmd_cluster_master_of "$1"
}

redis_cluster_env() {
    if [[ -f $RX_DIR/c1/port ]]; then
        printf 'export HERALD_TEST_REDIS_CLUSTER_URL=rediss://:%s@127.0.0.1:%s,127.0.0.1:%s,127.0.0.1:%s\n' \
            "$REDIS_SECRET" "$(rx_port c1)" "$(rx_port c2)" "$(rx_port c3)"
    fi
}
redis_cluster_procs() { printf 'rx/%s\n' "${CLUSTER_NODES[@]}"; }
redis_cluster_clean() {
    rx_remove "${CLUSTER_NODES[@]}"
    rm -f "$RX_DIR/create.log"
}
redis_cluster_reset() { redis_cluster_clean; }
redis_cluster_forget() { redis_cluster_clean; }

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    engines_main redis-cluster "${BASH_SOURCE[0]}" "$@"
fi
