//! The `hostile` section of the report, and what it adds to the verdict.

use std::collections::BTreeMap;

use super::HostileConfig;
use super::engine::{HealthTally, HostileResult};
use super::memory;
use crate::histogram;
use crate::report::model::{
    AttackReport, GoodClients, HealthReport, HostileReport, MemoryReport, Report, UnexpectedReport,
};

/// When the attack phase ran, in seconds since the run began (the timeline's clock).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    /// Attacks began.
    pub start: f64,
    /// No new attack after this.
    pub end: f64,
}

/// Builds the section from the engine's results and the report's timeline, and adds the
/// problems it finds to the verdict.
pub(crate) fn attach(r: &mut Report, result: HostileResult, cfg: &HostileConfig, w: Window) {
    let t = tallied(&result, cfg);
    let checks = |h: HealthTally| HealthReport {
        failed: h.checks - h.ok,
        url: h.url,
        checks: h.checks,
        ok: h.ok,
        failures: h.failures,
        latency_ms: histogram::summarize(&h.time),
    };
    let health = result.health.map(checks);
    let pattern_probe = result.probe.map(checks);
    let h2_probe = result.h2_probe.map(checks);
    let memory = memory_reports(r, cfg, w);
    let good_clients = good_clients(r);
    let probes = [&health, &pattern_probe, &h2_probe];
    let found = problems(r, cfg, &t, probes, &memory);
    r.verdict.problems.extend(found);
    r.verdict.ok = r.verdict.problems.is_empty();
    let secs = result.secs.max(1e-3);
    r.hostile = Some(HostileReport {
        attackers: cfg.conns,
        catalogue: cfg.attacks.iter().map(|a| a.name().to_owned()).collect(),
        attack_timeout_secs: cfg.attack_timeout.as_secs_f64(),
        slowloris_max_secs: cfg.slowloris_max.as_secs_f64(),
        max_slow: cfg.max_slow,
        source_ips: cfg.source_ips.len(),
        secs: result.secs,
        started: result.started,
        attacks: t.attacks,
        attacks_per_sec: t.attacks as f64 / secs,
        cancelled_at_end: t.cancelled,
        unexpected_total: t.unexpected_total,
        by_outcome: t.by_outcome,
        by_attack: t.by_attack,
        unexpected: t.unexpected,
        health,
        pattern_probe,
        h2_probe,
        memory,
        good_clients,
    });
}

/// `outcome ×count, ...`.
fn failures(f: &BTreeMap<String, u64>) -> String {
    f.iter()
        .map(|(k, v)| format!("{k} ×{v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The attacks' counts, per attack (in catalogue order) and together.
struct Tallied {
    by_outcome: BTreeMap<String, u64>,
    by_attack: Vec<AttackReport>,
    /// Most frequent first.
    unexpected: Vec<UnexpectedReport>,
    attacks: u64,
    cancelled: u64,
    unexpected_total: u64,
}

/// Sums the engine's tallies: catalogue order, then anything else that was counted.
fn tallied(result: &HostileResult, cfg: &HostileConfig) -> Tallied {
    let mut by_outcome: BTreeMap<String, u64> = BTreeMap::new();
    let mut by_attack = Vec::new();
    let mut unexpected = Vec::new();
    let (mut attacks, mut cancelled, mut unexpected_total) = (0u64, 0u64, 0u64);
    let mut order = cfg.attacks.clone();
    for a in result.tallies.keys() {
        if !order.contains(a) {
            order.push(*a);
        }
    }
    for a in order {
        let Some(t) = result.tallies.get(&a) else {
            by_attack.push(AttackReport {
                attack: a.name().into(),
                ..AttackReport::default()
            });
            continue;
        };
        for (k, v) in &t.outcomes {
            *by_outcome.entry(k.clone()).or_default() += v;
        }
        for ((variant, outcome), count) in &t.unexpected {
            unexpected.push(UnexpectedReport {
                attack: a.name().into(),
                variant: variant.clone(),
                outcome: outcome.clone(),
                count: *count,
            });
        }
        attacks += t.total;
        cancelled += t.cancelled;
        unexpected_total += t.total - t.expected;
        by_attack.push(AttackReport {
            attack: a.name().into(),
            total: t.total,
            expected: t.expected,
            unexpected: t.total - t.expected,
            cancelled: t.cancelled,
            outcomes: t.outcomes.clone(),
            by_variant: t.variants.clone(),
            time_ms: histogram::summarize(&t.time),
        });
    }
    unexpected.sort_by(|a, b| b.count.cmp(&a.count).then(a.attack.cmp(&b.attack)));
    Tallied {
        by_outcome,
        by_attack,
        unexpected,
        attacks,
        cancelled,
        unexpected_total,
    }
}

/// Each server's RSS over the attack phase (after the warm-up, at most a quarter of it).
fn memory_reports(r: &Report, cfg: &HostileConfig, w: Window) -> Vec<MemoryReport> {
    let warmup = cfg.warmup.as_secs_f64().min((w.end - w.start) / 4.0);
    r.servers
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let samples: Vec<(f64, u64)> = r
                .timeline
                .iter()
                .filter_map(|p| p.server_rss_kb.get(i).map(|kb| (p.t_secs, *kb)))
                .collect();
            memory::analyze(s.pid, &samples, w.start, w.end, warmup)
        })
        .collect()
}

/// How the well-behaved subscribers fared.
fn good_clients(r: &Report) -> Option<GoodClients> {
    r.connections.as_ref().filter(|c| c.target > 0).map(|c| {
        let d = r.delivery.as_ref();
        let accounted = d.is_some_and(|d| d.accounted);
        let missing = d.map_or(0, |d| d.outcome.missing);
        GoodClients {
            connected: c.connected,
            failed: c.failed,
            dropped: c.dropped,
            expected: d.map_or(0, |d| d.outcome.expected),
            delivered: d.map_or(0, |d| d.outcome.delivered),
            missing,
            delivery_ratio: d.and_then(|d| d.delivery_ratio),
            unharmed: c.failed == 0
                && c.dropped == 0
                && (!accounted || (missing == 0 && d.is_some_and(|d| d.outcome.expected > 0))),
        }
    })
}

/// What the section adds to the verdict.
fn problems(
    r: &Report,
    cfg: &HostileConfig,
    t: &Tallied,
    [health, pattern_probe, h2_probe]: [&Option<HealthReport>; 3],
    memory: &[MemoryReport],
) -> Vec<String> {
    let mut problems = Vec::new();
    if t.unexpected_total > 0 {
        let top: Vec<String> = t
            .unexpected
            .iter()
            .take(3)
            .map(|u| format!("{}/{} → {} ×{}", u.attack, u.variant, u.outcome, u.count))
            .collect();
        problems.push(format!(
            "{} of {} attacks had an unexpected outcome (e.g. {})",
            t.unexpected_total,
            t.attacks,
            top.join("; ")
        ));
    }
    if let Some(h) = health
        && h.failed > 0
    {
        problems.push(format!(
            "{} of {} health checks of {} failed",
            h.failed, h.checks, h.url
        ));
    }
    if let Some(p) = pattern_probe
        && p.failed > 0
    {
        problems.push(format!(
            "{} of {} new-pattern subscriptions of a good client were refused ({}) — a pattern lock-out",
            p.failed,
            p.checks,
            failures(&p.failures)
        ));
    }
    if let Some(p) = h2_probe
        && p.failed > 0
    {
        problems.push(format!(
            "{} of {} requests of a good HTTP/2 client to {} failed ({})",
            p.failed,
            p.checks,
            p.url,
            failures(&p.failures)
        ));
    }
    for s in &r.servers {
        if !s.alive_at_end {
            problems.push(format!("server pid {} was gone at the end", s.pid));
        }
    }
    if let Some(limit) = cfg.max_rss_growth_kb {
        for m in memory {
            if m.rss_growth_kb > limit as i64 {
                problems.push(format!(
                    "server pid {} RSS grew {} KiB from the first to the last {:.0} s (limit {limit} KiB)",
                    m.pid, m.rss_growth_kb, m.window_secs
                ));
            }
        }
    }
    if t.attacks == 0 {
        problems.push("no attack finished".into());
    }
    problems
}
