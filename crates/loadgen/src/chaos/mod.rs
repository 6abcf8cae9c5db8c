//! `herald-loadgen chaos`: proof under faults. Clients over SSE, WebSocket and long-poll
//! follow shared and single-subscriber topics, reconnect on their own seeded schedule to a
//! random node with their cursors (sometimes over another transport), while publishers send
//! per-topic sequence numbers (retrying a publish of unknown fate with its idempotency key
//! until it is answered) and a control script injects faults on a seeded schedule (every
//! kind at least once, then at random).
//! Every client's stream is checked as it arrives ([`checker`]); the report counts silent
//! gaps, duplicates, reorders, signalled gaps and clients that never recovered.

pub(crate) mod args;
mod checker;
mod client;
mod fault;
mod injector;
mod ledger;
mod memory;
mod publisher;
mod report;
mod rng;
mod schedule;
mod timeline;
mod wire;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::args::ChaosArgs;
use self::fault::FaultKind;
use self::ledger::Ledger;
use self::publisher::TopicPublisher;
use self::rng::Rng;
use self::schedule::{ClientPlan, ClientShape, FaultShape, STREAM_TOPICS, plan_faults};
use crate::target::{Target, parse_target};

/// Exit status when the run finds a problem (as `--strict` elsewhere).
const EXIT_PROBLEMS: u8 = 3;
/// Exit status for a bad command line.
const EXIT_USAGE: u8 = 64;
/// Delay between two clients' starts (the ramp).
const CLIENT_STAGGER: Duration = Duration::from_millis(5);
/// Publishing starts once the clients are connected.
const PUBLISH_AFTER: Duration = Duration::from_secs(3);

/// The run's topics: (name, publish interval).
fn topics(a: &ChaosArgs) -> Vec<(String, Duration)> {
    let mut v = Vec::new();
    let delta = a.delta_namespace.as_deref();
    for i in 0..a.shared_topics {
        let kafka = a.kafka_prefix.as_deref().filter(|_| i % 2 == 1);
        let name = match (kafka, delta.filter(|_| i % 2 == 0)) {
            (Some(p), _) => format!("{p}shared-{i}"),
            (None, Some(ns)) => format!("{ns}:shared-{i}"),
            (None, None) => format!("chaos.shared-{i}"),
        };
        v.push((name, a.shared_every));
    }
    for i in 0..a.solo_topics {
        let kafka = a.kafka_prefix.as_deref().filter(|_| i % 3 == 2);
        let name = match (kafka, delta.filter(|_| i % 3 == 0)) {
            (Some(p), _) => format!("{p}solo-{i}"),
            (None, Some(ns)) => format!("{ns}:solo-{i}"),
            (None, None) => format!("chaos.solo-{i}"),
        };
        v.push((name, a.solo_every));
    }
    v
}

/// Client `c`'s topics (ledger indexes): one or two shared topics, and a solo topic of its
/// own for the first `solo` clients.
fn client_topics(seed: u64, c: u64, shared: usize, solo: usize) -> Vec<usize> {
    let mut r = Rng::new(seed.wrapping_add(c), STREAM_TOPICS);
    let mut v = Vec::new();
    if shared > 0 {
        let first = r.below(shared as u64) as usize;
        v.push(first);
        if shared > 1 && r.chance(0.5) {
            let second = (first + 1 + r.below(shared as u64 - 1) as usize) % shared;
            v.push(second);
        }
    }
    if (c as usize) < solo {
        v.push(shared + c as usize);
    }
    v
}

fn fault_shape(a: &ChaosArgs) -> FaultShape {
    let kafka = a.kafka_prefix.is_some();
    let kinds = a
        .faults
        .clone()
        .unwrap_or_else(|| FaultKind::ALL.to_vec())
        .into_iter()
        .filter(|k| kafka || *k != FaultKind::KafkaRestart)
        .collect();
    FaultShape {
        start: a.warmup,
        end: a.duration.saturating_sub(a.settle),
        gap: (a.fault_gap_min, a.fault_gap_max),
        kinds,
        nodes: a.urls.len(),
        kafka,
    }
}

fn client_shape(a: &ChaosArgs) -> ClientShape {
    ClientShape {
        every: (a.reconnect_min, a.reconnect_max),
        switch: a.switch,
        nodes: a.urls.len(),
    }
}

fn targets(urls: &[String], path: &str) -> Result<Vec<Target>, String> {
    urls.iter()
        .map(|u| parse_target(u, path, false).map_err(|e| e.to_string()))
        .collect()
}

/// Runs `herald-loadgen chaos`.
pub(crate) fn main(a: ChaosArgs) -> ExitCode {
    if a.urls.len() != a.admin_urls.len() || a.urls.is_empty() {
        eprintln!("error: give one --admin-url per --url (same order)");
        return ExitCode::from(EXIT_USAGE);
    }
    if a.clients == 0 || a.clients > 10_000 || a.duration <= a.settle + a.warmup {
        eprintln!(
            "error: --clients must be 1..=10000 and --duration longer than --warmup + --settle"
        );
        return ExitCode::from(EXIT_USAGE);
    }
    let seed = a.seed.unwrap_or_else(crate::clock::unix_micros);
    let faults = plan_faults(seed, &fault_shape(&a));
    if a.plan_only {
        let clients: Vec<serde_json::Value> = (0..a.clients.min(5))
            .map(|c| {
                let mut p = ClientPlan::new(seed, c, client_shape(&a));
                let legs: Vec<_> = (0..10).map(|_| p.next_leg()).collect();
                serde_json::json!({ "client": c, "topics": client_topics(seed, c, a.shared_topics, a.solo_topics), "legs": legs })
            })
            .collect();
        let plan = serde_json::json!({ "seed": seed, "faults": faults, "clients": clients });
        println!(
            "{}",
            serde_json::to_string_pretty(&plan).unwrap_or_default()
        );
        return ExitCode::SUCCESS;
    }
    let (sse, ws, poll, admin) = match (
        targets(&a.urls, "/v1/sse"),
        targets(&a.urls, "/v1/ws"),
        targets(&a.urls, "/v1/poll"),
        targets(&a.admin_urls, "/v1/publish"),
    ) {
        (Ok(s), Ok(w), Ok(p), Ok(ad)) => (s, w, p, ad),
        (Err(e), ..) | (_, Err(e), ..) | (_, _, Err(e), _) | (.., Err(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "[chaos] seed {seed}: {} faults planned over {:?}",
        faults.len(),
        a.duration
    );
    let report = rt.block_on(run(&a, seed, faults, [sse, ws, poll], admin));
    print!("{}", report::text(&report));
    if let Err(e) = report::write(&report, a.json.as_deref(), a.html.as_deref()) {
        eprintln!("error: {e:#}");
        return ExitCode::FAILURE;
    }
    if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_PROBLEMS)
    }
}

async fn run(
    a: &ChaosArgs,
    seed: u64,
    faults: Vec<schedule::PlannedFault>,
    [sse, ws, poll]: [Vec<Target>; 3],
    admin: Vec<Target>,
) -> report::ChaosReport {
    let topics = topics(a);
    let ledger = Arc::new(Ledger::new(topics.len()));
    let timeline = Arc::new(timeline::Timeline::default());
    let t0 = Instant::now();
    let stop = CancellationToken::new();
    let shared = Arc::new(client::Shared {
        sse,
        ws,
        poll,
        ledger: ledger.clone(),
        timeline: timeline.clone(),
        t0,
        seed,
        shape: client_shape(a),
        connect_timeout: a.connect_timeout,
        stop: stop.clone(),
    });
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..a.clients {
        let mine: Vec<(usize, String)> = client_topics(seed, c, a.shared_topics, a.solo_topics)
            .into_iter()
            .map(|i| (i, topics[i].0.clone()))
            .collect();
        let delta = a.delta_namespace.as_ref().is_some_and(|ns| {
            let prefix = format!("{ns}:");
            c % 2 == 0 && mine.iter().all(|(_, n)| n.starts_with(&prefix))
        });
        let shared = shared.clone();
        clients.spawn(async move {
            tokio::time::sleep(CLIENT_STAGGER * c as u32).await;
            client::run(c, mine, delta, shared).await
        });
    }
    let publish_until = t0 + a.duration.saturating_sub(a.drain);
    let mut publishers = tokio::task::JoinSet::new();
    let pool = publisher::pool(admin.clone(), a.publish_timeout);
    let retry = publisher::RetryPolicy {
        max_tries: a.publish_max_tries,
        retry_for: a.publish_retry_for,
        // a publish answered after this still reaches the clients before they stop
        until: publish_until + a.drain / 2,
        busy: a.publish_timeout,
        run: crate::clock::unix_micros(),
    };
    for (index, (name, every)) in topics.iter().enumerate() {
        let p = TopicPublisher {
            index,
            name: name.clone(),
            every: *every,
        };
        let (pool, ledger) = (pool.clone(), ledger.clone());
        publishers.spawn(async move {
            tokio::time::sleep(PUBLISH_AFTER).await;
            publisher::run(p, pool, ledger, seed, publish_until, retry).await
        });
    }
    let memory_stop = CancellationToken::new();
    let memory = tokio::spawn(memory::run(admin.clone(), t0, memory_stop.clone()));
    let fault_stop = CancellationToken::new();
    let injector = a.control.clone().map(|script| {
        tokio::spawn(injector::run(
            faults,
            script,
            timeline.clone(),
            t0,
            fault_shape(a).end,
            fault_stop.clone(),
        ))
    });
    // progress, bounded by the run's length
    let end = t0 + a.duration;
    while Instant::now() < end {
        tokio::time::sleep_until((Instant::now() + Duration::from_secs(10)).min(end)).await;
        let t = ledger.totals();
        eprintln!(
            "[chaos] {:>6.0}s published {} acked ({} after a retry), {} unknown, {} retried",
            t0.elapsed().as_secs_f64(),
            t.acked,
            t.acked_after_retry,
            t.uncertain,
            t.retried
        );
    }
    fault_stop.cancel();
    let mut faults_skipped = 0;
    if let Some(j) = injector {
        faults_skipped = j.await.unwrap_or(0);
    }
    memory_stop.cancel();
    let memory = memory.await.unwrap_or_default();
    stop.cancel();
    let mut published = 0;
    let mut publish_errors = std::collections::BTreeMap::new();
    while let Some(Ok(p)) = publishers.join_next().await {
        published += p.sent;
        for (k, n) in p.errors {
            *publish_errors.entry(k).or_default() += n;
        }
    }
    let mut outcomes = Vec::with_capacity(a.clients as usize);
    while let Some(o) = clients.join_next().await {
        if let Ok(o) = o {
            outcomes.push(o);
        }
    }
    outcomes.sort_by_key(|o| o.id);
    report::build(report::Inputs {
        seed,
        faults_skipped,
        kinds: match a.control {
            Some(_) => fault_shape(a).kinds,
            None => Vec::new(),
        },
        duration_s: a.duration.as_secs_f64(),
        nodes: admin.len(),
        outcomes,
        ledger: &ledger,
        fault_log: timeline.snapshot(),
        published,
        publish_errors,
        memory,
        delta: a.delta_namespace.is_some(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_mix_shared_and_solo_and_kafka_fed() {
        let shared = 8;
        let solo = 10;
        let mut count = vec![0; shared + solo];
        for c in 0..300 {
            let t = client_topics(5, c, shared, solo);
            assert_eq!(t, client_topics(5, c, shared, solo));
            assert!(!t.is_empty() && t.len() <= 3);
            t.iter().for_each(|i| count[*i] += 1);
        }
        assert!(count[..shared].iter().all(|n| *n > 10), "{count:?}");
        assert!(count[shared..].iter().all(|n| *n == 1), "{count:?}");
    }
}
