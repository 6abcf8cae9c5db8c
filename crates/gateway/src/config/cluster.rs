//! `[cluster]`: node identity, the bridges that join nodes (Redis, Kafka) and how a node
//! receives the cluster's messages (interest routing).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::secrets;

/// Cluster: node identity and the bridges that join nodes. With no bridge configured, the
/// node runs alone with in-memory positions (the default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// This node's id, unique in the cluster (logs, stream entries). Default: random.
    /// Bound: 1 to 64 characters.
    pub node_id: String,
    /// Redis URL: enables the Redis bridge, which fans messages out between nodes through
    /// Redis Streams and gives them shared positions. `redis://[user:password@]host:port[/db]`,
    /// `rediss://…` for TLS; with `redis_mode = "sentinel"`,
    /// `redis+sentinel://[user:password@]host:port,host:port/<master-name>`; with
    /// `redis_mode = "cluster"`, seed nodes, comma-separated. The password is never printed.
    #[serde(serialize_with = "secrets::serialize_redacted_url")]
    pub redis_url: Option<String>,
    /// How Redis is deployed: `single` (one server, or a managed endpoint), `sentinel`
    /// (a master found through its sentinels, followed across failovers) or `cluster`
    /// (Redis Cluster: streams spread over the masters by hash slot).
    pub redis_mode: RedisMode,
    /// PEM file of the CA that signed the Redis server's certificate (`rediss://`), instead
    /// of the system's roots.
    pub redis_ca_file: Option<PathBuf>,
    /// PEM file of a client certificate presented to Redis (TLS client authentication);
    /// needs `redis_key_file`.
    pub redis_cert_file: Option<PathBuf>,
    /// PEM file of the client certificate's private key.
    pub redis_key_file: Option<PathBuf>,
    /// Prefix of every Redis key the bridge uses (several clusters can share one Redis).
    pub redis_prefix: String,
    /// How a node receives the messages of the cluster: `interest` (the default) reads only
    /// the partitions of the log (Redis streams, Kafka partitions) holding a topic it has a
    /// subscriber for, so the cluster's publish capacity grows with its nodes; `broadcast`
    /// reads every partition on every node. Resume, `last` and history behave the same in both (see
    /// docs/cluster.md, "Interest routing").
    pub routing: Routing,
    /// With `routing = "interest"`, how long a node keeps following a partition after its last
    /// local subscriber to it left, so that subscription churn does not start and stop reads
    /// every second. Bound: 1s to 1h.
    #[serde(with = "humantime_serde")]
    pub interest_linger: Duration,
    /// With `routing = "interest"`, the longest a subscription to a topic whose partition the
    /// node does not follow yet waits while the node reads that partition's history from the
    /// log; past it the subscription is refused `503 bridge_unavailable`.
    /// Bound: 100ms to 1m.
    #[serde(with = "humantime_serde")]
    pub backfill_timeout: Duration,
    /// Number of Redis streams (the log's partitions) messages are spread over, by a stable
    /// hash of the topic. Every node of a cluster must use the same value. More partitions
    /// make a node under interest routing read less of what it has no subscriber for, and
    /// cost one stream each (on a Redis Cluster, one reading connection per followed
    /// partition).
    /// Bound: 1 to 16384.
    pub redis_shards: u32,
    /// Approximate entries kept per stream (`XADD MAXLEN ~`) with `routing = "broadcast"`.
    /// With `routing = "interest"` each stream keeps instead the messages of the longest
    /// `history_ttl` (`XADD MINID ~`), which is what any node can resume or backfill from.
    /// Bound: At least 100.
    pub redis_stream_maxlen: usize,
    /// Replicas that must hold a publish before it is answered (`WAIT` after the `XADD`, for
    /// at most `redis_wait_timeout`); a publish fewer replicas confirmed is answered
    /// `503 bridge_unavailable` (it may still be delivered). 0 (the default) answers once the
    /// master has it, and a master that dies before replicating loses it. Single and Sentinel
    /// modes only. Bound: 0 to 16.
    pub redis_wait_replicas: u32,
    /// Longest wait for `redis_wait_replicas`.
    #[serde(with = "humantime_serde")]
    pub redis_wait_timeout: Duration,
    /// How often a node writes its connections and per-topic subscriber counts to Redis (in
    /// one pipeline, changes only). A node silent for three intervals counts as gone.
    #[serde(with = "humantime_serde")]
    pub presence_interval: Duration,
    /// How long a publish's idempotency key is remembered: a publish retried with the same
    /// key to the same topic within it (HTTP `Idempotency-Key` or `idempotency_key`, the
    /// WebSocket `publish` field, the Kafka record header `herald-idempotency-key`) is
    /// answered with the first one's id and not published again (docs/protocol.md,
    /// "Retry-safe publishing"). Bound: 1s to 24h.
    #[serde(with = "humantime_serde")]
    pub idempotency_window: Duration,
    /// Most idempotency keys a node remembers (a lone node's publishes; the Kafka records it
    /// reads, this many shared by the partitions, at least 1,024 each): past it the oldest
    /// are forgotten first, so a publisher sending a fresh key with every message holds
    /// memory to this bound (about 400 bytes a key). Bound: 1 to 10000000.
    pub idempotency_max_keys: usize,
    /// Kafka bootstrap servers (`host:port,host:port`): enables the Kafka bridge, which
    /// delivers the records of `kafka_topics` to subscribers on every node.
    pub kafka_brokers: Option<String>,
    /// Kafka topics to consume: every partition on every node with `routing = "broadcast"`,
    /// the partitions holding a subscribed topic with `"interest"`. Publishes through the
    /// HTTP API to a topic Kafka carries are produced to the first one.
    pub kafka_topics: Vec<String>,
    /// With both Redis and Kafka configured, the Herald topics Kafka carries, by name prefix
    /// (`""` for all); Redis carries every other topic. Each topic is carried by exactly one
    /// log: publishes go to it, and a record for the topic read from the other log is refused
    /// (`herald_bridge_messages_total{direction="refused"}` and a log line). Required (not
    /// empty) when both are configured; unused otherwise, since one log carries every topic.
    /// Formerly `kafka_feeds`, still read (deprecated: a warning at start). Default: none.
    #[serde(alias = "kafka_feeds")]
    pub kafka_prefixes: Vec<String>,
    /// Each node commits its consumed position under the group `<prefix>-<node_id>`.
    pub kafka_group_prefix: String,
    /// Which partition of a Kafka topic holds a Herald topic's records: the partitioner of the
    /// producers, which key each record by its Herald topic. `consistent` (the default) is
    /// librdkafka's (CRC-32 of the key: kcat, the Python, Go, .NET and Rust clients built on
    /// librdkafka); `murmur2` is Java's (Kafka Streams, Connect, Spring, KafkaJS, franz-go).
    /// Herald's own producer uses it, and with `routing = "interest"` a node reads only the
    /// partitions it names for its subscribed topics: a record in another partition reaches
    /// only the nodes that read that one (counted in
    /// `herald_bridge_messages_total{bridge="kafka",direction="misrouted"}`; see
    /// docs/cluster.md, "Kafka: keys and partitions").
    pub kafka_partitioner: KafkaPartitioner,
    /// Kafka topic that client events are produced to (connects, disconnects, WebSocket
    /// publishes), for backend services. Needs `kafka_brokers`. Default: none.
    pub kafka_upstream_topic: Option<String>,
    /// librdkafka properties applied to every Kafka client Herald makes (consumer, producer,
    /// upstream producer), e.g. `"security.protocol" = "SASL_SSL"`, `"sasl.mechanisms" =
    /// "SCRAM-SHA-256"`, `"sasl.username"`, `"sasl.password"`, `"ssl.ca.location"`. Each has
    /// an environment twin: `HERALD_KAFKA_PROPERTIES_SASL_PASSWORD` sets `sasl.password`
    /// (`_` becomes `.`, `__` a literal `_`), which wins over the file. Values of secret
    /// properties (passwords, keys, JAAS configs) are never printed.
    #[serde(serialize_with = "secrets::serialize_redacted")]
    pub kafka_properties: std::collections::BTreeMap<String, String>,
}

/// How a node receives the cluster's messages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    /// Read only the partitions holding a topic with a local subscriber.
    #[default]
    Interest,
    /// Read every partition on every node.
    Broadcast,
}

/// The partitioner of the producers to the Kafka bridge's topics (see
/// [`ClusterConfig::kafka_partitioner`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum KafkaPartitioner {
    /// CRC-32 of the key, modulo the partitions (librdkafka's `consistent` and
    /// `consistent_random`).
    #[default]
    Consistent,
    /// Kafka's murmur2 of the key, positive, modulo the partitions (the Java producer's
    /// default; librdkafka's `murmur2` and `murmur2_random`).
    Murmur2,
}

/// How Redis is deployed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum RedisMode {
    /// One server (or a managed endpoint that hides its replicas).
    #[default]
    Single,
    /// A master and replicas watched by Redis Sentinel.
    Sentinel,
    /// Redis Cluster.
    Cluster,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            node_id: format!("{:08x}", rand::random::<u32>()),
            redis_url: None,
            redis_mode: RedisMode::Single,
            redis_ca_file: None,
            redis_cert_file: None,
            redis_key_file: None,
            redis_prefix: "herald".into(),
            routing: Routing::Interest,
            interest_linger: Duration::from_secs(60),
            backfill_timeout: Duration::from_secs(5),
            redis_shards: 16_384,
            redis_stream_maxlen: 100_000,
            redis_wait_replicas: 0,
            redis_wait_timeout: Duration::from_millis(500),
            presence_interval: Duration::from_secs(2),
            idempotency_window: Duration::from_secs(300),
            idempotency_max_keys: 100_000,
            kafka_brokers: None,
            kafka_topics: vec!["herald".into()],
            kafka_prefixes: Vec::new(),
            kafka_group_prefix: "herald".into(),
            kafka_partitioner: KafkaPartitioner::Consistent,
            kafka_upstream_topic: None,
            kafka_properties: std::collections::BTreeMap::new(),
        }
    }
}
