#!/usr/bin/env bash
# deploy/chaos.sh [DURATION]: proof under faults. Starts everything a chaos soak needs — three
# Herald nodes from a release build, Redis with Sentinel (master, replica, two sentinels),
# Kafka (deploy/engines.sh), Toxiproxy in front of every link — runs `herald-loadgen chaos`
# against them, stops what it started, and exits non-zero (3) on any silent gap, duplicate,
# reorder, client that never recovered or publish whose fate is still unknown (the loadgen's
# publishers retry with idempotency keys until answered).
#
#   deploy/chaos.sh 2m                      a 2-minute run (the default), as deploy/test.sh runs it
#   CHAOS_SEED=42 deploy/chaos.sh 30m       replay a seed (same faults, same reconnect plans)
#   CHAOS_JSON=/tmp/chaos.json deploy/chaos.sh   also copy the JSON report there
#
# Knobs: CHAOS_CLIENTS (300), CHAOS_SEED (from the clock), CHAOS_JSON, CHAOS_ARGS (more
# loadgen flags), HERALD_CHAOS_DIR (state, logs and reports; default target/chaos),
# HERALD_ENGINES_CACHE (jar and Toxiproxy cache, shared with deploy/engines.sh),
# CHAOS_NO_BUILD=1 (use the release binaries already built), CHAOS_BIN_DIR (take herald and
# herald-loadgen from there instead, e.g. target/debug; implies CHAOS_NO_BUILD).
#
# Links and what sits on them (Toxiproxy, one proxy each):
#   clients -> node N    proxy clients-nodeN (the loadgen's --url)
#   Herald  -> Redis     proxies redis-a, redis-b: each Redis announces its proxy's port
#                        (replica-announce-port, and Sentinel monitors the master through it), so
#                        Sentinel hands Herald the proxy; replication goes through it too
#   Herald  -> Kafka     proxy kafka: the broker advertises the proxy's port
#                        (HERALD_KAFKA_ADVERTISED_PORT)
# Redis runs with min-replicas-to-write 1 and min-replicas-max-lag 1, and Herald waits for
# the replica on every publish (cluster.redis_wait_replicas): an acknowledged publish survives
# the master's death (docs/cluster.md, "Losing acknowledged writes").
#
# The loadgen drives faults through `$HERALD_CHAOS_DIR/control start|stop KIND TARGET PARAM`,
# which calls this script's `control` mode.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${HERALD_CHAOS_DIR:-$repo/target/chaos}
CACHE=${HERALD_ENGINES_CACHE:-${HOME:-/tmp}/.cache/herald-engines}
TOXI_BIN=$CACHE/toxiproxy/bin
SENTINEL_MASTER=herald-chaos
KAFKA_TOPIC=herald-chaos
export HERALD_ENGINES_DIR=$DIR/engines HERALD_ENGINES_CACHE=$CACHE

log() { printf '[chaos.sh] %s\n' "$*" >&2; }
die() {
  printf '[chaos.sh] ERROR: %s\n' "$*" >&2
  exit 1
}

free_port() { # a port nothing listens on, not handed out before in this run
  local p
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 12000))
    grep -qx "$p" "$DIR/ports" 2>/dev/null && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p" >>"$DIR/ports"
      echo "$p"
      return 0
    fi
  done
  die "no free port"
}

# ------------------------------------------------------------------ Toxiproxy

toxi() { # METHOD PATH [JSON]
  curl -sf -X "$1" "http://127.0.0.1:$(cat "$DIR/toxi.port")$2" ${3:+-H 'content-type: application/json' -d "$3"} >/dev/null
}

ensure_toxiproxy() {
  [[ -x $TOXI_BIN/server ]] && return 0
  command -v go >/dev/null || die "Toxiproxy needs Go to install (go install ...); install Go"
  log "installing Toxiproxy into $TOXI_BIN (go install, cached)"
  mkdir -p "$TOXI_BIN"
  GOBIN=$TOXI_BIN go install github.com/Shopify/toxiproxy/v2/cmd/server@latest >&2
  GOBIN=$TOXI_BIN go install github.com/Shopify/toxiproxy/v2/cmd/cli@latest >&2
}

proxy() { # NAME LISTEN_PORT UPSTREAM_PORT
  toxi POST /proxies "{\"name\":\"$1\",\"listen\":\"127.0.0.1:$2\",\"upstream\":\"127.0.0.1:$3\",\"enabled\":true}"
}

# ------------------------------------------------------------------ Redis + Sentinel

redis_start() { # NAME [REPLICAOF_PORT]: redis-server NAME (a or b) on its port, announcing its proxy
  local n=$1 d=$DIR/redis-$1
  mkdir -p "$d"
  local args=(--bind 127.0.0.1 --port "$(cat "$d/port")" --save "" --appendonly no
    --replica-announce-ip 127.0.0.1 --replica-announce-port "$(cat "$d/proxy")"
    --min-replicas-to-write 1 --min-replicas-max-lag 1
    --daemonize yes --pidfile "$d/pid" --dir "$d" --logfile "$d/log")
  [[ -n ${2:-} ]] && args+=(--replicaof 127.0.0.1 "$2")
  rm -f "$d/pid"
  redis-server "${args[@]}" >/dev/null
  for _ in $(seq 100); do
    [[ $(redis-cli -p "$(cat "$d/port")" ping 2>/dev/null) == PONG ]] && return 0
    sleep 0.1
  done
  die "redis $n did not start"
}

sentinel_master_port() { # the proxy port Sentinel names as master
  redis-cli -p "$(cat "$DIR/sentinel-1/port")" sentinel get-master-addr-by-name "$SENTINEL_MASTER" 2>/dev/null | sed -n 2p
}

redis_of_proxy() { # PROXY_PORT -> a|b
  local n
  for n in a b; do
    if [[ $(cat "$DIR/redis-$n/proxy") == "$1" ]]; then echo "$n"; fi
  done
  return 0
}

replica_up() { # NAME
  redis-cli -p "$(cat "$DIR/redis-$1/port")" info replication 2>/dev/null | tr -d '\r' | grep -qx 'master_link_status:up'
}

start_redis_set() {
  local n s
  for n in a b; do
    mkdir -p "$DIR/redis-$n"
    free_port >"$DIR/redis-$n/port"
    free_port >"$DIR/redis-$n/proxy"
    proxy "redis-$n" "$(cat "$DIR/redis-$n/proxy")" "$(cat "$DIR/redis-$n/port")"
  done
  redis_start a
  redis_start b "$(cat "$DIR/redis-a/proxy")"
  for _ in $(seq 100); do replica_up b && break; sleep 0.2; done
  replica_up b || die "the Redis replica did not sync"
  for s in 1 2; do
    mkdir -p "$DIR/sentinel-$s"
    free_port >"$DIR/sentinel-$s/port"
    cat >"$DIR/sentinel-$s/sentinel.conf" <<EOF
port $(cat "$DIR/sentinel-$s/port")
bind 127.0.0.1
daemonize yes
pidfile $DIR/sentinel-$s/pid
logfile $DIR/sentinel-$s/log
dir $DIR/sentinel-$s
sentinel monitor $SENTINEL_MASTER 127.0.0.1 $(cat "$DIR/redis-a/proxy") 1
sentinel down-after-milliseconds $SENTINEL_MASTER 2000
sentinel failover-timeout $SENTINEL_MASTER 3000
EOF
    redis-sentinel "$DIR/sentinel-$s/sentinel.conf" >/dev/null
  done
  for _ in $(seq 100); do [[ -n $(sentinel_master_port) ]] && return 0; sleep 0.1; done
  die "sentinel did not start"
}

# ------------------------------------------------------------------ Herald nodes

node_start() { # N
  local n=$1
  HERALD_REDIS_URL="redis+sentinel://127.0.0.1:$(cat "$DIR/sentinel-1/port"),127.0.0.1:$(cat "$DIR/sentinel-2/port")/$SENTINEL_MASTER" \
    HERALD_LOG_FILTER=${HERALD_CHAOS_LOG:-warn} \
    nohup "$(cat "$DIR/herald.bin")" --config "$DIR/herald.toml" --redis-mode sentinel --node-id "chaos-$n" \
    --listen "127.0.0.1:$(cat "$DIR/node$n.port")" --admin-listen "127.0.0.1:$(cat "$DIR/node$n.admin")" \
    --kafka-brokers "127.0.0.1:$(cat "$DIR/kafka.proxy")" --kafka-topics "$KAFKA_TOPIC" --kafka-feeds kf. \
    </dev/null >>"$DIR/node$n.log" 2>&1 &
  echo $! >"$DIR/node$n.pid"
}

node_wait_ready() { # N [SECONDS]
  local n=$1 i
  for ((i = 0; i < ${2:-60} * 5; i++)); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(cat "$DIR/node$n.admin")/readyz") == 200 ]] && return 0
    kill -0 "$(cat "$DIR/node$n.pid")" 2>/dev/null || { tail -5 "$DIR/node$n.log" >&2; return 1; }
    sleep 0.2
  done
  return 1
}

# ------------------------------------------------------------------ control (called by the loadgen)

links() { # TARGET -> proxy names
  case $1 in
  redis) echo redis-a redis-b ;;
  *) echo "$1" ;;
  esac
}

control() { # start|stop KIND TARGET PARAM
  local verb=$1 kind=$2 target=$3 param=$4 p n port
  case $kind:$verb in
  node_kill:start) kill -KILL "$(cat "$DIR/${target}.pid")" ;;
  node_kill:stop)
    n=${target#node}
    node_start "$n"
    node_wait_ready "$n" 60 || die "node $n did not come back"
    ;;
  node_pause:start) kill -STOP "$(cat "$DIR/${target}.pid")" ;;
  node_pause:stop) kill -CONT "$(cat "$DIR/${target}.pid")" ;;
  redis_failover:start)
    n=$(redis_of_proxy "$(sentinel_master_port)")
    echo "$n" >"$DIR/redis.killed"
    kill -KILL "$(cat "$DIR/redis-$n/pid")"
    ;;
  redis_failover:stop)
    n=$(cat "$DIR/redis.killed")
    for _ in $(seq 150); do
      port=$(sentinel_master_port)
      [[ -n $port && $(redis_of_proxy "$port") != "$n" ]] && break
      sleep 0.1
    done
    [[ $(redis_of_proxy "$(sentinel_master_port)") != "$n" ]] || die "sentinel did not promote the replica within 15 s"
    redis_start "$n" "$(sentinel_master_port)"
    for _ in $(seq 150); do replica_up "$n" && break; sleep 0.1; done
    ;;
  pubsub_kill:start)
    # every pub/sub connection to the master (the nodes' live connections, the sentinels'
    # hello channel), on its real port. A fault just before may have cut them already: wait
    # (10 s at most) until every node has its live connection again, so the kill drops them
    n=$(redis_of_proxy "$(sentinel_master_port)")
    [[ -n $n ]] || die "pubsub_kill: sentinel names no master"
    port=$(cat "$DIR/redis-$n/port")
    for _ in $(seq 100); do
      [[ $(redis-cli -p "$port" client list type pubsub 2>/dev/null | grep -vc 'name=sentinel-') -ge 3 ]] && break
      sleep 0.1
    done
    p=$(redis-cli -p "$port" client list type pubsub 2>/dev/null | grep -vc 'name=sentinel-' || true)
    killed=$(redis-cli -p "$port" client kill type pubsub) || die "pubsub_kill: CLIENT KILL failed"
    printf '%s pubsub_kill redis-%s: %s pub/sub connections killed, %s of them not sentinels\n' "$(date +%T)" "$n" "$killed" "$p" >>"$DIR/faults.log"
    ;;
  pubsub_kill:stop) ;; # nothing to heal: the nodes resubscribe on their own
  kafka_restart:start) "$repo/deploy/engines.sh" kill-kafka 2>>"$DIR/engines.log" ;;
  kafka_restart:stop) "$repo/deploy/engines.sh" start-kafka 2>>"$DIR/engines.log" ;;
  net_latency:start)
    for p in $(links "$target"); do
      toxi POST "/proxies/$p/toxics" "{\"name\":\"chaos\",\"type\":\"latency\",\"stream\":\"downstream\",\"attributes\":{\"latency\":$param,\"jitter\":$((param / 4))}}"
    done
    ;;
  net_bandwidth:start)
    for p in $(links "$target"); do
      toxi POST "/proxies/$p/toxics" "{\"name\":\"chaos\",\"type\":\"bandwidth\",\"stream\":\"downstream\",\"attributes\":{\"rate\":$param}}"
    done
    ;;
  net_stall:start)
    for p in $(links "$target"); do
      toxi POST "/proxies/$p/toxics" '{"name":"chaos","type":"timeout","stream":"downstream","attributes":{"timeout":0}}'
      toxi POST "/proxies/$p/toxics" '{"name":"chaos-up","type":"timeout","stream":"upstream","attributes":{"timeout":0}}'
    done
    ;;
  net_latency:stop | net_bandwidth:stop | net_stall:stop)
    for p in $(links "$target"); do
      toxi DELETE "/proxies/$p/toxics/chaos" || true
      toxi DELETE "/proxies/$p/toxics/chaos-up" || true
    done
    ;;
  net_cut:start) for p in $(links "$target"); do toxi POST "/proxies/$p" '{"enabled":false}'; done ;;
  net_cut:stop) for p in $(links "$target"); do toxi POST "/proxies/$p" '{"enabled":true}'; done ;;
  *) die "control: unknown $verb $kind" ;;
  esac
}

if [[ ${1:-} == control ]]; then
  shift
  control "$@"
  exit 0
fi

# ------------------------------------------------------------------ the run

DURATION=${1:-120s}
[[ $DURATION =~ ^[0-9]+$ ]] && DURATION=${DURATION}s

stop_all() {
  local f
  for f in "$DIR"/node*.pid; do
    [[ -f $f ]] || continue
    kill -CONT "$(cat "$f")" 2>/dev/null || true
    kill -TERM "$(cat "$f")" 2>/dev/null || true
  done
  for f in "$DIR"/redis-*/pid "$DIR"/sentinel-*/pid; do
    [[ -f $f ]] && kill -TERM "$(cat "$f")" 2>/dev/null || true
  done
  [[ -f $DIR/toxi.pid ]] && kill -TERM "$(cat "$DIR/toxi.pid")" 2>/dev/null || true
  "$repo/deploy/engines.sh" stop 2>>"$DIR/engines.log" || true
  sleep 1
  for f in "$DIR"/node*.pid; do
    [[ -f $f ]] && kill -KILL "$(cat "$f")" 2>/dev/null || true
  done
}

rm -rf "$DIR"
mkdir -p "$DIR"
trap stop_all EXIT

if [[ ${CHAOS_NO_BUILD:-} != 1 && -z ${CHAOS_BIN_DIR:-} ]]; then
  log "building herald and herald-loadgen (release)"
  cargo build --release -q -p herald-gateway -p herald-loadgen --manifest-path "$repo/Cargo.toml"
fi
target_dir=$(cargo metadata --format-version 1 --no-deps --manifest-path "$repo/Cargo.toml" | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bin_dir=${CHAOS_BIN_DIR:-$target_dir/release}
echo "$bin_dir/herald" >"$DIR/herald.bin"
loadgen=$bin_dir/herald-loadgen
command -v redis-sentinel >/dev/null || "$repo/deploy/engines.sh" start --redis --sentinel >/dev/null 2>>"$DIR/engines.log"
"$repo/deploy/engines.sh" stop 2>>"$DIR/engines.log" || true
ensure_toxiproxy

free_port >"$DIR/toxi.port"
nohup "$TOXI_BIN/server" -host 127.0.0.1 -port "$(cat "$DIR/toxi.port")" </dev/null >"$DIR/toxiproxy.log" 2>&1 &
echo $! >"$DIR/toxi.pid"
for _ in $(seq 100); do toxi GET /version && break; sleep 0.1; done
toxi GET /version || die "toxiproxy did not start"

log "starting Kafka (deploy/engines.sh), advertised through Toxiproxy"
free_port >"$DIR/kafka.proxy"
HERALD_KAFKA_ADVERTISED_PORT=$(cat "$DIR/kafka.proxy") "$repo/deploy/engines.sh" start --kafka >"$DIR/engines.env" 2>>"$DIR/engines.log" ||
  { tail -20 "$DIR/engines.log" >&2; die "Kafka did not start"; }
proxy kafka "$(cat "$DIR/kafka.proxy")" "$(cat "$HERALD_ENGINES_DIR/kafka/port")"
"$repo/deploy/engines.sh" kafka-run org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$(cat "$DIR/kafka.proxy")" \
  --create --if-not-exists --topic "$KAFKA_TOPIC" --partitions 3 --replication-factor 1 >/dev/null 2>>"$DIR/engines.log"

log "starting Redis with Sentinel through Toxiproxy"
start_redis_set

cat >"$DIR/herald.toml" <<EOF
[cluster]
redis_wait_replicas = 1
EOF
for n in 1 2 3; do
  free_port >"$DIR/node$n.port"
  free_port >"$DIR/node$n.admin"
  free_port >"$DIR/node$n.clients"
  proxy "clients-node$n" "$(cat "$DIR/node$n.clients")" "$(cat "$DIR/node$n.port")"
  node_start "$n"
done
for n in 1 2 3; do node_wait_ready "$n" 90 || die "node $n is not ready (see $DIR/node$n.log)"; done
printf '#!/bin/sh\nexec "%s" control "$@"\n' "$repo/deploy/chaos.sh" >"$DIR/control"
chmod +x "$DIR/control"

log "running herald-loadgen chaos for $DURATION"
args=(chaos --duration "$DURATION" --clients "${CHAOS_CLIENTS:-300}" --kafka-prefix kf.
  --control "$DIR/control" --json "$DIR/report.json" --html "$DIR/report.html")
[[ -n ${CHAOS_SEED:-} ]] && args+=(--seed "$CHAOS_SEED")
for n in 1 2 3; do
  args+=(--url "http://127.0.0.1:$(cat "$DIR/node$n.clients")" --admin-url "http://127.0.0.1:$(cat "$DIR/node$n.admin")")
done
rc=0
# shellcheck disable=SC2086
"$loadgen" "${args[@]}" ${CHAOS_ARGS:-} || rc=$?
[[ -n ${CHAOS_JSON:-} && -f $DIR/report.json ]] && cp "$DIR/report.json" "$CHAOS_JSON"
log "report: $DIR/report.json, $DIR/report.html (exit $rc)"
exit "$rc"
