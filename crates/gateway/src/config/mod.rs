//! Configuration: one serde [`Config`], read from a TOML file, `HERALD_*` environment variables
//! and command-line flags (precedence: flag > environment > file > default), validated before
//! anything binds. The doc comment of each field is its user documentation.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use herald_core::{LagPolicy, RegistryConfig, TopicConfig};
use serde::{Deserialize, Serialize};

pub mod admin;
mod cli;
mod cluster;
pub mod hooks;
mod limits;
pub mod namespaces;
pub mod secrets;
pub mod telemetry;

pub use admin::AdminConfig;
pub use cli::{Cli, Command, HealthArgs};
pub use cluster::{ClusterConfig, KafkaPartitioner, RedisMode, Routing};
pub use hooks::{HooksConfig, OnUnavailable};
pub use limits::LimitsConfig;
pub use namespaces::NamespaceConfig;
pub use telemetry::{OtlpProtocol, TelemetryConfig};

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
    /// The runtime's worker threads; 0: one per CPU the process may use (tokio's default,
    /// which also reads `TOKIO_WORKER_THREADS`). Fewer workers than CPUs wake each other
    /// less: on a small machine shared with other work, one worker answered the WebSocket
    /// echo for about a fifth less CPU per message, while a broadcast's fan-out no longer runs
    /// on two cores at once (BENCHMARKS.md, "Worker threads").
    /// Bound: 0 to 1024.
    pub worker_threads: usize,
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
    /// HTTP hooks: the application's backend decides who may connect, subscribe and publish.
    pub hooks: HooksConfig,
    /// OpenTelemetry traces of messages (off unless an endpoint is set).
    pub telemetry: TelemetryConfig,
    /// Options per namespace, `[namespaces.<name>]`: the topics named `<name>:...`
    /// ([`NamespaceConfig`]).
    pub namespaces: std::collections::BTreeMap<String, NamespaceConfig>,
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
    /// Bound: At least 1.
    pub max_topics: usize,
    /// Messages each topic keeps for resume (`Last-Event-ID`, WebSocket cursors, poll cursors).
    /// Bound: 0 to 100000.
    pub history_len: usize,
    /// How long a message stays in history.
    #[serde(with = "humantime_serde")]
    /// Bound: Above zero.
    pub history_ttl: Duration,
    /// Live channel capacity per topic: how many messages a subscriber may fall behind before
    /// the lag policy applies. Allocated per topic up front (about 32 bytes a slot).
    /// Bound: 1 to 65536.
    pub channel_capacity: usize,
    /// How often idle topics are looked for and reclaimed.
    #[serde(with = "humantime_serde")]
    /// Bound: Above zero.
    pub reclaim_interval: Duration,
    /// Share of `max_topics` (above 0, at most 1) that topics created by subscriptions may
    /// take while no message has reached them. Past it, subscribing to a topic that does not
    /// exist gets 503 `topic_limit`; the rest of the registry stays for publishers and the
    /// cluster's logs, so subscribers alone can never make a publish fail.
    /// Bound: Above 0, at most 1.
    pub unpublished_share: f64,
    /// Let a topic's publisher write each message to the sockets of its idle single-topic SSE
    /// and WebSocket subscribers on plain TCP itself (in cohorts, on the runtime's workers),
    /// instead of waking one task per subscriber per message (docs/architecture.md, "Direct
    /// delivery"). `false` delivers every message through the subscriber's own task.
    pub direct_delivery: bool,
    /// Keep each topic's members (connection, user, since, the token's `info`) for
    /// `GET /v1/presence/{topic}?members=true`, on top of the subscriber counts kept always.
    /// Off by default: it costs memory per subscription. A namespace may set its own
    /// (`namespaces.<name>.presence`).
    pub presence: bool,
    /// Most distinct prefix patterns (`?topic=orders.*`) subscribed to on this node at once.
    /// Each costs a broadcast channel of `channel_capacity` slots (about 5 KB at 128) however
    /// many connections share it; past the limit, subscribing to a pattern no one holds yet
    /// gets 503 `topic_limit`. 0 refuses every pattern subscription.
    /// Bound: 0 to 1000000.
    pub max_patterns: usize,
}

/// Server-Sent Events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SseConfig {
    /// Interval of the `: ping` comment sent on an idle stream.
    #[serde(with = "humantime_serde")]
    /// Bound: Above zero.
    pub heartbeat: Duration,
    /// Shortest heartbeat a client may ask for (`?heartbeat=<seconds>`).
    #[serde(with = "humantime_serde")]
    /// Bound: Above zero; at most `max_heartbeat`. (They bound what clients ask for;
    /// `heartbeat` itself may lie outside them.)
    pub min_heartbeat: Duration,
    /// Longest heartbeat a client may ask for (a mobile client saving wake-ups; a proxy may
    /// close a stream silent for longer than its own timeout).
    #[serde(with = "humantime_serde")]
    /// Bound: At least `min_heartbeat`.
    pub max_heartbeat: Duration,
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
    /// Bound: 1024 to 16777216.
    pub max_message_size: usize,
    /// Read buffer per connection in bytes. tungstenite keeps it allocated and zero-fills it
    /// before reads, so it is resident memory on every connection: keep it small (larger
    /// messages are still read whole, in more reads).
    /// Bound: 256 to 1048576.
    pub read_buffer_size: usize,
    /// Bytes buffered before a write is flushed.
    /// Bound: 0 to 1048576.
    pub write_buffer_size: usize,
    /// Interval of WebSocket pings sent by the server.
    #[serde(with = "humantime_serde")]
    /// Bound: Above zero; shorter than `idle_timeout`.
    pub ping_interval: Duration,
    /// A connection from which nothing (not even a pong) arrived for this long is closed
    /// with 1001.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Shortest ping interval a client may ask for (`{"type":"heartbeat","interval":s}`).
    #[serde(with = "humantime_serde")]
    /// Bound: Above zero; at most `max_ping_interval`. (They bound what clients ask for;
    /// `ping_interval` itself may lie outside them.)
    pub min_ping_interval: Duration,
    /// Longest ping interval a client may ask for. A connection on a longer interval is
    /// given an idle timeout longer in proportion (`idle_timeout` × its interval /
    /// `ping_interval`).
    #[serde(with = "humantime_serde")]
    /// Bound: At least `min_ping_interval`.
    pub max_ping_interval: Duration,
    /// Frames per second one client may send (any kind, pings included); faster is closed
    /// with 1008 "too many messages". 0 turns the limit off.
    /// Bound: At least 0 (0: no limit).
    pub inbound_rate: f64,
    /// Burst of frames one client may send at once.
    /// Bound: At least 0.
    pub inbound_burst: f64,
    /// Accept WebSocket compression (permessage-deflate, RFC 7692) when a client offers it.
    /// Herald always answers `server_no_context_takeover` and `client_no_context_takeover`:
    /// every message is compressed on its own, once per message for all its subscribers,
    /// and no connection keeps a compressor or an inflater (see docs/protocol.md).
    pub permessage_deflate: bool,
    /// Frames shorter than this many bytes go uncompressed on a compressed connection
    /// (RFC 7692 lets each message choose); compressing them costs more than it saves.
    /// Bound: 0 to 16777216.
    pub deflate_min_size: usize,
}

/// Long-polling.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PollConfig {
    /// Longest time a poll is held open when no message is ready (a client may ask for less
    /// with `timeout=SECONDS`).
    #[serde(with = "humantime_serde")]
    /// Bound: above zero.
    pub timeout: Duration,
    /// Most messages returned by one poll; the returned cursor continues after them.
    /// Bound: At least 1.
    pub max_batch: usize,
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
            worker_threads: 0,
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
            hooks: HooksConfig::default(),
            telemetry: TelemetryConfig::default(),
            namespaces: Default::default(),
        }
    }
}

impl Default for TopicsConfig {
    /// The core registry's defaults ([`RegistryConfig::default`]), so they are written once.
    fn default() -> Self {
        let core = RegistryConfig::default();
        Self {
            max_topics: core.max_topics,
            history_len: core.topic.history_len,
            history_ttl: core.topic.history_ttl,
            channel_capacity: core.topic.channel_capacity,
            reclaim_interval: Duration::from_secs(30),
            unpublished_share: core.max_unpublished as f64 / core.max_topics as f64,
            direct_delivery: true,
            presence: false,
            max_patterns: core.max_patterns,
        }
    }
}

impl Default for SseConfig {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(15),
            min_heartbeat: Duration::from_secs(5),
            max_heartbeat: Duration::from_secs(300),
            retry: Duration::from_secs(3),
            max_lifetime: Duration::ZERO,
        }
    }
}

impl Default for WsConfig {
    fn default() -> Self {
        Self {
            max_message_size: 64 * 1024,
            read_buffer_size: 512,
            write_buffer_size: 0,
            ping_interval: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(75),
            min_ping_interval: Duration::from_secs(5),
            max_ping_interval: Duration::from_secs(300),
            inbound_rate: 100.0,
            inbound_burst: 200.0,
            permessage_deflate: true,
            deflate_min_size: 256,
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

impl Default for ShutdownConfig {
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(10),
            reconnect_jitter: Duration::from_secs(5),
        }
    }
}

impl Config {
    /// The options of `topic`'s namespace, when it is in a configured one.
    pub fn namespace(&self, topic: &str) -> Option<(&str, &NamespaceConfig)> {
        let ns = namespaces::namespace_of(topic)?;
        self.namespaces
            .get_key_value(ns)
            .map(|(name, config)| (name.as_str(), config))
    }

    /// Whether the members of `topic` are kept ([`NamespaceConfig::presence`]).
    pub fn presence_members(&self, topic: &str) -> bool {
        self.namespace(topic)
            .and_then(|(_, ns)| ns.presence)
            .unwrap_or(self.topics.presence)
    }

    /// Whether the members of any topic are kept.
    pub fn presence_anywhere(&self) -> bool {
        self.topics.presence || self.namespaces.values().any(|ns| ns.presence == Some(true))
    }

    /// Whether some namespace lets every client that may read its topics publish to them
    /// (`publish = true`): the public listener then serves `POST /v1/publish` to them.
    pub fn clients_publish_somewhere(&self) -> bool {
        self.namespaces.values().any(|ns| ns.publish == Some(true))
    }

    /// Whether `hook` applies to `topic` ([`NamespaceConfig::hooks`]).
    pub fn hook_applies(&self, hook: hooks::Hook, topic: &str) -> bool {
        match self.namespace(topic).and_then(|(_, ns)| ns.hooks.as_ref()) {
            Some(hooks) => hooks.contains(&hook),
            None => true,
        }
    }

    /// The core registry's limits.
    pub fn registry(&self) -> RegistryConfig {
        let topic = TopicConfig {
            channel_capacity: self.topics.channel_capacity,
            history_len: self.topics.history_len,
            history_ttl: self.topics.history_ttl,
            log_carried: self.cluster.redis_url.is_some() || self.cluster.kafka_brokers.is_some(),
            lag_policy: None,
            delta: false,
        };
        RegistryConfig {
            shards: 64,
            max_topics: self.topics.max_topics,
            max_unpublished:
                ((self.topics.max_topics as f64 * self.topics.unpublished_share).ceil() as usize)
                    .clamp(1, self.topics.max_topics),
            max_patterns: self.topics.max_patterns,
            topic: topic.clone(),
            namespaces: self
                .namespaces
                .iter()
                .map(|(name, ns)| {
                    let config = TopicConfig {
                        history_len: ns.history_len.unwrap_or(topic.history_len),
                        history_ttl: ns.history_ttl.unwrap_or(topic.history_ttl),
                        lag_policy: ns.lag_policy,
                        delta: ns.delta.is_some(),
                        ..topic.clone()
                    };
                    (name.clone(), config)
                })
                .collect(),
        }
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
        let cli = Cli::parse_from_args([
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
