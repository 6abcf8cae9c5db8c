//! The human summary printed at the end of a run.

use std::fmt::Write as _;

use super::model::{ChurnReport, Connections, Delivery, EchoReport, PublishReport, Report};
use crate::histogram::Percentiles;

fn pct(p: &Percentiles) -> String {
    if p.count == 0 {
        return "no samples".into();
    }
    format!(
        "p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2} ms  (n={})",
        p.p50_ms, p.p90_ms, p.p99_ms, p.p999_ms, p.max_ms, p.count
    )
}

fn row(out: &mut String, k: &str, v: impl std::fmt::Display) {
    let _ = writeln!(out, "  {k:<30} {v}");
}

/// A row of two figures, `a / b`.
fn pair(out: &mut String, k: &str, a: impl std::fmt::Display, b: impl std::fmt::Display) {
    row(out, k, format!("{a} / {b}"));
}

fn kb(v: u64) -> String {
    format!("{:.1} MiB", v as f64 / 1024.0)
}

fn outcomes(m: &std::collections::BTreeMap<String, u64>) -> String {
    let mut v: Vec<(&String, &u64)> = m.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn hostile(o: &mut String, h: &super::model::HostileReport) {
    let _ = writeln!(o, "hostile");
    row(
        o,
        "attackers / attacks",
        format!(
            "{} loops, {} attacks in {:.1}s ({:.0}/s), {} abandoned at the end",
            h.attackers, h.attacks, h.secs, h.attacks_per_sec, h.cancelled_at_end
        ),
    );
    row(o, "unexpected outcomes", h.unexpected_total);
    row(o, "by outcome", outcomes(&h.by_outcome));
    for a in &h.by_attack {
        let flag = if a.unexpected > 0 { " !" } else { "" };
        row(
            o,
            &format!("  {}{flag}", a.attack),
            format!(
                "{} ({} unexpected; p50 {:.1} ms): {}",
                a.total,
                a.unexpected,
                a.time_ms.p50_ms,
                outcomes(&a.outcomes)
            ),
        );
    }
    for u in h.unexpected.iter().take(20) {
        row(
            o,
            "  unexpected",
            format!("{}/{} → {} ×{}", u.attack, u.variant, u.outcome, u.count),
        );
    }
    if let Some(x) = &h.health {
        row(
            o,
            "health checks ok / all",
            format!(
                "{} / {} ({}; p99 {:.1} ms, max {:.1} ms)",
                x.ok, x.checks, x.url, x.latency_ms.p99_ms, x.latency_ms.max_ms
            ),
        );
        if !x.failures.is_empty() {
            row(o, "health failures", outcomes(&x.failures));
        }
    }
    for (name, probe) in [
        ("new-pattern probes", &h.pattern_probe),
        ("HTTP/2 probes", &h.h2_probe),
    ] {
        let Some(x) = probe else { continue };
        row(
            o,
            &format!("{name} ok / all"),
            format!(
                "{} / {} (p99 {:.1} ms)",
                x.ok, x.checks, x.latency_ms.p99_ms
            ),
        );
        if !x.failures.is_empty() {
            row(o, &format!("{name}: failures"), outcomes(&x.failures));
        }
    }
    for m in &h.memory {
        row(
            o,
            &format!("server {} rss", m.pid),
            format!(
                "attack start {} | after {:.0}s warm-up {} | peak {} | end {}",
                kb(m.rss_attack_start_kb),
                m.warmup_secs,
                kb(m.rss_start_kb),
                kb(m.rss_peak_kb),
                kb(m.rss_end_kb)
            ),
        );
        row(
            o,
            &format!("server {} rss growth", m.pid),
            format!(
                "first {:.0}s {} → last {:.0}s {}: {:+.1} MiB ({:+.2} MiB/min fitted)",
                m.window_secs,
                kb(m.rss_first_window_kb),
                m.window_secs,
                kb(m.rss_last_window_kb),
                m.rss_growth_kb as f64 / 1024.0,
                m.rss_slope_kb_per_min / 1024.0
            ),
        );
        if m.rss_per_minute_kb.len() > 1 {
            let per: Vec<String> = m
                .rss_per_minute_kb
                .iter()
                .map(|v| format!("{:.1}", *v as f64 / 1024.0))
                .collect();
            row(
                o,
                &format!("server {} rss per minute", m.pid),
                format!("{} MiB", per.join(" / ")),
            );
        }
    }
    if let Some(g) = &h.good_clients {
        row(
            o,
            "good clients",
            format!(
                "{} connected, {} failed, {} dropped; delivered {} / {} (missing {}, ratio {}) → {}",
                g.connected,
                g.failed,
                g.dropped,
                g.delivered,
                g.expected,
                g.missing,
                g.delivery_ratio.map_or("n/a".into(), |r| format!("{r:.6}")),
                if g.unharmed { "unharmed" } else { "HARMED" }
            ),
        );
    }
}

/// Renders the summary table.
pub(crate) fn render(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "herald-loadgen {} — {} ({:.1}s total: ramp {:.1}s, measured {:.1}s, drain {:.1}s)",
        r.version,
        r.command,
        r.phases.total_secs,
        r.phases.ramp_secs,
        r.phases.measured_secs,
        r.phases.drain_secs
    );
    if let Some(c) = &r.connections {
        connections_section(&mut o, c);
    }
    if let Some(d) = &r.delivery {
        delivery_section(&mut o, d);
    }
    if let Some(e) = &r.echo {
        echo_section(&mut o, e);
    }
    if let Some(c) = &r.churn {
        churn_section(&mut o, c);
    }
    if let Some(p) = &r.publish {
        publish_section(&mut o, p);
    }
    servers_section(&mut o, r);
    if let Some(h) = &r.hostile {
        hostile(&mut o, h);
    }
    let _ = writeln!(o, "loadgen");
    row(
        &mut o,
        "cpu",
        format!(
            "{:.2}s = {:.1}% of {} cpus",
            r.loadgen.cpu_seconds,
            r.loadgen.cpu_fraction_of_machine * 100.0,
            r.loadgen.machine_cpus
        ),
    );
    if !r.errors.is_empty() {
        let _ = writeln!(o, "errors");
        for (k, v) in &r.errors {
            row(&mut o, k, v);
        }
    }
    if r.verdict.ok {
        let _ = writeln!(o, "verdict: OK");
    } else {
        let _ = writeln!(o, "verdict: PROBLEMS");
        for p in &r.verdict.problems {
            let _ = writeln!(o, "  - {p}");
        }
    }
    o
}

/// The `connections` section.
fn connections_section(o: &mut String, c: &Connections) {
    let _ = writeln!(o, "connections");
    pair(o, "connected / target", c.connected, c.target);
    pair(o, "failed / dropped", c.failed, c.dropped);
    pair(o, "cohort / late joiners", c.cohort, c.late_joiners);
    row(
        o,
        "connect rate",
        format!("{:.0}/s", c.connect_rate_per_sec),
    );
    row(o, "connect time", pct(&c.connect_ms));
}

/// The `delivery` section.
fn delivery_section(o: &mut String, d: &Delivery) {
    let _ = writeln!(o, "delivery");
    if d.accounted {
        row(
            o,
            "published (failed)",
            format!("{} ({})", d.published, d.publish_failed),
        );
        pair(
            o,
            "delivered / expected",
            d.outcome.delivered,
            d.outcome.expected,
        );
        pair(
            o,
            "missing / duplicates",
            d.outcome.missing,
            d.outcome.duplicates,
        );
        if d.outcome.unconfirmed + d.outcome.unexpected + d.outcome.stale > 0 {
            row(
                o,
                "unconfirmed/unexpected/stale",
                format!(
                    "{} / {} / {}",
                    d.outcome.unconfirmed, d.outcome.unexpected, d.outcome.stale
                ),
            );
        }
    } else if d.outcome.delivered > 0 {
        row(o, "received (distinct seq)", d.outcome.delivered);
    }
    row(
        o,
        "receipts (all, churn)",
        format!("{} , {}", d.receipts, d.churn_receipts),
    );
    row(o, "receipts/s", format!("{:.0}", d.receipts_per_sec));
    row(o, "loss notifications", d.lost_events);
    row(o, "latency", pct(&d.latency_ms));
}

/// The `echo` section.
fn echo_section(o: &mut String, e: &EchoReport) {
    let _ = writeln!(o, "echo");
    pair(o, "sent / answered", e.sent, e.answered);
    pair(o, "unanswered / duplicates", e.unanswered, e.duplicates);
    row(
        o,
        "rate target / achieved",
        format!("{:.0} / {:.0} per s", e.target_rate, e.achieved_rate),
    );
    row(o, "round trip", pct(&e.rtt_ms));
}

/// The `churn` section.
fn churn_section(o: &mut String, c: &ChurnReport) {
    let _ = writeln!(o, "churn");
    pair(o, "started / connected", c.attempted, c.connected);
    pair(o, "failed / closed", c.failed, c.closed);
    row(
        o,
        "rate target / achieved",
        format!("{:.1} / {:.1} per s", c.rate, c.achieved_rate),
    );
    row(o, "connect time", pct(&c.connect_ms));
}

/// The `publish` section.
fn publish_section(o: &mut String, p: &PublishReport) {
    let _ = writeln!(o, "publish");
    pair(o, "requests ok / failed", p.ok, p.failed);
    row(
        o,
        "messages/s target/achieved",
        format!("{:.0} / {:.0}", p.target_rate, p.achieved_message_rate),
    );
    row(o, "requests ok/s", format!("{:.0}", p.achieved_qps));
    row(o, "request latency", pct(&p.latency_ms));
}

/// A section per server, and one for them together when there are several.
fn servers_section(o: &mut String, r: &Report) {
    for s in &r.servers {
        let _ = writeln!(o, "server pid {} ({})", s.pid, s.name);
        row(
            o,
            "cpu (measured window)",
            format!(
                "{:.2}s = {:.1}% of machine",
                s.cpu_seconds_measured,
                s.cpu_fraction_of_machine * 100.0
            ),
        );
        if let Some(u) = s.cpu_us_per_delivery {
            let ratio = s
                .ratio_to_floor
                .map(|x| format!(" ({x:.1}× floor)"))
                .unwrap_or_default();
            row(
                o,
                &format!("cpu-µs per {}", s.per),
                format!("{u:.2}{ratio}"),
            );
        }
        row(
            o,
            "rss start/connected/peak/end",
            format!(
                "{} / {} / {} / {}",
                kb(s.rss_start_kb),
                kb(s.rss_after_connect_kb),
                kb(s.rss_peak_kb),
                kb(s.rss_end_kb)
            ),
        );
        if let Some(g) = s.rss_growth_per_conn_bytes {
            row(o, "rss per connection", format!("{g:.0} bytes"));
        }
    }
    if let Some(t) = &r.servers_total
        && r.servers.len() > 1
    {
        let _ = writeln!(o, "servers together");
        row(
            o,
            "cpu of machine",
            format!("{:.1}%", t.cpu_fraction_of_machine * 100.0),
        );
        if let Some(u) = t.cpu_us_per_delivery {
            row(o, &format!("cpu-µs per {}", t.per), format!("{u:.2}"));
        }
    }
}
