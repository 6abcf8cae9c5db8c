//! The report: one serde structure written as JSON, rendered as text and as HTML.
//!
//! Field meanings are documented here and in the crate README; the JSON keys are the field
//! names.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::histogram::Percentiles;
use crate::seq::SeqOutcome;

/// A complete run report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Report {
    /// Always `herald-loadgen`.
    pub tool: String,
    /// Loadgen version.
    pub version: String,
    /// Subcommand (`sse`, `ws`, `echo`, `publish`, `churn`, `hostile`).
    pub command: String,
    /// Command line.
    pub args: Vec<String>,
    /// Start time, unix milliseconds.
    pub started_unix_ms: u64,
    /// Settings in effect.
    pub settings: Settings,
    /// Phase lengths.
    pub phases: Phases,
    /// Connection counts and connect times (absent for `publish`).
    pub connections: Option<Connections>,
    /// Delivery accounting (subscriber runs).
    pub delivery: Option<Delivery>,
    /// Publisher results (when something was published).
    pub publish: Option<PublishReport>,
    /// Echo results (`echo`).
    pub echo: Option<EchoReport>,
    /// Churn results (`churn`).
    pub churn: Option<ChurnReport>,
    /// Hostile clients (`hostile`).
    #[serde(default)]
    pub hostile: Option<HostileReport>,
    /// Errors by kind, all sources together.
    pub errors: BTreeMap<String, u64>,
    /// Sampled server processes.
    pub servers: Vec<ServerReport>,
    /// All sampled servers together.
    pub servers_total: Option<ServersTotal>,
    /// The loadgen's own cost.
    pub loadgen: LoadgenReport,
    /// Floor CPU-µs per write given with --floor-us.
    pub floor_us_per_write: Option<f64>,
    /// One point per tick.
    pub timeline: Vec<TimelinePoint>,
    /// Pass/fail summary.
    pub verdict: Verdict,
}

/// Settings of the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Settings {
    /// Client target URLs.
    pub targets: Vec<String>,
    /// Publish URLs.
    pub publish_targets: Vec<String>,
    /// Main connections requested.
    pub conns: u64,
    /// Ramp rate (connections/s, 0 = unlimited).
    pub ramp_per_sec: f64,
    /// Measured phase length (s).
    pub duration_secs: f64,
    /// Drain length (s).
    pub drain_secs: f64,
    /// Topics.
    pub topics: u32,
    /// Topics per connection.
    pub topics_per_conn: u32,
    /// Publish rate target (messages/s).
    pub publish_rate: Option<f64>,
    /// Publish fan-out mode.
    pub publish_mode: Option<String>,
    /// Payload (data object) size in bytes.
    pub payload_size: Option<usize>,
    /// Worker processes used (0: all in the coordinator's process).
    pub worker_processes: usize,
    /// Workers (in-process or processes).
    pub workers: usize,
    /// Source addresses used.
    pub source_ips: usize,
    /// Raw mode.
    pub raw: bool,
    /// Churn rate (clients/s).
    pub churn_rate: Option<f64>,
    /// Churn hold time (s).
    pub churn_hold_secs: Option<f64>,
    /// Echo rate (requests/s) and frame size.
    pub echo_rate: Option<f64>,
    /// Echo frame size.
    pub echo_size: Option<usize>,
}

/// Phase lengths, seconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Phases {
    /// Ramp: first connect attempt until every attempt was resolved.
    pub ramp_secs: f64,
    /// Measured phase (publishing / echoing / churning).
    pub measured_secs: f64,
    /// Drain after the measured phase.
    pub drain_secs: f64,
    /// Whole run.
    pub total_secs: f64,
    /// The run was interrupted (Ctrl-C) or a deadline hit.
    pub interrupted: bool,
}

/// Main connections.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Connections {
    /// Requested.
    pub target: u64,
    /// Attempted.
    pub attempted: u64,
    /// Became ready (subscribed).
    pub connected: u64,
    /// Never became ready.
    pub failed: u64,
    /// Ready, then ended before the run did.
    pub dropped: u64,
    /// Highest number open at once (sum of workers' peaks).
    pub peak_open: u64,
    /// Ready before the measured phase (the accounted cohort).
    pub cohort: u64,
    /// Ready after the measured phase began (not accounted).
    pub late_joiners: u64,
    /// connected / ramp_secs.
    pub connect_rate_per_sec: f64,
    /// Connect-to-ready time.
    pub connect_ms: Percentiles,
}

/// Delivery accounting.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Delivery {
    /// Whether expected/missing are computed (a built-in publisher ran).
    pub accounted: bool,
    /// Messages issued by the publisher.
    pub published: u64,
    /// Of those, messages with a failed publish request (not expected).
    pub publish_failed: u64,
    /// Sequence accounting summed over the cohort's subscriptions: `expected` is Σ over topics
    /// of (messages published OK × cohort subscribers of the topic); without a publisher
    /// `delivered` counts distinct receipts. Its fields stand at this level of the JSON.
    #[serde(flatten)]
    pub outcome: SeqOutcome,
    /// delivered / expected.
    pub delivery_ratio: Option<f64>,
    /// Every message receipt by main clients (duplicates and late joiners included).
    pub receipts: u64,
    /// Receipts without a sequence number.
    pub untracked: u64,
    /// Receipts by churn clients.
    pub churn_receipts: u64,
    /// Loss notifications (herald.lost / lost frames).
    pub lost_events: u64,
    /// Receipts (main + churn) per second of measured phase + drain.
    pub receipts_per_sec: f64,
    /// Publish→receive latency.
    pub latency_ms: Percentiles,
    /// Per topic.
    pub per_topic: Vec<TopicReport>,
}

/// Accounting of one topic.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct TopicReport {
    /// Topic name.
    pub topic: String,
    /// Cohort subscribers.
    pub subscribers: u64,
    /// Of those, dropped early.
    pub dropped: u64,
    /// Messages issued to the topic.
    pub published: u64,
    /// Of those, failed publishes.
    pub publish_failed: u64,
    /// Expected deliveries.
    pub expected: u64,
    /// Delivered.
    pub delivered: u64,
    /// Missing.
    pub missing: u64,
    /// Duplicates.
    pub duplicates: u64,
    /// Loss notifications.
    pub lost_events: u64,
}

/// Publisher results.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct PublishReport {
    /// Target rate (messages/s).
    pub target_rate: f64,
    /// Messages issued.
    pub messages: u64,
    /// Requests made (messages × nodes in `all` mode).
    pub requests: u64,
    /// 2xx answers.
    pub ok: u64,
    /// Failed requests.
    pub failed: u64,
    /// ok requests / publishing time.
    pub achieved_qps: f64,
    /// messages issued / publishing time (compare with `target_rate`).
    pub achieved_message_rate: f64,
    /// Answers by status code.
    pub statuses: BTreeMap<String, u64>,
    /// Request latency.
    pub latency_ms: Percentiles,
}

/// Echo results.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct EchoReport {
    /// Target rate (requests/s).
    pub target_rate: f64,
    /// Requests sent.
    pub sent: u64,
    /// Answers received (distinct).
    pub answered: u64,
    /// Requests without an answer at the end of the drain.
    pub unanswered: u64,
    /// Duplicate answers.
    pub duplicates: u64,
    /// answered / measured seconds.
    pub achieved_rate: f64,
    /// Round-trip time.
    pub rtt_ms: Percentiles,
}

/// Churn results.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct ChurnReport {
    /// Target churn rate (clients/s).
    pub rate: f64,
    /// Hold time (s).
    pub hold_secs: f64,
    /// Churn clients started.
    pub attempted: u64,
    /// Became ready.
    pub connected: u64,
    /// Failed to become ready.
    pub failed: u64,
    /// Closed by us.
    pub closed: u64,
    /// connected / measured seconds.
    pub achieved_rate: f64,
    /// Connect-to-ready time of churn clients.
    pub connect_ms: Percentiles,
    /// Messages received by churn clients (not accounted).
    pub receipts: u64,
}

/// One sampled server process.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct ServerReport {
    /// PID.
    pub pid: u32,
    /// Process name.
    pub name: String,
    /// CPU seconds during the measured phase + drain.
    pub cpu_seconds_measured: f64,
    /// cpu_seconds_measured / (wall seconds × machine CPUs).
    pub cpu_fraction_of_machine: f64,
    /// CPU seconds over the whole run.
    pub cpu_seconds_total: f64,
    /// Σ servers' measured CPU-µs / units of work in the same window (see `per`).
    pub cpu_us_per_delivery: Option<f64>,
    /// Unit of `cpu_us_per_delivery`: `delivery`, `echo` or `publish`.
    pub per: String,
    /// cpu_us_per_delivery / floor_us_per_write.
    pub ratio_to_floor: Option<f64>,
    /// RSS before connecting (KiB).
    pub rss_start_kb: u64,
    /// RSS once every client was connected (KiB).
    pub rss_after_connect_kb: u64,
    /// Highest sampled RSS (KiB).
    pub rss_peak_kb: u64,
    /// RSS at the end (KiB).
    pub rss_end_kb: u64,
    /// (rss_after_connect − rss_start) / connected clients, bytes.
    pub rss_growth_per_conn_bytes: Option<f64>,
    /// The process was still alive at the end.
    pub alive_at_end: bool,
}

/// All sampled servers together.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct ServersTotal {
    /// Σ CPU seconds during the measured phase + drain.
    pub cpu_seconds_measured: f64,
    /// Σ CPU as a fraction of the machine.
    pub cpu_fraction_of_machine: f64,
    /// Σ CPU-µs / units of work (see `per`).
    pub cpu_us_per_delivery: Option<f64>,
    /// Unit of `cpu_us_per_delivery`.
    pub per: String,
    /// cpu_us_per_delivery / floor_us_per_write.
    pub ratio_to_floor: Option<f64>,
    /// Σ (rss_after_connect − rss_start) / connected clients, bytes.
    pub rss_growth_per_conn_bytes: Option<f64>,
}

/// The loadgen's own cost.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct LoadgenReport {
    /// CPU seconds of the coordinator and every worker process.
    pub cpu_seconds: f64,
    /// cpu_seconds / (wall seconds × machine CPUs).
    pub cpu_fraction_of_machine: f64,
    /// CPUs of the machine.
    pub machine_cpus: usize,
    /// Soft open-files limit after raising it.
    pub nofile_limit: u64,
}

/// One timeline sample.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct TimelinePoint {
    /// Seconds since the start.
    pub t_secs: f64,
    /// Phase name.
    pub phase: String,
    /// Main connections open.
    pub open: u64,
    /// Receipts per second (main + churn), or echo answers per second.
    pub deliveries_per_sec: f64,
    /// Publish requests per second.
    pub publish_per_sec: f64,
    /// Latency percentiles of this interval.
    pub p50_ms: f64,
    /// 90th.
    pub p90_ms: f64,
    /// 99th.
    pub p99_ms: f64,
    /// 99.9th.
    pub p999_ms: f64,
    /// Max.
    pub max_ms: f64,
    /// Latency samples in this interval (0: the percentiles are meaningless).
    pub latency_samples: u64,
    /// Attacks finished per second (`hostile`).
    #[serde(default)]
    pub attacks_per_sec: f64,
    /// RSS of each sampled server (KiB), in `servers` order.
    pub server_rss_kb: Vec<u64>,
}

/// Hostile clients: attacks, how the server answered, the health of everyone else.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct HostileReport {
    /// Attacker loops.
    pub attackers: usize,
    /// Attacks in the catalogue of this run, in order.
    pub catalogue: Vec<String>,
    /// Time bound of one attack (s).
    pub attack_timeout_secs: f64,
    /// Time bound of one slowloris attack (s).
    pub slowloris_max_secs: f64,
    /// Most slow attacks at once.
    pub max_slow: usize,
    /// Source addresses of attackers.
    pub source_ips: usize,
    /// Attack phase length (s).
    pub secs: f64,
    /// Attacks started.
    pub started: u64,
    /// Attacks that ended with an outcome.
    pub attacks: u64,
    /// attacks / secs.
    pub attacks_per_sec: f64,
    /// Attacks still in progress at the end and abandoned (not in `attacks`).
    pub cancelled_at_end: u64,
    /// Attacks whose outcome was not one the attack expects.
    pub unexpected_total: u64,
    /// All attacks together, by outcome.
    pub by_outcome: BTreeMap<String, u64>,
    /// Per attack.
    pub by_attack: Vec<AttackReport>,
    /// Unexpected outcomes by attack, variant and outcome, most frequent first.
    pub unexpected: Vec<UnexpectedReport>,
    /// Health checks of the admin listener (`--health-url`).
    pub health: Option<HealthReport>,
    /// A good client subscribing to a new wildcard pattern every `--probe-every` while
    /// `pattern_lockout` runs: each must be accepted (200).
    #[serde(default)]
    pub pattern_probe: Option<HealthReport>,
    /// A good HTTP/2 client's request on a fresh connection every `--probe-every` while an
    /// HTTP/2 attack runs (`--h2-url`): each must be answered 200.
    #[serde(default)]
    pub h2_probe: Option<HealthReport>,
    /// Server memory over the attack phase, per `--server-pid`.
    pub memory: Vec<MemoryReport>,
    /// The well-behaved subscribers running alongside.
    pub good_clients: Option<GoodClients>,
}

/// One attack of the catalogue.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct AttackReport {
    /// Attack name.
    pub attack: String,
    /// Attacks that ended with an outcome.
    pub total: u64,
    /// Of those, with an expected outcome.
    pub expected: u64,
    /// Of those, with an unexpected outcome.
    pub unexpected: u64,
    /// Abandoned at the end of the run.
    pub cancelled: u64,
    /// By outcome (`status_431`, `ws_close_1009`, `ws_error_bad_json`, `closed`, `reset`,
    /// `timeout`...).
    pub outcomes: BTreeMap<String, u64>,
    /// Outcomes by variant of the attack.
    pub by_variant: BTreeMap<String, BTreeMap<String, u64>>,
    /// Connect-to-outcome time.
    pub time_ms: Percentiles,
}

/// One kind of unexpected outcome.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct UnexpectedReport {
    /// Attack.
    pub attack: String,
    /// Variant of the attack.
    pub variant: String,
    /// What happened.
    pub outcome: String,
    /// How often.
    pub count: u64,
}

/// Health checks made during the attack.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct HealthReport {
    /// URL.
    pub url: String,
    /// Checks made.
    pub checks: u64,
    /// Answered 200.
    pub ok: u64,
    /// Failed.
    pub failed: u64,
    /// Failures by outcome.
    pub failures: BTreeMap<String, u64>,
    /// Answer time.
    pub latency_ms: Percentiles,
}

/// Server memory during the attack phase (from the per-tick RSS samples).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct MemoryReport {
    /// PID.
    pub pid: u32,
    /// Warm-up excluded from the start figure (s).
    pub warmup_secs: f64,
    /// RSS when the attacks began (KiB).
    pub rss_attack_start_kb: u64,
    /// RSS after the warm-up (KiB).
    pub rss_start_kb: u64,
    /// Highest RSS during the attack phase (KiB).
    pub rss_peak_kb: u64,
    /// RSS at the end of the attack phase (KiB).
    pub rss_end_kb: u64,
    /// Length of the first and last windows compared (s): a minute, or a third of the
    /// post-warm-up phase when it is shorter than three minutes.
    pub window_secs: f64,
    /// Mean RSS over the first window after the warm-up (KiB).
    pub rss_first_window_kb: u64,
    /// Mean RSS over the last window (KiB).
    pub rss_last_window_kb: u64,
    /// rss_last_window − rss_first_window (KiB).
    pub rss_growth_kb: i64,
    /// Least-squares slope of RSS after the warm-up (KiB per minute).
    pub rss_slope_kb_per_min: f64,
    /// Mean RSS of each minute of the attack phase (KiB).
    pub rss_per_minute_kb: Vec<u64>,
    /// RSS samples used.
    pub samples: usize,
}

/// The well-behaved subscribers, summarized.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct GoodClients {
    /// Connected.
    pub connected: u64,
    /// Failed to connect.
    pub failed: u64,
    /// Dropped during the run.
    pub dropped: u64,
    /// Expected deliveries.
    pub expected: u64,
    /// Delivered.
    pub delivered: u64,
    /// Missing.
    pub missing: u64,
    /// delivered / expected.
    pub delivery_ratio: Option<f64>,
    /// Every good client stayed connected and received every message.
    pub unharmed: bool,
}

/// Verdict.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Verdict {
    /// No problem found.
    pub ok: bool,
    /// What went wrong.
    pub problems: Vec<String>,
}
