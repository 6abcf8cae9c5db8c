//! The Redis bridge's state: its connections, its streams, what its reader keeps across
//! passes; and which stream carries a topic ([`shard_of`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use super::entries::EntryId;
use crate::bridge::interest::Interest;
use crate::bridge::redis_conn::{RedisTarget, SharedConn};

pub(super) const NAME: &str = "redis";

/// How the streams are capped.
#[derive(Clone, Copy, Debug)]
pub(super) enum Trim {
    /// `MAXLEN ~ n` (broadcast routing).
    MaxLen(usize),
    /// `MINID ~ <now - age>` (interest routing: what any node reads back).
    MinAge(Duration),
}

/// The Redis bridge.
#[derive(Debug)]
pub(crate) struct RedisBridge {
    pub(super) target: Arc<RedisTarget>,
    pub(super) publisher: SharedConn,
    pub(super) shards: u32,
    pub(super) trim: Trim,
    /// Replicas a publish waits for (`WAIT`), and for how long.
    pub(super) wait: (u32, Duration),
    /// How long an idempotency key is remembered (`cluster.idempotency_window`).
    pub(super) idempotency_window: Duration,
    pub(super) node_id: String,
    /// How far back a node reads a stream it starts following (`topics.history_ttl`).
    pub(super) history: Duration,
    /// The streams this node follows.
    pub(super) interest: Arc<Interest>,
    /// Longest wait of a subscription for a stream's history (`cluster.backfill_timeout`).
    pub(super) backfill_timeout: Duration,
    /// Each shard's epoch, once known.
    pub(super) epochs: RwLock<Vec<Option<u64>>>,
    /// Per followed stream, what the reader holds of it (kept across reconnects; dropped with
    /// the stream).
    pub(super) last_ids: Mutex<HashMap<u32, Held>>,
    /// The reader's live connection is up.
    pub(super) connected: AtomicBool,
    /// Why the reader's last pass ended, for `/readyz`.
    pub(super) last_error: Mutex<Option<String>>,
}

/// What the reader holds of a followed stream, kept across its passes (dropped with the
/// stream).
#[derive(Clone, Copy, Debug)]
pub(super) struct Held {
    /// The last entry read.
    pub(super) last: EntryId,
    /// The generation at which the stream was followed.
    pub(super) since: u64,
    /// The sequence number from which this node has read every entry of the stream (where
    /// it started reading it): a topic of the stream created now holds everything from here.
    pub(super) floor: u64,
}

/// The shard stream (of `shards`) that carries `topic`: a stable hash of its name, the same
/// on every node.
pub fn shard_of(topic: &str, shards: u32) -> u32 {
    use std::hash::Hasher as _;
    let mut h = fnv::FnvHasher::default();
    h.write(topic.as_bytes());
    (h.finish() % u64::from(shards)) as u32
}
