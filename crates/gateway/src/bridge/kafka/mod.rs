//! The Kafka bridge: other services publish to Herald by producing to Kafka.
//!
//! Each node assigns itself partitions of the configured Kafka topics by hand (manual
//! assignment, not a shared consumer group: a consumer group would split the partitions
//! between nodes, and every node must deliver every record of a topic to its own
//! subscribers). Which partitions ([`super::interest`]; [`keys::Layout`] numbers them):
//!
//! - `cluster.routing = "broadcast"`: every partition, on every node, each from the position
//!   the node committed under its own group id (`<group_prefix>-<node_id>`), so a restarted
//!   node resumes from where it stopped and no record that reached Kafka is lost to it; a
//!   node with no committed position starts `topics.history_ttl` back, to fill its history.
//!   The node is ready once it has read what the log held when it (re)started.
//! - `"interest"` (the default): the partitions that can hold a topic with a local
//!   subscriber (see [`follow`]). A Herald topic lives in one partition of each configured
//!   Kafka topic, the one its key hashes to under `cluster.kafka_partitioner` ([`keys`]), so
//!   a subscription wants those partitions (every partition for a pattern) and waits, at most
//!   `cluster.backfill_timeout`, until the node has read them from `topics.history_ttl` back
//!   (`offsets_for_times`) up to the high watermark it saw when it added them
//!   (`incremental_assign`, without restarting the consumer). A partition with no local
//!   subscriber for `cluster.interest_linger` is unassigned and its topics forgotten (their
//!   history would have a hole when the node reads it again, from the history window).
//!   Positions of followed partitions are still committed under the node's group, but a
//!   partition followed anew starts from the history window, never from a commit: what the
//!   node knew of its topics was forgotten with it. A reconnect reads on from where the
//!   pass stopped, and the node is not ready until the partitions it followed then are
//!   caught up again (not those added for a subscription: a subscription waits for those).
//!   Why not seek to a client's cursor instead of the history window: the node serves
//!   `last`, history and every later client from the same topic history, which must start
//!   where the window does, as on a node that followed the partition all along.
//!
//! Keys and partitions: records are keyed by their Herald topic (Herald's producer does, with
//! librdkafka's `partitioner` set to match `cluster.kafka_partitioner`), so each Herald topic
//! stays in one partition and keeps its order. A record whose Herald topic does not hash to
//! the partition it was read from was keyed (or partitioned) otherwise: it is delivered where
//! that partition is read, and counted in
//! `herald_bridge_messages_total{bridge="kafka",direction="misrouted"}` under both routings
//! (so that a deployment checks it under broadcast before switching to interest). The
//! partition counts are read once, at the first connection: adding partitions to a configured
//! Kafka topic moves keys between partitions, and needs the nodes restarted (rolling).
//!
//! Routing never decodes the payload: the Herald topic comes from the `herald-topic` record
//! header (else the record key), the event name from `herald-event`. The value is one JSON
//! value, or one MessagePack value when the record's `herald-format` header says `msgpack`
//! (carried as produced to MessagePack subscribers; it must have a JSON form, see
//! [`herald_core::msgpack`]); it is checked once per node. This bridge produces a MessagePack
//! payload with `herald-format: msgpack`.
//!
//! Positions come from the log: a record at offset `o` of partition `p` gets sequence number
//! `o + 1` in an epoch derived from the Kafka topic and partition, so the same record has the
//! same id on every node and clients resume on any node, whichever partitions it followed
//! until then. Records are at-least-once; a replayed record has a position already delivered
//! and is dropped ([`herald_core::Topic::ingest`]).

mod bridge;
mod broadcast;
mod follow;
pub(crate) mod keys;
mod retries;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use herald_core::{Cursor, EventName, Payload, TopicName};
use rdkafka::Message as _;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Header, Headers as _, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_util::sync::CancellationToken;

use super::idempotency::KAFKA_HEADER;
use super::kafka_props::{self, KafkaContext};
use super::logs::{BoxFuture, Bridge, BridgeError, Ingest, now_ms};
use crate::config::{ClusterConfig, Routing};
use crate::telemetry::metrics;
use crate::telemetry::trace::Carried;
pub(crate) use bridge::KafkaBridge;
use bridge::NAME;
use keys::Layout;

/// The epoch of a Kafka partition's stream of positions.
pub(crate) fn partition_epoch(topic: &str, partition: i32) -> u64 {
    use std::hash::Hasher as _;
    let mut h = fnv::FnvHasher::default();
    h.write(b"kafka:");
    h.write(topic.as_bytes());
    h.write(&partition.to_be_bytes());
    h.finish() | 1
}

impl KafkaBridge {
    /// Creates the producer (connections are made lazily by librdkafka); a node with no
    /// committed position starts `history` back.
    pub(crate) fn new(
        config: &ClusterConfig,
        brokers: &str,
        history: Duration,
    ) -> anyhow::Result<Arc<Self>> {
        let context = KafkaContext::new("kafka_consumer");
        let producer: FutureProducer<KafkaContext> = kafka_props::client_config(
            brokers,
            &[("message.timeout.ms", "5000")],
            &config.kafka_properties,
            &[
                ("enable.idempotence", "true"),
                (
                    "partitioner",
                    keys::producer_property(config.kafka_partitioner),
                ),
            ],
        )
        .create_with_context(context.sharing("kafka_producer"))
        .map_err(|e| anyhow::anyhow!("kafka producer: {e}"))?;
        Ok(Arc::new(Self {
            brokers: brokers.to_string(),
            topics: config.kafka_topics.clone(),
            group: format!("{}-{}", config.kafka_group_prefix, config.node_id),
            node_id: config.node_id.clone(),
            properties: config.kafka_properties.clone(),
            history,
            partitioner: config.kafka_partitioner,
            broadcast: config.routing == Routing::Broadcast,
            linger: config.interest_linger,
            backfill_timeout: config.backfill_timeout,
            layout: OnceLock::new(),
            interest: OnceLock::new(),
            layout_known: tokio::sync::watch::Sender::new(false),
            positions: parking_lot::Mutex::new(HashMap::new()),
            misrouted: parking_lot::Mutex::new((0, None)),
            producer,
            context,
            last_error: parking_lot::Mutex::new(None),
            ready: AtomicBool::new(false),
            caught_up: AtomicBool::new(false),
            partitions: std::sync::atomic::AtomicUsize::new(0),
            retries: retries::Retries::new(config.idempotency_window, config.idempotency_max_keys),
        }))
    }

    fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
        metrics::bridge_up(NAME, ready);
    }

    /// One consuming pass: a consumer, the partition counts, then the broadcast or the
    /// interest loop. `first` when it is the bridge's first pass.
    async fn consume(&self, ingest: &Ingest, first: bool) -> anyhow::Result<()> {
        let consumer: StreamConsumer<KafkaContext> = kafka_props::client_config(
            &self.brokers,
            &[
                ("auto.commit.interval.ms", "500"),
                ("auto.offset.reset", "earliest"),
            ],
            &self.properties,
            &[
                ("group.id", &self.group),
                ("enable.auto.commit", "true"),
                ("enable.auto.offset.store", "false"),
                ("enable.partition.eof", "false"),
            ],
        )
        .create_with_context(self.context.clone())?;
        let consumer = Arc::new(consumer);
        let (topics, c) = (self.topics.clone(), consumer.clone());
        let counts = tokio::task::spawn_blocking(move || partition_counts(&c, &topics)).await??;
        let current = Layout::new(self.partitioner, &counts);
        self.retries.set_partitions(current.total());
        match self.broadcast {
            true => self.consume_all(ingest, &consumer, &current).await,
            false => follow::consume(self, ingest, &consumer, current, first).await,
        }
    }

    /// The pass is connected: errors from before are forgotten.
    fn connected(&self) {
        self.context.clear();
        self.last_error.lock().take();
        self.set_ready(true);
    }

    /// Runs for the whole pass: librdkafka reconnects by itself and resumes from its
    /// position; a probe tells readiness whether the broker answers meanwhile.
    async fn health(&self, consumer: &Arc<StreamConsumer<KafkaContext>>) {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let (c, topic) = (consumer.clone(), self.topics[0].clone());
            let ok = tokio::task::spawn_blocking(move || {
                c.fetch_metadata(Some(&topic), Duration::from_secs(2))
                    .is_ok()
            })
            .await
            .unwrap_or(false);
            if ok != self.ready.load(Ordering::Relaxed) {
                if ok {
                    self.context.clear();
                    tracing::info!("kafka broker reachable again");
                } else {
                    tracing::warn!("kafka broker unreachable; local connections are still served");
                }
                self.set_ready(ok);
            }
        }
    }

    /// Interest routing: the sweep of the followed partitions
    /// ([`super::interest::Interest::sweep_until`]), once the first metadata gave the layout;
    /// a dropped partition's position and remembered idempotency keys go with it.
    async fn sweep(self: Arc<Self>, ingest: Ingest, stop: CancellationToken) {
        let mut known = self.layout_known.subscribe();
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = known.wait_for(|known| *known) => {}
        }
        let (Some(layout), Some(interest)) = (self.layout.get(), self.interest.get()) else {
            return;
        };
        let of = |topic: &str, out: &mut Vec<u32>| out.extend(layout.partitions_of(topic));
        interest
            .sweep_until(&ingest, of, &stop, |dropped| {
                let partitions: Vec<_> = dropped.iter().map(|g| layout.partition(*g)).collect();
                self.retries.forget(&partitions);
                let mut positions = self.positions.lock();
                for number in dropped {
                    positions.remove(number);
                }
            })
            .await;
    }

    /// Counts (and logs, once a minute at most) a record whose Herald topic does not hash
    /// to the partition it was read from.
    fn misrouted(&self, topic: &TopicName, message: &rdkafka::message::BorrowedMessage<'_>) {
        metrics::bridge_message(NAME, "misrouted");
        let mut misrouted = self.misrouted.lock();
        misrouted.0 += 1;
        if misrouted
            .1
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(60))
        {
            tracing::warn!(
                %topic,
                kafka_topic = message.topic(),
                partition = message.partition(),
                partitioner = ?self.partitioner,
                misrouted = misrouted.0,
                "kafka record in a partition its herald topic does not hash to: it reaches only \
                 the nodes reading that partition (key records by the herald topic; see \
                 cluster.kafka_partitioner)"
            );
            *misrouted = (0, Some(Instant::now()));
        }
    }

    /// Delivers one record to this node's subscribers; `current` has the partition counts
    /// the pass read (to tell a misrouted record).
    fn ingest(
        &self,
        ingest: &Ingest,
        message: &rdkafka::message::BorrowedMessage<'_>,
        current: &Layout,
    ) {
        let headers = message
            .headers()
            .into_iter()
            .flat_map(|h| h.iter().map(|h| (h.key, h.value)));
        let Some((topic, event)) = route(message.key(), headers) else {
            tracing::warn!(
                partition = message.partition(),
                offset = message.offset(),
                "kafka record without a valid herald-topic header or key skipped"
            );
            return;
        };
        if let Some(partitions) = current.partitions(message.topic())
            && !current.is_routed(topic.as_str(), message.partition(), partitions)
        {
            self.misrouted(&topic, message);
        }
        let headers = message
            .headers()
            .into_iter()
            .flat_map(|h| h.iter().map(|h| (h.key, h.value)));
        let msgpack = match is_msgpack(headers) {
            Ok(msgpack) => msgpack,
            Err(format) => {
                tracing::warn!(
                    partition = message.partition(),
                    offset = message.offset(),
                    format,
                    "kafka record with an unknown herald-format skipped (json or msgpack)"
                );
                return;
            }
        };
        let payload = match (message.payload(), msgpack) {
            (Some(value), false) => Payload::from_json(value).map_err(|e| e.to_string()),
            (Some(value), true) => Payload::from_msgpack(value).map_err(|e| e.to_string()),
            (None, _) => Err("no value".to_string()),
        };
        let payload = match payload {
            Ok(payload) => payload,
            Err(error) => {
                tracing::warn!(
                    partition = message.partition(),
                    offset = message.offset(),
                    format = if msgpack { "msgpack" } else { "json" },
                    error,
                    "kafka record whose value is not a valid payload skipped"
                );
                return;
            }
        };
        let position = Cursor::new(
            partition_epoch(message.topic(), message.partition()),
            message.offset() as u64 + 1,
        );
        let now = now_ms() as i64;
        let written = message.timestamp().to_millis();
        let age_ms = written.map_or(0, |ts| now.saturating_sub(ts).max(0) as u64);
        if let Some(key) = retries::record_key(message)
            && let retries::Verdict::Repeat(first) = self.retries.ingested(
                (message.topic(), message.partition()),
                topic.as_str(),
                key,
                position,
                written.map_or(now, |ts| ts.max(0)) as u64,
            )
        {
            metrics::bridge_message(NAME, "repeat");
            tracing::debug!(
                %topic,
                partition = message.partition(),
                offset = message.offset(),
                %first,
                "kafka record dropped: its idempotency key was published to the topic within \
                 cluster.idempotency_window"
            );
            return;
        }
        // The W3C headers of a traced record (Herald's or another producer's).
        let mut trace = Carried::NONE;
        if ingest.traces() {
            for header in message.headers().into_iter().flat_map(|h| h.iter()) {
                let value = header.value.and_then(|v| std::str::from_utf8(v).ok());
                match header.key {
                    "traceparent" => trace.traceparent = value,
                    "tracestate" => trace.tracestate = value,
                    _ => {}
                }
            }
        }
        ingest.deliver(topic, position, event, payload, age_ms, trace);
    }
}

/// The Herald topic and event of a record, from its headers (`herald-topic`, `herald-event`;
/// the last of each wins) and, without a `herald-topic`, its key; never from the value. `None`
/// when neither names a valid topic. An invalid event name is dropped, not the record.
fn route<'a>(
    key: Option<&'a [u8]>,
    headers: impl Iterator<Item = (&'a str, Option<&'a [u8]>)>,
) -> Option<(TopicName, Option<EventName>)> {
    let (mut topic, mut event) = (key, None);
    for (name, value) in headers {
        match name {
            "herald-topic" => topic = value,
            "herald-event" => event = value,
            _ => {}
        }
    }
    let topic = TopicName::new(std::str::from_utf8(topic?).ok()?).ok()?;
    let event = event
        .and_then(|e| std::str::from_utf8(e).ok())
        .and_then(|e| EventName::new(e).ok());
    Some((topic, event))
}

/// Whether a record's value is MessagePack: its `herald-format` header (the last one wins) is
/// `msgpack`; `json` or no header is JSON. Anything else is refused, with what it said.
fn is_msgpack<'a>(
    headers: impl Iterator<Item = (&'a str, Option<&'a [u8]>)>,
) -> Result<bool, String> {
    let format = headers
        .filter(|(name, _)| *name == "herald-format")
        .last()
        .and_then(|(_, value)| value);
    match format {
        None | Some(b"json") => Ok(false),
        Some(b"msgpack") => Ok(true),
        Some(other) => Err(String::from_utf8_lossy(other).into_owned()),
    }
}

/// The partition count of each of `topics`, from the broker's metadata.
fn partition_counts(
    consumer: &StreamConsumer<KafkaContext>,
    topics: &[String],
) -> anyhow::Result<Vec<(String, u32)>> {
    let timeout = Duration::from_secs(5);
    let mut counts = Vec::with_capacity(topics.len());
    for topic in topics {
        let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
        let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
            anyhow::bail!("kafka topic {topic} not found");
        };
        if t.partitions().is_empty() {
            anyhow::bail!("kafka topic {topic} has no partitions (does it exist?)");
        }
        counts.push((topic.clone(), t.partitions().len() as u32));
    }
    Ok(counts)
}

impl Bridge for KafkaBridge {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Produces the message to the first configured Kafka topic, keyed by the Herald topic,
    /// with `herald-topic` / `herald-event` (and `herald-idempotency-key`) headers; the
    /// position is where Kafka stored it. A retry of a key this node has read or produced
    /// within the window is answered with the first record's position, not produced
    /// ([`retries`]).
    fn append<'a>(
        &'a self,
        topic: &'a TopicName,
        event: Option<&'a EventName>,
        data: &'a Payload,
        trace: Carried<'a>,
        idempotency: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Cursor, BridgeError>> {
        Box::pin(async move {
            let kafka_topic = self.topics[0].as_str();
            if let Some(key) = idempotency
                && let Some(first) =
                    (self.retries).answered(kafka_topic, topic.as_str(), key, now_ms())
            {
                return Ok(first);
            }
            let mut headers = OwnedHeaders::new()
                .insert(Header {
                    key: "herald-topic",
                    value: Some(topic.as_str()),
                })
                .insert(Header {
                    key: "herald-node",
                    value: Some(self.node_id.as_str()),
                });
            if let Some(event) = event {
                headers = headers.insert(Header {
                    key: "herald-event",
                    value: Some(event.as_str()),
                });
            }
            // A traced message's context (W3C names): every node's ingest continues its trace.
            for (key, value) in [
                ("traceparent", trace.traceparent),
                ("tracestate", trace.tracestate),
                (KAFKA_HEADER, idempotency),
            ] {
                if let Some(value) = value {
                    headers = headers.insert(Header {
                        key,
                        value: Some(value),
                    });
                }
            }
            // A MessagePack payload travels as its publisher sent it.
            let value = match data.msgpack() {
                Some(msgpack) => {
                    headers = headers.insert(Header {
                        key: "herald-format",
                        value: Some("msgpack"),
                    });
                    msgpack
                }
                None => data.as_bytes(),
            };
            let record = FutureRecord::to(&self.topics[0])
                .key(topic.as_str())
                .payload(&value[..])
                .headers(headers);
            let delivery = self
                .producer
                .send(record, Duration::from_secs(5))
                .await
                .map_err(|(e, _)| BridgeError::Unavailable {
                    bridge: NAME,
                    reason: e.to_string(),
                })?;
            metrics::bridge_message(NAME, "out");
            let position = Cursor::new(
                partition_epoch(kafka_topic, delivery.partition),
                delivery.offset as u64 + 1,
            );
            Ok(match idempotency {
                Some(key) => self.retries.produced(
                    (kafka_topic, delivery.partition),
                    topic.as_str(),
                    key,
                    position,
                    now_ms(),
                ),
                None => position,
            })
        })
    }

    /// Consumes the partitions this node follows (every one under broadcast routing) until
    /// `stop`, restarting with backoff after errors.
    fn run(self: Arc<Self>, ingest: Ingest, stop: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let sweep = (!self.broadcast)
                .then(|| tokio::spawn(self.clone().sweep(ingest.clone(), stop.clone())));
            let passes = AtomicU64::new(0);
            super::reconnect::reconnect_loop(
                NAME,
                &stop,
                Duration::from_millis(200),
                || async {
                    let first = passes.fetch_add(1, Ordering::Relaxed) == 0;
                    self.consume(&ingest, first).await.map_err(|e| {
                        match self.context.last_error() {
                            Some(cause) => format!("{e:#} ({cause})"),
                            None => format!("{e:#}"),
                        }
                    })
                },
                |error| {
                    self.set_ready(false);
                    if let Some(e) = error {
                        *self.last_error.lock() = Some(e);
                    }
                },
            )
            .await;
            if let Some(sweep) = sweep {
                let _ = sweep.await;
            }
        })
    }

    /// Wants the partitions that can hold `topics` (every partition for a pattern) and waits
    /// until the consumer has read their history, for at most `cluster.backfill_timeout`
    /// (which also bounds the wait for the first connection, when the partition counts are
    /// not known yet).
    fn backfill<'a>(
        &'a self,
        topics: &'a [&'a str],
        patterns: bool,
    ) -> BoxFuture<'a, Result<(), BridgeError>> {
        Box::pin(async move {
            if self.broadcast {
                return Ok(());
            }
            let deadline = tokio::time::Instant::now() + self.backfill_timeout;
            let mut known = self.layout_known.subscribe();
            // The partition counts come with the consumer's first metadata.
            let _ = tokio::time::timeout_at(deadline, async {
                let _ = known.wait_for(|known| *known).await;
            })
            .await;
            let (Some(layout), Some(interest)) = (self.layout.get(), self.interest.get()) else {
                return Err(unavailable(format!(
                    "this node has not reached the brokers within {:?}",
                    self.backfill_timeout
                )));
            };
            let partitions: Vec<u32> = match patterns {
                // A pattern may match a topic of any partition.
                true => (0..layout.total()).collect(),
                false => (topics.iter().flat_map(|t| layout.partitions_of(t))).collect(),
            };
            // The consumer sees the followed set change ([`Interest::changes`]).
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            interest.backfill(partitions, left).await.map_err(|pending| {
                unavailable(format!(
                    "this node could not read the history of {pending} kafka partition(s) within {:?}",
                    self.backfill_timeout
                ))
            })
        })
    }

    fn partitions_followed(&self) -> (usize, usize) {
        if self.broadcast {
            let partitions = self.partitions.load(Ordering::Relaxed);
            return (partitions, partitions);
        }
        match (self.layout.get(), self.interest.get()) {
            (Some(layout), Some(interest)) => (interest.followed_count(), layout.total() as usize),
            _ => (0, 0),
        }
    }

    fn is_ready(&self) -> bool {
        if !self.ready.load(Ordering::Relaxed) {
            return false;
        }
        match self.broadcast {
            true => self.caught_up.load(Ordering::Relaxed),
            false => (self.interest.get()).is_some_and(|i| i.initial_pending() == 0),
        }
    }

    fn not_ready_reason(&self) -> Option<String> {
        if self.is_ready() {
            return None;
        }
        // What librdkafka says now (a refused login) is more telling than how the last
        // pass ended (a metadata request that timed out because of it).
        if let Some(error) = self.context.last_error() {
            return Some(error);
        }
        if let Some(error) = self.last_error.lock().clone() {
            return Some(error);
        }
        if self.ready.load(Ordering::Relaxed) {
            return Some(match self.interest.get() {
                Some(interest) => format!(
                    "{} of {} followed partitions not caught up yet",
                    interest.initial_pending(),
                    interest.followed_count()
                ),
                None => "catching up with the log".into(),
            });
        }
        Some("connecting to the brokers".into())
    }
}

fn unavailable(reason: impl ToString) -> BridgeError {
    BridgeError::Unavailable {
        bridge: NAME,
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests;
