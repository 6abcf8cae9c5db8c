//! Command-line interface. Every flag's doc comment is its `--help` text.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::publish::PublishMode;

/// Load, soak and benchmark tool for push servers: Herald, or any SSE / WebSocket server.
#[derive(Debug, Parser)]
#[command(name = "herald-loadgen", version, about, long_about = None)]
pub(crate) struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// N SSE subscribers (raw HTTP/1.1) spread over K topics, with an optional built-in publisher.
    Sse(SseArgs),
    /// N WebSocket subscribers speaking Herald's JSON protocol (or --raw: count any frame).
    Ws(WsArgs),
    /// N WebSocket clients sending fixed-size frames at a total rate, timing the echo.
    Echo(EchoArgs),
    /// HTTP publishing at a fixed rate or in token-bucket bursts.
    Publish(PublishCmdArgs),
    /// Subscribers that stay, plus X clients per second that connect and leave.
    Churn(ChurnArgs),
    /// Raw floor: CPU cost of one small write per socket on loopback, for comparison.
    Floor(FloorArgs),
    /// Hostile clients (malformed, oversized, slow, forged) while good SSE subscribers receive.
    Hostile(Box<HostileArgs>),
    /// Chaos soak: mixed-transport clients that reconnect and switch, faults injected on a
    /// seeded schedule, every client's stream checked (see the README, `chaos`).
    Chaos(Box<crate::chaos::args::ChaosArgs>),
    /// Internal: run as a worker process of a coordinator (JSON lines on stdin/stdout).
    #[command(name = "__worker", hide = true)]
    Worker,
}

fn duration(s: &str) -> Result<Duration, humantime::DurationError> {
    humantime::parse_duration(s)
}

/// Which servers to hit.
#[derive(Debug, Clone, Args)]
pub(crate) struct TargetArgs {
    /// Server URL; repeat for several nodes (connections are spread round-robin).
    /// An empty path means Herald's default (/v1/sse or /v1/ws).
    #[arg(long = "url", required = true)]
    pub urls: Vec<String>,
    /// Allow targets outside 127.0.0.0/8, ::1 and localhost.
    #[arg(long)]
    pub allow_non_loopback: bool,
}

/// How many connections and how fast.
#[derive(Debug, Clone, Args)]
pub(crate) struct ConnArgs {
    /// Number of client connections.
    #[arg(long, default_value_t = 100)]
    pub conns: u64,
    #[command(flatten)]
    pub pace: PaceArgs,
}

/// How client connections are opened and read: the ramp, the timeouts, the sources.
#[derive(Debug, Clone, Args)]
pub(crate) struct PaceArgs {
    /// New connections per second during the ramp (0: as fast as --max-pending allows).
    #[arg(long, default_value_t = 1000.0)]
    pub ramp: f64,
    /// Timeout for connect + handshake (+ subscribe) of one client (`hostile`: also the
    /// attackers' TCP connect).
    #[arg(long, value_parser = duration, default_value = "10s")]
    pub connect_timeout: Duration,
    /// Most connection attempts in progress at once (per worker).
    #[arg(long, default_value_t = 1000)]
    pub max_pending: usize,
    /// Source addresses to bind: a count (N addresses from 127.0.0.1), a range
    /// (127.0.0.1-127.0.0.20), or a list. Default: one per 20,000 sockets for IPv4 loopback targets.
    #[arg(long)]
    pub source_ips: Option<String>,
    /// Read buffer per connection, bytes.
    #[arg(long, default_value_t = 4096)]
    pub read_buffer: usize,
}

/// Run length, processes and outputs.
#[derive(Debug, Clone, Args)]
pub(crate) struct RunArgs {
    /// Length of the measured phase (after the ramp), e.g. 60s, 5m.
    #[arg(long, value_parser = duration, default_value = "10s")]
    pub duration: Duration,
    /// Time after the measured phase for in-flight messages to arrive.
    #[arg(long, value_parser = duration, default_value = "2s")]
    pub drain: Duration,
    /// Worker processes (default: automatic, one process per --sockets-per-process sockets;
    /// with a small run everything stays in this process).
    #[arg(long)]
    pub workers: Option<usize>,
    /// Socket budget of one process (the hard open-files limit here is 20,000).
    #[arg(long, default_value_t = 18_000)]
    pub sockets_per_process: u64,
    #[command(flatten)]
    pub report: ReportArgs,
    /// CPU-µs per write measured by `floor`, to report server cost as a ratio to it.
    #[arg(long)]
    pub floor_us: Option<f64>,
    /// Exit with status 3 when the verdict lists problems (missing, duplicates, failures).
    #[arg(long)]
    pub strict: bool,
    /// Largest SSE line / event / WebSocket message accepted, bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_event: usize,
}

/// What a run samples and where its report goes.
#[derive(Debug, Clone, Args)]
pub(crate) struct ReportArgs {
    /// PID of a server process to sample (CPU, RSS); repeatable.
    #[arg(long = "server-pid")]
    pub server_pids: Vec<u32>,
    /// Write the JSON report to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write a self-contained HTML report (inline SVG charts) to this file.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// Interval of timeline samples and progress updates.
    #[arg(long, value_parser = duration, default_value = "1s")]
    pub tick: Duration,
}

/// Topics.
#[derive(Debug, Clone, Args)]
pub(crate) struct TopicArgs {
    /// Number of topics; connection i subscribes to topic i % K (0: no topic parameter).
    #[arg(long, default_value_t = 1)]
    pub topics: u32,
    /// Topics per connection (consecutive topics from i % K).
    #[arg(long, default_value_t = 1)]
    pub topics_per_conn: u32,
    /// Topic name prefix: topic i is named {prefix}{i}.
    #[arg(long, default_value = "load-")]
    pub topic_prefix: String,
    /// SSE query parameter naming a topic.
    #[arg(long, default_value = "topic")]
    pub topic_param: String,
    /// Ask Herald for Fossil deltas (`delta=fossil` on SSE, which implies its JSON form;
    /// `"delta":"fossil"` in the WebSocket `subscribe`) and apply them: the topics must be in a
    /// namespace with `delta = "fossil"` (e.g. `--topic-prefix d:load-`). A delta that does
    /// not apply is counted (`delta_apply`) and its message is not delivered.
    #[arg(long)]
    pub delta: bool,
}

/// The built-in publisher.
#[derive(Debug, Clone, Args)]
pub(crate) struct PubArgs {
    /// Herald publish URL (admin listener), e.g. http://127.0.0.1:9090; repeatable.
    /// Without it nothing is published and deliveries are only counted.
    #[arg(long = "publish-url")]
    pub publish_urls: Vec<String>,
    /// Messages per second, over all topics.
    #[arg(long, default_value_t = 100.0)]
    pub publish_rate: f64,
    /// With several publish URLs: `all` sends each message to every node (unbridged nodes),
    /// `round-robin` sends message i to node i % n (bridged nodes).
    #[arg(long, value_enum, default_value_t = PublishMode::All)]
    pub publish_mode: PublishMode,
    /// Token-bucket capacity for bursty publishing (default: evenly paced).
    #[arg(long)]
    pub publish_burst: Option<f64>,
    /// Size of each message's `data` JSON object, bytes.
    #[arg(long, default_value_t = 100)]
    pub payload_size: usize,
    /// Concurrent publish requests per publish URL.
    #[arg(long, default_value_t = 8)]
    pub publish_concurrency: usize,
    /// Timeout of one publish request.
    #[arg(long, value_parser = duration, default_value = "5s")]
    pub publish_timeout: Duration,
    /// Optional `event` name of published messages.
    #[arg(long)]
    pub event: Option<String>,
}

/// `sse`.
#[derive(Debug, Clone, Args)]
pub(crate) struct SseArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub topics: TopicArgs,
    #[command(flatten)]
    pub publish: PubArgs,
}

/// `ws`.
#[derive(Debug, Clone, Args)]
pub(crate) struct WsArgs {
    #[command(flatten)]
    pub common: SseArgs,
    /// Raw mode: no subscribe, count every frame; latency from a `ts` field when present.
    #[arg(long)]
    pub raw: bool,
    /// Raw mode: a text frame to send after the handshake.
    #[arg(long)]
    pub init_frame: Option<String>,
    /// Time allowed for the `subscribed` acknowledgement.
    #[arg(long, value_parser = duration, default_value = "10s")]
    pub subscribe_timeout: Duration,
}

/// `echo`.
#[derive(Debug, Clone, Args)]
pub(crate) struct EchoArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
    #[command(flatten)]
    pub run: RunArgs,
    /// Echo requests per second, over all clients.
    #[arg(long, default_value_t = 1000.0)]
    pub rate: f64,
    /// Frame size, bytes.
    #[arg(long, default_value_t = 256)]
    pub size: usize,
    /// Raw mode: send plain text frames to a generic echo server.
    #[arg(long)]
    pub raw: bool,
}

/// Transport of churn clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Transport {
    /// SSE subscribers.
    Sse,
    /// Herald WebSocket subscribers.
    Ws,
}

/// `churn`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ChurnArgs {
    #[command(flatten)]
    pub common: SseArgs,
    /// Transport of all clients.
    #[arg(long, value_enum, default_value_t = Transport::Sse)]
    pub transport: Transport,
    /// Churn clients connecting (and, after --churn-hold, leaving) per second.
    #[arg(long, default_value_t = 10.0)]
    pub churn_rate: f64,
    /// How long a churn client stays connected.
    #[arg(long, value_parser = duration, default_value = "2s")]
    pub churn_hold: Duration,
    /// Time allowed for the `subscribed` acknowledgement (ws).
    #[arg(long, value_parser = duration, default_value = "10s")]
    pub subscribe_timeout: Duration,
}

/// `publish`.
#[derive(Debug, Clone, Args)]
pub(crate) struct PublishCmdArgs {
    /// Publish URL (e.g. http://127.0.0.1:9090); repeatable.
    #[arg(long = "url", required = true)]
    pub urls: Vec<String>,
    /// Allow targets outside loopback.
    #[arg(long)]
    pub allow_non_loopback: bool,
    /// Messages per second (0: as fast as --concurrency allows).
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// Token-bucket capacity: bursts of up to this many messages (default: evenly paced).
    #[arg(long)]
    pub burst: Option<f64>,
    /// Concurrent requests per URL.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// With several URLs: all, or round-robin.
    #[arg(long, value_enum, default_value_t = PublishMode::RoundRobin)]
    pub mode: PublishMode,
    /// How long to publish.
    #[arg(long, value_parser = duration, default_value = "10s")]
    pub duration: Duration,
    /// Number of topics.
    #[arg(long, default_value_t = 1)]
    pub topics: u32,
    /// Topic name prefix.
    #[arg(long, default_value = "load-")]
    pub topic_prefix: String,
    /// Size of each message's `data` JSON object, bytes.
    #[arg(long, default_value_t = 100)]
    pub payload_size: usize,
    /// Optional `event` name.
    #[arg(long)]
    pub event: Option<String>,
    /// Timeout of one request.
    #[arg(long, value_parser = duration, default_value = "5s")]
    pub timeout: Duration,
    #[command(flatten)]
    pub report: ReportArgs,
    /// Exit with status 3 when any request failed.
    #[arg(long)]
    pub strict: bool,
}

/// `hostile`.
#[derive(Debug, Clone, Args)]
pub(crate) struct HostileArgs {
    /// Public listener URL(s) of the server (attacks use Herald's paths /v1/sse and /v1/ws on
    /// it; good clients use the URL as `sse` does).
    #[arg(long = "url", required = true)]
    pub urls: Vec<String>,
    /// Allow targets outside 127.0.0.0/8, ::1 and localhost.
    #[arg(long)]
    pub allow_non_loopback: bool,
    /// Attacker loops: each opens a connection per attack, taking the catalogue in turn.
    #[arg(long, default_value_t = 200)]
    pub conns: usize,
    /// Attacks to run: `default`, `all` (adds the opt-in ones), or a comma-separated list of
    /// names; `-name` removes one (`default,-slowloris`).
    #[arg(long, default_value = "default")]
    pub attacks: String,
    /// Time bound of one attack, connect to answer.
    #[arg(long, value_parser = duration, default_value = "5s")]
    pub attack_timeout: Duration,
    /// Slowloris: time between trickled bytes (the head never completes).
    #[arg(long, value_parser = duration, default_value = "1s")]
    pub slowloris_every: Duration,
    /// Slowloris: give up after this long without an answer (the server's header timeout is
    /// 10 s by default, answered 408).
    #[arg(long, value_parser = duration, default_value = "15s")]
    pub slowloris_max: Duration,
    /// Most slow attacks in progress at once (default: a tenth of --conns).
    #[arg(long)]
    pub max_slow: Option<usize>,
    /// Source addresses of attacker sockets (count, range or list, as --source-ips). Default
    /// for IPv4 loopback targets: 127.0.0.2-127.0.0.65, apart from the good clients' address.
    #[arg(long)]
    pub attack_source_ips: Option<String>,
    /// An Origin the server refuses (its auth.allowed_origins is set): enables ws_bad_origin.
    #[arg(long)]
    pub origin_forbidden: Option<String>,
    /// The server's admin listener (Herald: http://127.0.0.1:9090): enables admin_cross_site
    /// and the admin variants of bad_limit.
    #[arg(long)]
    pub admin_url: Option<String>,
    /// The server runs the soak's hooks (deploy/hostile-soak.sh: a connect hook; a subscribe
    /// hook deciding `rooms:` and denying `rooms:secret`, unavailable for `secret:` with
    /// hooks.on_unavailable = "allow"): enables ws_cookie_cross_site, hook_unavailable_allow
    /// and pattern_past_hook.
    #[arg(long)]
    pub hooked: bool,
    /// The server's public listener over TLS (https://127.0.0.1:8443), where it serves HTTP/2
    /// (ALPN h2): enables the h2_* attacks and a good HTTP/2 client's probe. Needs --tls-ca.
    #[arg(long, requires = "tls_ca")]
    pub h2_url: Option<String>,
    /// PEM file of the CA that signed the certificate of --h2-url.
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
    /// Time between a good client's subscriptions to a new wildcard pattern while
    /// pattern_lockout runs (each must be accepted), and between a good HTTP/2 client's
    /// requests while an h2_* attack runs.
    #[arg(long, value_parser = duration, default_value = "1s")]
    pub probe_every: Duration,
    /// The server's HS256 secret, if known: expired tokens are then validly signed, so that only
    /// the expiry is wrong.
    #[arg(long, env = "HERALD_LOADGEN_JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,
    /// The server's ws.max_message_size (oversized frames are made larger than this).
    #[arg(long, default_value_t = 64 * 1024)]
    pub max_ws_message: usize,
    /// Size of the huge Last-Event-ID, bytes.
    #[arg(long, default_value_t = 2 << 20)]
    pub huge_bytes: usize,
    /// Pings in one ws_ping_flood attack.
    #[arg(long, default_value_t = 10_000)]
    pub ping_flood: usize,
    /// Health URL to GET during the attacks (Herald: the admin listener's /healthz).
    #[arg(long)]
    pub health_url: Option<String>,
    /// Time between health checks.
    #[arg(long, value_parser = duration, default_value = "1s")]
    pub health_every: Duration,
    /// Time bound of one health check.
    #[arg(long, value_parser = duration, default_value = "2s")]
    pub health_timeout: Duration,
    /// Start of the attack phase left out of the memory start figure (at most a quarter of
    /// --duration).
    #[arg(long, value_parser = duration, default_value = "30s")]
    pub warmup: Duration,
    /// Flag server RSS growth (mean of the first to the last minute) above this many MiB.
    #[arg(long)]
    pub max_rss_growth_mb: Option<f64>,
    /// Well-behaved SSE subscribers running alongside (0: none).
    #[arg(long, default_value_t = 100)]
    pub good_conns: u64,
    /// How the good clients connect.
    #[command(flatten)]
    pub pace: PaceArgs,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub topics: TopicArgs,
    #[command(flatten)]
    pub publish: PubArgs,
}

/// `floor`.
#[derive(Debug, Clone, Args)]
pub(crate) struct FloorArgs {
    /// Loopback connections written to.
    #[arg(long, default_value_t = 1000)]
    pub conns: u64,
    /// How long to write.
    #[arg(long, value_parser = duration, default_value = "5s")]
    pub duration: Duration,
    /// Bytes per write (an SSE event of about this size).
    #[arg(long, default_value_t = 100)]
    pub size: usize,
    /// Write the JSON result here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_a_full_sse_command() {
        let cli = Cli::try_parse_from([
            "herald-loadgen",
            "sse",
            "--url",
            "http://127.0.0.1:8080",
            "--url",
            "http://127.0.0.1:8081",
            "--conns",
            "5000",
            "--duration",
            "5m",
            "--publish-url",
            "http://127.0.0.1:9090",
            "--publish-mode",
            "round-robin",
            "--server-pid",
            "42",
        ])
        .unwrap();
        let Command::Sse(a) = cli.command else {
            panic!("not sse")
        };
        assert_eq!(a.target.urls.len(), 2);
        assert_eq!(a.conn.conns, 5000);
        assert_eq!(a.run.duration, Duration::from_secs(300));
        assert_eq!(a.publish.publish_mode, PublishMode::RoundRobin);
        assert_eq!(a.run.report.server_pids, vec![42]);
    }

    #[test]
    fn parses_a_hostile_command() {
        let cli = Cli::try_parse_from([
            "herald-loadgen",
            "hostile",
            "--url",
            "http://127.0.0.1:8080",
            "--good-conns",
            "1000",
            "--publish-url",
            "http://127.0.0.1:9090",
            "--publish-rate",
            "10",
            "--duration",
            "5m",
            "--attacks",
            "default,-slowloris",
            "--health-url",
            "http://127.0.0.1:9090/healthz",
        ])
        .unwrap();
        let Command::Hostile(a) = cli.command else {
            panic!("not hostile")
        };
        assert_eq!((a.conns, a.good_conns), (200, 1000));
        assert_eq!(a.run.duration, Duration::from_secs(300));
        assert_eq!(a.publish.publish_rate, 10.0);
        assert_eq!(a.attack_timeout, Duration::from_secs(5));
    }
}
