//! Retry-safe publishing through Kafka: a record's idempotency key (the
//! `herald-idempotency-key` header, set by Herald's producer for a publish that carried one
//! and by any other producer that wants it) makes every node drop a later record of the same
//! key to the same Herald topic within `cluster.idempotency_window`.
//!
//! Kafka cannot refuse the second record, so every node decides at ingest, per partition, by
//! the records' own timestamps: a partition is read in the same order by every node, so every
//! node that has read the first record drops the same later ones (a node that starts
//! following the partition later reads it from `topics.history_ttl` back, and knows the first
//! only if it is within that history). A retry through this node's publish API is answered
//! with the first record's position without producing again when this node has read (or
//! produced) the first; two publishes of one key racing on two nodes are both produced, and
//! every node delivers only the first (the second's publisher was answered a position that
//! is never delivered).
//!
//! Bounded: each partition keeps at most `cluster.idempotency_max_keys` divided by the
//! partitions of the configured topics (at least 1,024), the oldest forgotten first.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use herald_core::Cursor;

use rdkafka::Message as _;
use rdkafka::message::Headers as _;

use crate::bridge::idempotency::{IdempotencyKey, KAFKA_HEADER, Seen};

/// A partition's keys hold at least this many entries, however many partitions there are.
const MIN_PER_PARTITION: usize = 1024;

/// The keys each partition's records carried.
#[derive(Debug)]
pub(super) struct Retries {
    window: Duration,
    max_keys: usize,
    /// Partitions of the configured topics (known with the first metadata; 1 until then).
    partitions: AtomicU32,
    seen: parking_lot::Mutex<HashMap<(String, i32), Seen>>,
}

/// What to do with a record that carries a key.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The first of its key within the window (or the same record again): deliver it.
    Deliver,
    /// A later record of a key seen within the window: drop it (the first is at this position).
    Repeat(Cursor),
}

impl Retries {
    pub(super) fn new(window: Duration, max_keys: usize) -> Self {
        Self {
            window,
            max_keys,
            partitions: AtomicU32::new(1),
            seen: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    /// The configured topics have `partitions` partitions in all (each keeps its share of
    /// the keys).
    pub(super) fn set_partitions(&self, partitions: u32) {
        self.partitions.store(partitions.max(1), Ordering::Relaxed);
    }

    fn per_partition(&self) -> usize {
        let partitions = self.partitions.load(Ordering::Relaxed) as usize;
        (self.max_keys / partitions).max(MIN_PER_PARTITION)
    }

    /// A record read at `position` of `kafka_topic`'s `partition`, written at `at` (ms),
    /// carrying `key` for Herald topic `topic`.
    pub(super) fn ingested(
        &self,
        (kafka_topic, partition): (&str, i32),
        topic: &str,
        key: &str,
        position: Cursor,
        at: u64,
    ) -> Verdict {
        let cap = self.per_partition();
        let mut seen = self.seen.lock();
        let seen = (seen.entry((kafka_topic.to_string(), partition)))
            .or_insert_with(|| Seen::new(self.window, cap));
        match seen.first(topic, key, position, at) {
            None => Verdict::Deliver,
            // Held from this node's own append, produced after this record: this one is
            // the first in the partition.
            Some(held) if held.seq > position.seq => {
                seen.replace(topic, key, position, at);
                Verdict::Deliver
            }
            Some(first) => Verdict::Repeat(first),
        }
    }

    /// The position of the first record of `key` to `topic` in `kafka_topic` within the
    /// window before `now`, when this node has read or produced it.
    pub(super) fn answered(
        &self,
        kafka_topic: &str,
        topic: &str,
        key: &str,
        now: u64,
    ) -> Option<Cursor> {
        let seen = self.seen.lock();
        (seen.iter())
            .filter(|((t, _), _)| t == kafka_topic)
            .find_map(|(_, seen)| seen.peek(topic, key, now))
    }

    /// This node produced a record of `key` to `topic` at `position` of `kafka_topic`'s
    /// `partition`, at `now`: the position to answer, the first record's when one within
    /// the window came before it.
    pub(super) fn produced(
        &self,
        (kafka_topic, partition): (&str, i32),
        topic: &str,
        key: &str,
        position: Cursor,
        now: u64,
    ) -> Cursor {
        let cap = self.per_partition();
        let mut seen = self.seen.lock();
        let seen = (seen.entry((kafka_topic.to_string(), partition)))
            .or_insert_with(|| Seen::new(self.window, cap));
        match seen.remember(topic, key, position, now) {
            Some(first) if first.seq < position.seq => first,
            Some(_) => {
                seen.replace(topic, key, position, now);
                position
            }
            None => position,
        }
    }

    /// Forgets the keys of partitions this node stopped reading (read again from the history
    /// window when followed again).
    pub(super) fn forget(&self, partitions: &[(&str, i32)]) {
        let mut seen = self.seen.lock();
        for (topic, partition) in partitions {
            seen.remove(&(topic.to_string(), *partition));
        }
    }
}

/// A record's idempotency key (the last `herald-idempotency-key` header), when it has a valid
/// one; an invalid one is ignored (the record is delivered as if it had none).
pub(super) fn record_key<'a>(
    message: &'a rdkafka::message::BorrowedMessage<'_>,
) -> Option<&'a str> {
    let value = (message.headers()?.iter())
        .filter(|h| h.key == KAFKA_HEADER)
        .last()?
        .value?;
    let key = std::str::from_utf8(value).ok();
    match key.filter(|k| IdempotencyKey::is_stored(k)) {
        Some(key) => Some(key),
        None => {
            tracing::debug!(
                partition = message.partition(),
                offset = message.offset(),
                "kafka record with an invalid herald-idempotency-key: delivered without one"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seq: u64) -> Cursor {
        Cursor::new(3, seq)
    }

    const P0: (&str, i32) = ("herald", 0);

    #[test]
    fn every_node_delivers_the_first_record_of_a_key_in_the_partition() {
        let retries = Retries::new(Duration::from_secs(60), 100_000);
        assert_eq!(
            retries.ingested(P0, "t", "k", at(1), 1000),
            Verdict::Deliver
        );
        assert_eq!(
            retries.ingested(P0, "t", "k", at(4), 1500),
            Verdict::Repeat(at(1))
        );
        // Read again (at-least-once): still the first.
        assert_eq!(
            retries.ingested(P0, "t", "k", at(1), 1000),
            Verdict::Deliver
        );
        // Another topic, another key, another partition: distinct.
        assert_eq!(
            retries.ingested(P0, "u", "k", at(5), 1500),
            Verdict::Deliver
        );
        assert_eq!(
            retries.ingested(P0, "t", "j", at(6), 1500),
            Verdict::Deliver
        );
        assert_eq!(
            retries.ingested(("herald", 1), "t", "k", at(2), 1500),
            Verdict::Deliver
        );
        // Past the window, by the records' own clock.
        assert_eq!(
            retries.ingested(P0, "t", "k", at(9), 61_001),
            Verdict::Deliver
        );
    }

    #[test]
    fn a_retry_on_the_node_that_produced_or_read_the_first_is_answered_with_it() {
        let retries = Retries::new(Duration::from_secs(60), 100_000);
        assert_eq!(retries.answered("herald", "t", "k", 1000), None);
        assert_eq!(retries.produced(P0, "t", "k", at(7), 1000), at(7));
        assert_eq!(retries.answered("herald", "t", "k", 2000), Some(at(7)));
        assert_eq!(retries.answered("other", "t", "k", 2000), None);
        assert_eq!(
            retries.answered("herald", "t", "k", 62_000),
            None,
            "past the window"
        );
        // Two of this node's appends raced: the later is answered with the first.
        assert_eq!(retries.produced(P0, "t", "k", at(9), 1100), at(7));
        // Another node's record of the same key came first in the partition: this node
        // delivers it, and drops its own.
        assert_eq!(retries.ingested(P0, "t", "k", at(5), 990), Verdict::Deliver);
        assert_eq!(
            retries.ingested(P0, "t", "k", at(7), 1000),
            Verdict::Repeat(at(5))
        );
        assert_eq!(retries.answered("herald", "t", "k", 2000), Some(at(5)));
    }

    #[test]
    fn each_partition_keeps_its_share_of_the_keys() {
        let retries = Retries::new(Duration::from_secs(60), 8192);
        retries.set_partitions(4);
        for i in 0..10_000 {
            retries.ingested(P0, "t", &format!("k{i}"), at(i), 1000);
        }
        assert_eq!(retries.seen.lock()[&("herald".to_string(), 0)].len(), 2048);
        retries.forget(&[P0]);
        assert!(retries.seen.lock().is_empty());
    }
}
