#!/usr/bin/env bash
# deploy/chaos.sh [DURATION]: proof under faults. Starts everything a chaos soak needs — three
# Herald nodes from a release build, Redis with Sentinel (master, replica, two sentinels:
# deploy/engines/sentinel.sh) and Kafka (deploy/engines.sh), Toxiproxy in front of every link —
# runs `herald-loadgen chaos`
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
#   Herald  -> Redis     proxies s-master, s-replica: each Redis announces its proxy's port
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

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$repo/deploy/lib.sh" # pick_port

log() { printf '[chaos.sh] %s\n' "$*" >&2; }
die() {
  printf '[chaos.sh] ERROR: %s\n' "$*" >&2
  exit 1
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

# The Sentinel set is deploy/engines/sentinel.sh's: master s-master and replica s-replica
# behind their proxies, two sentinels.
sentinel() { "$repo/deploy/engines/sentinel.sh" "$@" 2>>"$DIR/engines.log"; }

replica_up() { # NAME
  sentinel cli "$1" info replication | tr -d '\r' | grep -qx 'master_link_status:up'
}

start_redis_set() {
  local n ports=() proxies=()
  for n in s-master s-replica; do
    pick_port >"$DIR/$n.port"
    pick_port >"$DIR/$n.proxy"
    proxy "$n" "$(cat "$DIR/$n.proxy")" "$(cat "$DIR/$n.port")"
    ports+=("$(cat "$DIR/$n.port")")
    proxies+=("$(cat "$DIR/$n.proxy")")
  done
  HERALD_SENTINEL_MASTER=$SENTINEL_MASTER HERALD_SENTINEL_DOWN_AFTER_MS=2000 \
    HERALD_SENTINEL_FAILOVER_TIMEOUT_MS=3000 HERALD_SENTINEL_MIN_REPLICAS=1 \
    HERALD_SENTINEL_PORTS="${ports[*]}" HERALD_SENTINEL_ANNOUNCE="${proxies[*]}" \
    sentinel start >"$DIR/sentinel.env" || { tail -20 "$DIR/engines.log" >&2; die "Redis with Sentinel did not start"; }
}

# ------------------------------------------------------------------ Herald nodes

node_start() { # N
  local n=$1
  HERALD_REDIS_URL=$(sed -n 's/^export HERALD_TEST_REDIS_SENTINEL_URL=//p' "$DIR/sentinel.env") \
    HERALD_LOG_FILTER=${HERALD_CHAOS_LOG:-warn} \
    nohup "$(cat "$DIR/herald.bin")" --config "$DIR/herald.toml" --redis-mode sentinel --node-id "chaos-$n" \
    --listen "127.0.0.1:$(cat "$DIR/node$n.port")" --admin-listen "127.0.0.1:$(cat "$DIR/node$n.admin")" \
    --kafka-brokers "127.0.0.1:$(cat "$DIR/kafka.proxy")" --kafka-topics "$KAFKA_TOPIC" --kafka-prefixes kf. \
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
  redis) echo s-master s-replica ;;
  *) echo "$1" ;;
  esac
}

control() { # start|stop KIND TARGET PARAM
  local verb=$1 kind=$2 target=$3 param=$4 p n master killed
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
    n=$(sentinel master)
    [[ -n $n ]] || die "redis_failover: sentinel names no master"
    echo "$n" >"$DIR/redis.killed"
    "$repo/deploy/engines.sh" kill-node "$n" 2>>"$DIR/engines.log"
    ;;
  redis_failover:stop)
    n=$(cat "$DIR/redis.killed")
    for _ in $(seq 150); do
      master=$(sentinel master || true)
      [[ -n $master && $master != "$n" ]] && break
      sleep 0.1
    done
    [[ -n $master && $master != "$n" ]] || die "sentinel did not promote the replica within 15 s"
    sentinel rejoin "$n" # again, as the new master's replica
    for _ in $(seq 150); do replica_up "$n" && break; sleep 0.1; done
    ;;
  pubsub_kill:start)
    # every pub/sub connection to the master (the nodes' live connections, the sentinels'
    # hello channel), on its real port. A fault just before may have cut them already: wait
    # (10 s at most) until every node has its live connection again, so the kill drops them
    n=$(sentinel master)
    [[ -n $n ]] || die "pubsub_kill: sentinel names no master"
    for _ in $(seq 100); do
      [[ $(sentinel cli "$n" client list type pubsub | grep -vc 'name=sentinel-') -ge 3 ]] && break
      sleep 0.1
    done
    p=$(sentinel cli "$n" client list type pubsub | grep -vc 'name=sentinel-' || true)
    killed=$(sentinel cli "$n" client kill type pubsub) || die "pubsub_kill: CLIENT KILL failed"
    printf '%s pubsub_kill %s: %s pub/sub connections killed, %s of them not sentinels\n' "$(date +%T)" "$n" "$killed" "$p" >>"$DIR/faults.log"
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

# shellcheck disable=SC2317 # run by the EXIT trap
stop_run() {
  local f
  for f in "$DIR"/node*.pid; do
    [[ -f $f ]] || continue
    kill -CONT "$(cat "$f")" 2>/dev/null || true
    kill -TERM "$(cat "$f")" 2>/dev/null || true
  done
  if [[ -f $DIR/toxi.pid ]]; then kill -TERM "$(cat "$DIR/toxi.pid")" 2>/dev/null || true; fi
  "$repo/deploy/engines.sh" stop 2>>"$DIR/engines.log" || true
  sleep 1
  for f in "$DIR"/node*.pid; do
    if [[ -f $f ]]; then kill -KILL "$(cat "$f")" 2>/dev/null || true; fi
  done
}

# What a run that did not end left behind (its engines) first, then a fresh dir.
if [[ -d $DIR/engines ]]; then "$repo/deploy/engines.sh" stop >/dev/null 2>&1 || true; fi
rm -rf "$DIR"
mkdir -p "$DIR"
trap stop_run EXIT

if [[ ${CHAOS_NO_BUILD:-} != 1 && -z ${CHAOS_BIN_DIR:-} ]]; then
  log "building herald and herald-loadgen (release)"
  cargo build --release -q -p herald-gateway -p herald-loadgen --manifest-path "$repo/Cargo.toml"
fi
target_dir=$(cargo metadata --format-version 1 --no-deps --manifest-path "$repo/Cargo.toml" | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bin_dir=${CHAOS_BIN_DIR:-$target_dir/release}
echo "$bin_dir/herald" >"$DIR/herald.bin"
loadgen=$bin_dir/herald-loadgen
ensure_toxiproxy

pick_port >"$DIR/toxi.port"
nohup "$TOXI_BIN/server" -host 127.0.0.1 -port "$(cat "$DIR/toxi.port")" </dev/null >"$DIR/toxiproxy.log" 2>&1 &
echo $! >"$DIR/toxi.pid"
for _ in $(seq 100); do toxi GET /version && break; sleep 0.1; done
toxi GET /version || die "toxiproxy did not start"

log "starting Kafka (deploy/engines.sh), advertised through Toxiproxy"
pick_port >"$DIR/kafka.proxy"
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

[namespaces.dl]
delta = "fossil"
EOF
for n in 1 2 3; do
  pick_port >"$DIR/node$n.port"
  pick_port >"$DIR/node$n.admin"
  pick_port >"$DIR/node$n.clients"
  proxy "clients-node$n" "$(cat "$DIR/node$n.clients")" "$(cat "$DIR/node$n.port")"
  node_start "$n"
done
for n in 1 2 3; do node_wait_ready "$n" 90 || die "node $n is not ready (see $DIR/node$n.log)"; done
printf '#!/bin/sh\nexec "%s" control "$@"\n' "$repo/deploy/chaos.sh" >"$DIR/control"
chmod +x "$DIR/control"

log "running herald-loadgen chaos for $DURATION"
args=(chaos --duration "$DURATION" --clients "${CHAOS_CLIENTS:-300}" --kafka-prefix kf. --delta-namespace dl
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
