//! Building the report from what the coordinator gathered.

use std::collections::BTreeMap;

use super::fleet::Fleet;
use super::plan::RunPlan;
use super::servers::ServerWatch;
use crate::histogram::{self, Hist};
use crate::procstat;
use crate::publish::{PublishMode, PublishStats};
use crate::report::model::*;
use crate::seq::SeqOutcome;
use crate::spec::{ChurnSpec, ClientKind};
use crate::stats::Counters;
use crate::worker::protocol::{PublishSummary, TopicTally, WorkerFinal};

/// Everything [`assemble`] needs.
pub(crate) struct Inputs<'a> {
    /// The plan.
    pub plan: &'a RunPlan,
    /// Command line.
    pub args: Vec<String>,
    /// Start time.
    pub started_unix_ms: u64,
    /// Worker results.
    pub fleet: &'a Fleet,
    /// What the publisher sent.
    pub summary: Option<&'a PublishSummary>,
    /// Publisher counters.
    pub publish_stats: Option<&'a PublishStats>,
    /// Publishing time.
    pub publish_secs: f64,
    /// Server samples.
    pub servers: &'a ServerWatch,
    /// Timeline.
    pub timeline: Vec<TimelinePoint>,
    /// Phases.
    pub ramp_secs: f64,
    /// Measured phase.
    pub measured_secs: f64,
    /// Drain.
    pub drain_secs: f64,
    /// Measured phase + drain (the window of server CPU sampling).
    pub window_secs: f64,
    /// Whole run.
    pub total_secs: f64,
    /// Interrupted.
    pub interrupted: bool,
    /// CPU of the coordinator process (µs).
    pub own_cpu_us: u64,
    /// Open-files limit.
    pub nofile: u64,
}

fn merged(finals: &[&WorkerFinal], pick: impl Fn(&WorkerFinal) -> &str) -> Hist {
    let mut h = histogram::new_hist();
    for f in finals {
        if let Ok(x) = histogram::decode(pick(f)) {
            let _ = histogram::merge(&mut h, &x);
        }
    }
    h
}

fn errors_map(counters: &Counters, publish: Option<&PublishStats>) -> BTreeMap<String, u64> {
    let mut m: BTreeMap<String, u64> = counters
        .errors
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), *v))
        .collect();
    if let Some(p) = publish {
        for (k, v) in p.errors() {
            *m.entry(k.as_str().to_owned()).or_default() += v;
        }
    }
    m
}

/// Assembles the report and its verdict.
pub(crate) fn assemble(i: Inputs<'_>) -> Report {
    let plan = i.plan;
    let finals: Vec<&WorkerFinal> = i.fleet.finals.iter().flatten().collect();
    let total = i.fleet.total();
    let mut problems = Vec::new();
    for (w, err) in i.fleet.fatal.iter().enumerate() {
        if let Some(e) = err {
            problems.push(format!("worker {w} failed: {e}"));
        }
    }
    let echo_mode = matches!(plan.kind, ClientKind::Echo { .. });
    let latency = merged(&finals, |f| &f.latency);
    let connections = connections_report(&i, &finals, &total, &mut problems);
    let (units, per) = measured_units(i.fleet, &total, echo_mode);
    let delivery =
        (!echo_mode).then(|| delivery_report(&i, &finals, &total, &latency, units, &mut problems));
    let echo = echo_mode.then(|| echo_report(&i, &finals, &total, &latency, &mut problems));
    let churn = plan
        .churn
        .as_ref()
        .map(|c| churn_report(c, &i, &finals, &total, &mut problems));
    let publish = i.publish_stats.map(|p| {
        let target_rate = plan.publisher.as_ref().map_or(0.0, |c| c.rate);
        publish_report(p, target_rate, i.publish_secs)
    });
    if let Some(p) = &publish
        && p.failed > 0
    {
        problems.push(format!("{} publish requests failed", p.failed));
    }
    let cpus = procstat::machine_cpus();
    let (servers, servers_total) = server_reports(ServerInputs {
        servers: i.servers,
        targets: plan.targets.len(),
        floor: plan.outputs.floor_us,
        window_secs: i.window_secs,
        connected: total.connected,
        units,
        per,
        cpus,
    });
    run_problems(&i, finals.len(), &mut problems);
    let worker_cpu: u64 = finals.iter().map(|f| f.cpu_us).sum();
    let loadgen_cpu = (i.own_cpu_us + worker_cpu) as f64 / 1e6;
    Report {
        tool: "herald-loadgen".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        command: plan.command.clone(),
        args: i.args.clone(),
        started_unix_ms: i.started_unix_ms,
        settings: settings(plan),
        phases: Phases {
            ramp_secs: i.ramp_secs,
            measured_secs: i.measured_secs,
            drain_secs: i.drain_secs,
            total_secs: i.total_secs,
            interrupted: i.interrupted,
        },
        connections: Some(connections),
        delivery,
        publish,
        echo,
        churn,
        hostile: None,
        errors: errors_map(&total, i.publish_stats),
        servers,
        servers_total,
        loadgen: LoadgenReport {
            cpu_seconds: loadgen_cpu,
            cpu_fraction_of_machine: loadgen_cpu / (i.total_secs.max(1e-3) * cpus as f64),
            machine_cpus: cpus,
            nofile_limit: i.nofile,
        },
        floor_us_per_write: plan.outputs.floor_us,
        timeline: i.timeline,
        verdict: Verdict {
            ok: problems.is_empty(),
            problems,
        },
    }
}

/// The connections section, and its problems (failed, never attempted, dropped).
fn connections_report(
    i: &Inputs<'_>,
    finals: &[&WorkerFinal],
    total: &Counters,
    problems: &mut Vec<String>,
) -> Connections {
    let plan = i.plan;
    let connect = merged(finals, |f| &f.connect);
    let worker_ramp = finals.iter().map(|f| f.ramp_secs).fold(0.0, f64::max);
    if total.failed > 0 {
        problems.push(format!(
            "{} of {} connections failed",
            total.failed, plan.conns
        ));
    }
    if total.connected + total.failed < plan.conns && !i.interrupted {
        problems.push(format!(
            "only {} of {} connections were attempted to completion",
            total.connected + total.failed,
            plan.conns
        ));
    }
    if total.dropped > 0 {
        problems.push(format!(
            "{} connections dropped during the run",
            total.dropped
        ));
    }
    Connections {
        target: plan.conns,
        attempted: total.attempts,
        connected: total.connected,
        failed: total.failed,
        dropped: total.dropped,
        peak_open: total.peak_open,
        cohort: finals.iter().map(|f| f.cohort).sum(),
        late_joiners: finals.iter().map(|f| f.late_joiners).sum(),
        connect_rate_per_sec: per_sec(total.connected, worker_ramp),
        connect_ms: histogram::summarize(&connect),
    }
}

/// Work done in the measured window (measured phase + drain), for CPU per unit: echoes in
/// echo mode, deliveries otherwise; and the unit's name.
fn measured_units(fleet: &Fleet, total: &Counters, echo_mode: bool) -> (u64, &'static str) {
    let mut started = Counters::default();
    for c in fleet.started.iter().flatten() {
        started.add(c);
    }
    if echo_mode {
        (
            total.echo_received.saturating_sub(started.echo_received),
            "echo",
        )
    } else {
        (
            (total.deliveries + total.churn_deliveries)
                .saturating_sub(started.deliveries + started.churn_deliveries),
            "delivery",
        )
    }
}

/// The echo section, and its problems (unanswered, duplicated).
fn echo_report(
    i: &Inputs<'_>,
    finals: &[&WorkerFinal],
    total: &Counters,
    rtt: &Hist,
    problems: &mut Vec<String>,
) -> EchoReport {
    let mut o = SeqOutcome::default();
    for f in finals {
        if let Some(e) = &f.echo {
            o.add(e);
        }
    }
    if o.missing > 0 {
        problems.push(format!("{} echo requests unanswered", o.missing));
    }
    if o.duplicates > 0 {
        problems.push(format!("{} duplicate echo answers", o.duplicates));
    }
    EchoReport {
        target_rate: i.plan.echo.map_or(0.0, |e| e.0),
        sent: total.echo_sent,
        answered: o.delivered,
        unanswered: o.missing,
        duplicates: o.duplicates,
        achieved_rate: per_sec(o.delivered, i.measured_secs),
        rtt_ms: histogram::summarize(rtt),
    }
}

/// The churn section, and its problem (failed churn connections).
fn churn_report(
    c: &ChurnSpec,
    i: &Inputs<'_>,
    finals: &[&WorkerFinal],
    total: &Counters,
    problems: &mut Vec<String>,
) -> ChurnReport {
    let h = merged(finals, |f| &f.churn_connect);
    if total.churn_failed > 0 {
        problems.push(format!("{} churn connections failed", total.churn_failed));
    }
    ChurnReport {
        rate: c.rate,
        hold_secs: c.hold_ms as f64 / 1000.0,
        attempted: total.churn_attempts,
        connected: total.churn_connected,
        failed: total.churn_failed,
        closed: total.churn_closed,
        achieved_rate: per_sec(total.churn_connected, i.measured_secs),
        connect_ms: histogram::summarize(&h),
        receipts: total.churn_deliveries,
    }
}

/// Problems of the run itself: interrupted, workers that did not report.
fn run_problems(i: &Inputs<'_>, reported: usize, problems: &mut Vec<String>) {
    if i.interrupted {
        problems.push("the run was interrupted".into());
    }
    if reported < i.fleet.finals.len() {
        problems.push(format!(
            "{} of {} workers did not report; their counts are partial",
            i.fleet.finals.len() - reported,
            i.fleet.finals.len()
        ));
    }
}

fn settings(plan: &RunPlan) -> Settings {
    let p = plan.publisher.as_ref();
    Settings {
        targets: plan.targets.iter().map(|t| t.url.clone()).collect(),
        publish_targets: p
            .map(|p| p.targets.iter().map(|t| t.url.clone()).collect())
            .unwrap_or_default(),
        conns: plan.conns,
        ramp_per_sec: plan.ramp,
        duration_secs: plan.duration.as_secs_f64(),
        drain_secs: plan.drain.as_secs_f64(),
        topics: plan.topics.count,
        topics_per_conn: plan.topics.per_conn,
        publish_rate: p.map(|p| p.rate),
        publish_mode: p.map(|p| match p.mode {
            PublishMode::All => "all".into(),
            PublishMode::RoundRobin => "round-robin".into(),
        }),
        payload_size: p.map(|p| p.payload_size),
        worker_processes: if plan.processes { plan.workers } else { 0 },
        workers: plan.workers,
        source_ips: plan.source_ips.len(),
        raw: matches!(
            plan.kind,
            ClientKind::Ws { raw: true, .. } | ClientKind::Echo { raw: true, .. }
        ),
        churn_rate: plan.churn.as_ref().map(|c| c.rate),
        churn_hold_secs: plan.churn.as_ref().map(|c| c.hold_ms as f64 / 1000.0),
        echo_rate: plan.echo.map(|e| e.0),
        echo_size: plan.echo.map(|e| e.1),
    }
}

/// `n` per second of `secs` (0 for an empty window).
fn per_sec(n: u64, secs: f64) -> f64 {
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

fn delivery_report(
    i: &Inputs<'_>,
    finals: &[&WorkerFinal],
    total: &Counters,
    latency: &Hist,
    units: u64,
    problems: &mut Vec<String>,
) -> Delivery {
    let n = i.plan.topics.count as usize;
    let mut tallies = vec![TopicTally::default(); n];
    for f in finals {
        for (t, tally) in f.topics.iter().enumerate().take(n) {
            tallies[t].add(tally);
        }
    }
    let mut sum = SeqOutcome::default();
    for t in &tallies {
        sum.add(&t.outcome);
    }
    let accounted = i.summary.is_some();
    let published: u64 = i
        .summary
        .map_or(0, |s| s.topics.iter().map(|t| t.issued).sum());
    let publish_failed: u64 = i
        .summary
        .map_or(0, |s| s.topics.iter().map(|t| t.failed.len() as u64).sum());
    let per_topic = tallies
        .iter()
        .enumerate()
        .map(|(t, tally)| {
            let p = i.summary.and_then(|s| s.topics.get(t));
            TopicReport {
                topic: i.plan.topics.name(t as u32),
                subscribers: tally.subscribers,
                dropped: tally.dropped,
                published: p.map_or(0, |p| p.issued),
                publish_failed: p.map_or(0, |p| p.failed.len() as u64),
                expected: tally.outcome.expected,
                delivered: if accounted {
                    tally.outcome.delivered
                } else {
                    tally.received
                },
                missing: tally.outcome.missing,
                duplicates: tally.outcome.duplicates,
                lost_events: tally.lost_events,
            }
        })
        .collect();
    if accounted {
        if sum.missing > 0 {
            problems.push(format!(
                "{} of {} expected deliveries missing",
                sum.missing, sum.expected
            ));
        }
        if sum.duplicates > 0 {
            problems.push(format!("{} duplicate deliveries", sum.duplicates));
        }
        if sum.unexpected > 0 {
            problems.push(format!(
                "{} deliveries of never-published sequence numbers",
                sum.unexpected
            ));
        }
        if sum.approximate {
            problems.push("accounting is approximate (too many gaps to track exactly)".into());
        }
        if sum.expected == 0 && !i.interrupted {
            problems.push(
                "nothing was expected: no subscriber was ready or nothing was published".into(),
            );
        }
    }
    if total.lost_events > 0 {
        problems.push(format!("server reported loss {} times", total.lost_events));
    }
    Delivery {
        accounted,
        published,
        publish_failed,
        delivery_ratio: (accounted && sum.expected > 0)
            .then(|| sum.delivered as f64 / sum.expected as f64),
        outcome: SeqOutcome {
            delivered: if accounted {
                sum.delivered
            } else {
                tallies.iter().map(|t| t.received).sum()
            },
            ..sum
        },
        receipts: total.deliveries,
        untracked: total.untracked,
        churn_receipts: total.churn_deliveries,
        lost_events: total.lost_events,
        receipts_per_sec: per_sec(units, i.window_secs),
        latency_ms: histogram::summarize(latency),
        per_topic,
    }
}

/// Publisher section.
pub(crate) fn publish_report(p: &PublishStats, target_rate: f64, secs: f64) -> PublishReport {
    use std::sync::atomic::Ordering::Relaxed;
    let ok = p.ok.load(Relaxed);
    let lat = p.latency.take();
    PublishReport {
        target_rate,
        messages: p.messages.load(Relaxed),
        requests: p.requests.load(Relaxed),
        ok,
        failed: p.failed.load(Relaxed),
        achieved_qps: per_sec(ok, secs),
        achieved_message_rate: per_sec(p.messages.load(Relaxed), secs),
        statuses: p
            .statuses()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        latency_ms: histogram::summarize(&lat),
    }
}

/// What the server sections are computed from.
pub(crate) struct ServerInputs<'a> {
    /// Samples.
    pub servers: &'a ServerWatch,
    /// Number of client targets (for the even-share rule).
    pub targets: usize,
    /// Floor µs per write.
    pub floor: Option<f64>,
    /// Measured window, seconds.
    pub window_secs: f64,
    /// Connected clients.
    pub connected: u64,
    /// Units of work in the window.
    pub units: u64,
    /// Name of the unit.
    pub per: &'a str,
    /// Machine CPUs.
    pub cpus: usize,
}

/// Server sections; see the README for the share rule.
pub(crate) fn server_reports(i: ServerInputs<'_>) -> (Vec<ServerReport>, Option<ServersTotal>) {
    let ServerInputs {
        servers,
        targets,
        floor,
        window_secs,
        connected,
        units,
        per,
        cpus,
    } = i;
    let ws = &servers.servers;
    if ws.is_empty() {
        return (Vec::new(), None);
    }
    // With one --server-pid per --url, each server is assumed to hold an even share. With one
    // server it holds everything. Otherwise (say seven nodes and their Redis) which process
    // holds which clients is unknown, so per-server ratios are left out and only the totals
    // are reported.
    let share = if ws.len() == targets {
        Some(1.0 / ws.len() as f64)
    } else if ws.len() == 1 {
        Some(1.0)
    } else {
        None
    };
    let window = window_secs.max(1e-3);
    let mut reports = Vec::new();
    let (mut cpu_sum_us, mut growth_sum) = (0u64, 0i64);
    let mut any_growth = false;
    for s in ws {
        let measured_us = match (s.measure_start, s.measure_end) {
            (Some(a), Some(b)) => b.cpu_us.saturating_sub(a.cpu_us),
            _ => 0,
        };
        cpu_sum_us += measured_us;
        let total_us = match (s.start, s.last) {
            (Some(a), Some(b)) => b.cpu_us.saturating_sub(a.cpu_us),
            _ => 0,
        };
        let growth = match (s.start, s.after_connect) {
            (Some(a), Some(b)) => Some(b.rss_kb as i64 - a.rss_kb as i64),
            _ => None,
        };
        if let Some(g) = growth {
            growth_sum += g;
            any_growth = true;
        }
        let my_units = share.map_or(0.0, |f| units as f64 * f);
        let my_conns = share.map_or(0.0, |f| connected as f64 * f);
        let per_unit = (my_units >= 1.0).then(|| measured_us as f64 / my_units);
        reports.push(ServerReport {
            pid: s.pid,
            name: s.name.clone(),
            cpu_seconds_measured: measured_us as f64 / 1e6,
            cpu_fraction_of_machine: measured_us as f64 / 1e6 / (window * cpus as f64),
            cpu_seconds_total: total_us as f64 / 1e6,
            cpu_us_per_delivery: per_unit,
            per: per.to_owned(),
            ratio_to_floor: per_unit.zip(floor).map(|(u, f)| u / f),
            rss_start_kb: s.start.map_or(0, |x| x.rss_kb),
            rss_after_connect_kb: s.after_connect.map_or(0, |x| x.rss_kb),
            rss_peak_kb: s.peak_rss_kb,
            rss_end_kb: s.last.map_or(0, |x| x.rss_kb),
            rss_growth_per_conn_bytes: growth
                .filter(|_| my_conns >= 1.0)
                .map(|g| g as f64 * 1024.0 / my_conns),
            alive_at_end: s.last.is_some() && procstat::sample(s.pid).is_some(),
        });
    }
    let per_unit = (units > 0).then(|| cpu_sum_us as f64 / units as f64);
    let total = ServersTotal {
        cpu_seconds_measured: cpu_sum_us as f64 / 1e6,
        cpu_fraction_of_machine: cpu_sum_us as f64 / 1e6 / (window * cpus as f64),
        cpu_us_per_delivery: per_unit,
        per: per.to_owned(),
        ratio_to_floor: per_unit.zip(floor).map(|(u, f)| u / f),
        rss_growth_per_conn_bytes: (any_growth && connected > 0)
            .then(|| growth_sum as f64 * 1024.0 / connected as f64),
    };
    (reports, Some(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procstat::ProcSample;
    use crate::run::servers::Watched;

    fn watched(pid: u32, rss_before_kb: u64, rss_after_kb: u64, cpu_us: u64) -> Watched {
        let at = |cpu_us, rss_kb| Some(ProcSample { cpu_us, rss_kb });
        Watched {
            pid,
            name: format!("p{pid}"),
            start: at(0, rss_before_kb),
            after_connect: at(0, rss_after_kb),
            measure_start: at(0, rss_after_kb),
            measure_end: at(cpu_us, rss_after_kb),
            last: at(cpu_us, rss_after_kb),
            peak_rss_kb: rss_after_kb,
        }
    }

    fn inputs(servers: &ServerWatch, targets: usize) -> ServerInputs<'_> {
        ServerInputs {
            servers,
            targets,
            floor: Some(5.0),
            window_secs: 10.0,
            connected: 2_000,
            units: 100_000,
            per: "delivery",
            cpus: 2,
        }
    }

    #[test]
    fn one_pid_per_target_gets_an_even_share() {
        let w = ServerWatch {
            servers: vec![
                watched(1, 1_000, 3_000, 1_000_000),
                watched(2, 1_000, 3_000, 1_000_000),
            ],
        };
        let (each, total) = server_reports(inputs(&w, 2));
        // 2,000 KiB over its 1,000 clients; 1 s over its 50,000 deliveries.
        assert_eq!(each[0].rss_growth_per_conn_bytes, Some(2_048.0));
        assert_eq!(each[0].cpu_us_per_delivery, Some(20.0));
        assert_eq!(each[0].ratio_to_floor, Some(4.0));
        let total = total.unwrap();
        assert_eq!(total.rss_growth_per_conn_bytes, Some(2_048.0));
        assert_eq!(total.cpu_us_per_delivery, Some(20.0));
        assert!((total.cpu_fraction_of_machine - 0.1).abs() < 1e-9);
    }

    #[test]
    fn a_single_pid_holds_every_client() {
        let w = ServerWatch {
            servers: vec![watched(1, 1_000, 3_000, 1_000_000)],
        };
        let (each, _) = server_reports(inputs(&w, 3));
        assert_eq!(each[0].rss_growth_per_conn_bytes, Some(1_024.0));
        assert_eq!(each[0].cpu_us_per_delivery, Some(10.0));
    }

    #[test]
    fn per_server_ratios_are_left_out_when_pids_do_not_match_targets() {
        // Two nodes and their Redis: which process holds which clients is unknown.
        let w = ServerWatch {
            servers: vec![
                watched(1, 1_000, 2_000, 1_000_000),
                watched(2, 1_000, 2_000, 1_000_000),
                watched(3, 1_000, 1_000, 500_000),
            ],
        };
        let (each, total) = server_reports(inputs(&w, 2));
        assert!(each.iter().all(|s| s.rss_growth_per_conn_bytes.is_none()));
        assert!(each.iter().all(|s| s.cpu_us_per_delivery.is_none()));
        assert_eq!(each[2].rss_end_kb, 1_000);
        let total = total.unwrap();
        assert_eq!(total.rss_growth_per_conn_bytes, Some(1_024.0));
        assert_eq!(total.cpu_us_per_delivery, Some(25.0));
    }
}
