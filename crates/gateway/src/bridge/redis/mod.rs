//! The Redis bridge: node-to-node fan-out and shared positions through Redis Streams, with
//! Redis pub/sub as the live path.
//!
//! Every message is appended to one of `cluster.redis_shards` streams (the log's partitions),
//! chosen by a stable hash of the topic name, so each topic's messages stay in order in one stream.
//! The append is one script ([`APPEND`]): it makes the shard's epoch if it is missing, appends
//! the entry (`XADD`, trimmed), and publishes it on the shard's channel with its id and the
//! id of the entry before it ([`Notice`](notice::Notice)). Each node subscribes to the
//! channels of the streams it follows and ingests each notice into its registry, reading a
//! stream only to start following it or to fill a gap ([`reader`]): each node gets each
//! message of those streams exactly once, and there is no echo loop, because publishing
//! never delivers locally — delivery always comes back through the log. Redis's work per
//! message is the append and one publish to the nodes that follow its partition, whatever the
//! number of partitions they follow.
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

mod bridge;
mod entries;
mod notice;
mod reader;

pub(crate) use bridge::RedisBridge;
pub use bridge::shard_of;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use herald_core::{Cursor, EventName, Payload, TopicName};
use parking_lot::{Mutex, RwLock};
use tokio_util::sync::CancellationToken;

use super::interest::Interest;
use super::logs::{BoxFuture, Bridge, BridgeError, Ingest, now_ms};
use super::redis_conn::{RedisTarget, SharedConn};
use crate::config::{ClusterConfig, Routing};
use crate::telemetry::metrics;
use crate::telemetry::trace::Carried;
use bridge::{NAME, Trim};
use entries::parse_entry_id;
use notice::{APPEND, parse_epoch};

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

#[cfg(test)]
mod tests {
    use super::notice::Notice;
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
