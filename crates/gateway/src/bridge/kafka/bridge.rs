//! The Kafka bridge's state: its producer, its consumer's settings and what it keeps across
//! passes.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use rdkafka::producer::FutureProducer;

use super::keys::Layout;
use super::retries;
use crate::bridge::interest::Interest;
use crate::bridge::kafka_props::KafkaContext;
use crate::config::KafkaPartitioner;

pub(super) const NAME: &str = "kafka";

/// The Kafka bridge.
pub(crate) struct KafkaBridge {
    pub(super) brokers: String,
    pub(super) topics: Vec<String>,
    pub(super) group: String,
    pub(super) node_id: String,
    pub(super) properties: std::collections::BTreeMap<String, String>,
    /// How far back a node with no committed position starts (`topics.history_ttl`), and
    /// (interest routing) where a partition followed anew starts.
    pub(super) history: Duration,
    /// The producers' partitioner (`cluster.kafka_partitioner`).
    pub(super) partitioner: KafkaPartitioner,
    /// Every partition, always (`cluster.routing = "broadcast"`).
    pub(super) broadcast: bool,
    /// `cluster.interest_linger`.
    pub(super) linger: Duration,
    /// Longest wait of a subscription for a partition's history (`cluster.backfill_timeout`).
    pub(super) backfill_timeout: Duration,
    /// Interest routing: the configured topics' partitions, as the first metadata gave them.
    pub(super) layout: OnceLock<Layout>,
    /// Interest routing: the partitions followed, made when the layout is known.
    pub(super) interest: OnceLock<Interest>,
    /// Becomes true when `layout` and `interest` are set.
    pub(super) layout_known: tokio::sync::watch::Sender<bool>,
    /// Interest routing: per followed partition (its number), the next offset to read and the
    /// generation at which it was followed, kept across the consumer's passes (dropped
    /// with the partition).
    pub(super) positions: parking_lot::Mutex<HashMap<u32, (i64, u64)>>,
    /// Misrouted records since the last log line (one line a minute at most).
    pub(super) misrouted: parking_lot::Mutex<(u64, Option<Instant>)>,
    pub(super) producer: FutureProducer<KafkaContext>,
    /// The consumer's librdkafka errors (a refused login, an untrusted certificate).
    pub(super) context: KafkaContext,
    /// Why the last consuming pass ended.
    pub(super) last_error: parking_lot::Mutex<Option<String>>,
    pub(super) ready: AtomicBool,
    /// Broadcast routing: whether this node has read what the log held when it (re)started
    /// consuming: until then it is not ready, so clients are not sent to a node that would
    /// tell them messages were lost only because it has not read them yet (interest routing
    /// keeps this per partition, in `interest`).
    pub(super) caught_up: AtomicBool,
    /// Broadcast routing: partitions assigned (every partition of the configured topics).
    pub(super) partitions: std::sync::atomic::AtomicUsize,
    /// The idempotency keys of the records read and produced, per partition.
    pub(super) retries: retries::Retries,
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
