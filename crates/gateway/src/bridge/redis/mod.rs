//! The Redis bridge: node-to-node fan-out and shared positions through Redis Streams, with
//! Redis pub/sub as the live path.
//!
//! Every message is appended to one of `cluster.redis_shards` streams (the log's partitions),
//! chosen by a stable hash of the topic name, so each topic's messages stay in order in one stream.
//! The append is one script ([`APPEND`]): it makes the shard's epoch if it is missing, appends
//! the entry (`XADD`, trimmed), and publishes it on the shard's channel with its id and the
//! id of the entry before it ([`Notice`]). Each node subscribes to the channels of the streams
//! it follows and ingests each notice into its registry, reading a stream only to start
//! following it or to fill a gap ([`reader`]): each node gets each message of those streams
//! exactly once, and there is no echo loop, because publishing never delivers locally —
//! delivery always comes back through the log. Redis's work per message is the append and
//! one publish to the nodes that follow its partition, whatever the number of partitions they
//! follow.
//!
//! Which streams a node follows ([`super::interest`]): under `cluster.routing = "interest"`
//! (the default) those holding a topic it has a subscriber for, added when a subscription
//! needs one (the subscription waits until the node has read the stream's history) and
//! dropped `cluster.interest_linger` after the last one left; under `"broadcast"`, all.
//!
//! Positions: a stream entry id `<ms>-<n>` becomes the sequence number `ms << 21 | n`, and the
//! epoch of a shard is a random value kept in Redis (`<prefix>:epoch:<shard>`), made by the
//! first append or the first node to follow the shard. If Redis loses its data (a restart
//! without persistence), the epoch key is gone too, a new one is made, and clients resuming
//! from the old epoch are told messages were lost, as they may have been.
//!
//! History: each node keeps its own in-memory history, filled from the streams. A node that
//! starts following a stream reads it from `topics.history_ttl` ago, so a client that
//! reconnects to a node that just started, or that did not follow its topics until now,
//! resumes too. The streams are capped: under interest routing at the longest `history_ttl`
//! (`XADD MINID ~`), which is all a node ever reads back; under broadcast at
//! `cluster.redis_stream_maxlen` entries each (`MAXLEN ~`).
//!
//! Retries: a publish with an idempotency key seen for its topic within
//! `cluster.idempotency_window` is answered with the first one's id by the same script, on any
//! node, and appends nothing.
//!
//! Deployments (see [`super::redis_conn`]): one Redis or a Sentinel-watched master is followed
//! through one live connection (RESP3) with plain pub/sub. On a Redis Cluster the live path is
//! sharded pub/sub: each stream shares a hash tag with its epoch and its channel, and the
//! node's live connection is one connection per master. Readiness: a node is ready when its
//! live connection is up and every stream it followed when that connection was (re)made is
//! caught up; a stream followed for a new subscription makes that subscription wait, not the
//! node unready.
//!
//! An entry holds the topic (`t`), the payload's JSON form (`d`), the publishing node (`n`),
//! a timestamp (`ts`), the event name (`e`) when there is one, and, for a payload published
//! as MessagePack, its bytes as sent (`m`): a node that reads `m` delivers it as sent to its
//! `herald.msgpack` subscribers (the JSON form stays, for nodes that do not read `m`).

mod entries;
mod reader;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use herald_core::{Cursor, EventName, Payload, TopicName};
use parking_lot::{Mutex, RwLock};
use tokio_util::sync::CancellationToken;

use super::interest::Interest;
use super::redis_conn::{RedisTarget, SharedConn};
use super::{BoxFuture, Bridge, BridgeError, Ingest, now_ms};
use crate::config::{ClusterConfig, Routing};
use crate::telemetry::metrics;
use crate::telemetry::trace::Carried;

const NAME: &str = "redis";
/// Bits of a stream entry's per-millisecond counter kept in a sequence number.
const SEQ_BITS: u32 = 21;

/// How the streams are capped.
#[derive(Clone, Copy, Debug)]
enum Trim {
    /// `MAXLEN ~ n` (broadcast routing).
    MaxLen(usize),
    /// `MINID ~ <now - age>` (interest routing: what any node reads back).
    MinAge(Duration),
}

/// The Redis bridge.
#[derive(Debug)]
pub(crate) struct RedisBridge {
    target: Arc<RedisTarget>,
    publisher: SharedConn,
    shards: u32,
    trim: Trim,
    /// Replicas a publish waits for (`WAIT`), and for how long.
    wait: (u32, Duration),
    /// How long an idempotency key is remembered (`cluster.idempotency_window`).
    idempotency_window: Duration,
    node_id: String,
    /// How far back a node reads a stream it starts following (`topics.history_ttl`).
    history: Duration,
    /// The streams this node follows.
    interest: Arc<Interest>,
    /// Longest wait of a subscription for a stream's history (`cluster.backfill_timeout`).
    backfill_timeout: Duration,
    /// Each shard's epoch, once known.
    epochs: RwLock<Vec<Option<u64>>>,
    /// Per followed stream, what the reader holds of it (kept across reconnects; dropped with
    /// the stream).
    last_ids: Mutex<HashMap<u32, reader::Held>>,
    /// The reader's live connection is up.
    connected: AtomicBool,
    /// Why the reader's last pass ended, for `/readyz`.
    last_error: Mutex<Option<String>>,
}

impl RedisBridge {
    /// Prepares the bridge (connections are made when it runs: a Redis that is down at start
    /// only makes the node not ready); a node starting to follow a stream reads `history`
    /// back.
    pub(crate) fn new(config: &ClusterConfig, history: Duration) -> anyhow::Result<Arc<Self>> {
        let target = Arc::new(RedisTarget::from_config(config)?);
        let broadcast = config.routing == Routing::Broadcast;
        Ok(Arc::new(Self {
            publisher: SharedConn::new(target.clone()),
            target,
            shards: config.redis_shards,
            trim: if broadcast {
                Trim::MaxLen(config.redis_stream_maxlen)
            } else {
                Trim::MinAge(history)
            },
            wait: (config.redis_wait_replicas, config.redis_wait_timeout),
            idempotency_window: config.idempotency_window,
            node_id: config.node_id.clone(),
            history,
            interest: Arc::new(Interest::new(
                NAME,
                config.redis_shards,
                broadcast,
                config.interest_linger,
            )),
            backfill_timeout: config.backfill_timeout,
            epochs: RwLock::new(vec![None; config.redis_shards as usize]),
            last_ids: Mutex::new(HashMap::new()),
            connected: AtomicBool::new(false),
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

    /// The call of [`APPEND`] that appends one message to `shard`'s stream and publishes it
    /// on the shard's channel.
    fn append_invocation(
        &self,
        shard: u32,
        topic: &TopicName,
        event: Option<&EventName>,
        data: &Payload,
        trace: Carried<'_>,
        idempotency: Option<&str>,
    ) -> redis::ScriptInvocation<'static> {
        let mut call = APPEND.prepare_invoke();
        call.key(self.target.stream_key(shard))
            .key(self.target.epoch_key(shard));
        if let Some(key) = idempotency {
            call.key(self.target.idempotency_key(shard, topic.as_str(), key));
        }
        let (trim, bound) = match self.trim {
            Trim::MaxLen(n) => ("MAXLEN", n as u64),
            Trim::MinAge(age) => ("MINID", now_ms().saturating_sub(age.as_millis() as u64)),
        };
        let publish = match self.target.is_cluster() {
            true => "SPUBLISH",
            false => "PUBLISH",
        };
        call.arg(self.target.live_channel(shard))
            .arg(publish)
            .arg(trim)
            .arg(bound)
            .arg(format!("{:x}", rand::random::<u64>() | 1))
            .arg(self.idempotency_window.as_millis() as u64)
            .arg("t")
            .arg(topic.as_str())
            .arg("d")
            .arg(&data.as_bytes()[..])
            .arg("n")
            .arg(&self.node_id)
            .arg("ts")
            .arg(now_ms());
        if let Some(event) = event {
            call.arg("e").arg(event.as_str());
        }
        if let Some(msgpack) = data.msgpack() {
            call.arg("m").arg(&msgpack[..]);
        }
        // A traced message's context: every node's ingest continues its trace.
        if let Some(traceparent) = trace.traceparent {
            call.arg("tp").arg(traceparent);
        }
        if let Some(tracestate) = trace.tracestate {
            call.arg("tps").arg(tracestate);
        }
        call
    }
}

/// The append, in one script so that it is atomic: makes the shard's epoch if it is missing;
/// with an idempotency key (`KEYS[3]`) seen within the window, returns the entry it appended
/// then and only rewrites the key as it is (a write, so that `WAIT` after it confirms the
/// first append on the replicas too); else appends the entry (`XADD`, trimmed), remembers it under
/// the idempotency key, and publishes it on the shard's channel (`PUBLISH`, or `SPUBLISH` on
/// a Redis Cluster: the channel shares the stream's hash tag) with the id of the entry before
/// it, so that a node that missed a notification knows, and reads the gap from the stream.
/// Returns `{epoch, id, 1 if it was a retry}`.
///
/// The message published is a list of netstrings (`<length>:<bytes>`): the epoch, the
/// previous entry's id (`0-0` for the first), the entry's id, then the entry's fields and
/// values as in the stream.
static APPEND: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
local epoch = redis.call('GET', KEYS[2])
if not epoch then
  redis.call('SET', KEYS[2], ARGV[5])
  epoch = ARGV[5]
end
if KEYS[3] then
  local first = redis.call('GET', KEYS[3])
  if first then
    redis.call('SET', KEYS[3], first, 'KEEPTTL')
    return {epoch, first, 1}
  end
end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local prev = '0-0'
if last[1] then prev = last[1][1] end
local fields = {}
for i = 7, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[1], ARGV[3], '~', ARGV[4], '*', unpack(fields))
if KEYS[3] then redis.call('SET', KEYS[3], id, 'PX', ARGV[6]) end
local parts = {#epoch .. ':' .. epoch, #prev .. ':' .. prev, #id .. ':' .. id}
for i = 7, #ARGV do parts[#parts + 1] = #ARGV[i] .. ':' .. ARGV[i] end
redis.call(ARGV[2], ARGV[1], table.concat(parts))
return {epoch, id, 0}
",
    )
});

/// A notification of the live path, as [`APPEND`] publishes it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Notice<'a> {
    /// The shard's epoch.
    pub(super) epoch: &'a str,
    /// The id of the entry before this one in the stream (`0-0` when none).
    pub(super) prev: &'a str,
    /// The entry's id.
    pub(super) id: &'a str,
    /// The entry's fields and values, in order.
    pub(super) fields: Vec<(&'a [u8], &'a [u8])>,
}

impl<'a> Notice<'a> {
    /// Parses a notification; `None` when it is not one [`APPEND`] wrote.
    pub(super) fn parse(mut bytes: &'a [u8]) -> Option<Self> {
        let mut next = || -> Option<&'a [u8]> {
            let colon = bytes.iter().take(12).position(|&b| b == b':')?;
            let len: usize = std::str::from_utf8(&bytes[..colon]).ok()?.parse().ok()?;
            let rest = &bytes[colon + 1..];
            let (item, tail) = (rest.get(..len)?, &rest[len..]);
            bytes = tail;
            Some(item)
        };
        let text = |b: &'a [u8]| std::str::from_utf8(b).ok();
        let epoch = text(next()?)?;
        let prev = text(next()?)?;
        let id = text(next()?)?;
        let mut fields = Vec::new();
        while let Some(name) = next() {
            fields.push((name, next()?));
        }
        Some(Self {
            epoch,
            prev,
            id,
            fields,
        })
    }
}

/// An epoch as kept in Redis (hex).
fn parse_epoch(epoch: &str) -> u64 {
    u64::from_str_radix(epoch, 16).unwrap_or(1)
}

impl RedisBridge {
    /// With `redis_wait_replicas`, waits until that many replicas hold what this connection
    /// wrote (`WAIT`): an answered publish then survives the master's death and a failover.
    async fn confirm<C: redis::aio::ConnectionLike>(
        &self,
        conn: &mut C,
    ) -> Result<(), BridgeError> {
        let (replicas, timeout) = self.wait;
        if replicas == 0 {
            return Ok(());
        }
        let acked: redis::RedisResult<i64> = redis::cmd("WAIT")
            .arg(replicas)
            .arg(timeout.as_millis() as u64)
            .query_async(conn)
            .await;
        match acked {
            Ok(n) if n >= i64::from(replicas) => Ok(()),
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
        trace: Carried<'a>,
        idempotency: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Cursor, BridgeError>> {
        Box::pin(async move {
            if !self.connected.load(Ordering::Relaxed) {
                return Err(Self::unavailable("not connected"));
            }
            let shard = self.shard_of(topic.as_str());
            let invocation = self.append_invocation(shard, topic, event, data, trace, idempotency);
            // Tried again only when it was certainly not written: no connection could be made
            // (sentinels that have not agreed on the new master yet), or Redis refused it (a
            // demoted master's READONLY). A script that went out on a connection that then
            // broke or answered too late may have run, and running it again would be a second
            // entry unless the publish carries an idempotency key: without one it is answered
            // 503 (the publisher does not know its fate, and retries with a key to be safe).
            // A connection that broke while idle (Redis restarted, a failover) is not used
            // again: the reader's new pass forgets it before the node is ready again.
            let mut attempt = 0;
            let (epoch, id) = loop {
                attempt += 1;
                let result: Result<(), (bool, redis::RedisError)> = match self.publisher.get().await
                {
                    Ok(mut conn) => {
                        let added: redis::RedisResult<(String, String, i64)> =
                            invocation.invoke_async(&mut conn).await;
                        match added {
                            // Written: from here a retry would publish twice, so a failure to
                            // confirm it is an answer, not a retry.
                            // A retry is confirmed too: the script rewrote its key, and a
                            // replica that holds that write holds the first append, which
                            // came before it (the first publisher may have been answered
                            // 503 because no replica had confirmed it yet).
                            Ok((epoch, id, _retried)) => {
                                self.confirm(&mut conn).await?;
                                break (parse_epoch(&epoch), id);
                            }
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
                                    "the write may or may not have reached Redis (publish again with the same idempotency key to be sure): {e}"
                                )));
                            }
                        }
                    }
                    Err(e) => Err((true, e)),
                };
                match result {
                    Ok(()) => unreachable!("a write is answered inside the loop"),
                    Err((true, _)) if attempt < 4 => {
                        tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                    }
                    Err((_, e)) => return Err(Self::unavailable(e)),
                }
            };
            let seq = parse_entry_id(&id)
                .ok_or_else(|| Self::unavailable(format!("unexpected entry id {id}")))?;
            metrics::bridge_message(NAME, "out");
            Ok(Cursor::new(epoch, seq))
        })
    }

    /// Follows the streams until `stop`, reconnecting with backoff (see [`reader`]).
    fn run(self: Arc<Self>, ingest: Ingest, stop: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(reader::run(self, ingest, stop))
    }

    fn backfill<'a>(
        &'a self,
        topics: &'a [&'a str],
        patterns: bool,
    ) -> BoxFuture<'a, Result<(), BridgeError>> {
        Box::pin(async move {
            let partitions: Vec<u32> = match patterns {
                // A pattern may match a topic of any stream.
                true => (0..self.shards).collect(),
                false => topics.iter().map(|t| self.shard_of(t)).collect(),
            };
            (self.interest)
                .backfill(partitions, self.backfill_timeout)
                .await
                .map_err(|pending| {
                    Self::unavailable(format!(
                        "this node could not read the history of {pending} stream(s) within {:?}",
                        self.backfill_timeout
                    ))
                })
        })
    }

    fn partitions_followed(&self) -> (usize, usize) {
        (self.interest.followed_count(), self.shards as usize)
    }

    fn is_ready(&self) -> bool {
        self.connected.load(Ordering::Relaxed) && self.interest.initial_pending() == 0
    }

    fn not_ready_reason(&self) -> Option<String> {
        if self.is_ready() {
            return None;
        }
        let error = self.last_error.lock().clone();
        if !self.connected.load(Ordering::Relaxed) {
            return Some(match error {
                Some(error) => format!("not connected: {error}"),
                None => "not connected yet".into(),
            });
        }
        let waiting = self.interest.initial_pending();
        let followed = self.interest.followed_count();
        Some(match error {
            Some(error) => format!("{waiting} of {followed} followed streams not read: {error}"),
            None => format!("{waiting} of {followed} followed streams not caught up yet"),
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

    #[test]
    fn a_notice_reads_back_as_the_append_script_writes_it() {
        // As APPEND concatenates it: epoch, previous id, id, then fields and values.
        let parts: [&[u8]; 7] = [
            b"9f86",
            b"0-0",
            b"17-0",
            b"t",
            b"a:b",
            b"d",
            b"{\"x\":\"1:2\"}",
        ];
        let mut wire = Vec::new();
        for p in parts {
            wire.extend_from_slice(format!("{}:", p.len()).as_bytes());
            wire.extend_from_slice(p);
        }
        let notice = Notice::parse(&wire).unwrap();
        assert_eq!(
            (notice.epoch, notice.prev, notice.id),
            ("9f86", "0-0", "17-0")
        );
        assert_eq!(
            notice.fields,
            vec![
                (&b"t"[..], &b"a:b"[..]),
                (&b"d"[..], &b"{\"x\":\"1:2\"}"[..])
            ]
        );
        // Cut short, a length that runs past the end, or no length at all: not a notice.
        assert_eq!(Notice::parse(&wire[..wire.len() - 1]), None);
        assert_eq!(Notice::parse(b"4:9f86"), None);
        assert_eq!(Notice::parse(b"99:x"), None);
        assert_eq!(Notice::parse(b"garbage"), None);
    }

    #[test]
    fn entry_ids_order_as_redis_orders_them() {
        let id = |s| entries::EntryId::parse(s).unwrap();
        assert!(id("1-9") < id("2-0") && id("2-0") < id("2-1") && id("10-0") > id("9-99"));
        assert_eq!(id("17-3").to_string(), "17-3");
        assert_eq!(entries::EntryId::parse("17"), None);
    }
}
