//! Interest routing for the Kafka bridge's consumer: it assigns itself the partitions of
//! [`Interest`], adding and removing them as the followed set changes
//! (`incremental_assign` / `incremental_unassign` on a manually assigned consumer, so the
//! partitions it keeps are not read again), and ingests their records.
//!
//! A partition followed anew starts `topics.history_ttl` back (`offsets_for_times`; at the
//! high watermark when no record is that recent) and is caught up once the consumer has read
//! up to the high watermark it saw when it added the partition (at once when there was
//! nothing to read), or its position got there (records that take offsets but are never
//! delivered, such as transaction markers): the subscriptions waiting for it then go on. A
//! partition still followed when a pass ends is read on, in the next pass, from where
//! the last one stopped; the node is not ready until those are caught up again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use rdkafka::consumer::{Consumer as _, StreamConsumer};
use rdkafka::error::KafkaResult;
use rdkafka::message::BorrowedMessage;
use rdkafka::{Message as _, Offset, TopicPartitionList};

use super::bridge::{KafkaBridge, NAME};
use super::keys::Layout;
use crate::bridge::interest::Interest;
use crate::bridge::kafka_props::KafkaContext;
use crate::bridge::logs::{Ingest, now_ms};

/// One partition as a pass reads it.
#[derive(Debug)]
struct Part {
    /// The generation at which it was followed (a partition dropped and followed again is
    /// read again from the history window).
    since: u64,
    /// The next offset to read.
    next: i64,
    /// Not caught up until the position reaches this offset.
    target: Option<i64>,
}

/// Interest routing: one consuming pass, until an error.
pub(super) async fn consume(
    bridge: &KafkaBridge,
    ingest: &Ingest,
    consumer: &Arc<StreamConsumer<KafkaContext>>,
    current: Layout,
    first: bool,
) -> anyhow::Result<()> {
    let layout = bridge.layout.get_or_init(|| current.clone());
    if *layout != current {
        tracing::warn!(
            started_with = ?layout.counts(),
            now = ?current.counts(),
            "the kafka topics' partition counts changed since this node started: keys moved \
             between partitions, and this node reads the partitions it started with; restart \
             the nodes (one by one) to follow the new layout"
        );
    }
    let interest = bridge
        .interest
        .get_or_init(|| Interest::new(NAME, layout.total(), false, bridge.linger));
    bridge.layout_known.send_replace(true);
    let mut pass = Pass {
        bridge,
        consumer,
        layout,
        interest,
        parts: HashMap::new(),
        generation: None,
        restarted: !first,
    };
    bridge.connected();
    tracing::info!(
        partitions = layout.total(),
        group = %bridge.group,
        "kafka bridge consuming the partitions this node follows"
    );
    let result = tokio::select! {
        () = bridge.health(consumer) => Ok(()),
        result = pass.run(ingest, &current) => result,
    };
    pass.keep_positions();
    result
}

/// One pass of the consumer.
struct Pass<'a> {
    bridge: &'a KafkaBridge,
    consumer: &'a Arc<StreamConsumer<KafkaContext>>,
    layout: &'a Layout,
    interest: &'a Interest,
    /// The partitions assigned, by number.
    parts: HashMap<u32, Part>,
    /// The generation of the followed set the assignment matches.
    generation: Option<u64>,
    /// Not the bridge's first pass: the partitions followed when it starts were lost by a
    /// reconnect, and the node is not ready until they are caught up.
    restarted: bool,
}

impl Pass<'_> {
    /// Follows the followed set and ingests records until an error.
    async fn run(&mut self, ingest: &Ingest, current: &Layout) -> anyhow::Result<()> {
        let consumer = self.consumer;
        let mut changes = self.interest.changes();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if self.generation != Some(self.interest.generation()) {
                self.reconcile().await?;
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = tick.tick() => self.check_positions(),
                received = consumer.recv() => match received {
                    Ok(message) => {
                        // The records already received go with it, their fan-out once at
                        // the end (batch frames for the subscribers that asked).
                        let _together = crate::bridge::together::Together::new();
                        self.handle(ingest, &message, current);
                        for _ in 1..crate::bridge::together::READY_RECORDS {
                            match consumer.recv().now_or_never() {
                                Some(Ok(message)) => self.handle(ingest, &message, current),
                                _ => break,
                            }
                        }
                    }
                    Err(e) => {
                        // Transient (broker away): librdkafka retries.
                        tracing::debug!(error = %e, "kafka consumer error");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                },
            }
        }
    }

    /// Ingests one record of a followed partition, and tells when its partition caught up.
    fn handle(&mut self, ingest: &Ingest, message: &BorrowedMessage<'_>, current: &Layout) {
        let Some(number) = self.layout.number(message.topic(), message.partition()) else {
            return;
        };
        let Some(part) = self.parts.get_mut(&number) else {
            return; // unassigned since it was fetched
        };
        part.next = part.next.max(message.offset() + 1);
        {
            let reading = self.interest.reading();
            if reading.follows(number, part.since) {
                self.bridge.ingest(ingest, message, current);
            }
        }
        if let Err(e) = self.consumer.store_offset_from_message(message) {
            tracing::debug!(error = %e, "kafka offset not stored");
        }
        if part.target.is_some_and(|high| message.offset() + 1 >= high) {
            part.target = None;
            let since = part.since;
            self.caught_up(number, since);
        }
    }

    /// The partition numbered `number` is caught up (when still followed since `since`).
    fn caught_up(&self, number: u32, since: u64) {
        if self.interest.reading().follows(number, since) {
            self.interest.set_caught_up(number, true);
        }
    }

    /// Partitions still catching up whose position reached their target without a record
    /// there to read (a transaction marker takes an offset and is never delivered).
    fn check_positions(&mut self) {
        if !self.parts.values().any(|p| p.target.is_some()) {
            return;
        }
        let Ok(positions) = self.consumer.position() else {
            return;
        };
        for e in positions.elements() {
            let Offset::Offset(at) = e.offset() else {
                continue;
            };
            let Some(number) = self.layout.number(e.topic(), e.partition()) else {
                continue;
            };
            let Some(part) = self.parts.get_mut(&number) else {
                continue;
            };
            if part.target.is_some_and(|high| at >= high) {
                part.target = None;
                let since = part.since;
                self.caught_up(number, since);
            }
        }
    }

    /// Brings the assignment in line with the followed set: unassigns the partitions no
    /// longer followed (or followed again since), assigns the new ones where they start.
    async fn reconcile(&mut self) -> anyhow::Result<()> {
        let (generation, followed) = self.interest.followed();
        let wanted: HashMap<u32, u64> = followed.iter().copied().collect();
        let gone: Vec<u32> = (self.parts.iter())
            .filter(|(g, p)| wanted.get(g) != Some(&p.since))
            .map(|(g, _)| *g)
            .collect();
        if !gone.is_empty() {
            let mut list = TopicPartitionList::new();
            for g in &gone {
                let (topic, partition) = self.layout.partition(*g);
                list.add_partition(topic, partition);
                self.parts.remove(g);
            }
            self.consumer.incremental_unassign(&list)?;
        }
        let new: Vec<(u32, u64)> = (followed.into_iter())
            .filter(|(g, _)| !self.parts.contains_key(g))
            .collect();
        if !new.is_empty() {
            // Read on from where an earlier pass stopped, when it was following the
            // partition since the same generation; else from the history window.
            let parts: Vec<(String, i32, Option<i64>)> = {
                let positions = self.bridge.positions.lock();
                (new.iter())
                    .map(|(g, since)| {
                        let (topic, partition) = self.layout.partition(*g);
                        let resume = (positions.get(g))
                            .filter(|(_, s)| s == since)
                            .map(|(next, _)| *next);
                        (topic.to_string(), partition, resume)
                    })
                    .collect()
            };
            let history_ms = self.bridge.history.as_millis() as i64;
            let c = self.consumer.clone();
            let asked = parts.clone();
            let starts =
                tokio::task::spawn_blocking(move || starts(&c, &asked, history_ms)).await??;
            let mut list = TopicPartitionList::new();
            for ((topic, partition, _), (start, _)) in parts.iter().zip(&starts) {
                list.add_partition_offset(topic, *partition, Offset::Offset(*start))?;
            }
            self.consumer.incremental_assign(&list)?;
            let initial = self.restarted && self.generation.is_none();
            for ((number, since), (start, high)) in new.into_iter().zip(starts) {
                self.interest.started(number, initial);
                let target = (start < high).then_some(high);
                self.parts.insert(
                    number,
                    Part {
                        since,
                        next: start,
                        target,
                    },
                );
                if target.is_none() {
                    self.caught_up(number, since);
                }
            }
        }
        if !gone.is_empty() || self.generation.is_none() {
            tracing::debug!(
                partitions = self.parts.len(),
                "kafka bridge following the partitions"
            );
        }
        self.generation = Some(generation);
        Ok(())
    }

    /// Keeps where each followed partition is, for the next pass.
    fn keep_positions(&self) {
        let reading = self.interest.reading();
        let mut positions = self.bridge.positions.lock();
        for (&number, part) in &self.parts {
            if reading.follows(number, part.since) {
                positions.insert(number, (part.next, part.since));
            }
        }
    }
}

/// Where each of `parts` (Kafka topic, partition, the offset to read on from if any) starts,
/// and its high watermark now: the offset to read on from, else the first record of the
/// last `history_ms`, else the high watermark.
fn starts(
    consumer: &StreamConsumer<KafkaContext>,
    parts: &[(String, i32, Option<i64>)],
    history_ms: i64,
) -> KafkaResult<Vec<(i64, i64)>> {
    let timeout = Duration::from_secs(5);
    let mut highs = Vec::with_capacity(parts.len());
    for (topic, partition, _) in parts {
        let (_, high) = consumer.fetch_watermarks(topic, *partition, timeout)?;
        highs.push(high);
    }
    let since = now_ms() as i64 - history_ms;
    let mut by_time = TopicPartitionList::new();
    for (topic, partition, resume) in parts {
        if resume.is_none() {
            by_time.add_partition_offset(topic, *partition, Offset::Offset(since))?;
        }
    }
    if by_time.count() > 0 {
        by_time = consumer.offsets_for_times(by_time, timeout)?;
    }
    Ok((parts.iter().zip(highs))
        .map(|((topic, partition, resume), high)| {
            let start = resume.unwrap_or_else(|| {
                match by_time
                    .find_partition(topic, *partition)
                    .map(|e| e.offset())
                {
                    Some(Offset::Offset(o)) => o,
                    _ => high,
                }
            });
            (start, high)
        })
        .collect())
}
