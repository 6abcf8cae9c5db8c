//! The built-in publisher: posts sequence-numbered, timestamped messages to Herald's
//! `/v1/publish` at a fixed rate (or in token-bucket bursts) and remembers, per topic, how
//! many sequence numbers it issued and which publish requests failed.
//!
//! Message `i` goes to topic `i % topics`; each topic has its own sequence counter from 0.
//! The send timestamp is taken right before each request is written (after any queueing in
//! the loadgen), so publish→receive latency does not include the loadgen's own backlog.

pub(crate) mod http;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use self::http::Poster;
use crate::clock::unix_micros;
use crate::error::ErrorKind;
use crate::histogram::Recorder;
use crate::payload::{data_object, publish_body};
use crate::rate::Pacer;
use crate::target::Target;
use crate::worker::protocol::{PublishSummary, TopicPublished};

/// Where each message goes when several publish URLs are given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum PublishMode {
    /// Every message to every node (nodes that do not share messages).
    All,
    /// Message `i` to node `i % nodes` (nodes bridged together).
    RoundRobin,
}

/// Publisher settings.
#[derive(Debug, Clone)]
pub(crate) struct PublishConfig {
    /// Publish endpoints.
    pub targets: Vec<Target>,
    /// Fan-out over endpoints.
    pub mode: PublishMode,
    /// Messages per second (0: unlimited).
    pub rate: f64,
    /// Token-bucket capacity; `None` paces evenly.
    pub burst: Option<f64>,
    /// Topic names; message `i` goes to `topics[i % len]`.
    pub topics: Vec<String>,
    /// Size of the `data` object in bytes.
    pub payload_size: usize,
    /// Optional `event` name.
    pub event: Option<String>,
    /// Concurrent requests (connections) per endpoint.
    pub concurrency: usize,
    /// Timeout per request.
    pub timeout: Duration,
    /// Source address for publish connections.
    pub source: Option<IpAddr>,
}

/// Live publisher counters.
#[derive(Debug)]
pub(crate) struct PublishStats {
    /// Logical messages issued (each may be several requests in `all` mode).
    pub messages: AtomicU64,
    /// HTTP requests completed (ok or not).
    pub requests: AtomicU64,
    /// Requests answered 2xx.
    pub ok: AtomicU64,
    /// Requests that failed.
    pub failed: AtomicU64,
    errors: [AtomicU64; ErrorKind::COUNT],
    statuses: Mutex<BTreeMap<u16, u64>>,
    /// Request latency (µs).
    pub latency: Recorder,
}

impl PublishStats {
    fn new() -> Self {
        Self {
            messages: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            errors: std::array::from_fn(|_| AtomicU64::new(0)),
            statuses: Mutex::new(BTreeMap::new()),
            latency: Recorder::new(4),
        }
    }

    /// Errors by kind (non-zero only).
    pub(crate) fn errors(&self) -> BTreeMap<ErrorKind, u64> {
        ErrorKind::ALL
            .iter()
            .filter_map(|k| {
                let v = self.errors[k.index()].load(Relaxed);
                (v > 0).then_some((*k, v))
            })
            .collect()
    }

    /// Responses by status code.
    pub(crate) fn statuses(&self) -> BTreeMap<u16, u64> {
        self.statuses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

#[derive(Debug, Clone, Copy)]
struct Job {
    topic: u32,
    seq: u64,
}

type Failed = Arc<Mutex<Vec<Vec<u64>>>>;

fn mark_failed(failed: &Failed, job: Job) {
    let mut f = failed.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(v) = f.get_mut(job.topic as usize) {
        v.push(job.seq);
    }
}

/// A running publisher.
pub(crate) struct Publisher {
    stats: Arc<PublishStats>,
    stop: CancellationToken,
    task: JoinHandle<PublishSummary>,
    started: Instant,
}

impl Publisher {
    /// Starts publishing now.
    pub(crate) fn start(cfg: PublishConfig) -> Self {
        let stats = Arc::new(PublishStats::new());
        let stop = CancellationToken::new();
        let task = tokio::spawn(issue_loop(cfg, stats.clone(), stop.clone()));
        Self {
            stats,
            stop,
            task,
            started: Instant::now(),
        }
    }

    /// Live counters.
    pub(crate) fn stats(&self) -> &Arc<PublishStats> {
        &self.stats
    }

    /// Time since start.
    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Stops issuing, waits for requests in flight (bounded by their timeout) and returns
    /// what was published.
    pub(crate) async fn finish(self) -> PublishSummary {
        self.stop.cancel();
        self.task.await.unwrap_or_default()
    }
}

async fn sender_loop(
    target: Target,
    cfg: Arc<PublishConfig>,
    rx: Arc<tokio::sync::Mutex<mpsc::Receiver<Job>>>,
    stats: Arc<PublishStats>,
    failed: Failed,
    hint: usize,
) {
    let mut poster = Poster::new(target, cfg.source, cfg.timeout);
    loop {
        let job = { rx.lock().await.recv().await };
        let Some(job) = job else { break };
        let topic = &cfg.topics[job.topic as usize];
        let data = data_object(unix_micros(), job.seq, Some(topic), cfg.payload_size);
        let body = Bytes::from(publish_body(topic, cfg.event.as_deref(), &data));
        let t0 = Instant::now();
        let r = poster.post(body).await;
        stats.latency.record(hint, t0.elapsed().as_micros() as u64);
        stats.requests.fetch_add(1, Relaxed);
        let status = match &r {
            Ok(s) => Some(*s),
            Err(http::PostError::Status(s)) => Some(*s),
            Err(_) => None,
        };
        if let Some(s) = status {
            *stats
                .statuses
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(s)
                .or_default() += 1;
        }
        match r {
            Ok(_) => {
                stats.ok.fetch_add(1, Relaxed);
            }
            Err(e) => {
                stats.failed.fetch_add(1, Relaxed);
                stats.errors[e.kind().index()].fetch_add(1, Relaxed);
                mark_failed(&failed, job);
            }
        }
    }
}

async fn issue_loop(
    cfg: PublishConfig,
    stats: Arc<PublishStats>,
    stop: CancellationToken,
) -> PublishSummary {
    let cfg = Arc::new(cfg);
    let ntopics = cfg.topics.len().max(1);
    let failed: Failed = Arc::new(Mutex::new(vec![Vec::new(); ntopics]));
    let mut senders = Vec::new();
    let mut queues = Vec::new();
    for (ti, target) in cfg.targets.iter().enumerate() {
        let (tx, rx) = mpsc::channel::<Job>(cfg.concurrency.max(1) * 2);
        let rx = Arc::new(tokio::sync::Mutex::new(rx));
        for c in 0..cfg.concurrency.max(1) {
            senders.push(tokio::spawn(sender_loop(
                target.clone(),
                cfg.clone(),
                rx.clone(),
                stats.clone(),
                failed.clone(),
                ti * 64 + c,
            )));
        }
        queues.push(tx);
    }
    let mut pacer = match cfg.burst {
        Some(b) => Pacer::bucket(cfg.rate, b),
        None => Pacer::fixed(cfg.rate),
    };
    let mut seqs = vec![0u64; ntopics];
    let mut i: u64 = 0;
    'issue: loop {
        let n = tokio::select! {
            _ = stop.cancelled() => break,
            n = pacer.acquire(256) => n,
        };
        for _ in 0..n {
            let topic = (i % ntopics as u64) as usize;
            let job = Job {
                topic: topic as u32,
                seq: seqs[topic],
            };
            seqs[topic] += 1;
            stats.messages.fetch_add(1, Relaxed);
            let chosen: Vec<&mpsc::Sender<Job>> = match cfg.mode {
                PublishMode::All => queues.iter().collect(),
                PublishMode::RoundRobin => vec![&queues[(i % queues.len() as u64) as usize]],
            };
            i += 1;
            let mut enqueued = 0;
            let mut stopped = false;
            for q in chosen {
                tokio::select! {
                    r = q.send(job) => match r {
                        Ok(()) => enqueued += 1,
                        Err(_) => mark_failed(&failed, job),
                    },
                    _ = stop.cancelled() => {
                        stopped = true;
                        break;
                    }
                }
            }
            if stopped {
                if enqueued == 0 {
                    // never sent anywhere: take the number back, it was not published
                    seqs[topic] -= 1;
                    stats.messages.fetch_sub(1, Relaxed);
                } else {
                    // sent to some nodes only: not expected by anyone
                    mark_failed(&failed, job);
                }
                break 'issue;
            }
        }
    }
    drop(queues);
    let wait = cfg.timeout * 2 + Duration::from_secs(1);
    for s in senders {
        let _ = tokio::time::timeout(wait, s).await;
    }
    let failed = failed.lock().unwrap_or_else(|p| p.into_inner()).clone();
    PublishSummary {
        topics: seqs
            .into_iter()
            .zip(failed)
            .map(|(issued, mut failed)| {
                failed.sort_unstable();
                failed.dedup();
                TopicPublished { issued, failed }
            })
            .collect(),
    }
}
