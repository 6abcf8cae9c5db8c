//! The command line: every flag with its `HERALD_*` environment twin, laid over the TOML file
//! and the defaults ([`Cli::load`]). Each flag's help ends with its default, taken from
//! [`Config::default`] when the help is printed ([`Cli::parse_args`]), so defaults are written
//! in one place.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{CommandFactory as _, FromArgMatches as _, Parser};
use herald_core::LagPolicy;
use serde::Deserialize as _;

use super::cluster::{RedisMode, Routing};
use super::{Config, LogFormat, admin, telemetry};

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
    /// Public listener address, `IP:PORT`.
    #[arg(long, env = "HERALD_LISTEN", value_parser = parse_listen, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Admin listener address, `IP:PORT` (publish API, metrics, health).
    #[arg(long, env = "HERALD_ADMIN_LISTEN", value_parser = parse_listen, value_name = "ADDR")]
    pub admin_listen: Option<SocketAddr>,
    /// Log format.
    #[arg(long, env = "HERALD_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Log filter, e.g. `info` or `herald_gateway=debug`.
    #[arg(long, env = "HERALD_LOG_FILTER", value_name = "FILTER")]
    pub log_filter: Option<String>,
    /// Development mode: unauthenticated publishing on the public listener (demo page).
    #[arg(long, env = "HERALD_DEV", num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    pub dev: Option<bool>,
    /// SSE heartbeat interval, e.g. `15s`.
    #[arg(long, env = "HERALD_SSE_HEARTBEAT", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub sse_heartbeat: Option<Duration>,
    /// WebSocket ping interval, e.g. `30s` (clients may ask for their own within bounds).
    #[arg(long, env = "HERALD_WS_PING_INTERVAL", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub ws_ping_interval: Option<Duration>,
    /// Longest a long-poll request is held when nothing arrives, e.g. `25s`.
    #[arg(long, env = "HERALD_POLL_TIMEOUT", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub poll_timeout: Option<Duration>,
    /// Messages kept per topic for resume (0: none).
    #[arg(long, env = "HERALD_HISTORY_LEN", value_name = "N")]
    pub history_len: Option<usize>,
    /// Connections on the public listener at once.
    #[arg(long, env = "HERALD_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,
    /// Connections from one client address at once.
    #[arg(long, env = "HERALD_MAX_CONNECTIONS_PER_ADDRESS", value_name = "N")]
    pub max_connections_per_address: Option<u32>,
    /// The runtime's worker threads (0: one per CPU).
    #[arg(long, env = "HERALD_WORKER_THREADS", value_name = "N")]
    pub worker_threads: Option<usize>,
    /// Shutdown grace period, e.g. `10s`.
    #[arg(long, env = "HERALD_SHUTDOWN_GRACE", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub shutdown_grace: Option<Duration>,
    /// Lag policy: recover_or_notify, recover_or_disconnect or disconnect.
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
    /// How Redis is deployed: single, sentinel or cluster.
    #[arg(long, env = "HERALD_REDIS_MODE", value_name = "MODE")]
    pub redis_mode: Option<RedisMode>,
    /// How a node receives the cluster's messages: interest (only the log's partitions it
    /// has subscribers for) or broadcast (everything).
    #[arg(long, env = "HERALD_CLUSTER_ROUTING", value_name = "MODE")]
    pub cluster_routing: Option<Routing>,
    /// Kafka bootstrap servers enabling the Kafka bridge, e.g. `127.0.0.1:9092`.
    #[arg(long, env = "HERALD_KAFKA_BROKERS", value_name = "HOSTS")]
    pub kafka_brokers: Option<String>,
    /// Kafka topics to consume, comma-separated.
    #[arg(
        long,
        env = "HERALD_KAFKA_TOPICS",
        value_name = "TOPICS",
        value_delimiter = ','
    )]
    pub kafka_topics: Option<Vec<String>>,
    /// With Redis and Kafka both configured, the Herald topic prefixes Kafka carries,
    /// comma-separated ("" for all); Redis carries the rest.
    #[arg(
        long,
        env = "HERALD_KAFKA_PREFIXES",
        value_name = "PREFIXES",
        value_delimiter = ','
    )]
    pub kafka_prefixes: Option<Vec<String>>,
    /// `--kafka-prefixes`' former name, still read (deprecated: a warning at start; the new
    /// name wins when both are given).
    #[arg(
        long,
        env = "HERALD_KAFKA_FEEDS",
        value_name = "PREFIXES",
        value_delimiter = ',',
        hide = true
    )]
    pub kafka_feeds: Option<Vec<String>>,
    /// This node's id in the cluster.
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
    /// Browser origins allowed for WebSocket and CORS, comma-separated.
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
    /// URL of the connect hook (`http://…` or `https://…`): the application's backend decides who connects.
    #[arg(
        long,
        env = "HERALD_HOOKS_CONNECT_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub hooks_connect_url: Option<String>,
    /// URL of the subscribe hook.
    #[arg(
        long,
        env = "HERALD_HOOKS_SUBSCRIBE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub hooks_subscribe_url: Option<String>,
    /// URL of the publish hook.
    #[arg(
        long,
        env = "HERALD_HOOKS_PUBLISH_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub hooks_publish_url: Option<String>,
    /// URL of the refresh hook.
    #[arg(
        long,
        env = "HERALD_HOOKS_REFRESH_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub hooks_refresh_url: Option<String>,
    /// What an unavailable hook means: deny or allow (the token rules decide).
    #[arg(long, env = "HERALD_HOOKS_ON_UNAVAILABLE", value_name = "POLICY")]
    pub hooks_on_unavailable: Option<super::OnUnavailable>,
    /// CA certificates (PEM) trusted for `https://` hooks besides the system's trust store.
    #[arg(long, env = "HERALD_HOOKS_CA_FILE", value_name = "FILE")]
    pub hooks_ca_file: Option<PathBuf>,
    /// Admin listener access (keys, open /metrics, insecure).
    #[command(flatten)]
    pub admin: admin::AdminArgs,
    /// Traces of messages (OpenTelemetry).
    #[command(flatten)]
    pub telemetry: telemetry::TelemetryArgs,
    /// Print the effective configuration as TOML (secrets left out) and exit.
    #[arg(long)]
    pub print_config: bool,
    /// A subcommand instead of serving.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// A listener address (`--listen`, `--admin-listen`): `IP:PORT`, with a hint for what is
/// typed instead (a port alone, a host name).
fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let port = |p: &str| p.parse::<u16>().ok();
    if let Some(p) = port(s).or_else(|| s.strip_prefix(':').and_then(port)) {
        return Err(format!(
            "a port alone is not an address: give HOST:PORT, e.g. 0.0.0.0:{p} (every interface) \
             or 127.0.0.1:{p} (this machine only)"
        ));
    }
    if let Some((host, p)) = s.rsplit_once(':')
        && let Some(p) = port(p)
        && !host.is_empty()
    {
        if host.parse::<std::net::Ipv6Addr>().is_ok() {
            return Err(format!("an IPv6 address goes in brackets: [{host}]:{p}"));
        }
        return Err(format!(
            "{host:?} is not an IP address (host names are not looked up): give HOST:PORT with \
             an IP, e.g. 127.0.0.1:{p} for localhost, 0.0.0.0:{p} for every interface"
        ));
    }
    Err(
        "expected HOST:PORT with an IP address, e.g. 0.0.0.0:8080, 127.0.0.1:8080 or [::]:8080"
            .into(),
    )
}

fn parse_lag_policy(s: &str) -> Result<LagPolicy, String> {
    LagPolicy::deserialize(serde::de::value::StrDeserializer::<serde::de::value::Error>::new(s))
        .map_err(|_| {
            "expected recover_or_notify, recover_or_disconnect, disconnect or coalesce".to_string()
        })
}

/// What `--help` gives as each flag's default, taken from [`Config::default`] (and the same
/// words as the README's flag table, which a test compares).
fn defaults() -> Vec<(&'static str, String)> {
    let d = Config::default();
    let name = |v: &dyn erased::Name| v.name();
    let list = |v: &[String], empty: &str| match v.is_empty() {
        true => empty.to_string(),
        false => v.join(","),
    };
    let duration = |d: Duration| humantime::format_duration(d).to_string();
    vec![
        ("config", "none".into()),
        ("listen", d.listen.to_string()),
        ("admin_listen", d.admin_listen.to_string()),
        ("log_format", name(&d.log_format)),
        ("log_filter", d.log_filter.clone()),
        ("dev", d.dev.to_string()),
        ("sse_heartbeat", duration(d.sse.heartbeat)),
        ("ws_ping_interval", duration(d.ws.ping_interval)),
        ("poll_timeout", duration(d.poll.timeout)),
        ("history_len", d.topics.history_len.to_string()),
        ("max_connections", d.limits.max_connections.to_string()),
        (
            "max_connections_per_address",
            d.limits.max_connections_per_address.to_string(),
        ),
        ("worker_threads", "0 (one per CPU)".into()),
        ("shutdown_grace", duration(d.shutdown.grace)),
        ("lag_policy", name(&d.lag_policy)),
        ("redis_url", "none (single node)".into()),
        ("redis_mode", name(&d.cluster.redis_mode)),
        ("cluster_routing", name(&d.cluster.routing)),
        ("kafka_brokers", "none".into()),
        ("kafka_topics", list(&d.cluster.kafka_topics, "none")),
        (
            "kafka_prefixes",
            list(
                &d.cluster.kafka_prefixes,
                "none (needed with both Redis and Kafka)",
            ),
        ),
        ("node_id", "random".into()),
        ("auth_hs256_secret", "none".into()),
        ("auth_api_keys", list(&d.auth.api_keys, "none")),
        ("auth_allowed_origins", list(&d.auth.allowed_origins, "any")),
        ("tls_cert", "none (plain HTTP)".into()),
        ("tls_key", "none".into()),
        ("hooks_connect_url", "none".into()),
        ("hooks_subscribe_url", "none".into()),
        ("hooks_publish_url", "none".into()),
        ("hooks_refresh_url", "none".into()),
        ("hooks_on_unavailable", name(&d.hooks.on_unavailable)),
        ("hooks_ca_file", "none (the system's trust store)".into()),
        (
            "admin_api_keys",
            list(&d.admin.api_keys, "none (required off loopback)"),
        ),
        ("admin_public_metrics", d.admin.public_metrics.to_string()),
        ("admin_insecure", d.admin.insecure.to_string()),
        ("otlp_endpoint", "none (tracing off)".into()),
        ("otlp_protocol", name(&d.telemetry.otlp_protocol)),
        (
            "trace_sample_ratio",
            d.telemetry.trace_sample_ratio.to_string(),
        ),
    ]
}

/// Serialized names of the configuration's enums (`recover_or_notify`, `single`, `text`).
mod erased {
    pub(super) trait Name {
        fn name(&self) -> String;
    }

    impl<T: serde::Serialize> Name for T {
        fn name(&self) -> String {
            serde_json::to_value(self)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        }
    }
}

impl Cli {
    /// Parses the process's arguments, with each flag's default in `--help`.
    pub fn parse_args() -> Result<Self, clap::Error> {
        Self::parse_from_args(std::env::args_os())
    }

    /// Parses `args` (the first is the program name), with each flag's default in `--help`.
    pub fn parse_from_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let mut command = Self::command();
        for (id, default) in defaults() {
            command = command.mut_arg(id, |arg| {
                let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
                let arg = arg.help(format!("{help} [default: {default}]"));
                match arg.get_long_help().map(ToString::to_string) {
                    Some(long) => arg.long_help(format!("{long} [default: {default}]")),
                    None => arg,
                }
            });
        }
        let matches = command.try_get_matches_from(args)?;
        Self::from_arg_matches(&matches)
    }

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
        if let Some(v) = self.ws_ping_interval {
            config.ws.ping_interval = v;
        }
        if let Some(v) = self.poll_timeout {
            config.poll.timeout = v;
        }
        if let Some(v) = self.history_len {
            config.topics.history_len = v;
        }
        if let Some(v) = self.max_connections {
            config.limits.max_connections = v;
        }
        if let Some(v) = self.max_connections_per_address {
            config.limits.max_connections_per_address = v;
        }
        if let Some(v) = self.worker_threads {
            config.worker_threads = v;
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
        if let Some(v) = self.cluster_routing {
            config.cluster.routing = v;
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
        if let Some(v) = self.kafka_prefixes.as_ref().or(self.kafka_feeds.as_ref()) {
            config.cluster.kafka_prefixes = v.clone();
        }
        for (flag, url) in [
            (&self.hooks_connect_url, &mut config.hooks.connect_url),
            (&self.hooks_subscribe_url, &mut config.hooks.subscribe_url),
            (&self.hooks_publish_url, &mut config.hooks.publish_url),
            (&self.hooks_refresh_url, &mut config.hooks.refresh_url),
        ] {
            if let Some(v) = flag {
                *url = Some(v.clone());
            }
        }
        if let Some(v) = self.hooks_on_unavailable {
            config.hooks.on_unavailable = v;
        }
        if let Some(v) = &self.hooks_ca_file {
            config.hooks.ca_file = Some(v.clone());
        }
        config
            .cluster
            .kafka_properties
            .extend(super::secrets::from_env(std::env::vars()));
        self.admin.apply(&mut config.admin);
        (self.telemetry).apply(&mut config.telemetry, std::env::vars());
        Ok(config)
    }

    /// `config` as `--print-config` prints it: TOML, secrets left out, and a node id picked
    /// at random by this start (neither `--node-id`, `HERALD_NODE_ID` nor the file set one)
    /// commented out, so that the printed file is safe to give every node of a cluster: each
    /// start from it picks its own.
    pub fn printed_config(&self, config: &Config) -> anyhow::Result<String> {
        let text = toml::to_string(config).context("cannot print the configuration")?;
        if self.pins_node_id() {
            return Ok(text);
        }
        let mut section = "";
        let mut printed = String::with_capacity(text.len() + 100);
        for line in text.lines() {
            if line.starts_with('[') {
                section = line;
            }
            if section == "[cluster]" && line.starts_with("node_id = ") {
                printed.push_str(NODE_ID_UNSET);
            } else {
                printed.push_str(line);
            }
            printed.push('\n');
        }
        Ok(printed)
    }

    /// Whether the node id is set (flag, environment or file) rather than picked at random.
    fn pins_node_id(&self) -> bool {
        self.node_id.is_some() || self.file_sets("cluster", "node_id")
    }

    /// Whether the configuration file sets `key` in `[section]`.
    fn file_sets(&self, section: &str, key: &str) -> bool {
        self.config.as_ref().is_some_and(|path| {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|text| text.parse::<toml::Table>().ok())
                .and_then(|file| file.get(section)?.get(key).cloned())
                .is_some()
        })
    }

    /// The former names this start was given (flag, environment or file), each with the name
    /// that replaced it: they still work, and the node says so once at start.
    pub fn deprecated_names(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.kafka_feeds.is_some() {
            out.push(
                "--kafka-feeds / HERALD_KAFKA_FEEDS is deprecated; use --kafka-prefixes / \
                 HERALD_KAFKA_PREFIXES"
                    .to_string(),
            );
        }
        if self.file_sets("cluster", "kafka_feeds") {
            out.push(
                "cluster.kafka_feeds in the configuration file is deprecated; use \
                 cluster.kafka_prefixes"
                    .to_string(),
            );
        }
        out
    }

    /// The `HERALD_*` variables among `vars` that set nothing (a typo, or a setting that has
    /// no environment twin), each with the variable it is probably meant to be. The known
    /// ones are the flags' twins as clap declares them, and `HERALD_KAFKA_PROPERTIES_*`.
    pub fn unknown_env_vars(
        vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    ) -> Vec<(String, Option<String>)> {
        let known = env_twins();
        vars.into_iter()
            .filter_map(|(name, _)| name.into_string().ok())
            .filter(|name| name.starts_with("HERALD_"))
            .filter(|name| !name.starts_with(super::secrets::ENV_PREFIX))
            .filter(|name| !known.contains(name))
            .map(|name| {
                let closest = known
                    .iter()
                    .map(|k| (edit_distance(&name, k), k))
                    .min()
                    .filter(|(d, _)| *d <= 3)
                    .map(|(_, k)| k.clone());
                (name, closest)
            })
            .collect()
    }
}

/// What `--print-config` prints instead of a node id picked at random.
const NODE_ID_UNSET: &str = "# node_id = \"...\"    # unset: each start picks a random id (safe to copy to every node); \
     set a distinct one per node to keep it across restarts";

/// Every `HERALD_*` environment variable a flag reads, the subcommands' included.
fn env_twins() -> Vec<String> {
    fn walk(command: &clap::Command, out: &mut Vec<String>) {
        out.extend(
            command
                .get_arguments()
                .filter_map(|arg| arg.get_env()?.to_str().map(str::to_owned)),
        );
        command.get_subcommands().for_each(|sub| walk(sub, out));
    }
    let mut out = Vec::new();
    walk(&Cli::command(), &mut out);
    out
}

/// Levenshtein distance between `a` and `b` (ASCII names).
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// Subcommands of `herald`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Check a running gateway: exit 0 when its admin listener's /readyz answers 200,
    /// non-zero with the reason otherwise (container HEALTHCHECK; needs no other tool).
    Health(HealthArgs),
}

/// Flags of `herald health`.
#[derive(Debug, clap::Args)]
pub struct HealthArgs {
    /// Admin listener to ask: `http://HOST:PORT[/PATH]` or `HOST:PORT` [default: the
    /// configured admin_listen (HERALD_ADMIN_LISTEN, --config), 0.0.0.0 or :: asked on
    /// loopback; path /readyz].
    #[arg(long, value_name = "URL")]
    pub admin: Option<String>,
    /// Give up after this long, e.g. `3s`.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
}
