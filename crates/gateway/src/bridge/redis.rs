//! The Redis bridge: node-to-node fan-out and shared positions through Redis Streams.
//!
//! Every message is appended (`XADD`) to one of `cluster.redis_shards` streams, chosen by a
//! stable hash of the topic name, so each topic's messages stay in order in one stream. Every
//! node reads every shard stream (`XREAD BLOCK`) and ingests each entry into its registry:
//! each node gets each message exactly once and there is no echo loop, because publishing
//! never delivers locally — delivery always comes back through the stream.
//!
//! Positions: a stream entry id `<ms>-<n>` becomes the sequence number `ms << 21 | n`, and the
//! epoch of a shard is a random value kept in Redis (`<prefix>:epoch:<shard>`, created with
//! `SET NX`). If Redis loses its data (a restart without persistence), the epoch key is gone
//! too, a new one is made, and clients resuming from the old epoch are told messages were
//! lost, as they may have been.
//!
//! History: each node keeps its own in-memory history, filled from the streams. A starting
//! node reads the streams from `topics.history_ttl` ago, so a client that reconnects to a
//! node that just started resumes too. The streams are capped (`MAXLEN ~`) at
//! `cluster.redis_stream_maxlen` entries per shard.
//!
//! Deployments (see [`super::redis_conn`]): one Redis or a Sentinel-watched master is read
//! with one `XREAD` over all shard streams. On a Redis Cluster one command cannot read streams
//! of different slots, so each shard has its own reader, and each stream shares a hash tag with
//! its epoch key; the shards spread over the masters. Readiness is per shard: a node is ready
//! when every shard is followed and caught up, and a publish needs its own shard's reader.
//!
//! Why not Redis pub/sub per topic (which would let a node receive only the topics it has
//! subscribers for): pub/sub has no positions and no history, so resume across nodes and
//! catching up after a reconnect would be impossible. Streams cost every node the reading of
//! every message; with the payload left undecoded, that is cheap next to fan-out.
//!
//! An entry holds the topic (`t`), the payload's JSON form (`d`), the publishing node (`n`),
//! a timestamp (`ts`), the event name (`e`) when there is one, and, for a payload published
//! as MessagePack, its bytes as sent (`m`): a node that reads `m` delivers it as sent to its
//! `herald.msgpack` subscribers (the JSON form stays, for nodes that do not read `m`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use herald_core::{Cursor, EventName, Payload, TopicName};
use parking_lot::{Mutex, RwLock};
use redis::AsyncCommands as _;
use redis::streams::{StreamMaxlen, StreamReadOptions, StreamReadReply};
use tokio_util::sync::CancellationToken;

use super::redis_conn::{Purpose, RedisTarget, SharedConn};
use super::{BoxFuture, Bridge, BridgeError, Ingest, now_ms};
use crate::config::ClusterConfig;
use crate::telemetry::metrics;

const NAME: &str = "redis";
/// Entries read per stream per XREAD.
const READ_COUNT: usize = 1_000;
/// Bits of a stream entry's per-millisecond counter kept in a sequence number.
const SEQ_BITS: u32 = 21;

/// The Redis bridge.
#[derive(Debug)]
pub(crate) struct RedisBridge {
    target: Arc<RedisTarget>,
    publisher: SharedConn,
    shards: u32,
    maxlen: usize,
    /// Replicas a publish waits for (`WAIT`), and for how long.
    wait: (u32, Duration),
    node_id: String,
    /// How far back a starting node reads the streams (`topics.history_ttl`).
    history: Duration,
    /// Each shard's epoch, once known.
    epochs: RwLock<Vec<Option<u64>>>,
    /// Per shard: followed and caught up. Publishing to a shard needs it.
    ready: Vec<AtomicBool>,
    /// Why the last session of a follower ended, for `/readyz`.
    last_error: Mutex<Option<String>>,
}

impl RedisBridge {
    /// Prepares the bridge (connections are made when it runs: a Redis that is down at start
    /// only makes the node not ready); a starting node reads `history` back.
    pub(crate) fn new(config: &ClusterConfig, history: Duration) -> anyhow::Result<Arc<Self>> {
        let target = Arc::new(RedisTarget::from_config(config)?);
        Ok(Arc::new(Self {
            publisher: SharedConn::new(target.clone()),
            target,
            shards: config.redis_shards,
            maxlen: config.redis_stream_maxlen,
            wait: (config.redis_wait_replicas, config.redis_wait_timeout),
            node_id: config.node_id.clone(),
            history,
            epochs: RwLock::new(vec![None; config.redis_shards as usize]),
            ready: (0..config.redis_shards)
                .map(|_| AtomicBool::new(false))
                .collect(),
            last_error: Mutex::new(None),
        }))
    }

    /// The Redis connection settings (shared with presence).
    pub(crate) fn target(&self) -> Arc<RedisTarget> {
        self.target.clone()
    }

    fn shard_of(&self, topic: &str) -> u32 {
        shard_of(topic, self.shards)
    }

    fn unavailable(reason: impl ToString) -> BridgeError {
        BridgeError::Unavailable {
            bridge: NAME,
            reason: reason.to_string(),
        }
    }

    fn set_ready(&self, shards: &[u32], ready: bool) {
        for &shard in shards {
            self.ready[shard as usize].store(ready, Ordering::Relaxed);
        }
        if ready && self.is_ready() {
            self.last_error.lock().take();
        }
        metrics::bridge_up(NAME, self.is_ready());
    }

    /// Follows `shards` (one reader) until `stop`: one [`Self::session`] after another in
    /// [`super::reconnect_loop`].
    async fn run_group(self: Arc<Self>, ingest: Ingest, shards: Vec<u32>, stop: CancellationToken) {
        let start = format!(
            "{}-0",
            now_ms().saturating_sub(self.history.as_millis() as u64)
        );
        let last_ids = Mutex::new(vec![start; shards.len()]);
        super::reconnect_loop(
            NAME,
            &stop,
            Duration::from_millis(100),
            || async {
                let mut ids = last_ids.lock().clone();
                let result = self.session(&ingest, &shards, &mut ids).await;
                *last_ids.lock() = ids;
                result.map_err(|e| e.to_string())
            },
            |error| {
                self.set_ready(&shards, false);
                if let Some(e) = error {
                    *self.last_error.lock() = Some(e);
                }
            },
        )
        .await;
    }

    /// One connected session of the reader of `shards`: learn their epochs, then read and
    /// ingest until an error.
    async fn session(
        &self,
        ingest: &Ingest,
        shards: &[u32],
        last_ids: &mut [String],
    ) -> redis::RedisResult<()> {
        let mut conn = self.target.connect(Purpose::BlockingReads).await?;
        // Redis is back (or was never away): the publisher's connection, if it broke while
        // idle, is made again on its next write rather than failing it.
        self.publisher.forget();
        let mut epochs = Vec::with_capacity(shards.len());
        for (i, &shard) in shards.iter().enumerate() {
            let key = self.target.epoch_key(shard);
            let fresh = format!("{:x}", rand::random::<u64>() | 1);
            let _: Option<String> = redis::cmd("SET")
                .arg(&key)
                .arg(&fresh)
                .arg("NX")
                .query_async(&mut conn)
                .await?;
            let epoch: String = conn.get(&key).await?;
            let epoch = u64::from_str_radix(&epoch, 16).unwrap_or(1);
            let previous = self.epochs.write()[shard as usize].replace(epoch);
            if previous.is_some_and(|old| old != epoch) {
                // The stream was lost with Redis's data: read the new one from its start.
                tracing::warn!(
                    shard,
                    "redis lost its streams; clients will be told messages may be lost"
                );
                last_ids[i] = "0-0".into();
            }
            epochs.push(epoch);
        }
        tracing::info!(shards = shards.len(), "redis bridge following the streams");
        // Ready once a read comes back short: the node has caught up with the streams
        // (backfill after a start, or what it missed while disconnected), so clients sent to
        // it resume instead of being told messages were lost.
        let mut caught_up = false;
        let keys: Vec<String> = shards.iter().map(|&s| self.target.stream_key(s)).collect();
        let options = StreamReadOptions::default().block(2_000).count(READ_COUNT);
        // While catching up, read without blocking: an empty answer means caught up.
        let catch_up = StreamReadOptions::default().count(READ_COUNT);
        loop {
            let reply: Option<StreamReadReply> = conn
                .xread_options(
                    &keys,
                    last_ids,
                    if caught_up { &options } else { &catch_up },
                )
                .await?;
            let Some(reply) = reply else {
                if !caught_up {
                    caught_up = true;
                    self.set_ready(shards, true);
                }
                continue;
            };
            let full = reply.keys.iter().any(|k| k.ids.len() >= READ_COUNT);
            for stream in reply.keys {
                let Some(i) = keys.iter().position(|k| *k == stream.key) else {
                    continue;
                };
                for entry in stream.ids {
                    last_ids[i] = entry.id.clone();
                    self.ingest(ingest, epochs[i], &entry);
                }
            }
            if !caught_up && !full {
                caught_up = true;
                self.set_ready(shards, true);
            }
        }
    }

    fn ingest(&self, ingest: &Ingest, epoch: u64, entry: &redis::streams::StreamId) {
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
        ingest.deliver(topic, Cursor::new(epoch, seq), event, payload, age_ms);
    }
}

impl RedisBridge {
    /// With `redis_wait_replicas`, waits until that many replicas hold what this connection
    /// wrote (`WAIT`): an answered publish then survives the master's death and a failover.
    async fn confirm<C: redis::aio::ConnectionLike>(
        &self,
        conn: &mut C,
        id: Option<String>,
    ) -> Result<Option<String>, BridgeError> {
        let (replicas, timeout) = self.wait;
        if replicas == 0 {
            return Ok(id);
        }
        let acked: redis::RedisResult<i64> = redis::cmd("WAIT")
            .arg(replicas)
            .arg(timeout.as_millis() as u64)
            .query_async(conn)
            .await;
        match acked {
            Ok(n) if n >= i64::from(replicas) => Ok(id),
            Ok(n) => Err(Self::unavailable(format!(
                "written, but {n} of {replicas} replicas confirmed it within {timeout:?}"
            ))),
            Err(e) => Err(Self::unavailable(e)),
        }
    }
}

impl Bridge for RedisBridge {
    fn name(&self) -> &'static str {
        NAME
    }

    fn append<'a>(
        &'a self,
        topic: &'a TopicName,
        event: Option<&'a EventName>,
        data: &'a Payload,
    ) -> BoxFuture<'a, Result<Cursor, BridgeError>> {
        Box::pin(async move {
            let shard = self.shard_of(topic.as_str());
            let epoch = match self.epochs.read()[shard as usize] {
                Some(epoch) if self.ready[shard as usize].load(Ordering::Relaxed) => epoch,
                _ => return Err(Self::unavailable("not connected")),
            };
            let ts = now_ms().to_string();
            let mut fields: Vec<(&str, &[u8])> = vec![
                ("t", topic.as_str().as_bytes()),
                ("d", data.as_bytes()),
                ("n", self.node_id.as_bytes()),
                ("ts", ts.as_bytes()),
            ];
            if let Some(event) = event {
                fields.push(("e", event.as_str().as_bytes()));
            }
            if let Some(msgpack) = data.msgpack() {
                fields.push(("m", msgpack));
            }
            let key = self.target.stream_key(shard);
            // Tried again only when it was certainly not written: no connection could be made
            // (sentinels that have not agreed on the new master yet), or Redis refused it (a
            // demoted master's READONLY). An XADD that went out on a connection that then
            // broke or answered too late may have been written, and a second XADD would be a
            // second entry, which every subscriber receives under another id: it is answered
            // 503 (the publisher does not know its fate). A connection that broke while idle
            // (Redis restarted, a failover) is not used again: the reader's new session
            // forgets it before the node is ready again.
            let mut attempt = 0;
            let id: Option<String> = loop {
                attempt += 1;
                let result = match self.publisher.get().await {
                    Ok(mut conn) => {
                        let added: redis::RedisResult<Option<String>> = conn
                            .xadd_maxlen(&key, StreamMaxlen::Approx(self.maxlen), "*", &fields)
                            .await;
                        match added {
                            // Written: from here a retry would publish twice, so a failure to
                            // confirm it is an answer, not a retry.
                            Ok(id) => break self.confirm(&mut conn, id).await?,
                            Err(e)
                                if e.kind()
                                    == redis::ErrorKind::Server(
                                        redis::ServerErrorKind::ReadOnly,
                                    ) =>
                            {
                                Err((self.publisher.failed(&e), e))
                            }
                            Err(e) => {
                                self.publisher.failed(&e);
                                return Err(Self::unavailable(format!(
                                    "the write may or may not have reached Redis: {e}"
                                )));
                            }
                        }
                    }
                    Err(e) => Err((true, e)),
                };
                match result {
                    Ok(id) => break id,
                    Err((true, _)) if attempt < 4 => {
                        tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                    }
                    Err((_, e)) => return Err(Self::unavailable(e)),
                }
            };
            let id = id.ok_or_else(|| Self::unavailable("XADD returned no id"))?;
            let seq = parse_entry_id(&id)
                .ok_or_else(|| Self::unavailable(format!("unexpected entry id {id}")))?;
            metrics::bridge_message(NAME, "out");
            Ok(Cursor::new(epoch, seq))
        })
    }

    /// Follows every shard stream until `stop`, reconnecting with backoff. One reader follows
    /// all shards with one `XREAD` on a single Redis; on a Redis Cluster, where one command
    /// cannot read streams of different slots, each shard has its own reader.
    fn run(self: Arc<Self>, ingest: Ingest, stop: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let groups: Vec<Vec<u32>> = if self.target.is_cluster() {
                (0..self.shards).map(|s| vec![s]).collect()
            } else {
                vec![(0..self.shards).collect()]
            };
            let followers: Vec<_> = groups
                .into_iter()
                .map(|group| {
                    let reader = self.clone().run_group(ingest.clone(), group, stop.clone());
                    tokio::spawn(reader)
                })
                .collect();
            for follower in followers {
                let _ = follower.await;
            }
            metrics::bridge_up(NAME, false);
        })
    }

    fn is_ready(&self) -> bool {
        self.ready.iter().all(|r| r.load(Ordering::Relaxed))
    }

    fn not_ready_reason(&self) -> Option<String> {
        if self.is_ready() {
            return None;
        }
        let waiting = self
            .ready
            .iter()
            .filter(|r| !r.load(Ordering::Relaxed))
            .count();
        Some(match self.last_error.lock().as_deref() {
            Some(error) => format!("{waiting} of {} streams not followed: {error}", self.shards),
            None => format!("{waiting} of {} streams not caught up yet", self.shards),
        })
    }
}

/// The shard stream (of `shards`) that carries `topic`: a stable hash of its name, the same
/// on every node.
pub fn shard_of(topic: &str, shards: u32) -> u32 {
    use std::hash::Hasher as _;
    let mut h = fnv::FnvHasher::default();
    h.write(topic.as_bytes());
    (h.finish() % u64::from(shards)) as u32
}

/// `<ms>-<n>` → `ms << 21 | n`.
fn parse_entry_id(id: &str) -> Option<u64> {
    let (ms, n) = id.split_once('-')?;
    let (ms, n): (u64, u64) = (ms.parse().ok()?, n.parse().ok()?);
    if ms >= 1 << (64 - SEQ_BITS) || n >= 1 << SEQ_BITS {
        return None;
    }
    Some(ms << SEQ_BITS | n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_ids_map_to_increasing_sequence_numbers() {
        let a = parse_entry_id("1700000000000-0").unwrap();
        let b = parse_entry_id("1700000000000-1").unwrap();
        let c = parse_entry_id("1700000000001-0").unwrap();
        assert!(a < b && b < c);
        assert_eq!(parse_entry_id("x-1"), None);
        assert_eq!(parse_entry_id("1-9999999999"), None);
    }
}
