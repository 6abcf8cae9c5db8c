//! The `publish` subcommand: publishing alone, measuring achieved QPS and request latency.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::assemble::{ServerInputs, publish_report, server_reports};
use super::plan::PlanError;
use super::progress::Progress;
use super::servers::{Mark, ServerWatch};
use crate::cli::PublishCmdArgs;
use crate::procstat;
use crate::publish::{PublishConfig, Publisher};
use crate::report::model::{LoadgenReport, Phases, Report, Settings, TimelinePoint, Verdict};
use crate::target::parse_target;

/// Validates `publish` arguments.
pub(crate) fn config(a: &PublishCmdArgs) -> Result<PublishConfig, PlanError> {
    let bad = |m: &str| PlanError(m.to_owned());
    if !(a.rate.is_finite() && a.rate >= 0.0 && a.rate <= 10_000_000.0) {
        return Err(bad("--rate must be between 0 (unlimited) and 10,000,000"));
    }
    if a.topics == 0 || a.topics > 1_000_000 {
        return Err(bad("--topics must be between 1 and 1,000,000"));
    }
    if a.concurrency == 0 || a.concurrency > 1024 {
        return Err(bad("--concurrency must be between 1 and 1024"));
    }
    if a.duration.is_zero() || a.duration > Duration::from_secs(7 * 24 * 3600) {
        return Err(bad("--duration must be between 1ms and 7 days"));
    }
    if a.payload_size > (1 << 20) {
        return Err(bad("--payload-size is limited to 1 MiB"));
    }
    if !a
        .topic_prefix
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.:@-".contains(c))
    {
        return Err(bad("--topic-prefix may only contain [A-Za-z0-9_.:@-]"));
    }
    let targets = a
        .urls
        .iter()
        .map(|u| {
            parse_target(u, "/v1/publish", a.allow_non_loopback)
                .map_err(|e| PlanError(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(PublishConfig {
        targets,
        mode: a.mode,
        rate: a.rate,
        burst: a.burst,
        topics: (0..a.topics)
            .map(|i| format!("{}{i}", a.topic_prefix))
            .collect(),
        payload_size: a.payload_size,
        event: a.event.clone(),
        concurrency: a.concurrency,
        timeout: a.timeout,
        source: None,
    })
}

/// Runs `publish`.
pub(crate) async fn run(
    a: &PublishCmdArgs,
    cfg: PublishConfig,
    args: Vec<String>,
    nofile: u64,
) -> Report {
    let started_unix_ms = crate::clock::unix_micros() / 1000;
    let t0 = Instant::now();
    let mut servers = ServerWatch::new(&a.report.server_pids);
    let mut progress = Progress::new(Duration::from_secs(5));
    servers.sample(Mark::AfterConnect);
    servers.sample(Mark::MeasureStart);
    let settings = Settings {
        publish_targets: cfg.targets.iter().map(|t| t.url.clone()).collect(),
        duration_secs: a.duration.as_secs_f64(),
        topics: a.topics,
        publish_rate: Some(cfg.rate),
        publish_mode: Some(format!("{:?}", cfg.mode).to_lowercase()),
        payload_size: Some(cfg.payload_size),
        ..Settings::default()
    };
    let target_rate = cfg.rate;
    let publisher = Publisher::start(cfg);
    let stats = publisher.stats().clone();
    let mut timeline = Vec::new();
    let mut ticker = tokio::time::interval(a.report.tick);
    ticker.tick().await;
    let end = tokio::time::Instant::now() + a.duration;
    let (mut last_t, mut last_ok) = (Instant::now(), 0u64);
    let mut interrupted = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(end) => break,
            _ = tokio::signal::ctrl_c() => { interrupted = true; break; }
            _ = ticker.tick() => {
                let rss = servers.sample(Mark::Tick);
                let dt = last_t.elapsed().as_secs_f64().max(1e-3);
                last_t = Instant::now();
                let ok = stats.ok.load(Relaxed);
                let rate = (ok - last_ok) as f64 / dt;
                last_ok = ok;
                let t = t0.elapsed().as_secs_f64();
                progress.update(&format!(
                    "[{t:7.1}s] publish ok {ok} failed {} | {rate:.0}/s",
                    stats.failed.load(Relaxed)
                ), false);
                timeline.push(TimelinePoint {
                    t_secs: t,
                    phase: "publish".into(),
                    publish_per_sec: rate,
                    server_rss_kb: rss,
                    ..TimelinePoint::default()
                });
            }
        }
    }
    let secs = publisher.elapsed().as_secs_f64();
    let _summary = publisher.finish().await;
    servers.sample(Mark::MeasureEnd);
    progress.finish();
    let publish = publish_report(&stats, target_rate, secs);
    let cpus = procstat::machine_cpus();
    let (server_reports, servers_total) = server_reports(ServerInputs {
        servers: &servers,
        targets: 0,
        floor: None,
        window_secs: t0.elapsed().as_secs_f64(),
        connected: 0,
        units: publish.ok,
        per: "publish",
        cpus,
    });
    let mut problems = Vec::new();
    if publish.failed > 0 {
        problems.push(format!("{} publish requests failed", publish.failed));
    }
    if interrupted {
        problems.push("the run was interrupted".into());
    }
    let errors = stats
        .errors()
        .into_iter()
        .map(|(k, v)| (k.as_str().to_owned(), v))
        .collect();
    let total = t0.elapsed().as_secs_f64();
    let own = procstat::own_cpu_micros() as f64 / 1e6;
    Report {
        tool: "herald-loadgen".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        command: "publish".into(),
        args,
        started_unix_ms,
        settings,
        phases: Phases {
            measured_secs: secs,
            total_secs: total,
            interrupted,
            ..Phases::default()
        },
        publish: Some(publish),
        errors,
        servers: server_reports,
        servers_total,
        loadgen: LoadgenReport {
            cpu_seconds: own,
            cpu_fraction_of_machine: own / (total.max(1e-3) * cpus as f64),
            machine_cpus: cpus,
            nofile_limit: nofile,
        },
        timeline,
        verdict: Verdict {
            ok: problems.is_empty(),
            problems,
        },
        ..Report::default()
    }
}
