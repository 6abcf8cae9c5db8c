#!/usr/bin/env bash
# deploy/engines-test.sh: checks deploy/engines.sh and its parts in deploy/engines/.
#
#   deploy/engines-test.sh          the cheap checks (a few seconds): `bash -n` and, if it
#                                   is installed, shellcheck on every file; each part's help,
#                                   status and errors when run alone; every part defines what
#                                   common.sh asks of it; then a real plain Redis: started
#                                   with `engines.sh start --redis` (one export line, answers
#                                   PING), kill-redis/start-redis on the same port, stopped
#                                   (process gone, env file gone); and again with
#                                   deploy/engines/redis.sh start|stop run alone
#   deploy/engines-test.sh --all    also `engines.sh start` with every engine (Kafka's jars
#                                   are downloaded once into HERALD_ENGINES_CACHE), a check
#                                   that each answers on what its export line says (PING on
#                                   each Redis mode, ApiVersions on each Kafka listener, the
#                                   query API and OTLP ports of Jaeger),
#                                   then `engines.sh stop`
#   deploy/engines-test.sh --all-only   only that full run; ENGINES_SH=PATH runs it against
#                                   another copy of engines.sh (to compare with an old one)
#
# Everything runs in a state dir of its own (mktemp), stopped however the test ends; the
# jar cache (HERALD_ENGINES_CACHE) is the usual one. Only 127.0.0.1 is used.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
engines=${ENGINES_SH:-$repo/deploy/engines.sh}
lib=$repo/deploy/engines
mode=${1:-cheap}
case $mode in cheap | --all | --all-only) ;; *)
    echo "usage: $0 [--all | --all-only]" >&2
    exit 2
    ;;
esac

state=$(mktemp -d "${TMPDIR:-/tmp}/herald-engines-test.XXXXXX")
export HERALD_ENGINES_DIR=$state
cleanup() {
    "$engines" stop >/dev/null 2>&1 || true
    rm -rf "$state"
}
trap cleanup EXIT

checks=0
ok() {
    checks=$((checks + 1))
    printf 'ok   %s\n' "$*"
}
fail() {
    printf 'FAIL %s\n' "$*" >&2
    exit 1
}
# expect_rc RC WHAT CMD...: CMD exits with RC (its stderr goes to $state/err).
expect_rc() {
    local want=$1 what=$2 rc=0
    shift 2
    "$@" >"$state/out" 2>"$state/err" || rc=$?
    [[ $rc -eq $want ]] || { cat "$state/err" >&2; fail "$what: exit $rc, expected $want"; }
}
# The value of export NAME in the lines of FILE.
exported() { grep -o "$1=[^ ]*" "$2" | head -n 1 | cut -d= -f2-; }
port_of() { [[ $1 =~ :([0-9]+)(/[^,]*)?$ ]] && printf '%s\n' "${BASH_REMATCH[1]}"; }
names_of() { grep -o 'HERALD_[A-Z_]*=' "$1" | tr -d = | sort; }
# The ports of a URL with several hosts, separated by spaces.
ports_in() { grep -o '127\.0\.0\.1:[0-9]*' <<<"$1" | cut -d: -f2 | tr '\n' ' '; }
# True if PID is gone (or a zombie not reaped yet).
gone() { [[ ! -e /proc/$1 ]] || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
# The PIDs of processes whose cwd or command line is in the state dir.
procs_in_state() {
    local d
    for d in /proc/[0-9]*; do
        if [[ $(readlink "$d/cwd" 2>/dev/null) == "$state"/* ]] ||
            tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -qF "$state/"; then
            gone "${d#/proc/}" || printf '%s\n' "${d#/proc/}"
        fi
    done
}

cheap_checks() {
    local f p parts=()
    mapfile -t parts < <(bash -c 'source "$1/common.sh" && printf "%s\n" "${ENGINE_PARTS[@]}"' _ "$lib")
    [[ ${#parts[@]} -gt 0 ]] || fail "common.sh lists no ENGINE_PARTS"

    for f in "$repo/deploy/engines.sh" "$lib"/*.sh "$repo/deploy/engines-test.sh"; do
        bash -n "$f" || fail "bash -n $f"
    done
    ok "bash -n on engines.sh, engines/*.sh and this script"
    if command -v shellcheck >/dev/null 2>&1; then
        (cd "$repo" && shellcheck -x deploy/engines.sh deploy/engines/*.sh deploy/engines-test.sh) ||
            fail "shellcheck"
        ok "shellcheck -x clean"
    else
        printf 'skip shellcheck is not installed (apt-get install shellcheck)\n'
    fi

    # Every part: a file of its own that runs alone, and the functions common.sh expects.
    for p in "${parts[@]}"; do
        f=$lib/$p.sh
        [[ -x $f ]] || fail "$f is missing or not executable"
        expect_rc 0 "$p.sh --help" "$f" --help
        grep -q "deploy/engines/$p.sh start" "$state/err" || fail "$p.sh --help does not document start"
        expect_rc 2 "$p.sh (no command)" "$f"
        expect_rc 1 "$p.sh frob" "$f" frob
        grep -q "^\[engines\] ERROR: unknown command 'frob'" "$state/err" || fail "$p.sh frob: no ERROR line"
        expect_rc 0 "$p.sh status" "$f" status
        grep -Eq ': (not started|not made)' "$state/out" || fail "$p.sh status in an empty state dir: $(cat "$state/out")"
        expect_rc 1 "$p.sh env before start" "$f" env
    done
    ok "each of ${parts[*]} runs alone: --help, no command (2), unknown command, status, env"
    # shellcheck disable=SC2016 # expanded by the inner bash
    bash -c 'source "$1/common.sh"; engines_load_all; missing=""
        for p in "${ENGINE_PARTS[@]}"; do
            for h in env clean reset forget; do
                case $p:$h in tls:clean | tls:forget) continue ;; esac
                declare -F "${p//-/_}_$h" >/dev/null || missing+=" ${p//-/_}_$h"
            done
            if declare -F "${p//-/_}_start" >/dev/null; then
                declare -F "${p//-/_}_procs" >/dev/null || missing+=" ${p//-/_}_procs"
            fi
        done
        [[ -z $missing ]] || { echo "missing:$missing" >&2; exit 1; }' _ "$lib" ||
        fail "a part lacks a function common.sh calls"
    ok "every part defines env/clean/reset/forget (and procs when it starts something)"

    expect_rc 0 "engines.sh --help" "$engines" --help
    expect_rc 2 "engines.sh (no command)" "$engines"
    expect_rc 1 "engines.sh start --bogus" "$engines" start --bogus
    grep -qF "start: unknown option '--bogus' (expected --redis, --kafka, --redis-tls, --sentinel, --redis-cluster, --jaeger)" \
        "$state/err" || fail "start --bogus: $(cat "$state/err")"
    expect_rc 1 "engines.sh env before start" "$engines" env
    ok "engines.sh: --help, no command (2), start --bogus, env before start"

    # A real plain Redis, through the entry point.
    local url port pid
    expect_rc 0 "engines.sh start --redis" "$engines" start --redis
    [[ $(wc -l <"$state/out") -eq 1 && $(names_of "$state/out") == HERALD_TEST_REDIS_URL ]] ||
        fail "start --redis printed: $(cat "$state/out")"
    cmp -s "$state/out" "$state/env" || fail "the env file differs from what start printed"
    url=$(exported HERALD_TEST_REDIS_URL "$state/out")
    port=$(port_of "$url")
    [[ $url == "redis://127.0.0.1:$port" ]] || fail "HERALD_TEST_REDIS_URL=$url"
    [[ $(redis-cli -p "$port" ping) == PONG ]] || fail "no PONG on $port"
    ok "engines.sh start --redis: one export line, $url answers PING"
    pid=$(cat "$state/redis/redis.pid")
    expect_rc 0 "kill-redis" "$engines" kill-redis
    gone "$pid" || fail "redis (pid $pid) survived kill-redis"
    expect_rc 0 "start-redis" "$engines" start-redis
    [[ $(redis-cli -p "$port" ping) == PONG ]] || fail "no PONG on $port after start-redis"
    expect_rc 0 "engines.sh status" "$engines" status
    grep -q "^redis: running, pid [0-9]*, 127.0.0.1:$port$" "$state/out" || fail "status: $(cat "$state/out")"
    ok "kill-redis, start-redis on the same port, status"
    pid=$(cat "$state/redis/redis.pid")
    expect_rc 0 "engines.sh stop" "$engines" stop
    gone "$pid" || fail "redis (pid $pid) still there after stop"
    [[ ! -e $state/env && ! -e $state/redis/data ]] || fail "stop left the env file or the data"
    [[ -f $state/redis/redis.log ]] || fail "stop removed the log"
    ok "engines.sh stop: process gone, env and data removed, log kept"

    # The same part run alone.
    expect_rc 0 "redis.sh start" "$lib/redis.sh" start
    [[ $(wc -l <"$state/out") -eq 1 && $(names_of "$state/out") == HERALD_TEST_REDIS_URL ]] ||
        fail "redis.sh start printed: $(cat "$state/out")"
    port=$(port_of "$(exported HERALD_TEST_REDIS_URL "$state/out")")
    [[ $(redis-cli -p "$port" ping) == PONG ]] || fail "no PONG on $port"
    pid=$(cat "$state/redis/redis.pid")
    expect_rc 0 "redis.sh env" "$lib/redis.sh" env
    [[ $(names_of "$state/out") == HERALD_TEST_REDIS_URL ]] || fail "redis.sh env: $(cat "$state/out")"
    expect_rc 0 "redis.sh stop" "$lib/redis.sh" stop
    gone "$pid" || fail "redis (pid $pid) still there after redis.sh stop"
    [[ ! -e $state/env ]] || fail "redis.sh stop left the env file"
    ok "redis.sh start|env|stop alone: the same export line, PING, stopped"
}

# A client config for Kafka's CLI on the SASL_SSL or SSL listener, from the export lines.
kafka_client_config() { # sasl|ssl ENVFILE OUT
    local ca cert key user pass
    ca=$(exported HERALD_TEST_TLS_CA "$2")
    user=$(exported HERALD_TEST_KAFKA_USER "$2")
    pass=$(exported HERALD_TEST_KAFKA_PASSWORD "$2")
    {
        printf 'ssl.truststore.type=PEM\nssl.truststore.location=%s\n' "$ca"
        if [[ $1 == sasl ]]; then
            printf 'security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n'
            printf 'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="%s" password="%s";\n' "$user" "$pass"
        else
            cert=$(exported HERALD_TEST_TLS_CLIENT_CERT "$2")
            key=$(exported HERALD_TEST_TLS_CLIENT_KEY "$2")
            cat "$key" "$cert" >"$3.pem"
            printf 'security.protocol=SSL\nssl.keystore.type=PEM\nssl.keystore.location=%s\n' "$3.pem"
        fi
    } >"$3"
}

# api_versions LISTENER BROKERS [ARGS...]: Kafka's ApiVersions request, through the script.
api_versions() {
    if ! "$engines" kafka-run org.apache.kafka.tools.BrokerApiVersionsCommand \
        --bootstrap-server "$2" "${@:3}" >"$state/kafka.out" 2>&1 ||
        ! grep -q 'ApiVersions' "$state/kafka.out"; then
        tail -n 30 "$state/kafka.out" >&2
        fail "Kafka $1 $2"
    fi
}

full_check() {
    local env=$state/all.env url port ca cert key p
    echo "starting every engine with $engines (Kafka takes a while)..."
    "$engines" start >"$env" 2>"$state/start.err" || { tail -n 40 "$state/start.err" >&2; fail "engines.sh start"; }
    echo "exported (ports as P, the state dir as STATE):"
    sed -e "s|$state|STATE|g" -e 's/127\.0\.0\.1:[0-9]*/127.0.0.1:P/g' "$env" | sed 's/^/  /' 
    ca=$(exported HERALD_TEST_TLS_CA "$env")
    cert=$(exported HERALD_TEST_TLS_CLIENT_CERT "$env")
    key=$(exported HERALD_TEST_TLS_CLIENT_KEY "$env")
    [[ -s $ca && -s $cert && -s $key ]] || fail "HERALD_TEST_TLS_* files missing"

    url=$(exported HERALD_TEST_REDIS_URL "$env")
    [[ $(redis-cli -p "$(port_of "$url")" ping) == PONG ]] || fail "plain Redis $url"
    ok "plain Redis answers PING ($url)"

    url=$(exported HERALD_TEST_REDIS_TLS_URL "$env")
    [[ $(redis-cli -p "$(port_of "$url")" --tls --cacert "$ca" --cert "$cert" --key "$key" \
        --user herald --pass herald-redis-secret --no-auth-warning ping) == PONG ]] || fail "TLS Redis $url"
    ok "TLS Redis answers PING with the client certificate and the ACL user"

    url=$(exported HERALD_TEST_REDIS_SENTINEL_URL "$env")
    for p in $(ports_in "$url"); do
        port=$(redis-cli -p "$p" sentinel get-master-addr-by-name herald-master | tail -n 1)
        [[ $(redis-cli -p "$port" --user herald --pass herald-redis-secret --no-auth-warning ping) == PONG ]] ||
            fail "sentinel $p: master $port does not answer"
    done
    ok "both sentinels name the master, which answers PING as the ACL user"

    url=$(exported HERALD_TEST_REDIS_CLUSTER_URL "$env")
    for p in $(ports_in "$url"); do
        redis-cli -p "$p" --tls --cacert "$ca" -a herald-redis-secret --no-auth-warning cluster info |
            tr -d '\r' | grep -qx 'cluster_state:ok' || fail "cluster node $p is not ok"
    done
    ok "Redis Cluster seeds over TLS say cluster_state:ok"

    local plain sasl ssl
    plain=$(exported HERALD_TEST_KAFKA_BROKERS "$env")
    sasl=$(exported HERALD_TEST_KAFKA_SASL_BROKERS "$env")
    ssl=$(exported HERALD_TEST_KAFKA_SSL_BROKERS "$env")
    api_versions PLAINTEXT "$plain"
    ok "Kafka PLAINTEXT $plain answers ApiVersions"
    kafka_client_config sasl "$env" "$state/sasl.properties"
    api_versions SASL_SSL "$sasl" --command-config "$state/sasl.properties"
    ok "Kafka SASL_SSL $sasl answers ApiVersions (SCRAM-SHA-512, the test CA)"
    kafka_client_config ssl "$env" "$state/ssl.properties"
    api_versions SSL "$ssl" --command-config "$state/ssl.properties"
    ok "Kafka SSL $ssl answers ApiVersions (client certificate)"

    local query answer
    query=$(exported HERALD_TEST_JAEGER_QUERY "$env")
    # shellcheck disable=SC2016 # expanded by the inner bash
    answer=$(timeout 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" &&
        printf "GET /api/services HTTP/1.0\r\nHost: x\r\n\r\n" >&3 && cat <&3' _ "$(port_of "$query")") ||
        fail "Jaeger query $query does not answer"
    [[ $answer == "HTTP/1.0 200"* && $answer == *'"data"'* ]] || fail "Jaeger query $query: $answer"
    for url in "$(exported HERALD_TEST_JAEGER_OTLP "$env")" "$(exported HERALD_TEST_JAEGER_OTLP_HTTP "$env")"; do
        # shellcheck disable=SC2016 # expanded by the inner bash
        timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$(port_of "$url")" ||
            fail "Jaeger OTLP $url does not accept connections"
    done
    ok "Jaeger's query API $query answers /api/services; its OTLP ports accept connections"

    "$engines" stop 2>/dev/null || fail "engines.sh stop"
    [[ ! -e $state/env && ! -e $state/rx ]] || fail "stop left the env file or rx/"
    [[ -z $(procs_in_state) ]] || fail "processes of $state still run after stop: $(procs_in_state)"
    ok "engines.sh stop: nothing of $state runs"
}

[[ $mode == --all-only ]] || cheap_checks
[[ $mode == cheap ]] || full_check
printf 'engines-test: %d checks passed\n' "$checks"
