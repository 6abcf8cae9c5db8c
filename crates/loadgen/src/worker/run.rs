//! The worker loop: ramp up connections, report progress, follow the coordinator's phases,
//! and account for every connection at the end.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::protocol::{Control, PublishSummary, Snapshot, TopicTally, WorkerFinal, WorkerMsg};
use crate::conn::echo::Echo;
use crate::conn::lifecycle::run;
use crate::conn::sse::Sse;
use crate::conn::ws::WsClient;
use crate::conn::{ConnCtx, ConnOutcome, Role};
use crate::histogram::{self, Hist};
use crate::rate::Pacer;
use crate::seq::SeqOutcome;
use crate::spec::{ClientKind, WorkerSpec};
use crate::stats::Stats;

/// Global index given to churn client `k` of worker `w`: far above any main index, so that
/// it never collides, while `% topics` and `% targets` still spread churn clients evenly.
fn churn_index(worker: usize, k: u64) -> u64 {
    (1u64 << 48) + ((worker as u64) << 32) + k
}

fn spawn_conn(set: &mut JoinSet<ConnOutcome>, ctx: &Arc<ConnCtx>, conn: u64, role: Role) {
    let task = ctx.clone();
    match &ctx.spec.kind {
        ClientKind::Sse => set.spawn(run(task, conn, role, Sse::new(ctx, conn, role))),
        ClientKind::Ws { raw, init_frame } => {
            let client = WsClient::new(ctx, conn, role, *raw, init_frame.clone());
            set.spawn(run(task, conn, role, client))
        }
        &ClientKind::Echo {
            raw,
            size,
            rate_per_conn,
        } => set.spawn(run(
            task,
            conn,
            role,
            Echo::new(conn, raw, size, rate_per_conn),
        )),
    };
}

async fn churn_loop(ctx: Arc<ConnCtx>, rate: f64, hold: Duration) {
    let mut set = JoinSet::new();
    let mut pacer = Pacer::fixed(rate);
    let mut k = 0u64;
    let worker = ctx.spec.worker_id;
    // Churn clients use the same connection-attempt bound as the main clients.
    loop {
        tokio::select! {
            _ = ctx.quiesce.cancelled() => break,
            n = pacer.acquire(1000) => {
                for _ in 0..n {
                    spawn_conn(&mut set, &ctx, churn_index(worker, k), Role::Churn { hold });
                    k += 1;
                }
            }
            Some(_) = set.join_next(), if !set.is_empty() => {}
        }
    }
    while set.join_next().await.is_some() {}
}

async fn ticker(
    stats: Arc<Stats>,
    every: Duration,
    out: mpsc::Sender<WorkerMsg>,
    stop: CancellationToken,
) -> (Hist, Hist) {
    let mut latency_total = histogram::new_hist();
    let mut connect_total = histogram::new_hist();
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = interval.tick() => {
                let lat = stats.latency.take();
                let con = stats.connect.take();
                let _ = histogram::merge(&mut latency_total, &lat);
                let _ = histogram::merge(&mut connect_total, &con);
                let snap = Snapshot {
                    counters: stats.counters(),
                    latency: histogram::encode(&lat),
                    connect: histogram::encode(&con),
                };
                if out.send(WorkerMsg::Progress(snap)).await.is_err() {
                    break;
                }
            }
        }
    }
    (latency_total, connect_total)
}

enum Next {
    Control(Option<Control>),
    Deadline,
}

/// Runs a worker until `Stop`, a closed control channel, or its deadline.
///
/// `own_cpu` adds this process's CPU time to the final report (child processes only).
pub(crate) async fn run_worker(
    spec: WorkerSpec,
    mut control: mpsc::Receiver<Control>,
    out: mpsc::Sender<WorkerMsg>,
    own_cpu: bool,
) {
    let spec = Arc::new(spec);
    let stats = Arc::new(Stats::new(spec.hist_shards));
    let ctx = Arc::new(ConnCtx {
        spec: spec.clone(),
        stats: stats.clone(),
        started: AtomicBool::new(false),
        start: CancellationToken::new(),
        quiesce: CancellationToken::new(),
        stop: CancellationToken::new(),
        pending: Semaphore::new(spec.max_pending.max(1)),
    });
    let deadline = tokio::time::sleep(Duration::from_millis(spec.deadline_ms));
    tokio::pin!(deadline);
    let tick_stop = CancellationToken::new();
    let tick_task = tokio::spawn(ticker(
        stats.clone(),
        Duration::from_millis(spec.tick_ms.max(50)),
        out.clone(),
        tick_stop.clone(),
    ));

    let mut conns: JoinSet<ConnOutcome> = JoinSet::new();
    let mut outcomes: Vec<ConnOutcome> = Vec::new();
    let mut pacer = Pacer::fixed(spec.ramp_rate);
    let ramp_start = Instant::now();
    let mut spawned = 0u64;
    let mut early: Option<Option<PublishSummary>> = None;

    // Ramp: open the main connections at the configured rate.
    while spawned < spec.conns && early.is_none() {
        let next = tokio::select! {
            n = pacer.acquire(spec.conns - spawned) => {
                for _ in 0..n {
                    spawn_conn(&mut conns, &ctx, spec.first_conn + spawned, Role::Main);
                    spawned += 1;
                }
                continue;
            }
            c = control.recv() => Next::Control(c),
            _ = &mut deadline => Next::Deadline,
        };
        early = stop_request(next);
    }
    // Wait until every attempt is resolved (ready or failed); connect timeouts bound this.
    while early.is_none() {
        let c = stats.counters();
        if c.connected + c.failed >= spawned {
            break;
        }
        let next = tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(20)) => continue,
            Some(r) = conns.join_next(), if !conns.is_empty() => { if let Ok(o) = r { outcomes.push(o); } continue; }
            c = control.recv() => Next::Control(c),
            _ = &mut deadline => Next::Deadline,
        };
        early = stop_request(next);
    }
    let ramp_secs = ramp_start.elapsed().as_secs_f64();
    let _ = out
        .send(WorkerMsg::Ready {
            counters: stats.counters(),
        })
        .await;

    let mut churn_task = None;
    let summary = match early {
        Some(s) => s,
        None => loop {
            let next = tokio::select! {
                c = control.recv() => Next::Control(c),
                _ = &mut deadline => Next::Deadline,
                Some(r) = conns.join_next(), if !conns.is_empty() => { if let Ok(o) = r { outcomes.push(o); } continue; }
            };
            match next {
                Next::Control(Some(Control::Start)) => {
                    ctx.started.store(true, SeqCst);
                    ctx.start.cancel();
                    if let Some(churn) = &spec.churn {
                        churn_task = Some(tokio::spawn(churn_loop(
                            ctx.clone(),
                            churn.rate,
                            Duration::from_millis(churn.hold_ms),
                        )));
                    }
                    let _ = out
                        .send(WorkerMsg::Started {
                            counters: stats.counters(),
                        })
                        .await;
                }
                Next::Control(Some(Control::Quiesce)) => ctx.quiesce.cancel(),
                Next::Control(Some(Control::Stop { summary })) => break summary,
                Next::Control(None) | Next::Deadline => break None,
            }
        },
    };

    // Stop: close everything, collect every outcome (bounded wait), then account.
    ctx.quiesce.cancel();
    ctx.stop.cancel();
    let collect = async {
        while let Some(r) = conns.join_next().await {
            if let Ok(o) = r {
                outcomes.push(o);
            }
        }
    };
    if tokio::time::timeout(Duration::from_secs(15), collect)
        .await
        .is_err()
    {
        conns.abort_all();
    }
    if let Some(t) = churn_task {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    tick_stop.cancel();
    let (mut latency, mut connect) = tick_task
        .await
        .unwrap_or_else(|_| (histogram::new_hist(), histogram::new_hist()));
    let _ = histogram::merge(&mut latency, &stats.latency.take());
    let _ = histogram::merge(&mut connect, &stats.connect.take());
    let churn_connect = stats.churn_connect.take();

    let mut fin = account(&spec, &outcomes, summary.as_ref());
    fin.counters = stats.counters();
    fin.latency = histogram::encode(&latency);
    fin.connect = histogram::encode(&connect);
    fin.churn_connect = histogram::encode(&churn_connect);
    fin.ramp_secs = ramp_secs;
    if own_cpu {
        fin.cpu_us = crate::procstat::own_cpu_micros();
    }
    let _ = out.send(WorkerMsg::Final(Box::new(fin))).await;
}

fn stop_request(next: Next) -> Option<Option<PublishSummary>> {
    match next {
        Next::Control(Some(Control::Stop { summary })) => Some(summary),
        Next::Control(None) | Next::Deadline => Some(None),
        Next::Control(Some(_)) => None,
    }
}

/// Turns connection outcomes into per-topic tallies (see `SeqTracker::outcome`).
pub(crate) fn account(
    spec: &WorkerSpec,
    outcomes: &[ConnOutcome],
    summary: Option<&PublishSummary>,
) -> WorkerFinal {
    let mut topics = vec![TopicTally::default(); spec.topics.count as usize];
    let mut fin = WorkerFinal::default();
    let mut echo: Option<SeqOutcome> = None;
    let empty = super::protocol::TopicPublished::default();
    for o in outcomes.iter().filter(|o| o.ready) {
        if let Some((sent, tracker)) = &o.echo {
            echo.get_or_insert_with(SeqOutcome::default)
                .add(&tracker.outcome(*sent, &[], o.stayed));
        }
        if !o.cohort {
            fin.late_joiners += 1;
            continue;
        }
        fin.cohort += 1;
        for (t, tracker, lost) in &o.topics {
            let Some(tally) = topics.get_mut(*t as usize) else {
                continue;
            };
            tally.subscribers += 1;
            tally.dropped += u64::from(!o.stayed);
            tally.lost_events += lost;
            match summary {
                Some(s) => {
                    let p = s.topics.get(*t as usize).unwrap_or(&empty);
                    tally
                        .outcome
                        .add(&tracker.outcome(p.issued, &p.failed, o.stayed));
                }
                None => tally.received += tracker.distinct(),
            }
        }
    }
    fin.topics = topics;
    fin.echo = echo;
    fin
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seq::SeqTracker;
    use crate::spec::TopicPlan;
    use crate::worker::protocol::TopicPublished;

    fn spec(topics: u32) -> WorkerSpec {
        WorkerSpec {
            worker_id: 0,
            kind: ClientKind::Sse,
            targets: Vec::new(),
            first_conn: 0,
            conns: 0,
            ramp_rate: 0.0,
            max_pending: 1,
            topics: TopicPlan {
                count: topics,
                per_conn: 1,
                prefix: "t-".into(),
                param: "topic".into(),
                delta: false,
            },
            source_ips: Vec::new(),
            connect_timeout_ms: 1,
            subscribe_timeout_ms: 1,
            churn: None,
            read_buffer: 1024,
            max_line: 1024,
            max_event: 1024,
            tick_ms: 100,
            deadline_ms: 1000,
            hist_shards: 1,
        }
    }

    fn sub(
        topic: u32,
        seqs: impl IntoIterator<Item = u64>,
        cohort: bool,
        stayed: bool,
    ) -> ConnOutcome {
        let mut t = SeqTracker::new();
        for s in seqs {
            t.record(s);
        }
        ConnOutcome {
            ready: true,
            cohort,
            stayed,
            topics: vec![(topic, t, 0)],
            echo: None,
        }
    }

    #[test]
    fn accounts_cohort_late_joiners_drops_and_failed_publishes() {
        let outcomes = vec![
            sub(0, 0..10, true, true),                       // complete
            sub(0, (0..10).filter(|s| *s != 4), true, true), // one missing
            sub(1, 0..5, true, false),                       // dropped after seq 4
            sub(1, 5..10, false, true),                      // late joiner: not accounted
            ConnOutcome::default(),                          // never ready
        ];
        let summary = PublishSummary {
            topics: vec![
                TopicPublished {
                    issued: 10,
                    failed: vec![],
                },
                TopicPublished {
                    issued: 10,
                    failed: vec![7],
                },
            ],
        };
        let fin = account(&spec(2), &outcomes, Some(&summary));
        assert_eq!((fin.cohort, fin.late_joiners), (3, 1));
        let t0 = &fin.topics[0];
        assert_eq!(t0.subscribers, 2);
        assert_eq!(
            (
                t0.outcome.expected,
                t0.outcome.delivered,
                t0.outcome.missing
            ),
            (20, 19, 1)
        );
        let t1 = &fin.topics[1];
        assert_eq!((t1.subscribers, t1.dropped), (1, 1));
        // the dropped subscriber expects 0..=4 only
        assert_eq!((t1.outcome.expected, t1.outcome.missing), (5, 0));
        // without a publisher, only distinct receipts are counted
        let fin = account(&spec(2), &outcomes, None);
        assert_eq!(fin.topics[0].received, 19);
        assert_eq!(fin.topics[0].outcome.expected, 0);
    }
}
