//! Broadcast routing (`cluster.routing = "broadcast"`): every partition of the configured
//! Kafka topics on every node, each from the position the node committed (or the history
//! window when it has none); the node is ready once it has read what the log held when the
//! pass began.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::FutureExt as _;
use rdkafka::Message as _;
use rdkafka::Offset;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{Consumer, StreamConsumer};

use super::bridge::{KafkaBridge, NAME};
use super::keys::Layout;
use crate::bridge::kafka_props::KafkaContext;
use crate::bridge::logs::{Ingest, now_ms};
use crate::telemetry::metrics;

impl KafkaBridge {
    /// Broadcast routing: every partition, from the committed positions.
    pub(super) async fn consume_all(
        &self,
        ingest: &Ingest,
        consumer: &Arc<StreamConsumer<KafkaContext>>,
        current: &Layout,
    ) -> anyhow::Result<()> {
        let history_ms = self.history.as_millis() as i64;
        let (counts, c) = (current.counts(), consumer.clone());
        let assignment =
            tokio::task::spawn_blocking(move || assignment(&c, &counts, history_ms)).await??;
        consumer.assign(&assignment)?;
        self.partitions.store(assignment.count(), Ordering::Relaxed);
        metrics::bridge_partitions_followed(NAME, assignment.count());
        // Where the log ends now, per partition: ready once read up to there.
        let (c, starts) = (consumer.clone(), assignment.clone());
        let mut behind: HashMap<(String, i32), i64> = tokio::task::spawn_blocking(move || {
            let mut behind = HashMap::new();
            for e in starts.elements() {
                let (_, high) =
                    c.fetch_watermarks(e.topic(), e.partition(), Duration::from_secs(5))?;
                let start = match e.offset() {
                    Offset::Offset(o) => o,
                    _ => high,
                };
                if start < high {
                    behind.insert((e.topic().to_string(), e.partition()), high);
                }
            }
            Ok::<_, rdkafka::error::KafkaError>(behind)
        })
        .await??;
        self.caught_up.store(behind.is_empty(), Ordering::Relaxed);
        self.connected();
        tracing::info!(partitions = assignment.count(), group = %self.group, "kafka bridge consuming");
        let consume = async {
            loop {
                match consumer.recv().await {
                    Ok(message) => {
                        // The records already received go with it, their fan-out once at
                        // the end (batch frames for the subscribers that asked).
                        let _together = crate::bridge::together::Together::new();
                        let mut next = Some(message);
                        let mut taken = 0;
                        while let Some(message) = next.take() {
                            self.ingest(ingest, &message, current);
                            consumer.store_offset_from_message(&message)?;
                            if !behind.is_empty() {
                                let key = (message.topic().to_string(), message.partition());
                                if behind
                                    .get(&key)
                                    .is_some_and(|high| message.offset() + 1 >= *high)
                                {
                                    behind.remove(&key);
                                    if behind.is_empty() {
                                        tracing::info!("kafka bridge caught up with the log");
                                        self.caught_up.store(true, Ordering::Relaxed);
                                    }
                                }
                            }
                            taken += 1;
                            if taken < crate::bridge::together::READY_RECORDS
                                && let Some(Ok(ready)) = consumer.recv().now_or_never()
                            {
                                next = Some(ready);
                            }
                        }
                    }
                    Err(e) => {
                        // Transient (broker away, rebalance of metadata): librdkafka retries.
                        tracing::debug!(error = %e, "kafka consumer error");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        };
        tokio::select! {
            () = self.health(consumer) => Ok(()),
            result = consume => result,
        }
    }
}

/// Every partition of `topics` (with their counts), each from its committed offset, or from
/// `history_ms` ago when nothing is committed yet.
fn assignment(
    consumer: &StreamConsumer<KafkaContext>,
    topics: &[(String, u32)],
    history_ms: i64,
) -> anyhow::Result<TopicPartitionList> {
    let timeout = Duration::from_secs(5);
    let mut all = TopicPartitionList::new();
    for (topic, partitions) in topics {
        for p in 0..*partitions {
            all.add_partition(topic, p as i32);
        }
    }
    let committed = consumer.committed_offsets(all.clone(), timeout)?;
    let since = now_ms() as i64 - history_ms;
    let mut by_time = TopicPartitionList::new();
    for e in all.elements() {
        by_time.add_partition_offset(e.topic(), e.partition(), Offset::Offset(since))?;
    }
    let by_time = consumer.offsets_for_times(by_time, timeout)?;
    let mut start = TopicPartitionList::new();
    for e in committed.elements() {
        let offset = match e.offset() {
            Offset::Offset(o) => Offset::Offset(o),
            _ => by_time
                .find_partition(e.topic(), e.partition())
                .map(|p| p.offset())
                .filter(|o| matches!(o, Offset::Offset(_)))
                .unwrap_or(Offset::End),
        };
        start.add_partition_offset(e.topic(), e.partition(), offset)?;
    }
    Ok(start)
}
