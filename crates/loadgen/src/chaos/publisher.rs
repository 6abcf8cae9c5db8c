//! Publishing for the chaos run: one sequential publisher per topic, each message carrying
//! the topic's next sequence number, sent through the admin API (`POST /v1/publish`) of a
//! node chosen from the seed. A topic the cluster feeds from Kafka (`cluster.kafka_feeds`)
//! is published the same way: the node produces it to Kafka (its producer is idempotent,
//! `acks=all`) and every node consumes it from there, so those messages travel through the
//! broker with Kafka-derived ids.
//!
//! Sequential per topic: message n+1 is sent only once message n was answered, so when a
//! client sees n+1 the fate of every earlier number is known to the checker.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::{Instant, MissedTickBehavior};

use super::ledger::{Fate, Ledger};
use super::rng::Rng;
use super::schedule::STREAM_PUBLISH;
use crate::clock::unix_micros;
use crate::publish::http::Poster;
use crate::target::Target;

/// Keep-alive publish connections per node, shared by every topic's publisher (the admin
/// listener limits connections per address; one per topic and node would pass it).
pub(crate) const CONNS_PER_NODE: usize = 8;

/// The publish connections: per node, [`CONNS_PER_NODE`] posters.
pub(crate) type Pool = Arc<Vec<Vec<tokio::sync::Mutex<Poster>>>>;

/// Builds the pool.
pub(crate) fn pool(admin: Vec<Target>, timeout: Duration) -> Pool {
    Arc::new(
        admin
            .into_iter()
            .map(|t| {
                (0..CONNS_PER_NODE)
                    .map(|_| tokio::sync::Mutex::new(Poster::new(t.clone(), None, timeout)))
                    .collect()
            })
            .collect(),
    )
}

/// One topic's publisher.
#[derive(Debug, Clone)]
pub(crate) struct TopicPublisher {
    pub(crate) index: usize,
    pub(crate) name: String,
    /// Time between two messages.
    pub(crate) every: Duration,
}

/// What one topic's publisher did.
#[derive(Debug, Default)]
pub(crate) struct Published {
    pub(crate) sent: u64,
    /// Failed publishes by what went wrong (`status 503`, `timed out`, ...).
    pub(crate) errors: std::collections::BTreeMap<String, u64>,
}

/// Publishes `topic` until `until`.
pub(crate) async fn run(
    topic: TopicPublisher,
    pool: Pool,
    ledger: Arc<Ledger>,
    seed: u64,
    until: Instant,
) -> Published {
    let mut out = Published::default();
    let mut rng = Rng::new(seed.wrapping_add(topic.index as u64), STREAM_PUBLISH);
    let mut tick = tokio::time::interval(topic.every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut seq = 0u64;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(until) => break,
            _ = tick.tick() => {}
        }
        if Instant::now() >= until {
            break;
        }
        seq += 1;
        let body = serde_json::json!({
            "topic": topic.name,
            "data": { "seq": seq, "topic": topic.name, "ts": unix_micros() },
        });
        let node = rng.below(pool.len() as u64) as usize;
        let mut poster = pool[node][topic.index % CONNS_PER_NODE].lock().await;
        let fate = match poster.post(Bytes::from(body.to_string())).await {
            Ok(_) => Fate::Acked,
            Err(e) => {
                let what = match e {
                    crate::publish::http::PostError::Connect(_) => "connect failed".to_owned(),
                    crate::publish::http::PostError::Http(_) => "connection broken".to_owned(),
                    other => other.to_string(),
                };
                *out.errors.entry(what).or_default() += 1;
                Fate::Uncertain
            }
        };
        drop(poster);
        ledger.record(topic.index, seq, fate);
    }
    out.sent = seq;
    out
}
