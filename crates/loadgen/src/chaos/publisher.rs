//! Publishing for the chaos run: one sequential publisher per topic, each message carrying
//! the topic's next sequence number, sent through the admin API (`POST /v1/publish`) of a
//! node chosen from the seed. A topic Kafka carries in the cluster (`cluster.kafka_prefixes`)
//! is published the same way: the node produces it to Kafka (its producer is idempotent,
//! `acks=all`) and every node consumes it from there, so those messages travel through the
//! broker with Kafka-derived ids.
//!
//! Sequential per topic: message n+1 is sent only once message n was answered (or given up
//! on), so when a client sees n+1 the fate of every earlier number is known to the checker.
//!
//! Retry-safe: every publish carries a fresh idempotency key (`idempotency_key` in the body);
//! a try whose fate is unknown (a timeout, a broken connection, a 5xx such as
//! `503 bridge_unavailable`) is sent again with the same key, to the next node, after a
//! backoff, until it is answered or its bounds run out ([`RetryPolicy`]). The gateway answers
//! a retry of a key it has written with the first id and appends nothing, so a publish
//! acknowledged after a retry must be delivered exactly once.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::time::{Instant, MissedTickBehavior};

use super::ledger::{Fate, Ledger};
use super::rng::Rng;
use super::schedule::{STREAM_PUBLISH, STREAM_RETRY};
use crate::clock::unix_micros;
use crate::publish::http::{PostError, Poster};
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

/// How a publish of unknown fate is retried.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    /// Most tries of one publish, its first included.
    pub(crate) max_tries: u32,
    /// A publish is not tried again once this long has passed since its first try.
    pub(crate) retry_for: Duration,
    /// ...nor after this instant (the run's end draws near: left of unknown fate).
    pub(crate) until: Instant,
    /// Longest wait for a pooled connection that other topics' publishes hold (a paused
    /// node holds them for their timeouts): past it the try counts as failed, not sent.
    pub(crate) busy: Duration,
    /// Tells this run's keys from another's (a run against a cluster that still remembers
    /// the keys of a run with the same seed must not be answered that run's ids).
    pub(crate) run: u64,
}

/// What one topic's publisher did.
#[derive(Debug, Default)]
pub(crate) struct Published {
    pub(crate) sent: u64,
    /// Failed tries by what went wrong (`status 503`, `timed out`, ...); each was retried
    /// unless it was the publish's last.
    pub(crate) errors: std::collections::BTreeMap<String, u64>,
}

/// What a try's answer means.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// 2xx: written (by this try or an earlier one of the same key).
    Acked,
    /// No answer, a broken connection, a 5xx (a `503 bridge_unavailable` whose write may or
    /// may not have reached the log), 408 or 429: try again with the same key.
    Retry(String),
    /// Refused (another 4xx): trying again would be refused too.
    Refused(String),
}

fn answer(r: Result<u16, PostError>) -> Answer {
    match r {
        Ok(_) => Answer::Acked,
        Err(PostError::Status(s)) if (400..500).contains(&s) && s != 408 && s != 429 => {
            Answer::Refused(format!("HTTP status {s}"))
        }
        Err(PostError::Connect(_)) => Answer::Retry("connect failed".to_owned()),
        Err(PostError::Http(_)) => Answer::Retry("connection broken".to_owned()),
        Err(other) => Answer::Retry(other.to_string()),
    }
}

/// The idempotency key of publish `seq` of topic `index`: fresh for each publish, the same
/// for each of its tries (1..128 visible ASCII bytes, as the gateway asks).
pub(crate) fn key(run: u64, index: usize, seq: u64) -> String {
    format!("chaos-{run:x}-{index}-{seq}")
}

/// The pause before try `tries + 1` (100 ms doubling to 2 s, the upper half drawn).
fn backoff(tries: u32, r: &mut Rng) -> Duration {
    let cap = (100u64 << tries.saturating_sub(1).min(5)).min(2_000);
    Duration::from_millis(r.range(cap / 2, cap))
}

/// Publishes `topic` until `until`: each message until it is answered, a try that is not
/// answered (or answered 5xx) sent again with the same idempotency key, on the next node,
/// after a backoff, within `retry`'s bounds.
pub(crate) async fn run(
    topic: TopicPublisher,
    pool: Pool,
    ledger: Arc<Ledger>,
    seed: u64,
    until: Instant,
    retry: RetryPolicy,
) -> Published {
    let mut out = Published::default();
    let mut rng = Rng::new(seed.wrapping_add(topic.index as u64), STREAM_PUBLISH);
    // retries draw from their own stream, so that they never shift the node choices
    let mut pauses = Rng::new(seed, STREAM_RETRY + topic.index as u64);
    let mut tick = tokio::time::interval(topic.every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut seq = 0u64;
    let nodes = pool.len().max(1);
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
            "idempotency_key": key(retry.run, topic.index, seq),
        });
        let body = Bytes::from(body.to_string());
        let mut node = rng.below(nodes as u64) as usize;
        let first = Instant::now();
        let mut tries = 0u32;
        // bounded: at most `max_tries` tries, each bounded by the publish timeout (and the
        // wait for the connection, by the other topics' timeouts), none after `retry_for`
        let fate = loop {
            tries += 1;
            ledger.sending(topic.index, seq, tries);
            let slot = &pool[node][topic.index % CONNS_PER_NODE];
            let answered = match tokio::time::timeout(retry.busy, slot.lock()).await {
                Ok(mut poster) => answer(poster.post(body.clone()).await),
                Err(_) => Answer::Retry("connection busy".to_owned()),
            };
            let what = match answered {
                Answer::Acked => break Fate::Acked,
                Answer::Refused(what) => {
                    *out.errors.entry(what).or_default() += 1;
                    break Fate::Uncertain;
                }
                Answer::Retry(what) => what,
            };
            *out.errors.entry(what).or_default() += 1;
            let pause = backoff(tries, &mut pauses);
            let next = Instant::now() + pause;
            if tries >= retry.max_tries || next >= first + retry.retry_for || next >= retry.until {
                break Fate::Uncertain;
            }
            tokio::time::sleep_until(next).await;
            // a node that did not answer may be down: the next try goes to the next one
            // (any node answers a key another node wrote)
            node = (node + 1) % nodes;
        };
        ledger.record(topic.index, seq, fate);
    }
    out.sent = seq;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unanswered_tries_and_5xx_are_retried_other_refusals_are_not() {
        assert_eq!(answer(Ok(200)), Answer::Acked);
        for s in [500, 502, 503, 504, 408, 429] {
            assert!(
                matches!(answer(Err(PostError::Status(s))), Answer::Retry(_)),
                "{s}"
            );
        }
        assert_eq!(
            answer(Err(PostError::Timeout)),
            Answer::Retry("timed out".into())
        );
        assert_eq!(
            answer(Err(PostError::Http("reset".into()))),
            Answer::Retry("connection broken".into())
        );
        for s in [400, 403, 404, 413] {
            assert!(
                matches!(answer(Err(PostError::Status(s))), Answer::Refused(_)),
                "{s}"
            );
        }
    }

    #[test]
    fn keys_are_fresh_per_publish_and_valid() {
        let k = key(u64::MAX, 107, u64::MAX);
        assert!(
            k.len() <= 128 && k.bytes().all(|b| (b'!'..=b'~').contains(&b)),
            "{k}"
        );
        assert_ne!(key(1, 2, 3), key(1, 2, 4));
        assert_ne!(key(1, 2, 3), key(1, 3, 3));
        assert_ne!(key(1, 2, 3), key(2, 2, 3));
    }

    #[test]
    fn backoff_doubles_to_two_seconds() {
        let mut r = Rng::new(1, 2);
        for tries in 1..40 {
            let b = backoff(tries, &mut r).as_millis() as u64;
            let cap = (100u64 << (tries - 1).min(5)).min(2_000);
            assert!((cap / 2..=cap).contains(&b), "try {tries}: {b}");
        }
    }
}
