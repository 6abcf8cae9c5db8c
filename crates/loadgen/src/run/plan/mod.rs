//! Turning command-line arguments into a validated run plan, before anything connects.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::{
    ChurnArgs, ConnArgs, EchoArgs, HostileArgs, RunArgs, SseArgs, TargetArgs, Transport, WsArgs,
};
use crate::hostile::attack::Gates;
use crate::hostile::http2::H2Target;
use crate::hostile::{HostileConfig, parse_attacks};
use crate::publish::PublishConfig;
use crate::source_ip::{default_count, loopback_block, parse_source_ips};
use crate::spec::{ChurnSpec, ClientKind, TopicPlan, WorkerSpec};
use crate::target::{Target, parse_target};

/// A bad command line (exit status 64).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct PlanError(pub String);

fn bad(msg: impl Into<String>) -> PlanError {
    PlanError(msg.into())
}

/// Outputs and reporting options.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outputs {
    /// JSON report path.
    pub json: Option<PathBuf>,
    /// HTML report path.
    pub html: Option<PathBuf>,
    /// Floor µs per write.
    pub floor_us: Option<f64>,
    /// Exit 3 on problems.
    pub strict: bool,
}

/// Everything a run needs, validated.
#[derive(Debug, Clone)]
pub(crate) struct RunPlan {
    /// Subcommand name.
    pub command: String,
    /// Client kind.
    pub kind: ClientKind,
    /// Client targets.
    pub targets: Vec<Target>,
    /// Main connections.
    pub conns: u64,
    /// Ramp rate.
    pub ramp: f64,
    /// Measured phase.
    pub duration: Duration,
    /// Drain.
    pub drain: Duration,
    /// Topics.
    pub topics: TopicPlan,
    /// Churn (total rate).
    pub churn: Option<ChurnSpec>,
    /// Built-in publisher.
    pub publisher: Option<PublishConfig>,
    /// Number of workers.
    pub workers: usize,
    /// Whether workers are child processes.
    pub processes: bool,
    /// Source addresses.
    pub source_ips: Vec<IpAddr>,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Subscribe timeout.
    pub subscribe_timeout: Duration,
    /// Read buffer.
    pub read_buffer: usize,
    /// Max event.
    pub max_event: usize,
    /// Max pending connects per worker.
    pub max_pending: usize,
    /// Tick.
    pub tick: Duration,
    /// Server PIDs.
    pub server_pids: Vec<u32>,
    /// Outputs.
    pub outputs: Outputs,
    /// Echo: total rate and frame size (for the report).
    pub echo: Option<(f64, usize)>,
    /// Hostile clients running during the measured phase (`hostile`).
    pub hostile: Option<HostileConfig>,
}

fn targets(urls: &[String], default_path: &str, allow: bool) -> Result<Vec<Target>, PlanError> {
    if urls.is_empty() {
        return Err(bad("at least one --url is required"));
    }
    urls.iter()
        .map(|u| parse_target(u, default_path, allow).map_err(|e| bad(e.to_string())))
        .collect()
}

fn source_ips(conn: &ConnArgs, targets: &[Target], sockets: u64) -> Result<Vec<IpAddr>, PlanError> {
    match &conn.pace.source_ips {
        Some(spec) => {
            let ips = parse_source_ips(spec).map_err(|e| bad(e.to_string()))?;
            Ok(ips)
        }
        None if targets
            .iter()
            .all(|t| t.addr.ip().is_ipv4() && t.addr.ip().is_loopback()) =>
        {
            Ok(loopback_block(default_count(sockets)))
        }
        None => Ok(Vec::new()),
    }
}

fn check_run(run: &RunArgs, conn: &ConnArgs) -> Result<(), PlanError> {
    if conn.conns == 0 {
        return Err(bad("--conns must be at least 1"));
    }
    if conn.conns > 2_000_000 {
        return Err(bad("--conns is limited to 2,000,000"));
    }
    if !(conn.pace.ramp.is_finite() && conn.pace.ramp >= 0.0) {
        return Err(bad("--ramp must be a non-negative number"));
    }
    if run.duration.is_zero() || run.duration > Duration::from_secs(7 * 24 * 3600) {
        return Err(bad("--duration must be between 1ms and 7 days"));
    }
    if run.drain > Duration::from_secs(600) {
        return Err(bad("--drain is limited to 10 minutes"));
    }
    if run.sockets_per_process < 100 {
        return Err(bad("--sockets-per-process must be at least 100"));
    }
    if run.report.tick < Duration::from_millis(100) {
        return Err(bad("--tick must be at least 100ms"));
    }
    if conn.pace.read_buffer < 256 || conn.pace.read_buffer > (16 << 20) {
        return Err(bad("--read-buffer must be between 256 bytes and 16 MiB"));
    }
    if let Some(w) = run.workers
        && (w == 0 || w > 256)
    {
        return Err(bad("--workers must be between 1 and 256"));
    }
    Ok(())
}

/// Workers needed: `--workers`, or one per `sockets_per_process` sockets; and whether they
/// are child processes (always when more than one, or when `--workers` was given).
fn worker_layout(run: &RunArgs, sockets: u64) -> (usize, bool) {
    match run.workers {
        Some(w) => (w, true),
        None => {
            let n = sockets.div_ceil(run.sockets_per_process).max(1) as usize;
            (n, n > 1)
        }
    }
}

fn topic_plan(a: &SseArgs) -> Result<TopicPlan, PlanError> {
    let t = &a.topics;
    if t.topics > 1_000_000 {
        return Err(bad("--topics is limited to 1,000,000"));
    }
    if t.topics_per_conn == 0 || t.topics_per_conn > 64 {
        return Err(bad("--topics-per-conn must be between 1 and 64"));
    }
    let longest = format!("{}{}", t.topic_prefix, t.topics.saturating_sub(1));
    if longest.len() > 128
        || !t
            .topic_prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.:@-".contains(c))
    {
        return Err(bad(
            "topic names must match [A-Za-z0-9_.:@-]{1,128}: check --topic-prefix",
        ));
    }
    Ok(TopicPlan {
        count: t.topics,
        per_conn: t.topics_per_conn,
        prefix: t.topic_prefix.clone(),
        param: t.topic_param.clone(),
        delta: t.delta,
    })
}

fn publisher(
    a: &SseArgs,
    topics: &TopicPlan,
    source: Option<IpAddr>,
) -> Result<Option<PublishConfig>, PlanError> {
    let p = &a.publish;
    if p.publish_urls.is_empty() {
        return Ok(None);
    }
    if topics.count == 0 {
        return Err(bad("the built-in publisher needs --topics >= 1"));
    }
    if !(p.publish_rate.is_finite() && p.publish_rate > 0.0 && p.publish_rate <= 10_000_000.0) {
        return Err(bad("--publish-rate must be > 0 and at most 10,000,000"));
    }
    if p.payload_size > (1 << 20) {
        return Err(bad("--payload-size is limited to 1 MiB"));
    }
    if p.publish_concurrency == 0 || p.publish_concurrency > 1024 {
        return Err(bad("--publish-concurrency must be between 1 and 1024"));
    }
    Ok(Some(PublishConfig {
        targets: targets(&p.publish_urls, "/v1/publish", a.target.allow_non_loopback)?,
        mode: p.publish_mode,
        rate: p.publish_rate,
        burst: p.publish_burst,
        topics: (0..topics.count).map(|i| topics.name(i)).collect(),
        payload_size: p.payload_size,
        event: p.event.clone(),
        concurrency: p.publish_concurrency,
        timeout: p.publish_timeout,
        source,
    }))
}

fn base_plan(
    command: &str,
    a: &SseArgs,
    kind: ClientKind,
    default_path: &str,
    churn_sockets: u64,
) -> Result<RunPlan, PlanError> {
    check_run(&a.run, &a.conn)?;
    let targets = targets(&a.target.urls, default_path, a.target.allow_non_loopback)?;
    let topics = topic_plan(a)?;
    let sockets = a.conn.conns + churn_sockets;
    let source_ips = source_ips(&a.conn, &targets, sockets)?;
    let publisher = publisher(a, &topics, source_ips.first().copied())?;
    let client = Clients {
        command,
        kind,
        targets,
        topics,
        source_ips,
        sockets,
    };
    Ok(RunPlan {
        publisher,
        ..client.plan(&a.conn, &a.run)
    })
}

/// The clients of a run, once checked, and the plan that runs them (no publisher, no echo).
struct Clients<'a> {
    command: &'a str,
    kind: ClientKind,
    targets: Vec<Target>,
    topics: TopicPlan,
    source_ips: Vec<IpAddr>,
    /// Sockets open at once, for the worker layout.
    sockets: u64,
}

impl Clients<'_> {
    fn plan(self, conn: &ConnArgs, run: &RunArgs) -> RunPlan {
        let (workers, processes) = worker_layout(run, self.sockets);
        RunPlan {
            command: self.command.to_owned(),
            kind: self.kind,
            targets: self.targets,
            conns: conn.conns,
            ramp: conn.pace.ramp,
            duration: run.duration,
            drain: run.drain,
            topics: self.topics,
            churn: None,
            publisher: None,
            workers,
            processes,
            source_ips: self.source_ips,
            connect_timeout: conn.pace.connect_timeout,
            subscribe_timeout: Duration::from_secs(10),
            read_buffer: conn.pace.read_buffer,
            max_event: run.max_event.max(1024),
            max_pending: conn.pace.max_pending.max(1),
            tick: run.report.tick,
            server_pids: run.report.server_pids.clone(),
            outputs: Outputs {
                json: run.report.json.clone(),
                html: run.report.html.clone(),
                floor_us: run.floor_us,
                strict: run.strict,
            },
            echo: None,
            hostile: None,
        }
    }
}

/// Plan for `sse`.
pub(crate) fn sse_plan(a: &SseArgs) -> Result<RunPlan, PlanError> {
    base_plan("sse", a, ClientKind::Sse, "/v1/sse", 0)
}

/// Plan for `ws`.
pub(crate) fn ws_plan(a: &WsArgs) -> Result<RunPlan, PlanError> {
    let kind = ClientKind::Ws {
        raw: a.raw,
        init_frame: a.init_frame.clone(),
    };
    let mut plan = base_plan("ws", &a.common, kind, "/v1/ws", 0)?;
    plan.subscribe_timeout = a.subscribe_timeout;
    if a.raw {
        if plan.publisher.is_some() {
            return Err(bad(
                "--raw does not subscribe to topics: the built-in publisher cannot be accounted; publish with your own tool",
            ));
        }
        plan.topics.count = 0;
    }
    Ok(plan)
}

/// Plan for `churn`.
pub(crate) fn churn_plan(a: &ChurnArgs) -> Result<RunPlan, PlanError> {
    if !(a.churn_rate.is_finite() && a.churn_rate > 0.0 && a.churn_rate <= 100_000.0) {
        return Err(bad("--churn-rate must be > 0 and at most 100,000"));
    }
    if a.churn_hold.is_zero() {
        return Err(bad("--churn-hold must be positive"));
    }
    // churn clients open at once: rate × (hold + connect time), with margin
    let churn_sockets = (a.churn_rate * (a.churn_hold.as_secs_f64() + 1.0)).ceil() as u64;
    let (kind, path) = match a.transport {
        Transport::Sse => (ClientKind::Sse, "/v1/sse"),
        Transport::Ws => (
            ClientKind::Ws {
                raw: false,
                init_frame: None,
            },
            "/v1/ws",
        ),
    };
    let mut plan = base_plan("churn", &a.common, kind, path, churn_sockets)?;
    plan.subscribe_timeout = a.subscribe_timeout;
    plan.churn = Some(ChurnSpec {
        rate: a.churn_rate,
        hold_ms: a.churn_hold.as_millis() as u64,
    });
    Ok(plan)
}

/// Plan for `echo`.
pub(crate) fn echo_plan(a: &EchoArgs) -> Result<RunPlan, PlanError> {
    check_run(&a.run, &a.conn)?;
    if !(a.rate.is_finite() && a.rate > 0.0 && a.rate <= 10_000_000.0) {
        return Err(bad("--rate must be > 0 and at most 10,000,000"));
    }
    if a.size < 16 || a.size > (1 << 20) {
        return Err(bad("--size must be between 16 bytes and 1 MiB"));
    }
    let targets = targets(&a.target.urls, "/v1/ws", a.target.allow_non_loopback)?;
    let source_ips = source_ips(&a.conn, &targets, a.conn.conns)?;
    let client = Clients {
        command: "echo",
        kind: ClientKind::Echo {
            raw: a.raw,
            size: a.size,
            rate_per_conn: a.rate / a.conn.conns as f64,
        },
        targets,
        topics: TopicPlan {
            count: 0,
            per_conn: 1,
            prefix: String::new(),
            param: String::new(),
            delta: false,
        },
        source_ips,
        sockets: a.conn.conns,
    };
    Ok(RunPlan {
        echo: Some((a.rate, a.size)),
        ..client.plan(&a.conn, &a.run)
    })
}

/// Plan for `hostile`: the good clients are an `sse` plan (possibly of zero clients), the
/// attackers a [`HostileConfig`] run by the coordinator during the measured phase.
pub(crate) fn hostile_plan(a: &HostileArgs) -> Result<RunPlan, PlanError> {
    if a.conns == 0 || a.conns > 10_000 {
        return Err(bad("--conns (attackers) must be between 1 and 10,000"));
    }
    if a.attack_timeout.is_zero() || a.attack_timeout > Duration::from_secs(600) {
        return Err(bad("--attack-timeout must be between 1ms and 10 minutes"));
    }
    if a.slowloris_every.is_zero() || a.slowloris_max.is_zero() {
        return Err(bad(
            "--slowloris-every and --slowloris-max must be positive",
        ));
    }
    if a.slowloris_max > Duration::from_secs(600) {
        return Err(bad("--slowloris-max is limited to 10 minutes"));
    }
    if !(1024..=64 << 20).contains(&a.max_ws_message) {
        return Err(bad("--max-ws-message must be between 1 KiB and 64 MiB"));
    }
    if !(1024..=64 << 20).contains(&a.huge_bytes) {
        return Err(bad("--huge-bytes must be between 1 KiB and 64 MiB"));
    }
    if a.ping_flood == 0 || a.ping_flood > 1_000_000 {
        return Err(bad("--ping-flood must be between 1 and 1,000,000"));
    }
    if a.health_every.is_zero() || a.health_timeout.is_zero() {
        return Err(bad("--health-every and --health-timeout must be positive"));
    }
    if a.good_conns == 0 && !a.publish.publish_urls.is_empty() {
        return Err(bad(
            "the built-in publisher needs good clients to account for: give --good-conns",
        ));
    }
    if a.probe_every.is_zero() {
        return Err(bad("--probe-every must be positive"));
    }
    let gates = Gates {
        origin_forbidden: a.origin_forbidden.is_some(),
        admin_url: a.admin_url.is_some(),
        hooked: a.hooked,
        h2: a.h2_url.is_some(),
    };
    let attacks = parse_attacks(&a.attacks, gates).map_err(bad)?;
    let h2 = match (&a.h2_url, &a.tls_ca) {
        (Some(url), Some(ca)) => Some(H2Target::new(url, ca, a.allow_non_loopback).map_err(bad)?),
        _ => None,
    };
    let sse_args = SseArgs {
        target: TargetArgs {
            urls: a.urls.clone(),
            allow_non_loopback: a.allow_non_loopback,
        },
        conn: ConnArgs {
            // a plan of zero clients is refused; it is built for one and cut down below
            conns: a.good_conns.max(1),
            pace: a.pace.clone(),
        },
        run: a.run.clone(),
        topics: a.topics.clone(),
        publish: a.publish.clone(),
    };
    let mut plan = base_plan("hostile", &sse_args, ClientKind::Sse, "/v1/sse", 0)?;
    plan.conns = a.good_conns;
    let attack_targets = targets(&a.urls, "/v1/sse", a.allow_non_loopback)?;
    let attack_sources = match &a.attack_source_ips {
        Some(spec) => parse_source_ips(spec).map_err(|e| bad(e.to_string()))?,
        None if attack_targets
            .iter()
            .all(|t| t.addr.ip().is_ipv4() && t.addr.ip().is_loopback()) =>
        {
            parse_source_ips("127.0.0.2-127.0.0.65").map_err(|e| bad(e.to_string()))?
        }
        None => Vec::new(),
    };
    let health = a
        .health_url
        .as_deref()
        .map(|u| parse_target(u, "/healthz", a.allow_non_loopback).map_err(|e| bad(e.to_string())))
        .transpose()?;
    let admin = a
        .admin_url
        .as_deref()
        .map(|u| parse_target(u, "/", a.allow_non_loopback).map_err(|e| bad(e.to_string())))
        .transpose()?;
    plan.hostile = Some(HostileConfig {
        targets: attack_targets,
        admin,
        conns: a.conns,
        attacks,
        attack_timeout: a.attack_timeout,
        connect_timeout: a.pace.connect_timeout,
        slowloris_max: a.slowloris_max,
        slowloris_every: a.slowloris_every,
        max_slow: a.max_slow.unwrap_or(a.conns / 10).clamp(1, a.conns),
        source_ips: attack_sources,
        origin_forbidden: a.origin_forbidden.clone(),
        jwt_secret: a
            .jwt_secret
            .clone()
            .unwrap_or_else(|| "herald-loadgen-made-up-secret-0123456789".into())
            .into_bytes(),
        max_ws_message: a.max_ws_message,
        huge_bytes: a.huge_bytes,
        ping_flood: a.ping_flood,
        health,
        health_every: a.health_every,
        health_timeout: a.health_timeout,
        warmup: a.warmup,
        max_rss_growth_kb: a.max_rss_growth_mb.map(|mb| (mb * 1024.0).max(0.0) as u64),
        probe_every: a.probe_every,
        h2,
    });
    Ok(plan)
}

impl RunPlan {
    /// Splits the run into worker specs: contiguous ranges of connection indexes, with the
    /// ramp and churn rates divided evenly.
    pub(crate) fn worker_specs(&self) -> Vec<WorkerSpec> {
        let w = self.workers.max(1) as u64;
        let base = self.conns / w;
        let extra = self.conns % w;
        let mut first = 0;
        // generous hard deadline: ramp + phases + margin; workers stop by themselves after it
        let ramp_secs = if self.ramp > 0.0 {
            self.conns as f64 / self.ramp
        } else {
            0.0
        };
        let deadline = Duration::from_secs_f64(ramp_secs)
            + self.connect_timeout * 2
            + self.subscribe_timeout
            + self.duration
            + self.drain
            + Duration::from_secs(120);
        (0..w)
            .map(|i| {
                let conns = base + u64::from(i < extra);
                let spec = WorkerSpec {
                    worker_id: i as usize,
                    kind: self.kind.clone(),
                    targets: self.targets.clone(),
                    first_conn: first,
                    conns,
                    ramp_rate: self.ramp / w as f64,
                    max_pending: self.max_pending,
                    topics: self.topics.clone(),
                    source_ips: self.source_ips.clone(),
                    connect_timeout_ms: self.connect_timeout.as_millis() as u64,
                    subscribe_timeout_ms: self.subscribe_timeout.as_millis() as u64,
                    churn: self.churn.as_ref().map(|c| ChurnSpec {
                        rate: c.rate / w as f64,
                        hold_ms: c.hold_ms,
                    }),
                    read_buffer: self.read_buffer,
                    max_line: self.max_event,
                    max_event: self.max_event,
                    // twice per coordinator tick, so that every tick has fresh data
                    tick_ms: (self.tick.as_millis() / 2) as u64,
                    deadline_ms: deadline.as_millis() as u64,
                    hist_shards: 16,
                };
                first += conns;
                spec
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
