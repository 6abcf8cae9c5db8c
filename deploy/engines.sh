#!/usr/bin/env bash
# deploy/engines.sh: run a REAL Redis server, a REAL Apache Kafka broker (single-node
# KRaft) and a REAL Jaeger as plain local processes for Herald's integration tests. No
# Docker needed.
#
#   deploy/engines.sh start [--redis] [--kafka] [--redis-tls] [--sentinel] [--redis-cluster]
#                           [--jaeger]
#                                                  start fresh engines (default: all) on free
#                                                  ports; prints the `export ...` lines that
#                                                  are also written to $STATE_DIR/env.
#                                                  --redis-tls: a Redis with TLS only (client
#                                                  certificates required) and an ACL user;
#                                                  --sentinel: master + replica (ACL user) and
#                                                  two redis-sentinel; --redis-cluster: 3
#                                                  masters + 3 replicas over TLS with a
#                                                  password (redis-cli --cluster create);
#                                                  --jaeger: Jaeger v2 all-in-one (OTLP in,
#                                                  memory storage, query API), built once
#                                                  with Go into the cache. Kafka always has a SASL_SSL
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
# Each engine is a part in deploy/engines/ (common.sh says how a part is made), and each part
# runs alone: deploy/engines/{redis,kafka,tls,redis-tls,sentinel,redis-cluster,jaeger}.sh
# start|stop|status|env|help print and manage that engine only, in the same state dir.
#
# Only `export ...` lines go to stdout, everything else goes to stderr, so
#   eval "$(deploy/engines.sh start)"
# works. Every failure exits non-zero with a message starting with "[engines] ERROR".
#
# Environment knobs (all optional):
#   HERALD_ENGINES_DIR       state dir (default: <repo>/target/engines)
#   HERALD_ENGINES_CACHE     jar and Jaeger cache, kept across runs (default: ~/.cache/herald-engines)
#   HERALD_JAEGER_VERSION    github.com/jaegertracing/jaeger version (default: v1.76.0)
#   HERALD_KAFKA_VERSION     org.apache.kafka:kafka_2.13 version (default: 4.3.1)
#   HERALD_LOG4J_VERSION     log4j2 version of the slf4j binding (default: 2.25.4)
#   HERALD_KAFKA_PARTITIONS  num.partitions for auto-created topics (default: 3)
#   HERALD_KAFKA_HEAP        broker -Xmx (default: 512m)
#   HERALD_KAFKA_START_TIMEOUT  seconds to wait for the broker (default: 60)
#   HERALD_KAFKA_ADVERTISED_PORT  port the PLAINTEXT listener advertises (default: its own)
#   (the Kafka knobs are read by deploy/engines/kafka.sh)
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=engines/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/engines/common.sh"

# The commands of the whole set beyond start, stop, status and env (common.sh's
# engines_main): engines_knows CMD says whether CMD is one, engines_cmd runs it.
engines_knows() { # CMD
    case $1 in
    kill-node | start-node | cluster-master-of | kafka-run) ;;
    kill-* | start-* | restart-*) launchable "${1#*-}" ;; # kill-redis, start-kafka, ...
    *) return 1 ;;
    esac
}

engines_cmd() { # CMD [ARGS...]
    local cmd=$1 name
    shift
    case $cmd in
    kill-node | start-node)
        [[ $# -ge 1 ]] || die "$cmd: name a node, e.g. s-master or c1"
        lock_state
        if [[ $cmd == kill-node ]]; then cmd_kill "rx/$1" "${@:2}"; else rx_launch "$1"; fi
        ;;
    cluster-master-of) redis_cluster_cmd_master_of "$@" ;;
    kafka-run) kafka_cmd_run "$@" ;;
    *) # kill-NAME, start-NAME, restart-NAME
        name=${cmd#*-}
        lock_state
        [[ $cmd == start-* ]] || cmd_kill "$name" "$@"
        [[ $cmd == kill-* ]] || hook "$name" launch
        ;;
    esac
}

engines_main "" "${BASH_SOURCE[0]}" "$@"
