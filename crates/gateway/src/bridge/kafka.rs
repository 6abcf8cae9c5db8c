//! The Kafka bridge: other services publish to Herald by producing to Kafka.
//!
//! Every node consumes **every partition** of the configured Kafka topics itself (manual
//! assignment, not a shared consumer group), because every node must deliver every message to
//! its own subscribers; a consumer group would split the partitions between nodes. Each node
//! commits its position under its own group id (`<group_prefix>-<node_id>`), so a restarted
//! node resumes from where it stopped and no record that reached Kafka is lost to it. A node
//! with no committed position starts `topics.history_ttl` back, to fill its history.
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
//! same id on every node and clients resume on any node. Records are at-least-once; a replayed
//! record has a position already delivered and is dropped ([`herald_core::Topic::ingest`]).
//! Produce records for one Herald topic with the Herald topic as the key (as this bridge does),
//! so they land in one partition and keep their order.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use herald_core::{Cursor, EventName, Payload, TopicName};
use rdkafka::Message as _;
use rdkafka::Offset;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Header, Headers as _, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_util::sync::CancellationToken;

use super::kafka_props::{self, KafkaContext};
use super::{BoxFuture, Bridge, BridgeError, Ingest, now_ms};
use crate::config::ClusterConfig;
use crate::telemetry::metrics;

const NAME: &str = "kafka";

/// The Kafka bridge.
pub(crate) struct KafkaBridge {
    brokers: String,
    topics: Vec<String>,
    group: String,
    node_id: String,
    properties: std::collections::BTreeMap<String, String>,
    /// How far back a node with no committed position starts (`topics.history_ttl`).
    history: Duration,
    producer: FutureProducer<KafkaContext>,
    /// The consumer's librdkafka errors (a refused login, an untrusted certificate).
    context: KafkaContext,
    /// Why the last consuming session ended.
    last_error: parking_lot::Mutex<Option<String>>,
    ready: AtomicBool,
    /// Whether this node has read what the log held when it (re)started consuming: until
    /// then it is not ready, so clients are not sent to a node that would tell them messages
    /// were lost only because it has not read them yet.
    caught_up: AtomicBool,
    /// Partitions assigned (every partition of the configured topics).
    partitions: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for KafkaBridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaBridge")
            .field("brokers", &self.brokers)
            .field("topics", &self.topics)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

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
            &[("enable.idempotence", "true")],
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
            producer,
            context,
            last_error: parking_lot::Mutex::new(None),
            ready: AtomicBool::new(false),
            caught_up: AtomicBool::new(false),
            partitions: std::sync::atomic::AtomicUsize::new(0),
        }))
    }

    fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
        metrics::bridge_up(NAME, ready);
    }

    async fn consume(&self, ingest: &Ingest) -> anyhow::Result<()> {
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
        let history_ms = self.history.as_millis() as i64;
        let (topics, c) = (self.topics.clone(), consumer.clone());
        let assignment =
            tokio::task::spawn_blocking(move || assignment(&c, &topics, history_ms)).await??;
        consumer.assign(&assignment)?;
        self.partitions.store(assignment.count(), Ordering::Relaxed);
        metrics::bridge_groups_followed(NAME, assignment.count());
        // Where the log ends now, per partition: ready once read up to there.
        let (c, starts) = (consumer.clone(), assignment.clone());
        let mut behind: std::collections::HashMap<(String, i32), i64> =
            tokio::task::spawn_blocking(move || {
                let mut behind = std::collections::HashMap::new();
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
        self.context.clear();
        self.last_error.lock().take();
        self.set_ready(true);
        tracing::info!(partitions = assignment.count(), group = %self.group, "kafka bridge consuming");
        // librdkafka reconnects by itself and resumes from its position; a probe tells
        // readiness whether the broker answers meanwhile.
        let health = async {
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
                        tracing::warn!(
                            "kafka broker unreachable; local connections are still served"
                        );
                    }
                    self.set_ready(ok);
                }
            }
        };
        let consume = async {
            loop {
                match consumer.recv().await {
                    Ok(message) => {
                        self.ingest(ingest, &message);
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
            () = health => Ok(()),
            result = consume => result,
        }
    }

    fn ingest(&self, ingest: &Ingest, message: &rdkafka::message::BorrowedMessage<'_>) {
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
        let age_ms = message
            .timestamp()
            .to_millis()
            .map_or(0, |ts| now.saturating_sub(ts).max(0) as u64);
        ingest.deliver(topic, position, event, payload, age_ms);
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

/// Every partition of `topics`, each from its committed offset, or from `history_ms` ago
/// when nothing is committed yet.
fn assignment(
    consumer: &StreamConsumer<KafkaContext>,
    topics: &[String],
    history_ms: i64,
) -> anyhow::Result<TopicPartitionList> {
    let timeout = Duration::from_secs(5);
    let mut all = TopicPartitionList::new();
    for topic in topics {
        let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
        let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
            anyhow::bail!("kafka topic {topic} not found");
        };
        if t.partitions().is_empty() {
            anyhow::bail!("kafka topic {topic} has no partitions (does it exist?)");
        }
        for p in t.partitions() {
            all.add_partition(topic, p.id());
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

impl Bridge for KafkaBridge {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Produces the message to the first configured Kafka topic, keyed by the Herald topic,
    /// with `herald-topic` / `herald-event` headers; the position is where Kafka stored it.
    fn append<'a>(
        &'a self,
        topic: &'a TopicName,
        event: Option<&'a EventName>,
        data: &'a Payload,
    ) -> BoxFuture<'a, Result<Cursor, BridgeError>> {
        Box::pin(async move {
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
            Ok(Cursor::new(
                partition_epoch(&self.topics[0], delivery.partition),
                delivery.offset as u64 + 1,
            ))
        })
    }

    /// Consumes every partition of the configured topics until `stop`, restarting with
    /// backoff after errors.
    fn run(self: Arc<Self>, ingest: Ingest, stop: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            super::reconnect_loop(
                NAME,
                &stop,
                Duration::from_millis(200),
                || async {
                    self.consume(&ingest)
                        .await
                        .map_err(|e| match self.context.last_error() {
                            Some(cause) => format!("{e:#} ({cause})"),
                            None => format!("{e:#}"),
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
        })
    }

    fn groups_followed(&self) -> (usize, usize) {
        let partitions = self.partitions.load(Ordering::Relaxed);
        (partitions, partitions)
    }

    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed) && self.caught_up.load(Ordering::Relaxed)
    }

    fn not_ready_reason(&self) -> Option<String> {
        if self.is_ready() {
            return None;
        }
        // What librdkafka says now (a refused login) is more telling than how the last
        // session ended (a metadata request that timed out because of it).
        if let Some(error) = self.context.last_error() {
            return Some(error);
        }
        if let Some(error) = self.last_error.lock().clone() {
            return Some(error);
        }
        if self.ready.load(Ordering::Relaxed) {
            return Some("catching up with the log".into());
        }
        Some("connecting to the brokers".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn routed(key: Option<&str>, headers: &[(&str, &str)]) -> Option<(String, Option<String>)> {
        route(
            key.map(str::as_bytes),
            headers.iter().map(|(k, v)| (*k, Some(v.as_bytes()))),
        )
        .map(|(t, e)| (t.to_string(), e.map(|e| e.as_str().to_string())))
    }

    #[test]
    fn records_are_routed_by_header_then_key_never_the_value() {
        let t = |t: &str, e: Option<&str>| Some((t.to_string(), e.map(str::to_string)));
        assert_eq!(routed(Some("orders"), &[]), t("orders", None));
        assert_eq!(
            routed(
                Some("key"),
                &[
                    ("herald-topic", "orders"),
                    ("trace-id", "x"),
                    ("herald-event", "created")
                ]
            ),
            t("orders", Some("created"))
        );
        assert_eq!(
            routed(None, &[("herald-topic", "a"), ("herald-topic", "b")]),
            t("b", None)
        );
        assert_eq!(
            routed(Some("orders"), &[("herald-event", "bad event")]),
            t("orders", None)
        );
        assert_eq!(routed(None, &[]), None);
        assert_eq!(routed(Some("no spaces allowed"), &[]), None);
        assert_eq!(routed(Some("ok"), &[("herald-topic", "not valid")]), None);
        assert_eq!(route(Some(&[0xff, 0xfe][..]), std::iter::empty()), None);
    }

    #[test]
    fn the_format_header_names_json_or_msgpack() {
        let format = |headers: &[(&str, &str)]| {
            is_msgpack(headers.iter().map(|(k, v)| (*k, Some(v.as_bytes()))))
        };
        assert_eq!(format(&[]), Ok(false));
        assert_eq!(format(&[("herald-format", "json")]), Ok(false));
        assert_eq!(format(&[("herald-format", "msgpack")]), Ok(true));
        assert_eq!(
            format(&[("herald-format", "json"), ("herald-format", "msgpack")]),
            Ok(true)
        );
        assert_eq!(format(&[("herald-format", "xml")]), Err("xml".into()));
    }

    #[test]
    fn a_partition_s_epoch_is_stable_and_its_own() {
        assert_eq!(partition_epoch("herald", 0), partition_epoch("herald", 0));
        assert_ne!(partition_epoch("herald", 0), partition_epoch("herald", 1));
        assert_ne!(partition_epoch("herald", 0), partition_epoch("other", 0));
        assert_eq!(partition_epoch("herald", 3) & 1, 1, "an epoch is never 0");
    }
}
