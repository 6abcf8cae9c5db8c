#!/usr/bin/env bash
# shellcheck disable=SC2034 # the settings, credentials and dirs set here are used by the parts
# deploy/engines/common.sh: what every engine part shares (sourced, not run): settings,
# logging, apt-get, our own processes (ownership checks, stop), free ports (deploy/lib.sh),
# the state dir, its lock and env file, the start/stop/status logic over the parts, and the
# command line of engines.sh and of each part.
#
# A part is deploy/engines/NAME.sh, listed in ENGINE_PARTS below (in start and env order).
# It defines some of these functions, where P is NAME with '-' turned into '_':
#   P_prepare   install or download what it needs (runs before any port is picked)
#   P_start     pick its ports, launch it, wait until it answers
#   P_env       print its `export ...` lines if it is recorded in the state dir
#   P_procs     print the names of its processes (for stop_engines / running_pid)
#   P_clean     remove what `stop` removes (data; logs and ports stay)
#   P_reset     remove what a fresh `start` removes first
#   P_forget    remove its ports after a failed start, so nothing revives a half-made setup
#   P_status    (optional) status of a part without processes
#   P_cmd_CMD   (optional) an extra command of `NAME.sh CMD ...`
# and sets PART_NEEDS[NAME]="other parts it needs" (prepared, never reset, with it).
# A process NAME is checked by NAME_owns_pid NAME PID (rx_owns_pid for rx/*), and can be
# killed and started again with `engines.sh kill-NAME|start-NAME` when NAME_launch exists.
# Each part runs alone: `deploy/engines/NAME.sh start|stop|status|env|help` (part_main).
#
# To add an engine: write deploy/engines/NAME.sh like redis.sh and add NAME to ENGINE_PARTS.

[[ -n ${ENGINES_COMMON_LOADED:-} ]] && return 0
ENGINES_COMMON_LOADED=1
set -euo pipefail

# ----------------------------------------------------------------------------- settings

ENGINES_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$ENGINES_LIB/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$ENGINES_LIB/../lib.sh"
STATE_DIR_RAW=${HERALD_ENGINES_DIR:-$REPO/target/engines}
CACHE_DIR_RAW=${HERALD_ENGINES_CACHE:-${HOME:-/tmp}/.cache/herald-engines}
STOP_GRACE_SECONDS=10

# The parts, in start order (which is also the order of the env file's lines).
ENGINE_PARTS=(redis kafka tls redis-tls sentinel redis-cluster jaeger)
declare -A PART_NEEDS=()
declare -A PART_LOADED=()

# Test-only credentials of the engines started here (loopback only, thrown away on stop).
SECRET_USER=herald
REDIS_SECRET=herald-redis-secret
KAFKA_SECRET=herald-kafka-secret
STORE_PASS=herald-store-secret

# Source every part (each once; a part run alone has already sourced itself).
engines_load_all() {
    local p
    for p in "${ENGINE_PARTS[@]}"; do
        [[ -n ${PART_LOADED[$p]:-} ]] && continue
        PART_LOADED[$p]=1
        # shellcheck source=/dev/null
        source "$ENGINES_LIB/$p.sh"
    done
}

# hook PART NAME ARGS...: call the part's function P_NAME if it has one.
hook() {
    local fn=${1//-/_}_$2
    declare -F "$fn" >/dev/null || return 0
    "$fn" "${@:3}"
}

# ----------------------------------------------------------------------------- helpers

log() { printf '[engines] %s\n' "$*" >&2; }
die() {
    printf '[engines] ERROR: %s\n' "$*" >&2
    exit 1
}

# Print the last lines of a log file to stderr (for error messages).
tail_log() {
    local file=$1 lines=${2:-40}
    if [[ -s $file ]]; then
        printf '[engines] ---- last %s lines of %s ----\n' "$lines" "$file" >&2
        tail -n "$lines" "$file" >&2 || true
        printf '[engines] ---- end of %s ----\n' "$file" >&2
    else
        printf '[engines] (%s is empty or missing)\n' "$file" >&2
    fi
}

now() { date +%s; }

# Print a script's header comment (its comment lines from the second one on, up to the first
# line that is not a comment).
usage_of() {
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$1" >&2
}

# Run a command as root (directly, or via passwordless sudo).
as_root() {
    if [[ $EUID -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo -n "$@"
    else
        die "need root (or passwordless sudo) to run: $*"
    fi
}

APT_UPDATED=0
# apt-get install the given Debian packages, non-interactively. While it runs, a
# policy-rc.d that forbids starting services is put in place (if there is none), so that
# installing e.g. redis-server does not start a system-wide Redis.
apt_install() {
    command -v apt-get >/dev/null 2>&1 ||
        die "missing $*, and apt-get is not available to install it; install it by hand"
    log "installing with apt-get: $*"
    local guard=0 ok=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\n# temporary, from herald deploy/engines.sh\nexit 101\n' |
            as_root tee /usr/sbin/policy-rc.d >/dev/null
        as_root chmod 755 /usr/sbin/policy-rc.d
        guard=1
    fi
    local apt=(env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -q)
    if [[ $APT_UPDATED -eq 1 ]] || as_root "${apt[@]}" update >&2; then
        APT_UPDATED=1
        if as_root "${apt[@]}" install -y --no-install-recommends "$@" >&2; then
            ok=1
        fi
    fi
    if [[ $guard -eq 1 ]]; then
        as_root rm -f /usr/sbin/policy-rc.d
    fi
    [[ $ok -eq 1 ]] || die "apt-get install $* failed"
}

# Wait up to SECONDS for the command after it to succeed.
wait_for() {
    local seconds=$1 what=$2 deadline
    shift 2
    deadline=$(($(now) + seconds))
    until "$@" >/dev/null 2>&1; do
        [[ $(now) -lt $deadline ]] || die "timed out after ${seconds}s waiting for $what"
        sleep 0.2
    done
}

# ----------------------------------------------------------------------------- processes

# True if PID exists and is not a zombie. (A killed engine is no longer our child, so it is
# reaped by whoever adopted it; until then it is a zombie, which counts as dead.)
pid_alive() {
    local pid=$1 stat rest
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    rest=${stat##*) }
    [[ ${rest%% *} != Z ]]
}

# True if PID is the engine process NAME that this state dir started (NAME_owns_pid, or
# rx_owns_pid for rx/*, says). This is what guarantees we never signal a process we did not
# start, even if a PID got recycled.
pid_is_ours() {
    local name=$1 pid=$2 fn
    pid_alive "$pid" || return 1
    fn=${name%%/*}
    fn=${fn//-/_}_owns_pid
    declare -F "$fn" >/dev/null || return 1
    "$fn" "$name" "$pid"
}

# The pidfile of engine process NAME.
pid_file() {
    case $1 in
    rx/*) printf '%s\n' "$STATE_DIR/$1/redis.pid" ;;
    *) printf '%s\n' "$(engine_dir "$1")/$1.pid" ;;
    esac
}

# Print the PID of running engine process NAME, or fail if it does not run.
running_pid() {
    local name=$1 pidfile pid
    pidfile=$(pid_file "$name")
    [[ -f $pidfile ]] || return 1
    pid=$(tr -dc '0-9' <"$pidfile")
    pid_is_ours "$name" "$pid" || return 1
    printf '%s\n' "$pid"
}

# Wait until PID is gone or the epoch second DEADLINE has passed.
wait_gone() {
    local pid=$1 deadline=$2
    while pid_alive "$pid"; do
        [[ $(now) -lt $deadline ]] || return 1
        sleep 0.1
    done
}

# Give whoever adopted a dead engine until DEADLINE to reap its zombie, so that `pgrep`
# right after `stop` shows nothing (some container inits reap only every second or so).
# Never fails: a zombie holds no port and no memory.
wait_reaped() {
    local pid=$1 deadline=$2
    while [[ -e /proc/$pid && $(now) -lt $deadline ]]; do
        sleep 0.05
    done
}

# Stop the engines NAME... that run (all are signalled at once, then waited for).
# MODE "term": SIGTERM, then SIGKILL whatever still lives after STOP_GRACE_SECONDS.
# MODE "kill": SIGKILL at once (fault injection). REAP=1: also wait up to 3 s for the
# zombies to be reaped. Returns once the processes are gone; removes their pidfiles.
stop_engines() {
    local mode=$1 reap=$2 name pid i deadline
    shift 2
    local names=() pids=()
    for name in "$@"; do
        if pid=$(running_pid "$name"); then
            names+=("$name")
            pids+=("$pid")
            if [[ $mode == term ]]; then
                log "stopping $name (pid $pid, SIGTERM)"
                kill -TERM "$pid" 2>/dev/null || true
            else
                log "killing $name (pid $pid, SIGKILL)"
                kill -KILL "$pid" 2>/dev/null || true
            fi
        fi
    done
    deadline=$(($(now) + STOP_GRACE_SECONDS))
    for i in "${!pids[@]}"; do
        pid=${pids[$i]}
        name=${names[$i]}
        if ! wait_gone "$pid" "$deadline"; then
            log "$name (pid $pid) still alive after ${STOP_GRACE_SECONDS}s, sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            wait_gone "$pid" $(($(now) + 10)) || die "$name (pid $pid) did not exit"
        fi
    done
    for name in "$@"; do
        rm -f "$(pid_file "$name")"
    done
    if [[ $reap -eq 1 ]]; then
        deadline=$(($(now) + 3))
        for pid in "${pids[@]}"; do
            wait_reaped "$pid" "$deadline"
        done
    fi
}

# ----------------------------------------------------------------------------- ports

# port_listening, port_bindable and pick_port are deploy/lib.sh's (sourced above).

# Wait up to SECONDS for PORT to be bindable (e.g. right after killing its previous owner).
wait_port_free() {
    local port=$1 seconds=$2 deadline
    deadline=$(($(now) + seconds))
    until port_bindable "$port"; do
        [[ $(now) -lt $deadline ]] || return 1
        sleep 0.2
    done
}

# ----------------------------------------------------------------------------- state

# The state dir: redis/, kafka/ (ports, pidfiles, data, logs), rx/NAME/ (extra Redis
# processes), tls/ (certificates), env, .lock. Parts with dirs of their own set them in
# P_init.
STATE_DIR=""
REDIS_DIR=""
KAFKA_DIR=""
RX_DIR=""
TLS_DIR=""
init_state_dir() {
    local p
    mkdir -p "$STATE_DIR_RAW" || die "cannot create state dir $STATE_DIR_RAW"
    STATE_DIR=$(cd "$STATE_DIR_RAW" && pwd) # absolute: it ends up in configs and ownership checks
    REDIS_DIR=$STATE_DIR/redis
    KAFKA_DIR=$STATE_DIR/kafka
    RX_DIR=$STATE_DIR/rx
    TLS_DIR=$STATE_DIR/tls
    for p in "${ENGINE_PARTS[@]}"; do
        hook "$p" init
    done
}

engine_dir() { printf '%s\n' "$STATE_DIR/$1"; }

# Serialise commands that change state (parallel tests may inject faults concurrently).
# The lock is on fd 9; engines are launched with 9>&- so they never inherit it.
lock_state() {
    exec 9>"$STATE_DIR/.lock"
    if command -v flock >/dev/null 2>&1; then
        flock -w 300 9 || die "timed out waiting for the lock on $STATE_DIR"
    fi
}

recorded_port() { # NAME [FILE]: the port recorded for an engine, or fail
    local file
    file=$(engine_dir "$1")/${2:-port}
    [[ -f $file ]] || return 1
    tr -dc '0-9' <"$file"
}

# The `export` lines of the parts PART... that are recorded, in ENGINE_PARTS order.
env_lines() {
    local p q
    for p in "${ENGINE_PARTS[@]}"; do
        for q in "$@"; do
            [[ $p == "$q" ]] && hook "$p" env
        done
    done
    return 0
}

# $STATE_DIR/env: a line for each engine recorded in the state dir.
write_env_file() {
    local tmp=$STATE_DIR/env.tmp
    env_lines "${ENGINE_PARTS[@]}" >"$tmp"
    mv -f "$tmp" "$STATE_DIR/env"
}

# ----------------------------------------------------------------------------- parts

# PART... and the parts they need, in ENGINE_PARTS order, one a line.
with_needs() {
    local p q
    local -A want=()
    for p in "$@"; do
        want[$p]=1
        for q in ${PART_NEEDS[$p]:-}; do want[$q]=1; done
    done
    for p in "${ENGINE_PARTS[@]}"; do
        [[ -n ${want[$p]:-} ]] && printf '%s\n' "$p"
    done
    return 0
}

# The processes of PART... (all parts if none given), one a line, each once.
procs_of() {
    local p
    [[ $# -gt 0 ]] || set -- "${ENGINE_PARTS[@]}"
    for p in "$@"; do
        hook "$p" procs
    done | awk '!seen[$0]++'
}

# Stop everything this state dir runs, including extra Redis nodes no part lists any more,
# and remove the engines' data (logs, ports and certificates are kept).
stop_all() { # [REAP]
    local names=() p
    mapfile -t names < <({ procs_of; rx_names; } | awk '!seen[$0]++')
    [[ ${#names[@]} -gt 0 ]] && stop_engines term "${1:-1}" "${names[@]}"
    for p in "${ENGINE_PARTS[@]}"; do
        hook "$p" clean
    done
    rm -rf "$STATE_DIR/env" "$RX_DIR"
}

# Stop one part alone: its processes, its data, its ports; the env file keeps the others.
stop_part() { # PART
    local names=()
    mapfile -t names < <(procs_of "$1")
    [[ ${#names[@]} -gt 0 ]] && stop_engines term 1 "${names[@]}"
    hook "$1" clean
    hook "$1" forget
    write_env_file
    [[ -s $STATE_DIR/env ]] || rm -f "$STATE_DIR/env"
}

START_SCOPE=""
START_PARTS=()
on_start_exit() {
    local rc=$? names=() p scope=$START_SCOPE
    [[ $rc -ne 0 && -n $scope ]] || return 0
    log "start failed; stopping what was started"
    if [[ $scope == all ]]; then
        mapfile -t names < <({ procs_of; rx_names; } | awk '!seen[$0]++')
    else
        mapfile -t names < <(procs_of "${START_PARTS[@]}")
    fi
    START_SCOPE=""
    [[ ${#names[@]} -gt 0 ]] && { stop_engines kill 0 "${names[@]}" || true; }
    # Forget the ports too, so start-redis/start-kafka do not revive a half-made setup.
    for p in "${START_PARTS[@]}"; do
        hook "$p" forget || true
    done
    if [[ $scope == all ]]; then
        rm -rf "$RX_DIR"
        rm -f "$STATE_DIR/env"
    else
        write_env_file || true
    fi
}

# Start fresh engines PART... (and the parts they need) on free ports.
# SCOPE "all": first stop everything in the state dir and start from scratch (engines.sh
# start); then write the env file and print it.
# SCOPE "own": stop and reset only PART... (a part run alone); then write the env file and
# print the lines of PART... and of what they need.
start_parts() { # SCOPE PART...
    local scope=$1 p wanted=()
    shift
    mapfile -t wanted < <(with_needs "$@")
    if [[ $scope == all ]]; then
        # Anything left from a previous run in this state dir goes first.
        stop_all 0
        for p in "${ENGINE_PARTS[@]}"; do
            hook "$p" reset
        done
        rm -rf "$RX_DIR"
    else
        for p in "$@"; do
            local names=()
            mapfile -t names < <(procs_of "$p")
            [[ ${#names[@]} -gt 0 ]] && stop_engines term 0 "${names[@]}"
            hook "$p" clean
            hook "$p" reset
        done
    fi

    # Install / download before picking ports, so the ports stay free for as short as possible.
    for p in "${wanted[@]}"; do
        hook "$p" prepare
    done

    START_SCOPE=$scope
    START_PARTS=("${wanted[@]}")
    [[ $scope == all ]] && START_PARTS=("${ENGINE_PARTS[@]}")
    trap on_start_exit EXIT
    for p in "${wanted[@]}"; do
        hook "$p" start
    done
    START_SCOPE=""

    write_env_file
    if [[ $scope == all ]]; then
        cat "$STATE_DIR/env"
    else
        env_lines "${wanted[@]}"
    fi
}

# engines.sh status: every process of the parts, then every extra Redis node, and the env file.
status_all() {
    local names=()
    mapfile -t names < <(procs_of | grep -v '^rx/'; rx_names)
    status_of "${names[@]}"
    if [[ -f $STATE_DIR/env ]]; then
        printf 'env file: %s\n' "$STATE_DIR/env"
    fi
}

# What runs, on which port: every process NAME given.
status_of() {
    local name pid port
    for name in "$@"; do
        if ! port=$(recorded_port "$name"); then
            printf '%s: not started\n' "$name"
        elif pid=$(running_pid "$name"); then
            printf '%s: running, pid %s, 127.0.0.1:%s\n' "$name" "$pid" "$port"
        else
            printf '%s: stopped (port %s recorded)\n' "$name" "$port"
        fi
    done
}

# True if NAME is an engine process (not an extra Redis node) that NAME_launch starts again
# on its recorded port: engines.sh kill-NAME, start-NAME, restart-NAME.
launchable() {
    [[ $1 != */* ]] && procs_of | grep -qx -- "$1" && declare -F "${1//-/_}_launch" >/dev/null
}

cmd_kill() { # NAME [--graceful]
    local name=$1 mode=kill
    shift
    case ${1:-} in
    "") ;;
    --graceful) mode=term ;;
    *) die "kill-$name: unknown option '$1' (expected --graceful)" ;;
    esac
    recorded_port "$name" >/dev/null || die "no $name recorded in $STATE_DIR; run '$0 start' first"
    if ! running_pid "$name" >/dev/null; then
        log "$name is not running"
    fi
    stop_engines "$mode" 0 "$name"
}

# start [--PART...]: the parts that start something (all of them by default).
start_all() {
    local arg p selectable=() picked=()
    for p in "${ENGINE_PARTS[@]}"; do
        declare -F "${p//-/_}_start" >/dev/null && selectable+=("$p")
    done
    for arg in "$@"; do
        p=${arg#--}
        [[ $arg == --* && " ${selectable[*]} " == *" $p "* ]] ||
            die "start: unknown option '$arg' (expected $(printf -- '--%s, ' "${selectable[@]}" | sed 's/, $//'))"
        picked+=("$p")
    done
    [[ ${#picked[@]} -gt 0 ]] || picked=("${selectable[@]}")
    start_parts all "${picked[@]}"
}

# The command line of engines.sh (PART empty: every part; its other commands are
# engines_knows / engines_cmd, in engines.sh) and of a part run alone (deploy/engines/PART.sh CMD [ARGS...];
# its other commands are its P_cmd_CMD functions).
engines_main() { # PART FILE [CMD [ARGS...]]
    local part=$1 file=$2 cmd=${3:-} own
    shift 2
    [[ $# -gt 0 ]] && shift
    engines_load_all
    case $cmd in
    -h | --help | help | "")
        usage_of "$file"
        [[ -n $cmd ]] || exit 2
        return 0
        ;;
    esac
    init_state_dir
    case $cmd:${part:+part} in
    start:)
        lock_state
        start_all "$@"
        ;;
    start:part)
        [[ $# -eq 0 ]] || die "start: no options expected, got '$*'"
        lock_state
        start_parts own "$part"
        ;;
    stop:)
        lock_state
        stop_all
        ;;
    stop:part)
        lock_state
        stop_part "$part"
        ;;
    status:) status_all ;;
    status:part)
        if declare -F "${part//-/_}_status" >/dev/null; then
            hook "$part" status
        else
            local names=()
            mapfile -t names < <(procs_of "$part")
            status_of "${names[@]}"
        fi
        ;;
    env:)
        [[ -f $STATE_DIR/env ]] || die "no $STATE_DIR/env; run '$file start' first"
        cat "$STATE_DIR/env"
        ;;
    env:part)
        own=$(hook "$part" env)
        [[ -n $own ]] || die "$part is not started in $STATE_DIR; run '$file start' first"
        local wanted=()
        mapfile -t wanted < <(with_needs "$part")
        env_lines "${wanted[@]}"
        ;;
    *:)
        engines_knows "$cmd" || {
            usage_of "$file"
            die "unknown command '$cmd'"
        }
        engines_cmd "$cmd" "$@"
        ;;
    *:part)
        declare -F "${part//-/_}_cmd_${cmd//-/_}" >/dev/null || {
            usage_of "$file"
            die "unknown command '$cmd'"
        }
        hook "$part" "cmd_${cmd//-/_}" "$@"
        ;;
    esac
}
