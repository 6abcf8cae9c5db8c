#!/usr/bin/env bash
# deploy/engines/sentinel.sh: a Redis master and a replica with an ACL user (the default
# user off), watched by two redis-sentinel (Debian's redis-sentinel, installed with apt-get
# if missing; quorum 1, a master is down after 1 s).
#
#   deploy/engines/sentinel.sh start    start the set fresh; prints
#                                       export HERALD_TEST_REDIS_SENTINEL_URL=redis+sentinel://USER:PASS@127.0.0.1:S1,127.0.0.1:S2/herald-master
#   deploy/engines/sentinel.sh stop     stop the four processes, remove their dirs
#   deploy/engines/sentinel.sh status   whether each runs (rx/s-master, rx/s-replica,
#                                       rx/sentinel-1, rx/sentinel-2), its pid and port
#   deploy/engines/sentinel.sh env      print its export line
#   deploy/engines/sentinel.sh master   the name (s-master or s-replica) of the node the
#                                       sentinels name as master now
#   deploy/engines/sentinel.sh cli NAME ARGS...
#                                       redis-cli ARGS against NAME (s-master, s-replica,
#                                       sentinel-1, sentinel-2), with its credentials
#   deploy/engines/sentinel.sh rejoin NAME
#                                       start NAME (s-master or s-replica) again after
#                                       kill-node, as a replica of the master the sentinels
#                                       name now, as a failed master rejoins after a failover
#
# deploy/engines.sh kill-node|start-node s-master|s-replica|sentinel-1|sentinel-2: fault
# injection on one of them.
#
# Knobs for `start` (deploy/chaos.sh sets them; the defaults are the tests'):
#   HERALD_SENTINEL_MASTER          the master's name (herald-master)
#   HERALD_SENTINEL_DOWN_AFTER_MS   down-after-milliseconds (1000)
#   HERALD_SENTINEL_FAILOVER_TIMEOUT_MS  failover-timeout (10000)
#   HERALD_SENTINEL_PORTS="M R"     the master's and the replica's ports (default: free ones)
#   HERALD_SENTINEL_ANNOUNCE="M R"  the ports the master and the replica are reached at (a
#                                   proxy in front of each): each announces its own
#                                   (replica-announce-port), the replica follows the master
#                                   there and the sentinels watch it there
#   HERALD_SENTINEL_MIN_REPLICAS=N  min-replicas-to-write N (max lag 1 s): a write is refused
#                                   unless N replicas follow

# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PART_LOADED["sentinel"]=1

SENTINEL_MASTER=${HERALD_SENTINEL_MASTER:-herald-master}

# The master's name the set was started with (recorded: later commands may not have the knob).
sentinel_name() { cat "$RX_DIR/sentinel-1/master" 2>/dev/null || printf '%s\n' "$SENTINEL_MASTER"; }

# The port NAME (s-master or s-replica) is reached at: the one it announces, or its own.
sentinel_addr() {
    if [[ -f $RX_DIR/$1/announce ]]; then cat "$RX_DIR/$1/announce"; else rx_port "$1"; fi
}

# The port of the master the sentinels name now.
sentinel_master_port() {
    rx_cli sentinel-1 sentinel get-master-addr-by-name "$(sentinel_name)" | sed -n 2p
}

replica_linked() { rx_cli "$1" info replication | tr -d '\r' | grep -qx 'master_link_status:up'; }

sentinel_knows_replica() {
    rx_cli "$1" sentinel replicas "$SENTINEL_MASTER" | grep -qx "$(sentinel_addr s-replica)" &&
        [[ $(rx_cli "$1" sentinel ckquorum "$SENTINEL_MASTER" | head -c 2) == OK ]]
}

sentinel_prepare() {
    ensure_redis
    if ! command -v redis-sentinel >/dev/null 2>&1; then
        apt_install redis-sentinel
        disable_system_redis
    fi
}

sentinel_start() {
    local name sdir ports=() announce=() i=0 common args
    read -ra ports <<<"${HERALD_SENTINEL_PORTS:-}"
    read -ra announce <<<"${HERALD_SENTINEL_ANNOUNCE:-}"
    common=(--user default off --user "$SECRET_USER" on ">$REDIS_SECRET" '~*' '&*' '+@all'
        --masteruser "$SECRET_USER" --masterauth "$REDIS_SECRET")
    if [[ ${HERALD_SENTINEL_MIN_REPLICAS:-0} -gt 0 ]]; then
        common+=(--min-replicas-to-write "$HERALD_SENTINEL_MIN_REPLICAS" --min-replicas-max-lag 1)
    fi
    for name in s-master s-replica; do
        rx_prepare "$name" "${ports[i]:-}"
        [[ -z ${announce[i]:-} ]] || printf '%s\n' "${announce[i]}" >"$RX_DIR/$name/announce"
        i=$((i + 1))
    done
    for name in s-master s-replica; do
        args=(--port "$(rx_port "$name")" "${common[@]}")
        if [[ -f $RX_DIR/$name/announce ]]; then
            args+=(--replica-announce-ip 127.0.0.1 --replica-announce-port "$(sentinel_addr "$name")")
        fi
        if [[ $name == s-replica ]]; then
            args+=(--replicaof 127.0.0.1 "$(sentinel_addr s-master)")
        fi
        printf '%s\n' "${args[@]}" >"$RX_DIR/$name/args"
        printf '%s\n' --user "$SECRET_USER" --pass "$REDIS_SECRET" --no-auth-warning >"$RX_DIR/$name/cli"
        rx_launch "$name"
    done
    wait_for 20 "the replica to sync" replica_linked s-replica
    for name in sentinel-1 sentinel-2; do
        rx_prepare "$name"
        sdir=$RX_DIR/$name
        printf '%s\n' "$SENTINEL_MASTER" >"$sdir/master"
        cat >"$sdir/sentinel.conf" <<CONF
# Generated by herald deploy/engines/sentinel.sh (redis-sentinel rewrites it as it learns).
port $(rx_port "$name")
bind 127.0.0.1
daemonize yes
pidfile $sdir/redis.pid
logfile $sdir/redis.log
dir $sdir/data
sentinel monitor $SENTINEL_MASTER 127.0.0.1 $(sentinel_addr s-master) 1
sentinel auth-user $SENTINEL_MASTER $SECRET_USER
sentinel auth-pass $SENTINEL_MASTER $REDIS_SECRET
sentinel down-after-milliseconds $SENTINEL_MASTER ${HERALD_SENTINEL_DOWN_AFTER_MS:-1000}
sentinel failover-timeout $SENTINEL_MASTER ${HERALD_SENTINEL_FAILOVER_TIMEOUT_MS:-10000}
CONF
        rx_launch "$name"
    done
    for name in sentinel-1 sentinel-2; do
        wait_for 30 "$name to see the replica" sentinel_knows_replica "$name"
    done
}

sentinel_cmd_master() {
    local port name
    port=$(sentinel_master_port || true)
    [[ -n $port ]] || die "the sentinels name no master"
    for name in s-master s-replica; do
        [[ $(sentinel_addr "$name") == "$port" ]] && printf '%s\n' "$name"
    done
    return 0
}

sentinel_cmd_cli() { # NAME ARGS...
    [[ ${1:-} =~ ^(s-master|s-replica|sentinel-1|sentinel-2)$ ]] ||
        die "cli: name s-master, s-replica, sentinel-1 or sentinel-2"
    rx_cli "$@"
}

sentinel_cmd_rejoin() { # NAME
    local name=${1:-} port args=() kept=() i
    [[ $name == s-master || $name == s-replica ]] || die "rejoin: name s-master or s-replica"
    port=$(sentinel_master_port || true)
    [[ -n $port ]] || die "the sentinels name no master"
    mapfile -t args <"$RX_DIR/$name/args"
    for ((i = 0; i < ${#args[@]}; i++)); do
        if [[ ${args[i]} == --replicaof ]]; then i=$((i + 2)); else kept+=("${args[i]}"); fi
    done
    printf '%s\n' "${kept[@]}" --replicaof 127.0.0.1 "$port" >"$RX_DIR/$name/args"
    rx_launch "$name"
}

sentinel_env() {
    if [[ -f $RX_DIR/sentinel-1/port ]]; then
        printf 'export HERALD_TEST_REDIS_SENTINEL_URL=redis+sentinel://%s:%s@127.0.0.1:%s,127.0.0.1:%s/%s\n' \
            "$SECRET_USER" "$REDIS_SECRET" "$(rx_port sentinel-1)" "$(rx_port sentinel-2)" \
            "$(sentinel_name)"
    fi
}
sentinel_procs() { printf 'rx/%s\n' s-master s-replica sentinel-1 sentinel-2; }
sentinel_clean() { rx_remove s-master s-replica sentinel-1 sentinel-2; }
sentinel_reset() { sentinel_clean; }
sentinel_forget() { sentinel_clean; }

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    engines_main sentinel "${BASH_SOURCE[0]}" "$@"
fi
