#!/usr/bin/env bash
# deploy/engines/redis.sh: a plain Redis (Debian's redis-server, installed with apt-get if
# missing) on a free 127.0.0.1 port, without persistence; and the extra Redis processes
# (rx/NAME) that redis-tls.sh, sentinel.sh and redis-cluster.sh are made of.
#
#   deploy/engines/redis.sh start    start a fresh Redis; prints
#                                    export HERALD_TEST_REDIS_URL=redis://127.0.0.1:PORT
#   deploy/engines/redis.sh stop     stop it, remove its data and port (the logs stay)
#   deploy/engines/redis.sh status   whether it runs, its pid and port
#   deploy/engines/redis.sh env      print its export line
#
# Same state dir (HERALD_ENGINES_DIR) and env file as deploy/engines.sh, which also does
# kill-redis, start-redis (the same port again) and restart-redis.

# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PART_LOADED["redis"]=1

REDIS_START_TIMEOUT=10

# Make sure a Redis installed from Debian's package does not run as a system service:
# we only ever use our own redis-server processes, on our own ports.
disable_system_redis() {
    if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
        as_root systemctl disable --now redis-server.service >/dev/null 2>&1 || true
    elif [[ -x /etc/init.d/redis-server ]]; then
        as_root /etc/init.d/redis-server stop >/dev/null 2>&1 || true
        if command -v update-rc.d >/dev/null 2>&1; then
            as_root update-rc.d redis-server disable >/dev/null 2>&1 || true
        fi
    fi
}

ensure_redis() {
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
        apt_install redis-server
        disable_system_redis
        command -v redis-server >/dev/null 2>&1 || die "redis-server still missing after apt-get"
    fi
}

# redis-server rewrites its title, but its cwd is the --dir we gave it.
redis_owns_pid() { # NAME PID
    local cwd
    cwd=$(readlink "/proc/$2/cwd" 2>/dev/null) || return 1
    [[ $cwd == "$REDIS_DIR/data" ]] || return 1
    [[ $(cat "/proc/$2/comm" 2>/dev/null) == redis-server* ]]
}

redis_cli() {
    timeout 5 redis-cli -h 127.0.0.1 -p "$1" "${@:2}"
}

# Start redis-server on its recorded port; fail unless it answers PING from the very
# process we started (redis --daemonize exits 0 even if the port is taken).
redis_launch() {
    local port pid deadline
    port=$(recorded_port redis) || die "no Redis port recorded in $REDIS_DIR; run '$0 start --redis' first"
    ensure_redis
    if pid=$(running_pid redis); then
        log "redis already runs (pid $pid, port $port)"
        return 0
    fi
    wait_port_free "$port" 10 || die "port $port (Redis) is in use by another process"
    mkdir -p "$REDIS_DIR/data"
    rm -f "$REDIS_DIR/redis.pid"
    : >"$REDIS_DIR/redis.log"
    log "starting redis-server on 127.0.0.1:$port"
    redis-server --bind 127.0.0.1 --port "$port" --protected-mode yes \
        --save "" --appendonly no \
        --daemonize yes --pidfile "$REDIS_DIR/redis.pid" \
        --dir "$REDIS_DIR/data" --logfile "$REDIS_DIR/redis.log" \
        </dev/null >"$REDIS_DIR/launch.log" 2>&1 9>&- ||
        {
            tail_log "$REDIS_DIR/launch.log"
            tail_log "$REDIS_DIR/redis.log"
            die "redis-server failed to start on port $port"
        }

    deadline=$(($(now) + REDIS_START_TIMEOUT))
    while :; do
        if pid=$(running_pid redis) &&
            [[ $(redis_cli "$port" ping 2>/dev/null) == PONG ]] &&
            redis_cli "$port" info server 2>/dev/null | tr -d '\r' | grep -qx "process_id:$pid"; then
            log "redis ready (pid $pid, port $port)"
            return 0
        fi
        if [[ $(now) -ge $deadline ]]; then
            tail_log "$REDIS_DIR/launch.log"
            tail_log "$REDIS_DIR/redis.log"
            die "redis-server did not become ready on port $port within ${REDIS_START_TIMEOUT}s"
        fi
        sleep 0.05
    done
}

redis_prepare() { ensure_redis; }
redis_start() {
    mkdir -p "$REDIS_DIR"
    pick_port >"$REDIS_DIR/port"
    redis_launch
}
redis_env() {
    local port
    if port=$(recorded_port redis); then
        printf 'export HERALD_TEST_REDIS_URL=redis://127.0.0.1:%s\n' "$port"
    fi
}
redis_procs() { printf '%s\n' redis; }
redis_clean() { rm -rf "$REDIS_DIR/data"; }
redis_reset() { rm -rf "$REDIS_DIR"; }
redis_forget() { rm -f "$REDIS_DIR/port"; }

# ----------------------------------------------------------------------------- extra redis

# Extra Redis processes (rx/NAME): a TLS-only Redis, a sentinel set, cluster nodes. Each has a
# dir $RX_DIR/NAME with `port`, `args` (redis-server arguments, one a line) or `sentinel.conf`,
# and `cli` (redis-cli arguments to reach it, one a line).

# An extra Redis process: its cwd is its data dir.
rx_owns_pid() { # rx/NAME PID
    local cwd
    cwd=$(readlink "/proc/$2/cwd" 2>/dev/null) || return 1
    [[ $cwd == "$STATE_DIR/$1/data" ]] || return 1
    [[ $(cat "/proc/$2/comm" 2>/dev/null) == redis-* ]]
}

rx_port() { recorded_port "rx/$1"; }

rx_prepare() { # NAME [PORT]: a fresh dir and a free port (PORT when given)
    local dir=$RX_DIR/$1
    rm -rf "$dir"
    mkdir -p "$dir/data"
    if [[ -n ${2:-} ]]; then
        PICKED_PORTS+=("$2")
        printf '%s\n' "$2" >"$dir/port"
    else
        pick_port >"$dir/port"
    fi
    : >"$dir/cli"
}

rx_cli() { # NAME ARGS...: redis-cli against an extra node
    local dir=$RX_DIR/$1 cli=()
    mapfile -t cli <"$dir/cli"
    timeout 5 redis-cli -h 127.0.0.1 -p "$(rx_port "$1")" "${cli[@]}" "${@:2}"
}

rx_launch() { # NAME
    local name=$1 dir=$RX_DIR/$1 port pid deadline args=()
    port=$(rx_port "$name") || die "no $name recorded in $RX_DIR; run '$0 start' first"
    if pid=$(running_pid "rx/$name"); then
        log "$name already runs (pid $pid, port $port)"
        return 0
    fi
    wait_port_free "$port" 10 || die "port $port ($name) is in use by another process"
    if [[ -f $dir/sentinel.conf ]]; then
        redis-sentinel "$dir/sentinel.conf" </dev/null >"$dir/launch.log" 2>&1 9>&- ||
            { tail_log "$dir/launch.log"; die "redis-sentinel $name failed to start"; }
    else
        mapfile -t args <"$dir/args"
        redis-server --bind 127.0.0.1 --protected-mode yes --save "" --appendonly no \
            "${args[@]}" --daemonize yes --pidfile "$dir/redis.pid" \
            --dir "$dir/data" --logfile "$dir/redis.log" \
            </dev/null >"$dir/launch.log" 2>&1 9>&- ||
            {
                tail_log "$dir/launch.log"
                tail_log "$dir/redis.log"
                die "redis-server $name failed to start on port $port"
            }
    fi
    deadline=$(($(now) + REDIS_START_TIMEOUT))
    until running_pid "rx/$name" >/dev/null && [[ $(rx_cli "$name" ping 2>/dev/null) == PONG ]]; do
        if [[ $(now) -ge $deadline ]]; then
            tail_log "$dir/launch.log"
            tail_log "$dir/redis.log"
            die "$name did not answer PING on port $port within ${REDIS_START_TIMEOUT}s"
        fi
        sleep 0.05
    done
    log "$name ready (port $port)"
}

# Every extra node recorded in the state dir (rx/NAME), one a line.
rx_names() {
    [[ -d $RX_DIR ]] || return 0
    find "$RX_DIR" -mindepth 1 -maxdepth 1 -type d -printf 'rx/%f\n' | sort
}

# Remove the dirs of the extra nodes NAME... (what stop, reset and forget do for them).
rx_remove() {
    local name
    for name in "$@"; do
        rm -rf "${RX_DIR:?}/$name"
    done
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    engines_main redis "${BASH_SOURCE[0]}" "$@"
fi
