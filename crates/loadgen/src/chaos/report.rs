//! The chaos report: JSON (the keys `deploy/chaos.sh` and CI read) and a self-contained HTML
//! page, built from every client's outcome, the ledger and the fault timeline.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use serde::Serialize;

use super::checker::{Finding, FindingKind};
use super::client::ClientOutcome;
use super::fault::FaultKind;
use super::ledger::Ledger;
use super::timeline::FaultRecord;
use crate::report::svg::esc;

/// Findings listed in full (the counts are always complete).
const LIST_CAP: usize = 2_000;

/// Latency summary of resumes after one kind of fault.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct Resume {
    pub(crate) count: u64,
    pub(crate) p50: u64,
    pub(crate) p99: u64,
    pub(crate) max: u64,
}

/// A client that did not get back every topic's last acknowledged message.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Unrecovered {
    pub(crate) client: u64,
    /// (topic, last sequence number received, last acknowledged).
    pub(crate) behind: Vec<(String, u64, u64)>,
    pub(crate) open_at_end: bool,
    /// Lost its connection at this time (ms) and never got it back.
    pub(crate) down_since_ms: Option<u64>,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ChaosReport {
    pub(crate) seed: u64,
    pub(crate) duration_s: f64,
    pub(crate) nodes: usize,
    pub(crate) clients: u64,
    pub(crate) topics: usize,
    /// Publishes sent (acknowledged + unknown fate), each counted once however many times
    /// it was tried.
    pub(crate) published: u64,
    /// Publishes acknowledged, on their first try or a retry.
    pub(crate) published_acked: u64,
    /// Publishes whose fate is still unknown at the end: no try was answered within the
    /// retry bounds (target: 0).
    pub(crate) published_uncertain: u64,
    /// Publishes sent more than once (with their idempotency key), and the tries beyond
    /// the first in all.
    pub(crate) published_retried: u64,
    pub(crate) publish_retries: u64,
    /// Retried publishes acknowledged in the end: each must be delivered exactly once.
    pub(crate) acked_after_retry: u64,
    /// Deliveries of publishes acknowledged after a retry that the clients' checks covered
    /// (client × message), and how many of them were missing or came twice (in findings).
    pub(crate) retried_checked: u64,
    pub(crate) retried_in_findings: u64,
    /// Failed tries by what went wrong (each retried unless it was its publish's last).
    pub(crate) publish_errors: BTreeMap<String, u64>,
    /// Messages received by clients (duplicates included).
    pub(crate) delivered: u64,
    /// Of them, those that came as Fossil deltas and applied; deltas that did not apply.
    pub(crate) deltas_applied: u64,
    pub(crate) delta_failures: u64,
    /// Faults injected, by kind (every kind listed).
    pub(crate) faults: BTreeMap<&'static str, u64>,
    /// The kinds the run drew from that were injected, and those that were not (the window
    /// too short for them, or the run ended first).
    pub(crate) fault_kinds_injected: Vec<&'static str>,
    pub(crate) fault_kinds_missed: Vec<&'static str>,
    /// Planned faults skipped because earlier ones took longer to heal than planned and
    /// they would have run into `--settle`.
    pub(crate) faults_skipped: usize,
    /// Faults whose control commands failed.
    pub(crate) fault_errors: u64,
    pub(crate) reconnects: BTreeMap<&'static str, u64>,
    pub(crate) sessions: BTreeMap<&'static str, u64>,
    /// Time from losing a connection to being subscribed again, by the fault in force
    /// (`none`: no fault).
    pub(crate) resume_ms: BTreeMap<&'static str, Resume>,
    pub(crate) silent_gaps: u64,
    pub(crate) duplicates: u64,
    pub(crate) reorders: u64,
    pub(crate) signalled_gaps: u64,
    /// Signalled gaps by the signal's reason (`expired`: history ran out, `epoch`: the log's
    /// life changed, `lagged`).
    pub(crate) signalled_by_reason: BTreeMap<String, u64>,
    /// Acknowledged messages missing, silent and signalled.
    pub(crate) messages_lost_silently: u64,
    pub(crate) messages_lost_signalled: u64,
    pub(crate) unrecovered_clients: u64,
    pub(crate) loss_signals: u64,
    /// Publishes of unknown fate delivered after later ones (allowed).
    pub(crate) late_uncertain: u64,
    /// Each node's resident memory, life by life (a killed node's restart is a new life).
    pub(crate) memory: Vec<super::memory::NodeMemory>,
    /// The most any node life of at least a minute grew after it settled (MiB): memory flat
    /// across faults.
    pub(crate) memory_growth_mib: f64,
    pub(crate) ok: bool,
    pub(crate) problems: Vec<String>,
    pub(crate) findings: Vec<Finding>,
    pub(crate) unrecovered: Vec<Unrecovered>,
    pub(crate) fault_log: Vec<FaultRecord>,
    pub(crate) command: Vec<String>,
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn resume_of(mut v: Vec<u64>) -> Resume {
    v.sort_unstable();
    Resume {
        count: v.len() as u64,
        p50: percentile(&v, 0.5),
        p99: percentile(&v, 0.99),
        max: v.last().copied().unwrap_or(0),
    }
}

/// What the report is built from.
pub(crate) struct Inputs<'a> {
    pub(crate) seed: u64,
    /// The kinds the fault schedule drew from (none without a control script).
    pub(crate) kinds: Vec<FaultKind>,
    /// Planned faults skipped: they slipped past the fault window.
    pub(crate) faults_skipped: usize,
    pub(crate) duration_s: f64,
    pub(crate) nodes: usize,
    pub(crate) outcomes: Vec<ClientOutcome>,
    pub(crate) ledger: &'a Ledger,
    pub(crate) fault_log: Vec<FaultRecord>,
    pub(crate) published: u64,
    pub(crate) publish_errors: BTreeMap<String, u64>,
    pub(crate) memory: Vec<super::memory::NodeMemory>,
    /// Some clients asked for deltas (`--delta-namespace`).
    pub(crate) delta: bool,
}

pub(crate) fn build(i: Inputs<'_>) -> ChaosReport {
    let totals = i.ledger.totals();
    let mut faults: BTreeMap<&'static str, u64> =
        FaultKind::ALL.iter().map(|k| (k.name(), 0)).collect();
    for f in &i.fault_log {
        *faults.entry(f.kind.name()).or_default() += 1;
    }
    let (mut fault_kinds_injected, mut fault_kinds_missed) = (Vec::new(), Vec::new());
    for k in FaultKind::ALL {
        if i.fault_log.iter().any(|f| f.kind == k) {
            fault_kinds_injected.push(k.name());
        } else if i.kinds.contains(&k) {
            fault_kinds_missed.push(k.name());
        }
    }
    let mut r = ChaosReport {
        seed: i.seed,
        duration_s: i.duration_s,
        nodes: i.nodes,
        clients: i.outcomes.len() as u64,
        topics: 0,
        published: i.published,
        published_acked: totals.acked,
        published_uncertain: totals.uncertain,
        published_retried: totals.retried,
        publish_retries: totals.retries,
        acked_after_retry: totals.acked_after_retry,
        retried_checked: 0,
        retried_in_findings: 0,
        publish_errors: i.publish_errors,
        delivered: 0,
        deltas_applied: 0,
        delta_failures: 0,
        faults,
        fault_kinds_injected,
        fault_kinds_missed,
        faults_skipped: i.faults_skipped,
        fault_errors: i.fault_log.iter().filter(|f| f.error.is_some()).count() as u64,
        reconnects: BTreeMap::new(),
        sessions: BTreeMap::new(),
        resume_ms: BTreeMap::new(),
        silent_gaps: 0,
        duplicates: 0,
        reorders: 0,
        signalled_gaps: 0,
        signalled_by_reason: BTreeMap::new(),
        messages_lost_silently: 0,
        messages_lost_signalled: 0,
        unrecovered_clients: 0,
        loss_signals: 0,
        late_uncertain: 0,
        memory_growth_mib: (i.memory.iter().flat_map(|n| &n.lives))
            .map(super::memory::Life::growth_mib)
            .fold(0.0, f64::max),
        memory: i.memory,
        ok: true,
        problems: Vec::new(),
        findings: Vec::new(),
        unrecovered: Vec::new(),
        fault_log: i.fault_log,
        command: std::env::args().collect(),
    };
    let mut resumes: BTreeMap<&'static str, Vec<u64>> = BTreeMap::new();
    let mut topics = std::collections::BTreeSet::new();
    for o in i.outcomes {
        for (k, n) in &o.reconnects {
            *r.reconnects.entry(k).or_default() += n;
        }
        for (t, n) in &o.sessions {
            *r.sessions.entry(t.name()).or_default() += n;
        }
        for (kind, ms) in &o.resumes {
            resumes
                .entry(kind.map_or("none", |k| k.name()))
                .or_default()
                .push(*ms);
        }
        r.delivered += o.check.delivered;
        r.deltas_applied += o.deltas_applied;
        r.delta_failures += o.delta_failures;
        r.loss_signals += o.check.signals;
        r.late_uncertain += o.check.late_uncertain;
        let mut behind = Vec::new();
        for (slot, (ledger_topic, name)) in o.check.topics().iter().enumerate() {
            topics.insert(*ledger_topic);
            let last = i.ledger.last_acked(*ledger_topic);
            let got = o.check.last_seq(slot);
            if let Some((after, upto)) = o.check.checked(slot) {
                r.retried_checked += i
                    .ledger
                    .acked_after_retry_in(*ledger_topic, after + 1, upto);
            }
            if got < last {
                behind.push((name.clone(), got, last));
            }
        }
        if !behind.is_empty() {
            r.unrecovered.push(Unrecovered {
                client: o.id,
                behind,
                open_at_end: o.open_at_end,
                down_since_ms: o.down_since_ms,
            });
        }
        for f in o.check.into_findings() {
            if f.kind != FindingKind::SignalledGap {
                r.retried_in_findings += f.retried;
            }
            match f.kind {
                FindingKind::SilentGap => {
                    r.silent_gaps += 1;
                    r.messages_lost_silently += f.missing;
                }
                FindingKind::SignalledGap => {
                    r.signalled_gaps += 1;
                    r.messages_lost_signalled += f.missing;
                    *r.signalled_by_reason
                        .entry(f.reason.clone().unwrap_or_default())
                        .or_default() += 1;
                }
                FindingKind::Duplicate => r.duplicates += 1,
                FindingKind::Reorder => r.reorders += 1,
            }
            if r.findings.len() < LIST_CAP {
                r.findings.push(f);
            }
        }
    }
    r.topics = topics.len();
    r.resume_ms = resumes
        .into_iter()
        .map(|(k, v)| (k, resume_of(v)))
        .collect();
    r.unrecovered_clients = r.unrecovered.len() as u64;
    for (n, what) in [
        (r.silent_gaps, "silent gaps"),
        (r.duplicates, "duplicates"),
        (r.reorders, "reorders"),
        (r.unrecovered_clients, "clients that never recovered"),
        (r.delta_failures, "deltas that did not apply"),
    ] {
        if n > 0 {
            r.problems.push(format!("{n} {what}"));
        }
    }
    if r.published_uncertain > 0 {
        r.problems.push(format!(
            "{} publishes of unknown fate (no try answered)",
            r.published_uncertain
        ));
    }
    if r.delivered == 0 {
        r.problems.push("nothing was delivered".into());
    }
    if i.delta && r.deltas_applied == 0 {
        r.problems
            .push("deltas were asked for but none came".into());
    }
    r.ok = r.problems.is_empty();
    r
}

/// A short text summary.
pub(crate) fn text(r: &ChaosReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "chaos: seed {} over {:.0}s, {} nodes, {} clients, {} topics",
        r.seed, r.duration_s, r.nodes, r.clients, r.topics
    );
    let _ = writeln!(
        o,
        "published {} ({} acked, {} unknown fate), delivered {}",
        r.published, r.published_acked, r.published_uncertain, r.delivered
    );
    let _ = writeln!(
        o,
        "retried {} publishes ({} tries more), {} acked after a retry: {} deliveries of them checked, {} missing or twice",
        r.published_retried,
        r.publish_retries,
        r.acked_after_retry,
        r.retried_checked,
        r.retried_in_findings
    );
    if !r.publish_errors.is_empty() {
        let _ = writeln!(o, "failed tries: {:?}", r.publish_errors);
    }
    let faults: Vec<String> = r.faults.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let _ = writeln!(
        o,
        "faults: {} ({} control errors)",
        faults.join(", "),
        r.fault_errors
    );
    let _ = writeln!(
        o,
        "fault kinds injected: {} of {} [{}]{}{}",
        r.fault_kinds_injected.len(),
        r.fault_kinds_injected.len() + r.fault_kinds_missed.len(),
        r.fault_kinds_injected.join(", "),
        if r.fault_kinds_missed.is_empty() {
            String::new()
        } else {
            format!("; not injected: {}", r.fault_kinds_missed.join(", "))
        },
        if r.faults_skipped == 0 {
            String::new()
        } else {
            format!(
                "; {} planned faults skipped (slipped past the fault window)",
                r.faults_skipped
            )
        }
    );
    let rc: Vec<String> = r
        .reconnects
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let _ = writeln!(o, "reconnects: {}", rc.join(", "));
    let _ = writeln!(
        o,
        "deltas: {} applied, {} did not apply",
        r.deltas_applied, r.delta_failures
    );
    for (k, v) in &r.resume_ms {
        let _ = writeln!(
            o,
            "resume after {k}: n={} p50={}ms p99={}ms max={}ms",
            v.count, v.p50, v.p99, v.max
        );
    }
    for n in &r.memory {
        let lives: Vec<String> = (n.lives.iter())
            .map(|l| {
                format!(
                    "{:.0}-{:.0}s: settled {:.1} peak {:.1} last {:.1} MiB",
                    l.first_at_s, l.last_at_s, l.settled_mib, l.peak_mib, l.last_mib
                )
            })
            .collect();
        let _ = writeln!(o, "node {} memory: {}", n.node, lives.join("; "));
    }
    let _ = writeln!(
        o,
        "silent gaps {} ({} msgs), duplicates {}, reorders {}, signalled gaps {} ({} msgs) {:?}, unrecovered clients {}",
        r.silent_gaps,
        r.messages_lost_silently,
        r.duplicates,
        r.reorders,
        r.signalled_gaps,
        r.messages_lost_signalled,
        r.signalled_by_reason,
        r.unrecovered_clients
    );
    for f in r
        .findings
        .iter()
        .filter(|f| f.kind != FindingKind::SignalledGap)
        .take(20)
    {
        let _ = writeln!(
            o,
            "  {:?} client {} {} node{} topic {} seq {}->{} ids {}->{} missing {} retried {} fault {}",
            f.kind,
            f.client,
            f.transport.name(),
            f.node + 1,
            f.topic,
            f.prev_seq,
            f.seq,
            f.prev_id,
            f.id,
            f.missing,
            f.retried,
            f.fault.as_ref().map_or("none".into(), |x| format!(
                "{} {} @{}ms{}",
                x.kind.name(),
                x.target,
                x.start_ms,
                if x.after_heal { " (after heal)" } else { "" }
            ))
        );
    }
    for u in r.unrecovered.iter().take(10) {
        let _ = writeln!(
            o,
            "  unrecovered client {}: {:?} open_at_end={} down_since={:?}",
            u.client, u.behind, u.open_at_end, u.down_since_ms
        );
    }
    let _ = writeln!(
        o,
        "verdict: {}",
        if r.ok {
            "OK".to_owned()
        } else {
            r.problems.join("; ")
        }
    );
    o
}

fn html(r: &ChaosReport) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>herald-loadgen chaos report</title><style>\
body{{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}}\
table{{border-collapse:collapse;margin:8px 0}}td,th{{border:1px solid #ddd;padding:3px 8px;font-size:12px;text-align:left}}\
th{{background:#f5f5f5}}.ok{{color:#1a7f37;font-weight:bold}}.bad{{color:#c62828;font-weight:bold}}pre{{background:#f7f7f7;padding:10px;font-size:12px}}\
</style></head><body><h1>herald-loadgen chaos report</h1>"
    );
    let _ = write!(
        o,
        "<p class=\"{}\">Verdict: {}</p><pre>{}</pre>",
        if r.ok { "ok" } else { "bad" },
        if r.ok {
            "OK".into()
        } else {
            esc(&r.problems.join("; "))
        },
        esc(&text(r))
    );
    o.push_str("<h2>Faults</h2><table><tr><th>start s</th><th>end s</th><th>kind</th><th>target</th><th>param</th><th>error</th></tr>");
    for f in &r.fault_log {
        let _ = write!(
            o,
            "<tr><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            f.start_ms as f64 / 1e3,
            f.end_ms
                .map_or("-".into(), |e| format!("{:.1}", e as f64 / 1e3)),
            f.kind.name(),
            esc(&f.target),
            f.param,
            esc(f.error.as_deref().unwrap_or(""))
        );
    }
    o.push_str("</table><h2>Findings</h2><table><tr><th>kind</th><th>at s</th><th>client</th><th>transport</th><th>node</th><th>topic</th><th>seq</th><th>ids</th><th>missing</th><th>retried</th><th>reason</th><th>fault</th></tr>");
    for f in &r.findings {
        let _ = write!(
            o,
            "<tr><td>{:?}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}→{}</td><td>{}→{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            f.kind,
            f.at_ms as f64 / 1e3,
            f.client,
            f.transport.name(),
            f.node + 1,
            esc(&f.topic),
            f.prev_seq,
            f.seq,
            esc(&f.prev_id),
            esc(&f.id),
            f.missing,
            f.retried,
            esc(f.reason.as_deref().unwrap_or("")),
            f.fault.as_ref().map_or("none".into(), |x| esc(&format!(
                "{} {} @{:.1}s{}",
                x.kind.name(),
                x.target,
                x.start_ms as f64 / 1e3,
                if x.after_heal { " (after heal)" } else { "" }
            )))
        );
    }
    o.push_str("</table></body></html>");
    o
}

/// Writes the JSON and HTML files asked for.
pub(crate) fn write(
    r: &ChaosReport,
    json: Option<&Path>,
    html_path: Option<&Path>,
) -> anyhow::Result<()> {
    if let Some(p) = json {
        std::fs::write(p, serde_json::to_string_pretty(r)?)
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    if let Some(p) = html_path {
        std::fs::write(p, html(r)).with_context(|| format!("cannot write {}", p.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::checker::{Here, StreamCheck};
    use super::super::ledger::Fate;
    use super::super::schedule::Transport;
    use super::super::timeline::Timeline;
    use super::*;

    fn outcome(id: u64, check: StreamCheck) -> ClientOutcome {
        ClientOutcome {
            id,
            check,
            reconnects: BTreeMap::new(),
            resumes: Vec::new(),
            sessions: BTreeMap::new(),
            open_at_end: true,
            down_since_ms: None,
            deltas_applied: 0,
            delta_failures: 0,
        }
    }

    fn here(now_ms: u64) -> Here {
        Here {
            client: 0,
            transport: Transport::Sse,
            node: 0,
            now_ms,
        }
    }

    /// Publishes 1..=6 of one topic: 2 and 4 acknowledged after retries, 5 never answered.
    fn ledger() -> Ledger {
        let l = Ledger::new(1);
        for seq in 1..=6 {
            l.sending(0, seq, 1);
        }
        l.sending(0, 2, 3);
        l.sending(0, 4, 2);
        l.sending(0, 5, 30);
        for seq in [1, 2, 3, 4, 6] {
            l.record(0, seq, Fate::Acked);
        }
        l.record(0, 5, Fate::Uncertain);
        l
    }

    fn inputs<'a>(ledger: &'a Ledger, outcomes: Vec<ClientOutcome>) -> Inputs<'a> {
        let tl = Timeline::default();
        let f = tl.begin(FaultKind::PubsubKill, "redis", 0, 100);
        tl.end(f, 200, None);
        Inputs {
            seed: 1,
            kinds: vec![FaultKind::PubsubKill, FaultKind::NodeKill],
            faults_skipped: 0,
            duration_s: 1.0,
            nodes: 1,
            outcomes,
            ledger,
            fault_log: tl.snapshot(),
            published: 6,
            publish_errors: BTreeMap::new(),
            memory: Vec::new(),
            delta: false,
        }
    }

    #[test]
    fn retried_publishes_are_counted_checked_and_the_unknown_ones_fail_the_run() {
        let l = ledger();
        let tl = Timeline::default();
        // client 0 got everything once (5, of unknown fate, too); client 1 got 2 twice and
        // missed 4; client 2 started at 3
        let mut a = StreamCheck::new(vec![(0, "t".into())]);
        let mut b = StreamCheck::new(vec![(0, "t".into())]);
        let mut c = StreamCheck::new(vec![(0, "t".into())]);
        for (check, seqs) in [
            (&mut a, &[1, 2, 3, 4, 5, 6][..]),
            (&mut b, &[1, 2, 2, 3, 6]),
            (&mut c, &[3, 4, 6]),
        ] {
            for (i, seq) in seqs.iter().enumerate() {
                check.on_message(0, *seq, &format!("e-{seq}"), here(i as u64), &l, &tl);
            }
        }
        let r = build(inputs(
            &l,
            vec![outcome(0, a), outcome(1, b), outcome(2, c)],
        ));
        assert_eq!((r.published_acked, r.published_uncertain), (5, 1), "{r:?}");
        assert_eq!(
            (r.published_retried, r.publish_retries, r.acked_after_retry),
            (3, 2 + 1 + 29, 2)
        );
        // a: 2 and 4; b: 2 and 4 (from its first message, 1); c: 4 (from 3)
        assert_eq!(r.retried_checked, 5);
        // b's duplicate of 2 and its gap missing 4
        assert_eq!(r.retried_in_findings, 2);
        assert_eq!((r.duplicates, r.silent_gaps), (1, 1));
        assert!(!r.ok);
        assert!(
            r.problems
                .iter()
                .any(|p| p.contains("1 publishes of unknown fate")),
            "{:?}",
            r.problems
        );
        assert_eq!(r.fault_kinds_injected, ["pubsub_kill"]);
        assert_eq!(r.fault_kinds_missed, ["node_kill"]);
        let t = text(&r);
        assert!(
            t.contains("fault kinds injected: 1 of 2 [pubsub_kill]; not injected: node_kill"),
            "{t}"
        );
        assert!(t.contains("retried 3 publishes (32 tries more), 2 acked after a retry: 5 deliveries of them checked, 2 missing or twice"), "{t}");
    }

    #[test]
    fn a_clean_run_with_every_retry_answered_is_ok() {
        let l = Ledger::new(1);
        l.sending(0, 1, 2);
        l.record(0, 1, Fate::Acked);
        l.record(0, 2, Fate::Acked);
        let tl = Timeline::default();
        let mut a = StreamCheck::new(vec![(0, "t".into())]);
        a.on_open(&l);
        for seq in [1, 2] {
            a.on_message(0, seq, "x", here(seq), &l, &tl);
        }
        let mut i = inputs(&l, vec![outcome(0, a)]);
        i.kinds = vec![FaultKind::PubsubKill];
        let r = build(i);
        assert!(r.ok, "{:?}", r.problems);
        assert_eq!((r.acked_after_retry, r.retried_checked), (1, 1));
        assert!(r.fault_kinds_missed.is_empty());
        // with deltas asked: none applied, or one failing, fails the run
        for (applied, failed, ok) in [(0, 0, false), (3, 1, false), (3, 0, true)] {
            let mut a = StreamCheck::new(vec![(0, "t".into())]);
            a.on_open(&l);
            for seq in [1, 2] {
                a.on_message(0, seq, "x", here(seq), &l, &tl);
            }
            let mut o = outcome(0, a);
            (o.deltas_applied, o.delta_failures) = (applied, failed);
            let mut i = inputs(&l, vec![o]);
            (i.kinds, i.delta) = (vec![FaultKind::PubsubKill], true);
            assert_eq!(build(i).ok, ok, "{applied} {failed}");
        }
    }
}
