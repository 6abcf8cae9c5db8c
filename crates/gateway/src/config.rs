//! Configuration: one serde [`Config`], read from a TOML file, `HERALD_*` environment variables
//! and command-line flags (precedence: flag > environment > file > default), validated before
//! anything binds. The doc comment of each field is its user documentation.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use clap::Parser;
use herald_core::{LagPolicy, RegistryConfig, TopicConfig};
use serde::{Deserialize, Serialize};

pub mod admin;
pub use admin::AdminConfig;

/// Herald's whole configuration. Every field has a default; `herald --print-config` prints
/// them all as TOML.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address of the public listener: SSE, WebSocket, long-poll and the demo page.
    pub listen: SocketAddr,
    /// Address of the admin listener: publish API, topic stats, `/metrics`, `/healthz`,
    /// `/readyz`. Keep it on a private interface.
    pub admin_listen: SocketAddr,
    /// Log output: `text` or `json`.
    pub log_format: LogFormat,
    /// Log filter in `tracing_subscriber::EnvFilter` syntax (`info`, `herald_gateway=debug`).
    /// `RUST_LOG`, when set, takes precedence.
    pub log_filter: String,
    /// Development mode: serves `POST /v1/publish` on the public listener without any
    /// credentials and lets WebSocket clients publish, so the demo page can publish. Never
    /// enable it on a listener others can reach.
    pub dev: bool,
    /// What happens to a subscriber that falls behind: `recover_or_notify` (replay from
    /// history, else send a loss signal and go on), `recover_or_disconnect`, or `disconnect`.
    pub lag_policy: LagPolicy,
    /// Topics, history and their limits.
    pub topics: TopicsConfig,
    /// Server-Sent Events.
    pub sse: SseConfig,
    /// WebSocket.
    pub ws: WsConfig,
    /// Long-polling.
    pub poll: PollConfig,
    /// Limits that protect the gateway from its clients.
    pub limits: LimitsConfig,
    /// Graceful shutdown.
    pub shutdown: ShutdownConfig,
    /// Cluster: node identity and the bridges that join nodes.
    pub cluster: ClusterConfig,
    /// Who may subscribe and publish (see docs/security.md).
    pub auth: AuthConfig,
    /// TLS on the public listener.
    pub tls: TlsConfig,
    /// Access to the admin listener.
    pub admin: AdminConfig,
}

/// TLS (rustls) on the public listener: HTTP/1.1 and HTTP/2 (ALPN), SSE, WebSocket and
/// long-poll alike. Both files are read at start and again on `SIGHUP`; a reload that fails
/// keeps the certificate in use.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM file with the certificate chain, leaf first. Setting it turns TLS on.
    pub cert_file: Option<PathBuf>,
    /// PEM file with the private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
}

impl TlsConfig {
    /// Whether TLS is configured.
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some() || self.key_file.is_some()
    }
}

/// Access control. With nothing set (the default), anyone may subscribe to every topic except
/// `user:` ones, and publishing is only served on the admin listener.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Shared secret for HS256 tokens. Prefer the `HERALD_AUTH_HS256_SECRET` environment
    /// variable to keeping it in a file; it is never logged or printed.
    #[serde(skip_serializing)]
    pub hs256_secret: Option<String>,
    /// PEM files of RSA public keys for RS256 tokens.
    pub rs256_public_keys: Vec<PathBuf>,
    /// PEM files of EC (P-256) public keys for ES256 tokens.
    pub es256_public_keys: Vec<PathBuf>,
    /// A JWKS file (`{"keys":[...]}`) of token keys.
    pub jwks_file: Option<PathBuf>,
    /// Topics starting with one of these need no token even when keys are configured.
    pub public_prefixes: Vec<String>,
    /// API keys (sent as `x-api-key`) that may publish on the public listener. Setting any
    /// serves `POST /v1/publish` there.
    #[serde(skip_serializing)]
    pub api_keys: Vec<String>,
    /// Browser origins (`https://app.example.com`) allowed to open WebSockets and to read
    /// SSE/long-poll responses (CORS). Empty: any origin.
    pub allowed_origins: Vec<String>,
    /// Let browsers send credentials (cookies) on cross-origin SSE, long-poll and publish
    /// requests (`access-control-allow-credentials: true`). Needs an explicit
    /// `allowed_origins` list without `*`.
    pub cors_credentials: bool,
}

/// Cluster: node identity and the bridges that join nodes. With no bridge configured, the
/// node runs alone with in-memory positions (the default).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// This node's id, unique in the cluster (logs, stream entries). Default: random.
    pub node_id: String,
    /// Redis URL: enables the Redis bridge, which fans messages out between nodes through
    /// Redis Streams and gives them shared positions. `redis://[user:password@]host:port[/db]`,
    /// `rediss://…` for TLS; with `redis_mode = "sentinel"`,
    /// `redis+sentinel://[user:password@]host:port,host:port/<master-name>`; with
    /// `redis_mode = "cluster"`, seed nodes, comma-separated. The password is never printed.
    #[serde(serialize_with = "crate::bridge::redis_conn::serialize_redacted_url")]
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
    /// Number of Redis streams messages are spread over, by a stable hash of the topic.
    /// Every node of a cluster must use the same value.
    pub redis_shards: u32,
    /// Approximate entries kept per stream (`XADD MAXLEN ~`).
    pub redis_stream_maxlen: usize,
    /// How often a node writes its connections and per-topic subscriber counts to Redis (in
    /// one pipeline, changes only). A node silent for three intervals counts as gone.
    #[serde(with = "humantime_serde")]
    pub presence_interval: Duration,
    /// Kafka bootstrap servers (`host:port,host:port`): enables the Kafka bridge, which
    /// delivers the records of `kafka_topics` to subscribers on every node.
    pub kafka_brokers: Option<String>,
    /// Kafka topics to consume (every partition, on every node). Publishes through the HTTP
    /// API to a topic Kafka feeds are produced to the first one.
    pub kafka_topics: Vec<String>,
    /// With both Redis and Kafka configured, the Herald topics Kafka feeds, by name prefix
    /// (`""` for all); Redis feeds every other topic. Each topic is fed by exactly one log:
    /// publishes go to it, and a record for the topic read from the other log is refused
    /// (`herald_bridge_messages_total{direction="refused"}` and a log line). Required (not
    /// empty) when both are configured; unused otherwise, since one log feeds every topic.
    /// Default: none.
    pub kafka_feeds: Vec<String>,
    /// Each node commits its consumed position under the group `<prefix>-<node_id>`.
    pub kafka_group_prefix: String,
    /// Kafka topic that client events are produced to (connects, disconnects, WebSocket
    /// publishes), for backend services. Needs `kafka_brokers`. Default: none.
    pub kafka_upstream_topic: Option<String>,
    /// librdkafka properties applied to every Kafka client Herald makes (consumer, producer,
    /// upstream producer), e.g. `"security.protocol" = "SASL_SSL"`, `"sasl.mechanisms" =
    /// "SCRAM-SHA-256"`, `"sasl.username"`, `"sasl.password"`, `"ssl.ca.location"`. Each has
    /// an environment twin: `HERALD_KAFKA_PROPERTIES_SASL_PASSWORD` sets `sasl.password`
    /// (`_` becomes `.`, `__` a literal `_`), which wins over the file. Values of secret
    /// properties (passwords, keys, JAAS configs) are never printed.
    #[serde(serialize_with = "crate::bridge::kafka_props::serialize_redacted")]
    pub kafka_properties: std::collections::BTreeMap<String, String>,
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
            redis_shards: 16,
            redis_stream_maxlen: 100_000,
            presence_interval: Duration::from_secs(2),
            kafka_brokers: None,
            kafka_topics: vec!["herald".into()],
            kafka_feeds: Vec::new(),
            kafka_group_prefix: "herald".into(),
            kafka_upstream_topic: None,
            kafka_properties: std::collections::BTreeMap::new(),
        }
    }
}

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Topics, history and their limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopicsConfig {
    /// Most topics held at once. A topic is created by its first subscriber or publisher and
    /// reclaimed once it has no subscriber and its history has expired; past the limit,
    /// creating a topic fails with 503 / error `topic_limit`.
    pub max_topics: usize,
    /// Messages each topic keeps for resume (`Last-Event-ID`, WebSocket cursors, poll cursors).
    pub history_len: usize,
    /// How long a message stays in history.
    #[serde(with = "humantime_serde")]
    pub history_ttl: Duration,
    /// Live channel capacity per topic: how many messages a subscriber may fall behind before
    /// the lag policy applies. Allocated per topic up front (about 32 bytes a slot).
    pub channel_capacity: usize,
    /// How often idle topics are looked for and reclaimed.
    #[serde(with = "humantime_serde")]
    pub reclaim_interval: Duration,
    /// Share of `max_topics` (above 0, at most 1) that topics created by subscriptions may
    /// take while no message has reached them. Past it, subscribing to a topic that does not
    /// exist gets 503 `topic_limit`; the rest of the registry stays for publishers and the
    /// cluster's logs, so subscribers alone can never make a publish fail.
    pub unpublished_share: f64,
}

/// Server-Sent Events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SseConfig {
    /// Interval of the `: ping` comment sent on an idle stream.
    #[serde(with = "humantime_serde")]
    pub heartbeat: Duration,
    /// Reconnection delay hinted to clients with `retry:` when a stream starts.
    #[serde(with = "humantime_serde")]
    pub retry: Duration,
    /// End each stream after about this long (±10 % at random), with a `retry:` hint of
    /// `sse.retry`, so that
    /// clients reconnect (resuming exactly from `Last-Event-ID`) and spread over the nodes
    /// behind a load balancer. `0s` keeps streams open indefinitely.
    #[serde(with = "humantime_serde")]
    pub max_lifetime: Duration,
}

/// WebSocket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WsConfig {
    /// Largest inbound message in bytes; a larger one closes the connection with 1009.
    pub max_message_size: usize,
    /// Read buffer per connection in bytes. tungstenite keeps it allocated and zero-fills it
    /// before reads, so it is resident memory on every connection: keep it small (larger
    /// messages are still read whole, in more reads).
    pub read_buffer_size: usize,
    /// Bytes buffered before a write is flushed.
    pub write_buffer_size: usize,
    /// Interval of WebSocket pings sent by the server.
    #[serde(with = "humantime_serde")]
    pub ping_interval: Duration,
    /// A connection from which nothing (not even a pong) arrived for this long is closed
    /// with 1001.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Frames per second one client may send (any kind, pings included); faster is closed
    /// with 1008 "too many messages". 0 turns the limit off.
    pub inbound_rate: f64,
    /// Burst of frames one client may send at once.
    pub inbound_burst: f64,
}

/// Long-polling.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PollConfig {
    /// Longest time a poll is held open when no message is ready (a client may ask for less
    /// with `timeout=SECONDS`).
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Most messages returned by one poll; the returned cursor continues after them.
    pub max_batch: usize,
}

/// Limits that protect the gateway from its clients.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Open connections on the public listener; past it new ones get 503.
    pub max_connections: usize,
    /// Open connections from one client address; past it new ones get 429.
    pub max_connections_per_address: u32,
    /// New connections per second from one client address (token bucket); faster gets 429.
    pub connect_rate_per_address: f64,
    /// Burst of new connections one address may open at once.
    pub connect_burst_per_address: f64,
    /// Topics one connection may subscribe to (also the most topics in one request).
    pub max_subscriptions: usize,
    /// Largest published payload (compact JSON) in bytes; larger is 413.
    pub max_payload_bytes: usize,
    /// Most messages in one batch publish.
    pub max_batch_publish: usize,
    /// Publishes per second on the public listener per publisher: an API key, a token's
    /// subject, or (dev mode, tokens without `sub`) a client address; a batch counts each
    /// message. Faster gets 429 with `retry-after`. 0 turns the limit off. The admin listener
    /// is not limited.
    pub publish_rate_per_key: f64,
    /// Burst of publishes one publisher may make at once.
    pub publish_burst_per_key: f64,
    /// Publishes per second on one WebSocket connection; faster gets a `rate_limited` error
    /// frame (the connection stays). 0 turns the limit off.
    pub publish_rate_per_connection: f64,
    /// Burst of publishes one WebSocket connection may make at once.
    pub publish_burst_per_connection: f64,
    /// Time a client has to send its request headers (slowloris protection).
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// Longest time one write to an SSE or WebSocket client may wait for a client that does
    /// not read; then the connection is closed as a slow consumer. Bounds what each
    /// connection holds queued to the kernel's socket buffer.
    #[serde(with = "humantime_serde")]
    pub write_timeout: Duration,
    /// Largest request head (request line and headers) in bytes; larger gets 431.
    pub max_header_bytes: usize,
    /// Time a client has to send a request body (publish API, both listeners); slower gets
    /// 408. A body declared larger than the limit gets 413 before it is read.
    #[serde(with = "humantime_serde")]
    pub body_read_timeout: Duration,
    /// Topics one client (its token's subject, else its address) may hold that its own
    /// subscriptions created and that have had no message yet; past it, subscribing to yet
    /// another new topic gets 429 `topic_quota`. Subscribing to topics that exist is not
    /// counted.
    pub max_new_topics_per_client: usize,
    /// Open connections on the admin listener; past it new ones are closed.
    pub admin_max_connections: usize,
    /// Open connections on the admin listener from one address; past it new ones get 429.
    pub admin_max_connections_per_address: u32,
}

/// Graceful shutdown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownConfig {
    /// Longest wait for open connections to close after SIGTERM/SIGINT; the process exits
    /// then even with clients still connected.
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
    /// Upper bound of the random reconnection delay hinted to clients on shutdown (SSE
    /// `retry:`), so that they do not all come back at once.
    #[serde(with = "humantime_serde")]
    pub reconnect_jitter: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: ([0, 0, 0, 0], 8080).into(),
            admin_listen: ([127, 0, 0, 1], 9090).into(),
            log_format: LogFormat::Text,
            log_filter: "info".into(),
            dev: false,
            lag_policy: LagPolicy::default(),
            topics: TopicsConfig::default(),
            sse: SseConfig::default(),
            ws: WsConfig::default(),
            poll: PollConfig::default(),
            limits: LimitsConfig::default(),
            shutdown: ShutdownConfig::default(),
            cluster: ClusterConfig::default(),
            auth: AuthConfig::default(),
            tls: TlsConfig::default(),
            admin: AdminConfig::default(),
        }
    }
}

impl Default for TopicsConfig {
    fn default() -> Self {
        Self {
            max_topics: 100_000,
            history_len: 256,
            history_ttl: Duration::from_secs(300),
            channel_capacity: 128,
            reclaim_interval: Duration::from_secs(30),
            unpublished_share: 0.25,
        }
    }
}

impl Default for SseConfig {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(15),
            retry: Duration::from_secs(3),
            max_lifetime: Duration::ZERO,
        }
    }
}

impl Default for WsConfig {
    fn default() -> Self {
        Self {
            max_message_size: 64 * 1024,
            read_buffer_size: 1024,
            write_buffer_size: 0,
            ping_interval: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(75),
            inbound_rate: 100.0,
            inbound_burst: 200.0,
        }
    }
}

impl Default for PollConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(30),
            max_batch: 1000,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_connections: 100_000,
            max_connections_per_address: 10_000,
            connect_rate_per_address: 1_000.0,
            connect_burst_per_address: 5_000.0,
            max_subscriptions: 64,
            max_payload_bytes: 64 * 1024,
            max_batch_publish: 100,
            publish_rate_per_key: 1_000.0,
            publish_burst_per_key: 2_000.0,
            publish_rate_per_connection: 100.0,
            publish_burst_per_connection: 200.0,
            header_read_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            max_header_bytes: 16 * 1024,
            body_read_timeout: Duration::from_secs(10),
            max_new_topics_per_client: 1_000,
            admin_max_connections: 1024,
            admin_max_connections_per_address: 64,
        }
    }
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(10),
            reconnect_jitter: Duration::from_secs(5),
        }
    }
}

impl Config {
    /// Checks every value; the error says which field is wrong and why.
    pub fn validate(&self) -> anyhow::Result<()> {
        ensure!(
            self.listen != self.admin_listen || self.listen.port() == 0,
            "listen and admin_listen must differ (both are {})",
            self.listen
        );
        let t = &self.topics;
        ensure!(t.max_topics >= 1, "topics.max_topics must be at least 1");
        ensure!(
            t.history_len <= 100_000,
            "topics.history_len must be at most 100000"
        );
        ensure!(
            (1..=65_536).contains(&t.channel_capacity),
            "topics.channel_capacity must be within 1..=65536"
        );
        ensure!(
            !t.history_ttl.is_zero(),
            "topics.history_ttl must be above zero"
        );
        ensure!(
            !t.reclaim_interval.is_zero(),
            "topics.reclaim_interval must be above zero"
        );
        ensure!(
            t.unpublished_share > 0.0 && t.unpublished_share <= 1.0,
            "topics.unpublished_share must be above 0 and at most 1"
        );
        ensure!(
            !self.sse.heartbeat.is_zero(),
            "sse.heartbeat must be above zero"
        );
        let ws = &self.ws;
        ensure!(
            (1024..=16 << 20).contains(&ws.max_message_size),
            "ws.max_message_size must be within 1024..=16777216"
        );
        ensure!(
            ws.inbound_rate.is_finite()
                && ws.inbound_rate >= 0.0
                && ws.inbound_burst.is_finite()
                && ws.inbound_burst >= 0.0,
            "ws.inbound_rate and ws.inbound_burst must be numbers of at least 0"
        );
        ensure!(
            (256..=1 << 20).contains(&ws.read_buffer_size),
            "ws.read_buffer_size must be within 256..=1048576"
        );
        ensure!(
            ws.write_buffer_size <= 1 << 20,
            "ws.write_buffer_size must be at most 1048576"
        );
        ensure!(
            !ws.ping_interval.is_zero(),
            "ws.ping_interval must be above zero"
        );
        ensure!(
            ws.idle_timeout > ws.ping_interval,
            "ws.idle_timeout must be longer than ws.ping_interval"
        );
        ensure!(
            !self.poll.timeout.is_zero(),
            "poll.timeout must be above zero"
        );
        ensure!(
            self.poll.max_batch >= 1,
            "poll.max_batch must be at least 1"
        );
        ensure!(
            !self.auth.cors_credentials
                || (!self.auth.allowed_origins.is_empty()
                    && !self.auth.allowed_origins.iter().any(|o| o == "*")),
            "auth.cors_credentials needs auth.allowed_origins to list the origins (and not `*`)"
        );
        let l = &self.limits;
        ensure!(
            l.max_connections >= 1,
            "limits.max_connections must be at least 1"
        );
        ensure!(
            l.max_connections_per_address >= 1,
            "limits.max_connections_per_address must be at least 1"
        );
        ensure!(
            l.connect_rate_per_address > 0.0 && l.connect_burst_per_address >= 1.0,
            "limits.connect_rate_per_address must be above 0 and connect_burst_per_address at least 1"
        );
        for (name, value) in [
            ("publish_rate_per_key", l.publish_rate_per_key),
            ("publish_burst_per_key", l.publish_burst_per_key),
            ("publish_rate_per_connection", l.publish_rate_per_connection),
            (
                "publish_burst_per_connection",
                l.publish_burst_per_connection,
            ),
        ] {
            ensure!(
                value.is_finite() && value >= 0.0,
                "limits.{name} must be a number of at least 0"
            );
        }
        ensure!(
            (1..=1024).contains(&l.max_subscriptions),
            "limits.max_subscriptions must be within 1..=1024"
        );
        ensure!(
            (16..=16 << 20).contains(&l.max_payload_bytes),
            "limits.max_payload_bytes must be within 16..=16777216"
        );
        ensure!(
            (1..=10_000).contains(&l.max_batch_publish),
            "limits.max_batch_publish must be within 1..=10000"
        );
        ensure!(
            !l.header_read_timeout.is_zero(),
            "limits.header_read_timeout must be above zero"
        );
        ensure!(
            !l.write_timeout.is_zero(),
            "limits.write_timeout must be above zero"
        );
        ensure!(
            !l.body_read_timeout.is_zero(),
            "limits.body_read_timeout must be above zero"
        );
        ensure!(
            l.admin_max_connections >= 1 && l.admin_max_connections_per_address >= 1,
            "limits.admin_max_connections and admin_max_connections_per_address must be at least 1"
        );
        ensure!(
            (1024..=1 << 20).contains(&l.max_header_bytes),
            "limits.max_header_bytes must be within 1024..=1048576"
        );
        let c = &self.cluster;
        ensure!(
            !c.node_id.is_empty() && c.node_id.len() <= 64,
            "cluster.node_id must be 1 to 64 characters"
        );
        ensure!(
            (1..=1024).contains(&c.redis_shards),
            "cluster.redis_shards must be within 1..=1024"
        );
        ensure!(
            c.redis_stream_maxlen >= 100,
            "cluster.redis_stream_maxlen must be at least 100"
        );
        ensure!(
            c.kafka_upstream_topic.is_none() || c.kafka_brokers.is_some(),
            "cluster.kafka_upstream_topic needs cluster.kafka_brokers"
        );
        if c.kafka_brokers.is_some() {
            ensure!(
                !c.kafka_topics.is_empty(),
                "cluster.kafka_topics must name at least one topic"
            );
            ensure!(
                c.kafka_topics
                    .iter()
                    .all(|t| !t.is_empty() && t.len() <= 249),
                "cluster.kafka_topics entries must be 1 to 249 characters"
            );
        }
        ensure!(
            c.redis_url.is_none() || c.kafka_brokers.is_none() || !c.kafka_feeds.is_empty(),
            "with both cluster.redis_url and cluster.kafka_brokers, cluster.kafka_feeds must name \
             the topic prefixes Kafka feeds (\"\" for all); Redis feeds the rest"
        );
        if c.redis_url.is_some() {
            crate::bridge::redis_conn::RedisTarget::from_config(c)?;
        } else if c.redis_ca_file.is_some() || c.redis_cert_file.is_some() {
            bail!("cluster.redis_ca_file / redis_cert_file need cluster.redis_url");
        }
        crate::bridge::kafka_props::validate(&c.kafka_properties)?;
        if let Err(e) = crate::auth::Auth::from_config(&self.auth) {
            bail!("auth: {e:#}");
        }
        if self
            .auth
            .hs256_secret
            .as_ref()
            .is_some_and(|s| s.len() < 32)
        {
            bail!("auth.hs256_secret must be at least 32 bytes");
        }
        if self.tls.enabled()
            && let Err(e) = crate::server::tls::Tls::load(&self.tls)
        {
            bail!("tls: {e:#}");
        }
        self.admin.validate(self.admin_listen)?;
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log_filter) {
            bail!("log_filter {:?} is invalid: {e}", self.log_filter);
        }
        Ok(())
    }

    /// The core registry's limits.
    pub fn registry(&self) -> RegistryConfig {
        RegistryConfig {
            shards: 64,
            max_topics: self.topics.max_topics,
            max_unpublished:
                ((self.topics.max_topics as f64 * self.topics.unpublished_share).ceil() as usize)
                    .clamp(1, self.topics.max_topics),
            topic: TopicConfig {
                channel_capacity: self.topics.channel_capacity,
                history_len: self.topics.history_len,
                history_ttl: self.topics.history_ttl,
                log_fed: self.cluster.redis_url.is_some() || self.cluster.kafka_brokers.is_some(),
            },
        }
    }
}

/// Command-line flags; each has a `HERALD_*` environment twin. Everything else is set in the
/// TOML file given with `--config`.
#[derive(Debug, Parser)]
#[command(
    name = "herald",
    version,
    about = "Herald: a real-time push gateway (SSE, WebSocket, long-poll)."
)]
pub struct Cli {
    /// TOML configuration file (see `--print-config` for every key and its default).
    #[arg(long, env = "HERALD_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Public listener address [default: 0.0.0.0:8080].
    #[arg(long, env = "HERALD_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Admin listener address (publish API, metrics, health) [default: 127.0.0.1:9090].
    #[arg(long, env = "HERALD_ADMIN_LISTEN", value_name = "ADDR")]
    pub admin_listen: Option<SocketAddr>,
    /// Log format [default: text].
    #[arg(long, env = "HERALD_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Log filter, e.g. `info` or `herald_gateway=debug` [default: info].
    #[arg(long, env = "HERALD_LOG_FILTER", value_name = "FILTER")]
    pub log_filter: Option<String>,
    /// Development mode: unauthenticated publishing on the public listener (demo page).
    #[arg(long, env = "HERALD_DEV", num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub dev: Option<bool>,
    /// SSE heartbeat interval, e.g. `15s` [default: 15s].
    #[arg(long, env = "HERALD_SSE_HEARTBEAT", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub sse_heartbeat: Option<Duration>,
    /// Shutdown grace period, e.g. `10s` [default: 10s].
    #[arg(long, env = "HERALD_SHUTDOWN_GRACE", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub shutdown_grace: Option<Duration>,
    /// Lag policy: recover_or_notify, recover_or_disconnect or disconnect [default: recover_or_notify].
    #[arg(long, env = "HERALD_LAG_POLICY", value_parser = parse_lag_policy, value_name = "POLICY")]
    pub lag_policy: Option<LagPolicy>,
    /// Redis URL enabling the Redis cluster bridge, e.g. `redis://127.0.0.1:6379`.
    #[arg(
        long,
        env = "HERALD_REDIS_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub redis_url: Option<String>,
    /// How Redis is deployed: single, sentinel or cluster [default: single].
    #[arg(long, env = "HERALD_REDIS_MODE", value_name = "MODE")]
    pub redis_mode: Option<RedisMode>,
    /// Kafka bootstrap servers enabling the Kafka bridge, e.g. `127.0.0.1:9092`.
    #[arg(long, env = "HERALD_KAFKA_BROKERS", value_name = "HOSTS")]
    pub kafka_brokers: Option<String>,
    /// Kafka topics to consume, comma-separated [default: herald].
    #[arg(
        long,
        env = "HERALD_KAFKA_TOPICS",
        value_name = "TOPICS",
        value_delimiter = ','
    )]
    pub kafka_topics: Option<Vec<String>>,
    /// With Redis and Kafka both configured, the Herald topic prefixes Kafka feeds,
    /// comma-separated ("" for all); Redis feeds the rest [default: none].
    #[arg(
        long,
        env = "HERALD_KAFKA_FEEDS",
        value_name = "PREFIXES",
        value_delimiter = ','
    )]
    pub kafka_feeds: Option<Vec<String>>,
    /// This node's id in the cluster [default: random].
    #[arg(long, env = "HERALD_NODE_ID", value_name = "ID")]
    pub node_id: Option<String>,
    /// HS256 token secret (use the environment variable; it never appears in logs).
    #[arg(
        long,
        env = "HERALD_AUTH_HS256_SECRET",
        value_name = "SECRET",
        hide_env_values = true
    )]
    pub auth_hs256_secret: Option<String>,
    /// API keys allowed to publish on the public listener, comma-separated.
    #[arg(
        long,
        env = "HERALD_AUTH_API_KEYS",
        value_name = "KEYS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub auth_api_keys: Option<Vec<String>>,
    /// Browser origins allowed for WebSocket and CORS, comma-separated [default: any].
    #[arg(
        long,
        env = "HERALD_AUTH_ALLOWED_ORIGINS",
        value_name = "ORIGINS",
        value_delimiter = ','
    )]
    pub auth_allowed_origins: Option<Vec<String>>,
    /// TLS certificate chain (PEM) for the public listener; needs `--tls-key`.
    #[arg(long, env = "HERALD_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) for the public listener.
    #[arg(long, env = "HERALD_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// Admin listener access (keys, open /metrics, insecure).
    #[command(flatten)]
    pub admin: admin::AdminArgs,
    /// Print the effective configuration as TOML (secrets left out) and exit.
    #[arg(long)]
    pub print_config: bool,
    /// A subcommand instead of serving.
    #[command(subcommand)]
    pub command: Option<crate::health::Command>,
}

fn parse_lag_policy(s: &str) -> Result<LagPolicy, String> {
    LagPolicy::deserialize(serde::de::value::StrDeserializer::<serde::de::value::Error>::new(s))
        .map_err(|_| "expected recover_or_notify, recover_or_disconnect or disconnect".to_string())
}

impl Cli {
    /// The configuration: defaults, overlaid by the file, overlaid by flags and environment
    /// (clap has already given flags precedence over the environment). Not yet validated.
    pub fn load(&self) -> anyhow::Result<Config> {
        let mut config = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read config file {}", path.display()))?;
                toml::from_str(&text)
                    .with_context(|| format!("invalid config file {}", path.display()))?
            }
            None => Config::default(),
        };
        if let Some(v) = self.listen {
            config.listen = v;
        }
        if let Some(v) = self.admin_listen {
            config.admin_listen = v;
        }
        if let Some(v) = self.log_format {
            config.log_format = v;
        }
        if let Some(v) = &self.log_filter {
            config.log_filter = v.clone();
        }
        if let Some(v) = self.dev {
            config.dev = v;
        }
        if let Some(v) = self.sse_heartbeat {
            config.sse.heartbeat = v;
        }
        if let Some(v) = self.shutdown_grace {
            config.shutdown.grace = v;
        }
        if let Some(v) = self.lag_policy {
            config.lag_policy = v;
        }
        if let Some(v) = &self.redis_url {
            config.cluster.redis_url = Some(v.clone());
        }
        if let Some(v) = self.redis_mode {
            config.cluster.redis_mode = v;
        }
        if let Some(v) = &self.node_id {
            config.cluster.node_id = v.clone();
        }
        if let Some(v) = &self.auth_hs256_secret {
            config.auth.hs256_secret = Some(v.clone());
        }
        if let Some(v) = &self.auth_api_keys {
            config.auth.api_keys = v.clone();
        }
        if let Some(v) = &self.auth_allowed_origins {
            config.auth.allowed_origins = v.clone();
        }
        if let Some(v) = &self.tls_cert {
            config.tls.cert_file = Some(v.clone());
        }
        if let Some(v) = &self.tls_key {
            config.tls.key_file = Some(v.clone());
        }
        if let Some(v) = &self.kafka_brokers {
            config.cluster.kafka_brokers = Some(v.clone());
        }
        if let Some(v) = &self.kafka_topics {
            config.cluster.kafka_topics = v.clone();
        }
        if let Some(v) = &self.kafka_feeds {
            config.cluster.kafka_feeds = v.clone();
        }
        config
            .cluster
            .kafka_properties
            .extend(crate::bridge::kafka_props::from_env(std::env::vars()));
        self.admin.apply(&mut config.admin);
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_round_trip_through_toml() {
        let config = Config::default();
        config.validate().unwrap();
        let text = toml::to_string(&config).unwrap();
        assert_eq!(toml::from_str::<Config>(&text).unwrap(), config);
    }

    #[test]
    fn file_then_flags() {
        let dir = std::env::temp_dir().join(format!("herald-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("herald.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:1000\"\n[sse]\nheartbeat = \"2s\"\n",
        )
        .unwrap();
        let cli = Cli::try_parse_from([
            "herald",
            "--config",
            path.to_str().unwrap(),
            "--sse-heartbeat",
            "5s",
        ])
        .unwrap();
        let config = cli.load().unwrap();
        assert_eq!(config.listen, "127.0.0.1:1000".parse().unwrap());
        assert_eq!(config.sse.heartbeat, Duration::from_secs(5));
        assert_eq!(config.sse.retry, Duration::from_secs(3));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn secrets_are_never_printed() {
        let mut config = Config::default();
        config.auth.hs256_secret = Some("s3cret-s3cret-s3cret-s3cret-s3cret".into());
        config.auth.api_keys = vec!["key-s3cret".into()];
        config.cluster.redis_url = Some("rediss://app:s3cret@127.0.0.1:6380".into());
        config.cluster.kafka_properties = [
            ("sasl.username", "app"),
            ("sasl.password", "s3cret"),
            ("ssl.key.password", "s3cret"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
        config.validate().unwrap();
        let text = toml::to_string(&config).unwrap();
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("rediss://app:***@127.0.0.1:6380"), "{text}");
        assert!(text.contains("sasl.username"), "{text}");
        assert!(
            !format!(
                "{:?}",
                crate::auth::Auth::from_config(&config.auth).unwrap()
            )
            .contains("s3cret")
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        assert!(toml::from_str::<Config>("lisen = \"0.0.0.0:1\"").is_err());
        assert!(toml::from_str::<Config>("[sse]\nheartbeat = \"soon\"").is_err());
        let mut config = Config::default();
        config.admin_listen = config.listen;
        assert!(
            config
                .validate()
                .unwrap_err()
                .to_string()
                .contains("must differ")
        );
        let mut config = Config::default();
        config.ws.max_message_size = 10;
        assert!(
            config
                .validate()
                .unwrap_err()
                .to_string()
                .contains("ws.max_message_size")
        );
    }
}
