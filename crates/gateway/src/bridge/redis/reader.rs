//! The Redis bridge's readers: they follow the streams of [`super::Interest`] and ingest
//! their entries.
//!
//! Single and Sentinel modes have one reader: one `XREAD` over every followed stream and the
//! node's wake stream (an entry there, written when the node follows more, ends a blocking
//! read at once). A Redis Cluster has a main reader over the wake stream alone (it keeps the
//! node's connectivity, hence its readiness, known) and one reader per followed stream,
//! started when the stream is followed and ending once it is not.
//!
//! A stream that starts being followed is read from `topics.history_ttl` ago without
//! blocking until a read comes back short: it is then caught up, and the subscriptions
//! waiting for it go on ([`super::Interest::wait`]). After a reconnect every stream is read
//! from where the reader stopped, and the node is not ready until they are caught up.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use herald_core::{Cursor, EventName, Payload, TopicName};
use redis::AsyncCommands as _;
use redis::streams::{StreamReadOptions, StreamReadReply};
use tokio_util::sync::CancellationToken;

use super::super::redis_conn::{Purpose, RedisConn};
use super::{NAME, RedisBridge, SEQ_BITS, epoch_commands, parse_entry_id, parse_epoch};
use crate::bridge::{Ingest, now_ms, reconnect_loop};
use crate::telemetry::metrics;
use crate::telemetry::trace::Carried;

/// Most entries read per stream per `XREAD`.
const READ_COUNT: usize = 1_000;
/// Most entries one `XREAD` asks for over all its streams (a node that follows thousands of
/// streams reads fewer per stream, not a reply of millions).
const READ_TOTAL: usize = 100_000;
/// How long a blocking read waits for an entry.
const BLOCK_MS: usize = 2_000;
/// A reader of at least this many streams that read fewer than [`COALESCE_BELOW`] entries
/// waits [`COALESCE_WAIT`] before its next read, so that entries gather: one `XREAD` over
/// hundreds of streams costs Redis (and the node) about the same whether it returns one entry
/// or a hundred. Measured with four nodes following ~1,000 streams each: see BENCHMARKS.md,
/// *Interest routing*.
const COALESCE_KEYS: usize = 64;
/// See [`COALESCE_KEYS`].
const COALESCE_BELOW: usize = 256;
/// See [`COALESCE_KEYS`].
const COALESCE_WAIT: Duration = Duration::from_millis(2);
/// How often the followed set is swept (dropping streams past their linger).
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// What one reader reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    /// Every followed stream, and the wake stream (single and Sentinel modes).
    Main,
    /// The wake stream alone (a Redis Cluster's main reader).
    WakeOnly,
    /// One followed stream (Redis Cluster).
    Stream(u32),
}

/// Runs the bridge's readers and the sweep of its followed set until `stop`.
pub(super) async fn run(bridge: Arc<RedisBridge>, ingest: Ingest, stop: CancellationToken) {
    let sweep = tokio::spawn(sweep(bridge.clone(), ingest.clone(), stop.clone()));
    let main = match bridge.target.is_cluster() {
        true => Scope::WakeOnly,
        false => Scope::Main,
    };
    let main = tokio::spawn(follow(bridge.clone(), ingest.clone(), main, stop.clone()));
    if bridge.target.is_cluster() {
        cluster_readers(&bridge, &ingest, &stop).await;
    }
    let _ = main.await;
    let _ = sweep.await;
    bridge.connected.store(false, Ordering::Relaxed);
    metrics::bridge_up(NAME, false);
}

/// On a Redis Cluster: one reader per followed stream, started as the set grows (a reader
/// ends by itself once its stream is no longer followed).
async fn cluster_readers(bridge: &Arc<RedisBridge>, ingest: &Ingest, stop: &CancellationToken) {
    let mut readers: HashMap<u32, tokio::task::JoinHandle<()>> = HashMap::new();
    let mut changes = bridge.interest.changes();
    loop {
        let (_, followed) = bridge.interest.followed();
        readers.retain(|_, r| !r.is_finished());
        for (group, _) in followed {
            readers.entry(group).or_insert_with(|| {
                let reader = follow(
                    bridge.clone(),
                    ingest.clone(),
                    Scope::Stream(group),
                    stop.clone(),
                );
                tokio::spawn(reader)
            });
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            changed = changes.changed() => if changed.is_err() { break },
        }
    }
    for (_, reader) in readers {
        let _ = reader.await;
    }
}

/// Every second: marks the streams that hold a subscribed topic (every stream while a
/// pattern is subscribed), and drops those that held none for the linger, forgetting their
/// topics.
async fn sweep(bridge: Arc<RedisBridge>, ingest: Ingest, stop: CancellationToken) {
    let shards = bridge.shards;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(SWEEP_EVERY) => {}
        }
        let mut interested = Vec::new();
        ingest.each_subscribed(|t| interested.push(super::shard_of(t, shards)));
        let dropped = bridge
            .interest
            .sweep(interested, ingest.has_patterns(), |dropped| {
                let dropped: std::collections::HashSet<u32> = dropped.iter().copied().collect();
                let forgotten = ingest.forget(|t| dropped.contains(&super::shard_of(t, shards)));
                tracing::debug!(
                    streams = dropped.len(),
                    topics = forgotten,
                    "redis streams no longer followed"
                );
            });
        if !dropped.is_empty() {
            let mut last_ids = bridge.last_ids.lock();
            for group in dropped {
                last_ids.remove(&group);
            }
        }
    }
}

/// One reader: one session after another in [`reconnect_loop`], until `stop` (or, for one
/// stream's reader, until the stream is no longer followed).
async fn follow(bridge: Arc<RedisBridge>, ingest: Ingest, scope: Scope, stop: CancellationToken) {
    let sessions = std::sync::atomic::AtomicU64::new(0);
    let done = stop.child_token();
    let reader = &bridge;
    reconnect_loop(
        NAME,
        &done.clone(),
        Duration::from_millis(100),
        || async {
            let first = sessions.fetch_add(1, Ordering::Relaxed) == 0;
            let result = Session::new(reader, &ingest, scope, first).run().await;
            if matches!(result, Ok(Done::Unfollowed)) {
                done.cancel();
            }
            result.map(|_| ()).map_err(|e| e.to_string())
        },
        |error| {
            if !matches!(scope, Scope::Stream(_)) {
                reader.connected.store(false, Ordering::Relaxed);
                metrics::bridge_up(NAME, false);
            }
            if let Some(e) = error {
                *reader.last_error.lock() = Some(e);
            }
        },
    )
    .await;
}

/// Why a session ended without an error.
#[derive(Debug, PartialEq, Eq)]
enum Done {
    /// Its one stream is no longer followed.
    Unfollowed,
}

/// One followed stream, as a reader reads it.
#[derive(Debug)]
struct Stream {
    group: u32,
    key: String,
    /// The generation at which the stream was (last) followed: a stream dropped and followed
    /// again is read again from the history window.
    since: u64,
    epoch: u64,
    last_id: String,
    /// Being read up to what the log holds: `Some(ms)`, the time (unix ms) the reader started
    /// doing so. Caught up once a read comes back short, or reaches an entry written since
    /// then (a stream written to faster than a read takes may never come back short).
    catching_up: Option<u64>,
}

/// One connected session of a reader.
struct Session<'a> {
    bridge: &'a RedisBridge,
    ingest: &'a Ingest,
    scope: Scope,
    /// The reader's first session: the streams it finds followed were followed for a
    /// subscription (or, under broadcast, at start), not lost by a reconnect.
    first: bool,
    streams: Vec<Stream>,
    generation: Option<u64>,
    wake_key: Option<String>,
    wake_id: String,
    /// Entries the last read returned.
    last_read: usize,
}

impl<'a> Session<'a> {
    fn new(bridge: &'a RedisBridge, ingest: &'a Ingest, scope: Scope, first: bool) -> Self {
        let wake_key = match scope {
            Scope::Main | Scope::WakeOnly => Some(bridge.target.wake_key(&bridge.node_id)),
            Scope::Stream(_) => None,
        };
        Self {
            bridge,
            ingest,
            scope,
            first,
            streams: Vec::new(),
            generation: None,
            wake_key,
            wake_id: "0-0".into(),
            last_read: usize::MAX,
        }
    }

    /// Reads and ingests until an error (or, for one stream's reader, until the stream is no
    /// longer followed).
    async fn run(mut self) -> redis::RedisResult<Done> {
        let mut conn = self.bridge.target.connect(Purpose::BlockingReads).await?;
        if self.wake_key.is_some() {
            // Redis is back (or was never away): the publisher's connection, if it broke
            // while idle, is made again on its next write rather than failing it.
            self.bridge.publisher.forget();
        }
        loop {
            if self.generation != Some(self.bridge.interest.generation())
                && !self.reconcile(&mut conn).await?
            {
                return Ok(Done::Unfollowed);
            }
            self.read(&mut conn).await?;
        }
    }

    /// Brings the streams read in line with the followed set: drops those no longer
    /// followed, learns the epochs of the new ones and where to read them from. False when
    /// this reader's one stream is no longer followed.
    async fn reconcile(&mut self, conn: &mut RedisConn) -> redis::RedisResult<bool> {
        let bridge = self.bridge;
        let (generation, followed) = bridge.interest.followed();
        let mine: Vec<(u32, u64)> = match self.scope {
            Scope::Main => followed,
            Scope::WakeOnly => Vec::new(),
            Scope::Stream(g) => match followed.into_iter().find(|(f, _)| *f == g) {
                Some(f) => vec![f],
                None => return Ok(false),
            },
        };
        let wanted: HashMap<u32, u64> = mine.iter().copied().collect();
        self.streams
            .retain(|s| wanted.get(&s.group) == Some(&s.since));
        let new: Vec<(u32, u64)> = (mine.into_iter())
            .filter(|(g, _)| !self.streams.iter().any(|s| s.group == *g))
            .collect();
        if !new.is_empty() {
            let mut pipe = redis::pipe();
            for (g, _) in &new {
                epoch_commands(&mut pipe, &bridge.target.epoch_key(*g));
            }
            let replies: Vec<(Option<String>, String)> = {
                let values: Vec<redis::Value> = pipe.query_async(conn).await?;
                let mut pairs = Vec::with_capacity(new.len());
                let mut values = values.into_iter();
                while let (Some(set), Some(get)) = (values.next(), values.next()) {
                    pairs.push((redis::from_redis_value(set)?, redis::from_redis_value(get)?));
                }
                pairs
            };
            let history_start = format!(
                "{}-0",
                now_ms().saturating_sub(bridge.history.as_millis() as u64)
            );
            let restarted = !self.first || bridge.interest.is_broadcast();
            let mut last_ids = bridge.last_ids.lock();
            let mut epochs = bridge.epochs.write();
            for ((group, since), (_, epoch)) in new.into_iter().zip(replies) {
                let epoch = parse_epoch(&epoch);
                let previous = epochs[group as usize].replace(epoch);
                // Read on from where this node stopped when it never stopped following the
                // stream; else from the history window.
                let mut last_id = match last_ids.get(&group) {
                    Some((id, s)) if *s == since => id.clone(),
                    _ => history_start.clone(),
                };
                if previous.is_some_and(|old| old != epoch) {
                    // The stream was lost with Redis's data: read the new one from its start.
                    tracing::warn!(
                        shard = group,
                        "redis lost its streams; clients will be told messages may be lost"
                    );
                    last_id = "0-0".into();
                }
                last_ids.insert(group, (last_id.clone(), since));
                bridge.interest.started(group, restarted);
                self.streams.push(Stream {
                    group,
                    key: bridge.target.stream_key(group),
                    since,
                    epoch,
                    last_id,
                    catching_up: Some(now_ms()),
                });
            }
        }
        self.generation = Some(generation);
        if matches!(self.scope, Scope::Main | Scope::WakeOnly) {
            tracing::debug!(
                streams = self.streams.len(),
                "redis bridge following the streams"
            );
        }
        Ok(true)
    }

    /// One `XREAD`: without blocking while a stream is catching up, else blocking; ingests
    /// what it returns, and marks the streams it found caught up.
    async fn read(&mut self, conn: &mut RedisConn) -> redis::RedisResult<()> {
        let bridge = self.bridge;
        let mut keys: Vec<&str> = self.streams.iter().map(|s| s.key.as_str()).collect();
        let mut ids: Vec<&str> = self.streams.iter().map(|s| s.last_id.as_str()).collect();
        if let Some(wake) = &self.wake_key {
            keys.push(wake);
            ids.push(&self.wake_id);
        }
        let count = (READ_TOTAL / keys.len().max(1)).clamp(10, READ_COUNT);
        let catching_up = self.streams.iter().any(|s| s.catching_up.is_some());
        let mut options = StreamReadOptions::default().count(count);
        if !catching_up {
            options = options.block(BLOCK_MS);
            if keys.len() >= COALESCE_KEYS && self.last_read < COALESCE_BELOW {
                tokio::time::sleep(COALESCE_WAIT).await;
            }
        }
        let reply: Option<StreamReadReply> = conn.xread_options(&keys, &ids, &options).await?;
        self.last_read = (reply.iter().flat_map(|r| &r.keys))
            .map(|k| k.ids.len())
            .sum();
        let mut read: HashMap<usize, usize> = HashMap::new();
        if let Some(reply) = reply {
            let reading = bridge.interest.reading();
            for stream in reply.keys {
                if Some(&stream.key) == self.wake_key.as_ref() {
                    if let Some(last) = stream.ids.last() {
                        self.wake_id = last.id.clone();
                    }
                    continue;
                }
                let Some(i) = self.streams.iter().position(|s| s.key == stream.key) else {
                    continue;
                };
                let s = &mut self.streams[i];
                read.insert(i, stream.ids.len());
                let follows = reading.follows(s.group, s.since);
                for entry in &stream.ids {
                    s.last_id = entry.id.clone();
                    if follows {
                        ingest_entry(self.ingest, s.epoch, entry);
                    }
                }
            }
        }
        if !self.streams.is_empty() {
            let mut last_ids = bridge.last_ids.lock();
            for &i in read.keys() {
                let s = &self.streams[i];
                last_ids.insert(s.group, (s.last_id.clone(), s.since));
            }
        }
        for (i, s) in self.streams.iter_mut().enumerate() {
            let Some(started) = s.catching_up else {
                continue;
            };
            let short = read.get(&i).is_none_or(|&n| n < count);
            let reached = parse_entry_id(&s.last_id).is_some_and(|seq| seq >> SEQ_BITS >= started);
            if short || reached {
                s.catching_up = None;
                bridge.interest.set_caught_up(s.group, true);
            }
        }
        if matches!(self.scope, Scope::Main | Scope::WakeOnly)
            && !bridge.connected.swap(true, Ordering::Relaxed)
        {
            tracing::info!(streams = self.streams.len(), "redis bridge connected");
        }
        if crate::bridge::Bridge::is_ready(bridge) {
            bridge.last_error.lock().take();
            metrics::bridge_up(NAME, true);
        }
        Ok(())
    }
}

/// Delivers one stream entry to this node's subscribers.
fn ingest_entry(ingest: &Ingest, epoch: u64, entry: &redis::streams::StreamId) {
    let Some(seq) = parse_entry_id(&entry.id) else {
        tracing::warn!(id = %entry.id, "redis stream entry with an unexpected id skipped");
        return;
    };
    let field = |name: &str| -> Option<String> { entry.get::<String>(name) };
    let (Some(topic), Some(data)) = (field("t"), field("d")) else {
        tracing::warn!(id = %entry.id, "redis stream entry without topic or data skipped");
        return;
    };
    let Ok(topic) = TopicName::new(&topic) else {
        tracing::warn!(id = %entry.id, "redis stream entry with an invalid topic skipped");
        return;
    };
    let event = field("e").and_then(|e| EventName::new(&e).ok());
    let payload = match entry.get::<Vec<u8>>("m") {
        Some(msgpack) => Payload::from_msgpack(&msgpack).map_err(|e| e.to_string()),
        None => Payload::from_json(data.as_bytes()).map_err(|e| e.to_string()),
    };
    let Ok(payload) = payload else {
        tracing::warn!(id = %entry.id, "redis stream entry with an invalid payload skipped");
        return;
    };
    let age_ms = now_ms().saturating_sub(seq >> SEQ_BITS);
    // The trace context of a traced message (fields `tp`, `tps`), read only when tracing is on.
    let (traceparent, tracestate) = match ingest.traces() {
        true => (field("tp"), field("tps")),
        false => (None, None),
    };
    let trace = Carried {
        traceparent: traceparent.as_deref(),
        tracestate: tracestate.as_deref(),
    };
    ingest.deliver(
        topic,
        Cursor::new(epoch, seq),
        event,
        payload,
        age_ms,
        trace,
    );
}
