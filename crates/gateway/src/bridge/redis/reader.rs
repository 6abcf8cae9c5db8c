//! The Redis bridge's reader: the live path (pub/sub) for the streams of
//! [`super::Interest`], and the streams themselves read only to start following one or to
//! fill a gap.
//!
//! One live connection per node (RESP3: pub/sub messages arrive as pushes beside ordinary
//! replies; on a Redis Cluster one connection per master, through sharded pub/sub) subscribes
//! to the channel of every followed stream. The append script publishes each new entry on its
//! stream's channel with the id of the entry before it ([`Notice`]), so the reader
//! knows, per stream, whether it holds everything up to that entry:
//!
//! - a notice whose previous id is the last id the reader holds is ingested as it is;
//! - one it already holds (its id is not past the last) is dropped;
//! - one whose previous id is another (a notice lost: the connection dropped, the queue
//!   overflowed) makes the reader read the stream from its last id (`XRANGE`) before it
//!   delivers anything more of that stream, so order and positions stay exact.
//!
//! A stream that starts being followed is subscribed to first, then read from
//! `topics.history_ttl` ago until a read comes back short: it is then caught up and the
//! subscriptions waiting for it go on ([`super::Interest::wait`]); notices that arrived during
//! the read are dropped or ingested by the rule above. When the live connection closes (Redis
//! restarted, `CLIENT KILL`, a failover), the pass ends; the next one subscribes again and
//! reads every followed stream from where it stopped, and the node is not ready until that is
//! done. A lost notice that no later notice reveals (the last one before a quiet spell) is
//! found the same way: a notice can only be lost with its connection, or to the queue's
//! overflow, which is treated as a loss of every stream.
//!
//! Redis's work per published message is the append and one publish to the nodes that follow
//! the stream, whatever the number of streams each node follows; a node's reads of the
//! streams cost only when it starts following one or fills a gap.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use herald_core::{Cursor, LogStart};
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::super::redis_conn::RedisConn;
use super::bridge::{Held, NAME, RedisBridge, shard_of};
use super::entries::{EntryId, ingest_entry, range_entries};
use super::notice::{Notice, parse_epoch};
use crate::bridge::logs::{Ingest, now_ms};
use crate::bridge::reconnect::reconnect_loop;
use crate::telemetry::metrics;

/// Most entries read per stream per `XRANGE`.
const READ_COUNT: usize = 500;
/// Most streams read (or subscribed to, on a Redis Cluster) at once: at most 64,000 entries
/// in flight per round, so that a round is answered well within the live connection's
/// timeout even when every stream has a long history.
const READ_STREAMS: usize = 128;
/// Subscriptions (one channel each) in flight at once.
const SUBSCRIBE_CHUNK: usize = 512;
/// Notices queued between the live connection and the reader, at most, and their bytes at
/// most. When either is reached the next notices are dropped and every followed stream is
/// read from where the reader stopped (the same repair as after a lost connection), so a
/// burst costs reads, never memory.
const LIVE_QUEUE: usize = 16_384;
/// See [`LIVE_QUEUE`].
const LIVE_QUEUE_BYTES: usize = 64 << 20;
/// Notices handled in one go.
const LIVE_BATCH: usize = 512;
/// How often the live connection is pinged (a connection that stopped answering ends the
/// pass) while no notice arrives.
const PING_EVERY: Duration = Duration::from_secs(1);

/// Runs the bridge's reader and the sweep of its followed set until `stop`.
pub(super) async fn run(bridge: Arc<RedisBridge>, ingest: Ingest, stop: CancellationToken) {
    // A topic created while its stream is followed starts in the stream's epoch, at the
    // position from which this node has read the stream.
    let source = bridge.clone();
    ingest.set_epoch_source(move |topic| {
        let partition = source.shard_of(topic);
        let epoch = source.epochs.read()[partition as usize]?;
        let held = source.last_ids.lock().get(&partition).copied()?;
        let followed = source.interest.reading().follows(partition, held.since);
        followed.then(|| LogStart {
            at: Cursor::new(epoch, held.last.seq()),
            floor: held.floor,
        })
    });
    let sweep = tokio::spawn(sweep(bridge.clone(), ingest.clone(), stop.clone()));
    follow(&bridge, &ingest, &stop).await;
    let _ = sweep.await;
    bridge.connected.store(false, Ordering::Relaxed);
    metrics::bridge_up(NAME, false);
}

/// The sweep of the followed streams ([`super::Interest::sweep_until`]); a dropped stream's
/// position goes with it.
async fn sweep(bridge: Arc<RedisBridge>, ingest: Ingest, stop: CancellationToken) {
    let shards = bridge.shards;
    let of = |topic: &str, partitions: &mut Vec<u32>| partitions.push(shard_of(topic, shards));
    (bridge.interest)
        .sweep_until(&ingest, of, &stop, |dropped| {
            let mut last_ids = bridge.last_ids.lock();
            for partition in dropped {
                last_ids.remove(partition);
            }
        })
        .await;
}

/// The reader: one pass after another in [`reconnect_loop`], until `stop`.
async fn follow(bridge: &Arc<RedisBridge>, ingest: &Ingest, stop: &CancellationToken) {
    let passes = std::sync::atomic::AtomicU64::new(0);
    reconnect_loop(
        NAME,
        stop,
        Duration::from_millis(100),
        || async {
            let first = passes.fetch_add(1, Ordering::Relaxed) == 0;
            let result = Pass::new(bridge, ingest, first).run(stop).await;
            result.map_err(|e| e.to_string())
        },
        |error| {
            bridge.connected.store(false, Ordering::Relaxed);
            metrics::bridge_up(NAME, false);
            if let Some(e) = error {
                *bridge.last_error.lock() = Some(e);
            }
        },
    )
    .await;
}

/// One followed stream, as the reader holds it.
#[derive(Debug)]
struct Stream {
    /// The generation at which the stream was (last) followed: a stream dropped and followed
    /// again is read again from the history window.
    since: u64,
    epoch: u64,
    /// The last entry ingested (or skipped as not followed).
    last: EntryId,
    /// Being read up to what the log holds since the time (unix ms) the reader started doing
    /// so: caught up once a read comes back short or reaches an entry written since then.
    catching_up: Option<u64>,
}

/// Why the live connection's pass must end.
#[derive(Debug, thiserror::Error)]
enum PassError {
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    #[error("the live connection closed")]
    Closed,
    /// Redis refused the credentials (a RESP3 `HELLO … AUTH` answers `WRONGPASS`).
    #[error("authentication failed: {0}")]
    Auth(redis::RedisError),
}

/// The error of making the live connection, saying plainly when it is the credentials.
fn connect_error(e: redis::RedisError) -> PassError {
    let refused = e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"));
    match refused {
        true => PassError::Auth(e),
        false => PassError::Redis(e),
    }
}

/// One connected pass of the reader.
struct Pass<'a> {
    bridge: &'a RedisBridge,
    ingest: &'a Ingest,
    /// The reader's first pass: the streams it finds followed were followed for a
    /// subscription (or, under broadcast, at start), not lost by a reconnect.
    first: bool,
    streams: HashMap<u32, Stream>,
    /// Each subscribed channel's stream.
    channels: HashMap<Box<[u8]>, u32>,
    generation: Option<u64>,
    /// The bridge was found ready since the streams read last changed (readiness is not
    /// looked at again until they do: it walks every partition).
    ready: bool,
}

impl<'a> Pass<'a> {
    fn new(bridge: &'a RedisBridge, ingest: &'a Ingest, first: bool) -> Self {
        Self {
            bridge,
            ingest,
            first,
            streams: HashMap::new(),
            channels: HashMap::new(),
            generation: None,
            ready: false,
        }
    }

    /// Subscribes, reads and ingests until the connection fails or `stop`.
    async fn run(mut self, stop: &CancellationToken) -> Result<(), PassError> {
        let bridge = self.bridge;
        let (tx, mut notices) = mpsc::channel::<PushInfo>(LIVE_QUEUE);
        let overflowed = Arc::new(AtomicBool::new(false));
        let closed = Arc::new(AtomicBool::new(false));
        let queued = Arc::new(AtomicUsize::new(0));
        let push = {
            let (overflowed, closed, queued) = (overflowed.clone(), closed.clone(), queued.clone());
            move |info: PushInfo| -> Result<(), ()> {
                if info.kind == PushKind::Disconnection {
                    closed.store(true, Ordering::Release);
                }
                let size = push_size(&info);
                if queued.fetch_add(size, Ordering::AcqRel) + size > LIVE_QUEUE_BYTES {
                    queued.fetch_sub(size, Ordering::AcqRel);
                    overflowed.store(true, Ordering::Release);
                    return Ok(());
                }
                match tx.try_send(info) {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        queued.fetch_sub(size, Ordering::AcqRel);
                        match e {
                            mpsc::error::TrySendError::Full(_) => {
                                overflowed.store(true, Ordering::Release);
                                Ok(())
                            }
                            mpsc::error::TrySendError::Closed(_) => Err(()),
                        }
                    }
                }
            }
        };
        let mut conn = bridge
            .target
            .connect_live(push)
            .await
            .map_err(connect_error)?;
        // Redis is back (or was never away): the publisher's connection, if it broke while
        // idle, is made again on its next write rather than failing it.
        bridge.publisher.forget();
        let mut changes = bridge.interest.changes();
        let mut ping = tokio::time::interval(PING_EVERY);
        let mut batch = Vec::with_capacity(LIVE_BATCH);
        loop {
            if closed.load(Ordering::Acquire) {
                return Err(PassError::Closed);
            }
            changes.borrow_and_update();
            if self.generation != Some(bridge.interest.generation()) {
                self.reconcile(&mut conn).await?;
            }
            if overflowed.swap(false, Ordering::AcqRel) {
                tracing::warn!("redis live notices overflowed; reading every followed stream");
                let all: Vec<u32> = self.streams.keys().copied().collect();
                self.catch_up(&mut conn, all).await?;
            }
            if !self.ready {
                self.connected();
            }
            tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                _ = changes.changed() => {}
                n = notices.recv_many(&mut batch, LIVE_BATCH) => {
                    if n == 0 {
                        return Err(PassError::Closed);
                    }
                    let size: usize = batch.iter().map(push_size).sum();
                    queued.fetch_sub(size, Ordering::AcqRel);
                    self.handle(&mut conn, &mut batch).await?;
                }
                _ = ping.tick() => {
                    redis::cmd("PING").query_async::<()>(&mut conn).await?;
                }
            }
        }
    }

    /// Marks the bridge connected (and ready, once every stream it must read is caught up).
    fn connected(&mut self) {
        let bridge = self.bridge;
        if !bridge.connected.swap(true, Ordering::Relaxed) {
            tracing::info!(streams = self.streams.len(), "redis bridge connected");
        }
        if crate::bridge::Bridge::is_ready(bridge) {
            bridge.last_error.lock().take();
            metrics::bridge_up(NAME, true);
            self.ready = true;
        }
    }

    /// Brings the streams followed in line with the followed set: unsubscribes from those no
    /// longer followed; subscribes to the new ones, learns their epochs and reads them from
    /// where to start.
    async fn reconcile(&mut self, conn: &mut RedisConn) -> redis::RedisResult<()> {
        let bridge = self.bridge;
        let (generation, followed) = bridge.interest.followed();
        let wanted: HashMap<u32, u64> = followed.into_iter().collect();
        let dropped: Vec<u32> = (self.streams.iter())
            .filter(|(g, s)| wanted.get(g) != Some(&s.since))
            .map(|(g, _)| *g)
            .collect();
        for g in &dropped {
            self.streams.remove(g);
        }
        self.subscription(conn, &dropped, false).await?;
        let new: Vec<(u32, u64)> = (wanted.into_iter())
            .filter(|(g, _)| !self.streams.contains_key(g))
            .collect();
        if !new.is_empty() {
            let partitions: Vec<u32> = new.iter().map(|(g, _)| *g).collect();
            // Subscribed before the streams are read: an entry appended in between is in the
            // read or in a notice, never in neither.
            self.subscription(conn, &partitions, true).await?;
            let history_start = EntryId(
                now_ms().saturating_sub(bridge.history.as_millis() as u64),
                0,
            );
            let epochs = self.epochs(conn, &partitions, history_start).await?;
            let restarted = !self.first || bridge.interest.is_broadcast();
            {
                let mut last_ids = bridge.last_ids.lock();
                let mut known = bridge.epochs.write();
                for ((partition, since), (epoch, before)) in new.into_iter().zip(epochs) {
                    let previous = known[partition as usize].replace(epoch);
                    // Read on from where this node stopped when it never stopped following the
                    // stream; else from the history window: after the last entry before it,
                    // from which on this node then holds every entry.
                    let mut held = match last_ids.get(&partition) {
                        Some(held) if held.since == since => *held,
                        _ => Held {
                            last: before,
                            since,
                            floor: before.seq(),
                        },
                    };
                    if previous.is_some_and(|old| old != epoch) {
                        tracing::warn!(
                            shard = partition,
                            "redis lost its streams; clients will be told messages may be lost"
                        );
                        held.last = EntryId::default();
                        held.floor = 0;
                    }
                    let last = held.last;
                    last_ids.insert(partition, held);
                    bridge.interest.started(partition, restarted);
                    self.streams.insert(
                        partition,
                        Stream {
                            since,
                            epoch,
                            last,
                            catching_up: Some(now_ms()),
                        },
                    );
                }
            }
            self.catch_up(conn, partitions).await?;
        }
        self.generation = Some(generation);
        self.ready = false;
        tracing::debug!(
            streams = self.streams.len(),
            "redis bridge following the streams"
        );
        Ok(())
    }

    /// Subscribes to (or, `!subscribe`, unsubscribes from) the channels of `partitions`.
    async fn subscription(
        &mut self,
        conn: &mut RedisConn,
        partitions: &[u32],
        subscribe: bool,
    ) -> redis::RedisResult<()> {
        if partitions.is_empty() {
            return Ok(());
        }
        let target = &self.bridge.target;
        let channels: Vec<String> = partitions.iter().map(|&g| target.live_channel(g)).collect();
        for (channel, &g) in channels.iter().zip(partitions) {
            let key: Box<[u8]> = channel.as_bytes().into();
            match subscribe {
                true => self.channels.insert(key, g),
                false => self.channels.remove(&key),
            };
        }
        // One channel per command: the client library takes each subscription confirmation
        // for the reply to one command, so a command naming several channels would hand its
        // later confirmations to the commands sent after it. (On a Redis Cluster a shard
        // channel's slot decides its master anyway.)
        let command = match (target.is_cluster(), subscribe) {
            (true, true) => "SSUBSCRIBE",
            (true, false) => "SUNSUBSCRIBE",
            (false, true) => "SUBSCRIBE",
            (false, false) => "UNSUBSCRIBE",
        };
        for chunk in channels.chunks(SUBSCRIBE_CHUNK) {
            let sent = chunk.iter().map(|channel| {
                let mut conn = conn.clone();
                async move { redis::cmd(command).arg(channel).exec_async(&mut conn).await }
            });
            for result in join_all(sent).await {
                result?;
            }
        }
        Ok(())
    }

    /// The epochs of `partitions`, each made if it is missing (`SET NX GET`), and the last entry
    /// of each stream before `start` (`0-0` when there is none).
    async fn epochs(
        &self,
        conn: &RedisConn,
        partitions: &[u32],
        start: EntryId,
    ) -> redis::RedisResult<Vec<(u64, EntryId)>> {
        let mut epochs = Vec::with_capacity(partitions.len());
        for chunk in partitions.chunks(READ_STREAMS) {
            let asked = chunk.iter().map(|&g| {
                let mut conn = conn.clone();
                let target = &self.bridge.target;
                let (key, stream) = (target.epoch_key(g), target.stream_key(g));
                let fresh = format!("{:x}", rand::random::<u64>() | 1);
                async move {
                    let old: Option<String> = redis::cmd("SET")
                        .arg(key)
                        .arg(&fresh)
                        .arg("NX")
                        .arg("GET")
                        .query_async(&mut conn)
                        .await?;
                    let before: Value = redis::cmd("XREVRANGE")
                        .arg(stream)
                        .arg(format!("({start}"))
                        .arg("-")
                        .arg("COUNT")
                        .arg(1)
                        .query_async(&mut conn)
                        .await?;
                    let before = (range_entries(before).first())
                        .and_then(|(id, _)| EntryId::parse(id))
                        .unwrap_or_default();
                    let epoch = parse_epoch(old.as_deref().unwrap_or(&fresh));
                    redis::RedisResult::Ok((epoch, before))
                }
            });
            for epoch in join_all(asked).await {
                epochs.push(epoch?);
            }
        }
        Ok(epochs)
    }

    /// Handles a batch of pushes: ingests the notices that continue their stream, and reads
    /// the streams whose notices do not (a gap) from where the reader stopped.
    async fn handle(
        &mut self,
        conn: &mut RedisConn,
        batch: &mut Vec<PushInfo>,
    ) -> Result<(), PassError> {
        let bridge = self.bridge;
        let mut gaps: Vec<u32> = Vec::new();
        let mut touched: Vec<u32> = Vec::new();
        {
            let reading = bridge.interest.reading();
            // The batch's records fanned out once, at the end of this block.
            let _together = crate::bridge::together::Together::new();
            for push in batch.drain(..) {
                match push.kind {
                    PushKind::Message | PushKind::SMessage => {}
                    PushKind::Disconnection => return Err(PassError::Closed),
                    _ => continue,
                }
                let mut data = push.data.into_iter();
                let (Some(Value::BulkString(channel)), Some(Value::BulkString(payload))) =
                    (data.next(), data.next())
                else {
                    continue;
                };
                let Some(&partition) = self.channels.get(channel.as_slice()) else {
                    continue;
                };
                if gaps.contains(&partition) {
                    continue; // read from the stream below
                }
                let Some(s) = self.streams.get_mut(&partition) else {
                    continue;
                };
                let Some(notice) = Notice::parse(&payload) else {
                    tracing::warn!(
                        shard = partition,
                        "malformed redis live notice; reading the stream"
                    );
                    gaps.push(partition);
                    continue;
                };
                let (Some(id), Some(prev)) =
                    (EntryId::parse(notice.id), EntryId::parse(notice.prev))
                else {
                    gaps.push(partition);
                    continue;
                };
                let epoch = parse_epoch(notice.epoch);
                if epoch != s.epoch {
                    // The stream was lost with Redis's data and made anew: read it from its
                    // start, in its new epoch.
                    tracing::warn!(
                        shard = partition,
                        "redis lost its streams; clients will be told messages may be lost"
                    );
                    s.epoch = epoch;
                    s.last = EntryId::default();
                    bridge.epochs.write()[partition as usize] = Some(epoch);
                    gaps.push(partition);
                    continue;
                }
                if id <= s.last {
                    continue; // read already
                }
                if prev != s.last {
                    gaps.push(partition);
                    continue;
                }
                s.last = id;
                touched.push(partition);
                if reading.follows(partition, s.since) {
                    let fields = |name: &str| {
                        (notice.fields.iter())
                            .find(|(n, _)| *n == name.as_bytes())
                            .map(|(_, v)| *v)
                    };
                    ingest_entry(self.ingest, s.epoch, notice.id, fields);
                }
            }
        }
        touched.sort_unstable();
        touched.dedup();
        self.remember(touched);
        if !gaps.is_empty() {
            metrics::bridge_live_gaps(NAME, gaps.len());
            self.catch_up(conn, gaps).await?;
        }
        Ok(())
    }

    /// Keeps the last ids of `partitions` in the bridge (a reconnect reads on from there).
    fn remember(&self, partitions: impl IntoIterator<Item = u32>) {
        let mut last_ids = self.bridge.last_ids.lock();
        for g in partitions {
            let Some(s) = self.streams.get(&g) else {
                continue;
            };
            if let Some(held) = last_ids.get_mut(&g).filter(|h| h.since == s.since) {
                held.last = s.last;
            }
        }
    }

    /// Reads `partitions` from their last ids up to what their streams hold now, ingesting every
    /// entry, and marks them caught up.
    async fn catch_up(
        &mut self,
        conn: &mut RedisConn,
        partitions: Vec<u32>,
    ) -> redis::RedisResult<()> {
        let bridge = self.bridge;
        let mut pending = partitions;
        let started = now_ms();
        for g in &pending {
            if let Some(s) = self.streams.get_mut(g) {
                s.catching_up.get_or_insert(started);
            }
        }
        while !pending.is_empty() {
            let mut next = Vec::new();
            for chunk in pending.chunks(READ_STREAMS) {
                let reads = chunk.iter().filter_map(|g| {
                    let s = self.streams.get(g)?;
                    let mut conn = conn.clone();
                    let key = bridge.target.stream_key(*g);
                    let from = format!("({}", s.last);
                    Some(async move {
                        let reply: Value = redis::cmd("XRANGE")
                            .arg(key)
                            .arg(from)
                            .arg("+")
                            .arg("COUNT")
                            .arg(READ_COUNT)
                            .query_async(&mut conn)
                            .await?;
                        redis::RedisResult::Ok((*g, reply))
                    })
                });
                let replies = join_all(reads).await;
                let reading = bridge.interest.reading();
                for reply in replies {
                    let (g, reply) = reply?;
                    let Some(s) = self.streams.get_mut(&g) else {
                        continue;
                    };
                    let entries = range_entries(reply);
                    let follows = reading.follows(g, s.since);
                    let _together = crate::bridge::together::Together::new();
                    for (id, fields) in &entries {
                        let Some(entry) = EntryId::parse(id) else {
                            continue;
                        };
                        if entry <= s.last {
                            continue;
                        }
                        s.last = entry;
                        if follows {
                            let field = |name: &str| {
                                (fields.iter())
                                    .find(|(n, _)| n.as_slice() == name.as_bytes())
                                    .map(|(_, v)| v.as_slice())
                            };
                            ingest_entry(self.ingest, s.epoch, id, field);
                        }
                    }
                    let started = s.catching_up.unwrap_or(started);
                    let short = entries.len() < READ_COUNT;
                    let reached = s.last.0 >= started;
                    if short || reached {
                        s.catching_up = None;
                        bridge.interest.set_caught_up(g, true);
                    } else {
                        next.push(g);
                    }
                }
            }
            self.remember(pending.iter().copied());
            pending = next;
        }
        Ok(())
    }
}

/// The bytes a push holds (its bulk strings), for [`LIVE_QUEUE_BYTES`].
fn push_size(info: &PushInfo) -> usize {
    (info.data.iter())
        .map(|v| match v {
            Value::BulkString(b) => b.len(),
            _ => 16,
        })
        .sum::<usize>()
        + 64
}
