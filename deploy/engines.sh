#!/usr/bin/env bash
# deploy/engines.sh: run a REAL Redis server and a REAL Apache Kafka broker (single-node
# KRaft) as plain local processes for Herald's integration tests. No Docker needed.
#
#   deploy/engines.sh start [--redis] [--kafka] [--redis-tls] [--sentinel] [--redis-cluster]
#                                                  start fresh engines (default: all) on free
#                                                  ports; prints the `export ...` lines that
#                                                  are also written to $STATE_DIR/env.
#                                                  --redis-tls: a Redis with TLS only (client
#                                                  certificates required) and an ACL user;
#                                                  --sentinel: master + replica (ACL user) and
#                                                  two redis-sentinel; --redis-cluster: 3
#                                                  masters + 3 replicas over TLS with a
#                                                  password (redis-cli --cluster create). Kafka always has a SASL_SSL
#                                                  listener (PLAIN, SCRAM-SHA-256/512) and an
#                                                  SSL listener that requires a client
#                                                  certificate, beside PLAINTEXT; certificates
#                                                  are made with openssl, keystores with keytool
#   deploy/engines.sh stop                         stop them, remove their data
#   deploy/engines.sh status                       what runs, on which port
#   deploy/engines.sh env                          print $STATE_DIR/env
#   deploy/engines.sh kill-redis|kill-kafka [--graceful]
#                                                  fault injection: SIGKILL (or SIGTERM with
#                                                  --graceful) one engine, keep its port and data
#   deploy/engines.sh start-redis|start-kafka      start it again on the SAME port (Kafka keeps
#                                                  its data dir, so topics and committed offsets
#                                                  survive)
#   deploy/engines.sh kill-node|start-node NAME    the same for one extra Redis process: tls,
#                                                  s-master, s-replica, sentinel-1, sentinel-2,
#                                                  c1..c6 (kill-node NAME --graceful: SIGTERM)
#   deploy/engines.sh cluster-master-of KEY        the cluster node NAME serving KEY's slot
#   deploy/engines.sh restart-redis|restart-kafka  kill-* then start-*
#   deploy/engines.sh kafka-run CLASS [ARGS...]    run a Kafka CLI class from the cached jars,
#                                                  e.g. org.apache.kafka.tools.TopicCommand
#
# Only `export ...` lines go to stdout, everything else goes to stderr, so
#   eval "$(deploy/engines.sh start)"
# works. Every failure exits non-zero with a message starting with "[engines] ERROR".
#
# Environment knobs (all optional):
#   HERALD_ENGINES_DIR       state dir (default: <repo>/target/engines)
#   HERALD_ENGINES_CACHE     jar cache, kept across runs (default: ~/.cache/herald-engines)
#   HERALD_KAFKA_VERSION     org.apache.kafka:kafka_2.13 version (default: 4.3.1)
#   HERALD_LOG4J_VERSION     log4j2 version of the slf4j binding (default: 2.25.4)
#   HERALD_KAFKA_PARTITIONS  num.partitions for auto-created topics (default: 3)
#   HERALD_KAFKA_HEAP        broker -Xmx (default: 512m)
#   HERALD_KAFKA_START_TIMEOUT  seconds to wait for the broker (default: 60)
#   HERALD_KAFKA_ADVERTISED_PORT  port the PLAINTEXT listener advertises (default: its own);
#                            deploy/chaos.sh points it at a Toxiproxy proxy, so that every
#                            client connection to the broker goes through the proxy
set -euo pipefail

# ----------------------------------------------------------------------------- settings

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
STATE_DIR_RAW=${HERALD_ENGINES_DIR:-$REPO/target/engines}
CACHE_DIR_RAW=${HERALD_ENGINES_CACHE:-${HOME:-/tmp}/.cache/herald-engines}

KAFKA_VERSION=${HERALD_KAFKA_VERSION:-4.3.1}
# Kafka 4.x logs through slf4j 1.7.36 (what its poms declare) into log4j2; the binding for
# slf4j 1.x is log4j-slf4j-impl (log4j-slf4j2-impl is for slf4j 2.x and is not picked up).
# Keep it at the log4j-core version that kafka-server itself depends on.
LOG4J_VERSION=${HERALD_LOG4J_VERSION:-2.25.4}
KAFKA_PARTITIONS=${HERALD_KAFKA_PARTITIONS:-3}
KAFKA_HEAP=${HERALD_KAFKA_HEAP:-512m}
KAFKA_START_TIMEOUT=${HERALD_KAFKA_START_TIMEOUT:-60}
REDIS_START_TIMEOUT=10
STOP_GRACE_SECONDS=10
MAVEN_DEPENDENCY_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1

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

ensure_java() {
    if ! command -v java >/dev/null 2>&1; then
        apt_install openjdk-17-jre-headless
        command -v java >/dev/null 2>&1 || die "java still missing after apt-get"
    fi
}

ensure_maven() {
    if ! command -v mvn >/dev/null 2>&1; then
        apt_install maven
        command -v mvn >/dev/null 2>&1 || die "mvn still missing after apt-get"
    fi
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

# True if PID is the engine NAME that this state dir started. This is what guarantees we
# never signal a process we did not start, even if a PID got recycled.
pid_is_ours() {
    local name=$1 pid=$2 cmdline cwd
    pid_alive "$pid" || return 1
    case $name in
    redis)
        # redis-server rewrites its title, but its cwd is the --dir we gave it.
        cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null) || return 1
        [[ $cwd == "$REDIS_DIR/data" ]] || return 1
        [[ $(cat "/proc/$pid/comm" 2>/dev/null) == redis-server* ]]
        ;;
    kafka)
        cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
        [[ $cmdline == *" kafka.Kafka $KAFKA_DIR/server.properties"* ]]
        ;;
    rx/*)
        # An extra Redis process (TLS, sentinel set, cluster node): its cwd is its data dir.
        cwd=$(readlink "/proc/$pid/cwd" 2>/dev/null) || return 1
        [[ $cwd == "$STATE_DIR/$name/data" ]] || return 1
        [[ $(cat "/proc/$pid/comm" 2>/dev/null) == redis-* ]]
        ;;
    *) return 1 ;;
    esac
}

# Print the PID of running engine NAME, or fail if it does not run.
pid_file() {
    case $1 in
    rx/*) printf '%s\n' "$STATE_DIR/$1/redis.pid" ;;
    *) printf '%s\n' "$(engine_dir "$1")/$1.pid" ;;
    esac
}

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

# True if something accepts TCP connections on 127.0.0.1:PORT.
port_listening() {
    # shellcheck disable=SC2016 # $1 is expanded by the inner bash
    timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

# True if a server could bind 127.0.0.1:PORT now (with SO_REUSEADDR, as Redis and Kafka do).
port_bindable() {
    local port=$1
    if command -v python3 >/dev/null 2>&1; then
        python3 -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
' "$port" 2>/dev/null
    elif port_listening "$port"; then
        return 1
    fi
}

# Wait up to SECONDS for PORT to be bindable (e.g. right after killing its previous owner).
wait_port_free() {
    local port=$1 seconds=$2 deadline
    deadline=$(($(now) + seconds))
    until port_bindable "$port"; do
        [[ $(now) -lt $deadline ]] || return 1
        sleep 0.2
    done
}

PICKED_PORTS=()
# Print a free port. Ports are drawn at random BELOW the kernel's ephemeral range, so that
# while an engine is down (fault injection) no client connection can take its port as a
# local port and block the restart on the same port.
pick_port() {
    local lo=20000 hi=32767 eph_lo span port tries taken p
    if read -r eph_lo _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null && [[ $eph_lo -gt 21000 ]]; then
        hi=$((eph_lo - 1))
    else
        hi=60999
    fi
    span=$((hi - lo + 1))
    for ((tries = 0; tries < 200; tries++)); do
        port=$((lo + (RANDOM * 32768 + RANDOM) % span))
        taken=0
        for p in "${PICKED_PORTS[@]}"; do
            [[ $p -eq $port ]] && taken=1
        done
        if [[ $taken -eq 0 ]] && port_bindable "$port"; then
            PICKED_PORTS+=("$port")
            printf '%s\n' "$port"
            return 0
        fi
    done
    die "could not find a free port in $lo-$hi"
}

# ----------------------------------------------------------------------------- state

STATE_DIR=""
REDIS_DIR=""
KAFKA_DIR=""
init_state_dir() {
    mkdir -p "$STATE_DIR_RAW" || die "cannot create state dir $STATE_DIR_RAW"
    STATE_DIR=$(cd "$STATE_DIR_RAW" && pwd) # absolute: it ends up in configs and ownership checks
    REDIS_DIR=$STATE_DIR/redis
    KAFKA_DIR=$STATE_DIR/kafka
    RX_DIR=$STATE_DIR/rx
    TLS_DIR=$STATE_DIR/tls
}

engine_dir() {
    case $1 in
    redis) printf '%s\n' "$REDIS_DIR" ;;
    kafka) printf '%s\n' "$KAFKA_DIR" ;;
    rx/*) printf '%s\n' "$STATE_DIR/$1" ;;
    esac
}

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

write_env_file() {
    local port tmp=$STATE_DIR/env.tmp
    : >"$tmp"
    if port=$(recorded_port redis); then
        printf 'export HERALD_TEST_REDIS_URL=redis://127.0.0.1:%s\n' "$port" >>"$tmp"
    fi
    if port=$(recorded_port kafka); then
        printf 'export HERALD_TEST_KAFKA_BROKERS=127.0.0.1:%s\n' "$port" >>"$tmp"
        port=$(recorded_port kafka sasl_port)
        printf 'export HERALD_TEST_KAFKA_SASL_BROKERS=127.0.0.1:%s\n' "$port" >>"$tmp"
        port=$(recorded_port kafka ssl_port)
        printf 'export HERALD_TEST_KAFKA_SSL_BROKERS=127.0.0.1:%s\n' "$port" >>"$tmp"
        printf 'export HERALD_TEST_KAFKA_USER=%s HERALD_TEST_KAFKA_PASSWORD=%s\n' \
            "$SECRET_USER" "$KAFKA_SECRET" >>"$tmp"
    fi
    if [[ -f $TLS_DIR/ca.pem ]]; then
        printf 'export HERALD_TEST_TLS_CA=%s HERALD_TEST_TLS_CLIENT_CERT=%s HERALD_TEST_TLS_CLIENT_KEY=%s\n' \
            "$TLS_DIR/ca.pem" "$TLS_DIR/client.pem" "$TLS_DIR/client.key" >>"$tmp"
    fi
    if port=$(rx_port tls 2>/dev/null); then
        printf 'export HERALD_TEST_REDIS_TLS_URL=rediss://%s:%s@127.0.0.1:%s\n' \
            "$SECRET_USER" "$REDIS_SECRET" "$port" >>"$tmp"
    fi
    if [[ -f $RX_DIR/sentinel-1/port ]]; then
        printf 'export HERALD_TEST_REDIS_SENTINEL_URL=redis+sentinel://%s:%s@127.0.0.1:%s,127.0.0.1:%s/%s\n' \
            "$SECRET_USER" "$REDIS_SECRET" "$(rx_port sentinel-1)" "$(rx_port sentinel-2)" \
            "$SENTINEL_MASTER" >>"$tmp"
    fi
    if [[ -f $RX_DIR/c1/port ]]; then
        printf 'export HERALD_TEST_REDIS_CLUSTER_URL=rediss://:%s@127.0.0.1:%s,127.0.0.1:%s,127.0.0.1:%s\n' \
            "$REDIS_SECRET" "$(rx_port c1)" "$(rx_port c2)" "$(rx_port c3)" >>"$tmp"
    fi
    mv -f "$tmp" "$STATE_DIR/env"
}

# ----------------------------------------------------------------------------- redis

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

# ----------------------------------------------------------------------------- TLS material

# Test-only credentials of the engines started here (loopback only, thrown away on stop).
SECRET_USER=herald
REDIS_SECRET=herald-redis-secret
KAFKA_SECRET=herald-kafka-secret
STORE_PASS=herald-store-secret
SENTINEL_MASTER=herald-master

# A CA, a server certificate for 127.0.0.1/localhost and a client certificate, made with
# openssl; the Kafka broker's keystore and truststore made from them with the JDK's keytool.
make_tls_material() {
    [[ -f $TLS_DIR/.complete ]] && return 0
    command -v openssl >/dev/null 2>&1 || apt_install openssl
    rm -rf "$TLS_DIR"
    mkdir -p "$TLS_DIR"
    log "making test certificates in $TLS_DIR"
    (
        set -e
        cd "$TLS_DIR"
        openssl req -x509 -newkey rsa:2048 -nodes -days 3 -subj "/CN=Herald test CA" \
            -keyout ca.key -out ca.pem
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >server.ext
        openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3 \
            -extfile server.ext -out server.pem
        printf 'extendedKeyUsage=clientAuth\n' >client.ext
        openssl req -newkey rsa:2048 -nodes -subj "/CN=herald-client" -keyout client.key -out client.csr
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3 \
            -extfile client.ext -out client.pem
        if command -v keytool >/dev/null 2>&1; then
            openssl pkcs12 -export -in server.pem -inkey server.key -certfile ca.pem -name broker \
                -passout "pass:$STORE_PASS" -out broker-openssl.p12
            keytool -importkeystore -noprompt -srckeystore broker-openssl.p12 -srcstoretype PKCS12 \
                -srcstorepass "$STORE_PASS" -destkeystore broker.p12 -deststoretype PKCS12 \
                -deststorepass "$STORE_PASS"
            keytool -importcert -noprompt -alias herald-ca -file ca.pem -keystore truststore.p12 \
                -storetype PKCS12 -storepass "$STORE_PASS"
        fi
        touch .complete
    ) >"$STATE_DIR/tls.log" 2>&1 || {
        tail_log "$STATE_DIR/tls.log"
        die "could not make the test certificates"
    }
}

# ----------------------------------------------------------------------------- extra redis

# Extra Redis processes (rx/NAME): a TLS-only Redis, a sentinel set, cluster nodes. Each has a
# dir $RX_DIR/NAME with `port`, `args` (redis-server arguments, one a line) or `sentinel.conf`,
# and `cli` (redis-cli arguments to reach it, one a line).

rx_port() { recorded_port "rx/$1"; }

rx_prepare() { # NAME: a fresh dir and a free port
    local dir=$RX_DIR/$1
    rm -rf "$dir"
    mkdir -p "$dir/data"
    pick_port >"$dir/port"
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

rx_names() { [[ -d $RX_DIR ]] && find "$RX_DIR" -mindepth 1 -maxdepth 1 -type d -printf 'rx/%f\n' | sort; }

rx_stop_all() { # MODE REAP
    local names=()
    mapfile -t names < <(rx_names)
    [[ ${#names[@]} -gt 0 ]] && stop_engines "$1" "$2" "${names[@]}"
    return 0
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

# A Redis with TLS only (no plaintext port), client certificates required, and an ACL user;
# the default user is off.
start_redis_tls() {
    local dir=$RX_DIR/tls port
    rx_prepare tls
    port=$(rx_port tls)
    printf '%s\n' --port 0 --tls-port "$port" --tls-cert-file "$TLS_DIR/server.pem" \
        --tls-key-file "$TLS_DIR/server.key" --tls-ca-cert-file "$TLS_DIR/ca.pem" \
        --tls-auth-clients yes --user default off \
        --user "$SECRET_USER" on ">$REDIS_SECRET" '~*' '&*' '+@all' >"$dir/args"
    printf '%s\n' --tls --cacert "$TLS_DIR/ca.pem" --cert "$TLS_DIR/client.pem" \
        --key "$TLS_DIR/client.key" --user "$SECRET_USER" --pass "$REDIS_SECRET" \
        --no-auth-warning >"$dir/cli"
    rx_launch tls
}

replica_linked() { rx_cli "$1" info replication | tr -d '\r' | grep -qx 'master_link_status:up'; }

sentinel_knows_replica() {
    rx_cli "$1" sentinel replicas "$SENTINEL_MASTER" | grep -qx "$(rx_port s-replica)" &&
        [[ $(rx_cli "$1" sentinel ckquorum "$SENTINEL_MASTER" | head -c 2) == OK ]]
}

# A master and a replica with an ACL user (the default user off), watched by two sentinels
# (quorum 1, a master is down after 1 s).
start_sentinel_set() {
    local name sdir
    rx_prepare s-master
    rx_prepare s-replica
    local acl=(--user default off --user "$SECRET_USER" on ">$REDIS_SECRET" '~*' '&*' '+@all'
        --masteruser "$SECRET_USER" --masterauth "$REDIS_SECRET")
    printf '%s\n' --port "$(rx_port s-master)" "${acl[@]}" >"$RX_DIR/s-master/args"
    printf '%s\n' --port "$(rx_port s-replica)" --replicaof 127.0.0.1 "$(rx_port s-master)" \
        "${acl[@]}" >"$RX_DIR/s-replica/args"
    for name in s-master s-replica; do
        printf '%s\n' --user "$SECRET_USER" --pass "$REDIS_SECRET" --no-auth-warning >"$RX_DIR/$name/cli"
        rx_launch "$name"
    done
    wait_for 20 "the replica to sync" replica_linked s-replica
    for name in sentinel-1 sentinel-2; do
        rx_prepare "$name"
        sdir=$RX_DIR/$name
        cat >"$sdir/sentinel.conf" <<EOF
# Generated by herald deploy/engines.sh (redis-sentinel rewrites it as it learns).
port $(rx_port "$name")
bind 127.0.0.1
daemonize yes
pidfile $sdir/redis.pid
logfile $sdir/redis.log
dir $sdir/data
sentinel monitor $SENTINEL_MASTER 127.0.0.1 $(rx_port s-master) 1
sentinel auth-user $SENTINEL_MASTER $SECRET_USER
sentinel auth-pass $SENTINEL_MASTER $REDIS_SECRET
sentinel down-after-milliseconds $SENTINEL_MASTER 1000
sentinel failover-timeout $SENTINEL_MASTER 10000
EOF
        rx_launch "$name"
    done
    for name in sentinel-1 sentinel-2; do
        wait_for 30 "$name to see the replica" sentinel_knows_replica "$name"
    done
}

cluster_ok() {
    local name
    for name in c1 c2 c3 c4 c5 c6; do
        rx_cli "$name" cluster info | tr -d '\r' | grep -qx 'cluster_state:ok' || return 1
    done
    [[ $(rx_cli c1 cluster nodes | grep -c ' slave ') -eq 3 ]]
}

# Redis Cluster over TLS (clients, replication and the cluster bus): 3 masters and 3
# replicas with a password, created with redis-cli.
start_redis_cluster() {
    local name seeds=()
    for name in c1 c2 c3 c4 c5 c6; do
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
    local key=$1 slot="" name port line
    for name in c1 c2 c3 c4 c5 c6; do # ask any node that runs
        running_pid "rx/$name" >/dev/null || continue
        slot=$(rx_cli "$name" cluster keyslot "$key" | tr -dc '0-9') && [[ -n $slot ]] && break
    done
    [[ -n $slot ]] || die "no cluster node answers"
    for name in c1 c2 c3 c4 c5 c6; do
        running_pid "rx/$name" >/dev/null || continue
        line=$(rx_cli "$name" cluster nodes | grep 'myself' | grep 'master') || continue
        port=$(rx_port "$name")
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

# ----------------------------------------------------------------------------- kafka

kafka_cache_dir() { printf '%s\n' "$CACHE_DIR_RAW/kafka_2.13-$KAFKA_VERSION+log4j-$LOG4J_VERSION"; }
kafka_libs() { printf '%s\n' "$(kafka_cache_dir)/libs"; }

# Download Kafka's jars (and its log4j binding) from Maven Central into the cache, once.
ensure_kafka_jars() {
    local dir libs
    dir=$(kafka_cache_dir)
    libs=$dir/libs
    [[ -f $libs/.complete ]] && return 0
    ensure_java
    ensure_maven
    mkdir -p "$dir" || die "cannot create cache dir $dir"
    # The lock (fd 8, in a subshell) keeps parallel runs from downloading at the same time.
    (
        if command -v flock >/dev/null 2>&1; then
            flock -w 900 8 || die "timed out waiting for the cache lock $dir/.lock"
        fi
        [[ -f $libs/.complete ]] && exit 0
        log "downloading Kafka $KAFKA_VERSION jars from Maven Central into $libs"
        cat >"$dir/pom.xml" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by herald deploy/engines.sh: the jars to run a Kafka broker and its CLI. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>herald.engines</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <!-- the broker: kafka.Kafka, kafka.tools.StorageTool -->
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <!-- CLI: TopicCommand, ConsoleProducer, consumer.ConsoleConsumer, ... (no Connect) -->
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>$KAFKA_VERSION</version>
      <exclusions>
        <exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId></exclusion>
      </exclusions>
    </dependency>
    <!-- slf4j 1.7 -> log4j2; without a binding the broker logs nothing -->
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
        rm -rf "$libs.tmp"
        local attempt ok=0
        for attempt in 1 2 3; do
            if mvn -B -q -ntp -f "$dir/pom.xml" -Dmaven.repo.local="$CACHE_DIR_RAW/m2" \
                "$MAVEN_DEPENDENCY_PLUGIN:copy-dependencies" \
                -DincludeScope=runtime -DoutputDirectory="$libs.tmp" \
                </dev/null >"$dir/mvn.log" 2>&1; then
                ok=1
                break
            fi
            log "maven download attempt $attempt failed"
            sleep $((attempt * 5))
        done
        if [[ $ok -ne 1 ]]; then
            tail_log "$dir/mvn.log"
            die "could not download org.apache.kafka:kafka_2.13:$KAFKA_VERSION from Maven Central"
        fi
        local jar
        for jar in "kafka_2.13-$KAFKA_VERSION.jar" "kafka-clients-$KAFKA_VERSION.jar" \
            "kafka-tools-$KAFKA_VERSION.jar" "log4j-slf4j-impl-$LOG4J_VERSION.jar"; do
            [[ -f $libs.tmp/$jar ]] || die "download incomplete: $jar missing in $libs.tmp"
        done
        touch "$libs.tmp/.complete"
        rm -rf "$libs"
        mv "$libs.tmp" "$libs"
        log "cached $(find "$libs" -name '*.jar' | wc -l) jars ($(du -sh "$libs" | cut -f1))"
    ) 8>"$dir/.lock"
}

# log4j2 configs: the broker logs INFO to stdout (redirected to kafka.log); CLI tools log
# WARN and up to stderr, so their stdout carries only their real output.
write_log4j_configs() {
    cat >"$KAFKA_DIR/log4j2.properties" <<'EOF'
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.kafka_request.name = kafka.request.logger
logger.kafka_request.level = WARN
EOF
    cat >"$KAFKA_DIR/tools-log4j2.properties" <<'EOF'
status = warn
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
EOF
}

# Write server.properties for a single-node KRaft broker+controller with a static quorum.
write_kafka_config() {
    local port=$1 cport=$2 sport=$3 tport=$4
    cat >"$KAFKA_DIR/server.properties" <<EOF
# Generated by herald deploy/engines.sh: single-node KRaft (broker + controller), for tests.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport,SASL_SSL://127.0.0.1:$sport,SSL://127.0.0.1:$tport
advertised.listeners=PLAINTEXT://127.0.0.1:${HERALD_KAFKA_ADVERTISED_PORT:-$port},SASL_SSL://127.0.0.1:$sport,SSL://127.0.0.1:$tport
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL
# SASL_SSL: PLAIN and SCRAM (credentials added when the storage is formatted). SSL: a client
# certificate signed by the test CA is required.
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SECRET_USER="$KAFKA_SECRET";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.ssl.ssl.client.auth=required
ssl.keystore.type=PKCS12
ssl.keystore.location=$TLS_DIR/broker.p12
ssl.keystore.password=$STORE_PASS
ssl.key.password=$STORE_PASS
ssl.truststore.type=PKCS12
ssl.truststore.location=$TLS_DIR/truststore.p12
ssl.truststore.password=$STORE_PASS
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$KAFKA_DIR/data
num.partitions=$KAFKA_PARTITIONS
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
delete.topic.enable=true
# After a SIGKILL (kill-kafka) the controller keeps the dead broker's registration until its
# session times out, and the restarted broker cannot register before that (default 9 s).
# A short session makes start-kafka after kill-kafka take ~7 s instead of ~20 s.
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=3000
EOF
}

# Run a class from the cached jars with the CLI log config. C1-only JIT and the serial GC
# make these short-lived JVMs start ~40% faster on 2 cores (the broker keeps the defaults).
kafka_java() {
    java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
        -Dlog4j2.configurationFile="$KAFKA_DIR/tools-log4j2.properties" \
        -cp "$(kafka_libs)/*" "$@"
}

# A Kafka cluster id, as `StorageTool random-uuid` makes it (16 random bytes, base64url
# without padding, not starting with '-'), without paying for a JVM start.
new_cluster_id() {
    local id
    while :; do
        id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
        [[ ${#id} -eq 22 && $id != -* ]] && break
    done
    printf '%s\n' "$id"
}

# Format the KRaft storage once; later starts reuse the data dir (topics, offsets).
kafka_format_if_needed() {
    local cluster_id
    [[ -f $KAFKA_DIR/data/meta.properties ]] && return 0
    mkdir -p "$KAFKA_DIR/data"
    if [[ -s $KAFKA_DIR/cluster.id ]]; then
        cluster_id=$(cat "$KAFKA_DIR/cluster.id")
    else
        cluster_id=$(new_cluster_id)
        printf '%s\n' "$cluster_id" >"$KAFKA_DIR/cluster.id"
    fi
    log "formatting Kafka storage (cluster id $cluster_id)"
    kafka_java kafka.tools.StorageTool format -t "$cluster_id" -c "$KAFKA_DIR/server.properties" \
        --add-scram "SCRAM-SHA-256=[name=$SECRET_USER,password=$KAFKA_SECRET]" \
        --add-scram "SCRAM-SHA-512=[name=$SECRET_USER,password=$KAFKA_SECRET]" \
        </dev/null >>"$KAFKA_DIR/format.log" 2>&1 ||
        { tail_log "$KAFKA_DIR/format.log"; die "kafka StorageTool format failed"; }
}

# Start the broker on its recorded ports and wait until it accepts connections and has
# logged that it started.
kafka_launch() {
    local port cport pid deadline
    port=$(recorded_port kafka) || die "no Kafka port recorded in $KAFKA_DIR; run '$0 start --kafka' first"
    cport=$(recorded_port kafka controller_port) || die "no Kafka controller port recorded in $KAFKA_DIR"
    [[ -f $KAFKA_DIR/server.properties ]] || die "missing $KAFKA_DIR/server.properties; run '$0 start --kafka' first"
    if pid=$(running_pid kafka); then
        log "kafka already runs (pid $pid, port $port)"
        return 0
    fi
    ensure_java
    ensure_kafka_jars
    write_log4j_configs
    kafka_format_if_needed
    wait_port_free "$port" 10 || die "port $port (Kafka) is in use by another process"
    wait_port_free "$cport" 10 || die "port $cport (Kafka controller) is in use by another process"

    [[ -f $KAFKA_DIR/kafka.log ]] && mv -f "$KAFKA_DIR/kafka.log" "$KAFKA_DIR/kafka.log.prev"
    log "starting Kafka $KAFKA_VERSION on 127.0.0.1:$port (controller $cport)"
    # nohup execs java, so $! is the broker's own PID.
    nohup java -Xmx"$KAFKA_HEAP" -Xms128m -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
        -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.properties" \
        -Dkafka.logs.dir="$KAFKA_DIR" \
        -cp "$(kafka_libs)/*" kafka.Kafka "$KAFKA_DIR/server.properties" \
        </dev/null >"$KAFKA_DIR/kafka.log" 2>&1 9>&- &
    pid=$!
    printf '%s\n' "$pid" >"$KAFKA_DIR/kafka.pid"

    deadline=$(($(now) + KAFKA_START_TIMEOUT))
    while :; do
        if ! pid_alive "$pid"; then
            rm -f "$KAFKA_DIR/kafka.pid"
            tail_log "$KAFKA_DIR/kafka.log"
            die "Kafka (pid $pid) exited during startup"
        fi
        if grep -q 'Kafka Server started' "$KAFKA_DIR/kafka.log" && port_listening "$port"; then
            log "kafka ready (pid $pid, port $port)"
            return 0
        fi
        if [[ $(now) -ge $deadline ]]; then
            tail_log "$KAFKA_DIR/kafka.log"
            stop_engines term 0 kafka
            die "Kafka did not start on port $port within ${KAFKA_START_TIMEOUT}s"
        fi
        sleep 0.2
    done
}

# ----------------------------------------------------------------------------- commands

# Stop everything this state dir runs and remove the engines' data (logs are kept).
cmd_stop() { # [REAP]
    stop_engines term "${1:-1}" redis kafka
    rx_stop_all term "${1:-1}"
    rm -rf "$REDIS_DIR/data" "$KAFKA_DIR/data" "$KAFKA_DIR/cluster.id" "$STATE_DIR/env" "$RX_DIR"
}

START_IN_PROGRESS=0
on_exit() {
    local rc=$?
    if [[ $rc -ne 0 && $START_IN_PROGRESS -eq 1 ]]; then
        log "start failed; stopping what was started"
        START_IN_PROGRESS=0
        stop_engines kill 0 redis kafka || true
        rx_stop_all kill 0 || true
        rm -rf "$RX_DIR"
        # Forget the ports too, so start-redis/start-kafka do not revive a half-made setup.
        rm -f "$REDIS_DIR/port" "$KAFKA_DIR/port" "$KAFKA_DIR/controller_port" "$STATE_DIR/env"
    fi
}

cmd_start() {
    local want_redis=0 want_kafka=0 want_tls=0 want_sentinel=0 want_cluster=0 arg
    for arg in "$@"; do
        case $arg in
        --redis) want_redis=1 ;;
        --kafka) want_kafka=1 ;;
        --redis-tls) want_tls=1 ;;
        --sentinel) want_sentinel=1 ;;
        --redis-cluster) want_cluster=1 ;;
        *) die "start: unknown option '$arg' (expected --redis, --kafka, --redis-tls, --sentinel, --redis-cluster)" ;;
        esac
    done
    if [[ $((want_redis + want_kafka + want_tls + want_sentinel + want_cluster)) -eq 0 ]]; then
        want_redis=1 want_kafka=1 want_tls=1 want_sentinel=1 want_cluster=1
    fi

    # Anything left from a previous run in this state dir goes first.
    cmd_stop 0
    rm -rf "$REDIS_DIR" "$KAFKA_DIR" "$RX_DIR" "$TLS_DIR"

    # Install / download before picking ports, so the ports stay free for as short as possible.
    [[ $((want_redis + want_tls + want_sentinel + want_cluster)) -gt 0 ]] && ensure_redis
    if [[ $want_sentinel -eq 1 ]] && ! command -v redis-sentinel >/dev/null 2>&1; then
        apt_install redis-sentinel
        disable_system_redis
    fi
    if [[ $want_kafka -eq 1 ]]; then
        ensure_java
        ensure_kafka_jars
    fi
    [[ $((want_kafka + want_tls + want_cluster)) -gt 0 ]] && make_tls_material

    START_IN_PROGRESS=1
    trap on_exit EXIT
    if [[ $want_redis -eq 1 ]]; then
        mkdir -p "$REDIS_DIR"
        pick_port >"$REDIS_DIR/port"
        redis_launch
    fi
    if [[ $want_kafka -eq 1 ]]; then
        mkdir -p "$KAFKA_DIR"
        pick_port >"$KAFKA_DIR/port"
        pick_port >"$KAFKA_DIR/controller_port"
        pick_port >"$KAFKA_DIR/sasl_port"
        pick_port >"$KAFKA_DIR/ssl_port"
        write_kafka_config "$(recorded_port kafka)" "$(recorded_port kafka controller_port)" \
            "$(recorded_port kafka sasl_port)" "$(recorded_port kafka ssl_port)"
        kafka_launch
    fi
    [[ $want_tls -eq 1 ]] && start_redis_tls
    [[ $want_sentinel -eq 1 ]] && start_sentinel_set
    [[ $want_cluster -eq 1 ]] && start_redis_cluster
    START_IN_PROGRESS=0

    write_env_file
    cat "$STATE_DIR/env"
}

cmd_status() {
    local name pid port
    for name in redis kafka $(rx_names); do
        if ! port=$(recorded_port "$name"); then
            printf '%s: not started\n' "$name"
        elif pid=$(running_pid "$name"); then
            printf '%s: running, pid %s, 127.0.0.1:%s\n' "$name" "$pid" "$port"
        else
            printf '%s: stopped (port %s recorded)\n' "$name" "$port"
        fi
    done
    if [[ -f $STATE_DIR/env ]]; then
        printf 'env file: %s\n' "$STATE_DIR/env"
    fi
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

cmd_start_engine() { # NAME
    case $1 in
    redis) redis_launch ;;
    kafka) kafka_launch ;;
    esac
}

usage() {
    sed -n '2,/^set -euo pipefail/p' "${BASH_SOURCE[0]}" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2
}

main() {
    local cmd=${1:-}
    [[ $# -gt 0 ]] && shift
    case $cmd in
    -h | --help | help | "")
        usage
        [[ -n $cmd ]] || exit 2
        return 0
        ;;
    esac
    init_state_dir
    case $cmd in
    start)
        lock_state
        cmd_start "$@"
        ;;
    stop)
        lock_state
        cmd_stop
        ;;
    status) cmd_status ;;
    env)
        [[ -f $STATE_DIR/env ]] || die "no $STATE_DIR/env; run '$0 start' first"
        cat "$STATE_DIR/env"
        ;;
    kill-redis | kill-kafka)
        lock_state
        cmd_kill "${cmd#kill-}" "$@"
        ;;
    kill-node)
        [[ $# -ge 1 ]] || die "kill-node: name a node, e.g. s-master or c1"
        lock_state
        cmd_kill "rx/$1" "${@:2}"
        ;;
    start-node)
        [[ $# -ge 1 ]] || die "start-node: name a node, e.g. s-master or c1"
        lock_state
        rx_launch "$1"
        ;;
    cluster-master-of)
        [[ $# -eq 1 ]] || die "cluster-master-of: give one key"
        cmd_cluster_master_of "$1"
        ;;
    start-redis | start-kafka)
        lock_state
        cmd_start_engine "${cmd#start-}"
        ;;
    restart-redis | restart-kafka)
        lock_state
        cmd_kill "${cmd#restart-}" "$@"
        cmd_start_engine "${cmd#restart-}"
        ;;
    kafka-run)
        [[ $# -ge 1 ]] || die "kafka-run: expected a main class, e.g. org.apache.kafka.tools.TopicCommand"
        [[ -f $(kafka_libs)/.complete ]] || ensure_kafka_jars
        mkdir -p "$KAFKA_DIR"
        [[ -f $KAFKA_DIR/tools-log4j2.properties ]] || write_log4j_configs
        kafka_java "$@"
        ;;
    *)
        usage
        die "unknown command '$cmd'"
        ;;
    esac
}

main "$@"
