//! The cluster's view of who is connected where, kept in Redis: live nodes, each node's
//! connections, and subscribers per topic on each node.
//!
//! Nothing here is written per connection or per heartbeat of a client. Each node keeps its
//! connections in memory and, every `cluster.presence_interval`, writes what changed since the
//! last flush in one pipeline, then refreshes the keys' TTL:
//!
//! | key | type | content |
//! | --- | --- | --- |
//! | `<prefix>:nodes` | sorted set | node id → last refresh (unix ms) |
//! | `<prefix>:node:<id>:conns` | hash | connection id → `{"transport":..,"since":..,"user":..}` |
//! | `<prefix>:node:<id>:info` | string | `{"groups":{"<bridge>":[followed, total]}}`: the partitions of each log the node reads (interest routing; the key keeps its former word: running nodes read it) |
//! | `<prefix>:node:<id>:users` | hash | user (token `sub`) → its connection ids, comma-separated |
//! | `<prefix>:node:<id>:presence` | hash | topic → subscribers on that node |
//! | `<prefix>:node:<id>:members` | set | topics with members on that node (the hashes below) |
//! | `<prefix>:node:<id>:members:<topic>` | hash | connection id → `{"since":..,"transport":..,"user":..,"info"?:{..}}` |
//!
//! The member hashes hold every subscription of the node's connections (waiting long-polls
//! included) ([`super::members`]): a flush writes the members that joined, left or changed token
//! since the last one, deletes the hash of a topic left without members, and refreshes the TTL of
//! each hash (one `EXPIRE` per topic with members on the node, every interval).
//!
//! A node that dies stops refreshing: its keys expire after `3 × presence_interval` and it
//! drops out of the live set, so its connections, subscribers and members stop being counted
//! (readers only look at live nodes). After a Redis outage the node rewrites everything it
//! holds, deleting first the member hashes the set names (a node restarted under the same id
//! leaves none of its past members behind). On a Redis Cluster the prefix is a hash
//! tag (`{<prefix>}`), so these keys share a slot and a flush stays one pipeline.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use herald_core::{Registry, TopicName};

use super::members::{Changes, Members};
use crate::bridge::redis_conn::{RedisTarget, SharedConn};
use crate::bridge::{Logs, now_ms};
use crate::cluster::observer::ConnectionObserver;
use crate::config::ClusterConfig;
use crate::telemetry::metrics;

const NAME: &str = "redis_presence";
/// Connection changes queued between flushes; past it they are dropped (and counted) and the
/// next flush rewrites the node's whole entry.
const QUEUE: usize = 65_536;
/// Most `HSCAN`s one page of members takes (a page may end short of its limit after them).
pub(crate) const MAX_SCANS: usize = 64;

/// Where a page of a topic's members starts in the cluster: a node (by id), an `HSCAN`
/// cursor in its hash of the topic's members, and how many of that scan's members the last
/// page took already.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NodeCursor {
    /// The node's id.
    pub node: String,
    /// The `HSCAN` cursor.
    pub scan: u64,
    /// Members of that scan to skip.
    pub skip: usize,
}

#[derive(Debug)]
enum Change {
    Opened {
        id: String,
        transport: &'static str,
        user: Option<String>,
    },
    Closed {
        id: String,
    },
}

/// Writes the connection registry and topic presence of one node to Redis.
#[derive(Debug)]
pub(crate) struct Presence {
    tx: mpsc::Sender<Change>,
    rx: parking_lot::Mutex<Option<mpsc::Receiver<Change>>>,
    lost: std::sync::atomic::AtomicBool,
    conn: SharedConn,
    prefix: String,
    node_id: String,
    interval: Duration,
    /// The node's logs, whose followed partitions each flush writes.
    logs: Arc<Logs>,
}

impl Presence {
    /// For the Redis at `target` (the bridge's); each flush also writes how many partitions
    /// of each of `logs` the node reads.
    pub(crate) fn new(
        config: &ClusterConfig,
        target: Arc<RedisTarget>,
        logs: Arc<Logs>,
    ) -> anyhow::Result<Arc<Self>> {
        let (tx, rx) = mpsc::channel(QUEUE);
        Ok(Arc::new(Self {
            tx,
            rx: parking_lot::Mutex::new(Some(rx)),
            lost: std::sync::atomic::AtomicBool::new(false),
            prefix: target.presence_prefix(),
            conn: SharedConn::new(target),
            node_id: config.node_id.clone(),
            interval: config.presence_interval,
            logs,
        }))
    }

    fn ttl(&self) -> Duration {
        self.interval * 3
    }

    fn nodes_key(&self) -> String {
        format!("{}:nodes", self.prefix)
    }

    fn conns_key(&self, node: &str) -> String {
        format!("{}:node:{node}:conns", self.prefix)
    }

    fn info_key(&self, node: &str) -> String {
        format!("{}:node:{node}:info", self.prefix)
    }

    /// What the node's `info` key holds: the partitions of each log it reads (under the key
    /// `groups`, their former name, which running nodes read).
    fn info(&self) -> String {
        let partitions: serde_json::Map<String, serde_json::Value> = (self.logs.iter())
            .map(|b| {
                let (followed, total) = b.partitions_followed();
                (b.name().to_string(), serde_json::json!([followed, total]))
            })
            .collect();
        serde_json::json!({ "groups": partitions }).to_string()
    }

    fn users_key(&self, node: &str) -> String {
        format!("{}:node:{node}:users", self.prefix)
    }

    /// The connections of `user` on each live node.
    pub(crate) async fn user_connections(
        &self,
        user: &str,
    ) -> redis::RedisResult<Vec<(String, Vec<String>)>> {
        let nodes = self.live_nodes().await?;
        let mut pipe = redis::pipe();
        for node in &nodes {
            pipe.hget(self.users_key(node), user);
        }
        let ids: Vec<Option<String>> = self.conn.query(&pipe).await?;
        Ok(nodes
            .into_iter()
            .zip(ids)
            .filter_map(|(node, ids)| {
                ids.map(|ids| (node, ids.split(',').map(str::to_owned).collect()))
            })
            .collect())
    }

    fn presence_key(&self, node: &str) -> String {
        format!("{}:node:{node}:presence", self.prefix)
    }

    /// The set of topics with members on `node`.
    fn members_index_key(&self, node: &str) -> String {
        format!("{}:node:{node}:members", self.prefix)
    }

    /// The members of `topic` on `node`.
    fn members_key(&self, node: &str, topic: &str) -> String {
        format!("{}:node:{node}:members:{topic}", self.prefix)
    }

    /// Flushes changes, `registry`'s subscriber counts and the changes of `members`, every
    /// interval until `stop`.
    pub(crate) async fn run(
        self: Arc<Self>,
        registry: Arc<Registry>,
        members: Arc<Members>,
        stop: CancellationToken,
    ) {
        let Some(mut rx) = self.rx.lock().take() else {
            return;
        };
        let mut held = Held::default();
        let mut tick = tokio::time::interval(self.interval);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            while let Ok(change) = rx.try_recv() {
                held.apply(change, now_ms());
            }
            if self.lost.swap(false, std::sync::atomic::Ordering::Relaxed) {
                held.rewrite = true;
            }
            let subscribers: HashMap<String, usize> = registry
                .stats(usize::MAX)
                .into_iter()
                .filter(|s| s.subscribers > 0)
                .map(|s| (s.name.to_string(), s.subscribers))
                .collect();
            let writes = held.writes(&subscribers);
            // Members: what changed, or everything (and the hashes Redis may hold from
            // before, named by the index) on a rewrite.
            let changes = members.take_changes();
            let member_writes = if held.rewrite || changes.overflow {
                let index = self.members_index_key(&self.node_id);
                let mut read = redis::pipe();
                read.smembers(&index);
                match self.conn.query::<(Vec<String>,)>(&read).await {
                    Ok((stale,)) => held.member_rewrite(&stale, members.snapshot()),
                    Err(e) => {
                        tracing::debug!(error = %e, "presence flush failed; will rewrite");
                        held.failed();
                        continue;
                    }
                }
            } else {
                held.member_changes(changes)
            };
            let mut pipe = redis::pipe();
            let (ck, pk, uk) = (
                self.conns_key(&self.node_id),
                self.presence_key(&self.node_id),
                self.users_key(&self.node_id),
            );
            writes.hash(&mut pipe, &uk, &writes.users);
            writes.hash(&mut pipe, &ck, &writes.conns);
            writes.hash(&mut pipe, &pk, &writes.presence);
            let ttl = self.ttl().as_secs().max(1) as i64;
            pipe.zadd(self.nodes_key(), &self.node_id, now_ms())
                .ignore();
            pipe.expire(&ck, ttl).ignore().expire(&pk, ttl).ignore();
            pipe.expire(&uk, ttl).ignore();
            pipe.set_ex(self.info_key(&self.node_id), self.info(), ttl as u64)
                .ignore();
            pipe.expire(self.nodes_key(), ttl * 20).ignore();
            self.write_members(&mut pipe, &member_writes, ttl);
            match self.conn.query::<()>(&pipe).await {
                Ok(()) => held.flushed(subscribers, member_writes.after),
                Err(e) => {
                    tracing::debug!(error = %e, "presence flush failed; will rewrite");
                    held.member_topics.extend(member_writes.after);
                    held.member_topics.extend(member_writes.del);
                    held.failed();
                }
            }
        }
        // Leave the cluster's view cleanly.
        let mut pipe = redis::pipe();
        for topic in &held.member_topics {
            pipe.del(self.members_key(&self.node_id, topic.as_str()))
                .ignore();
        }
        pipe.del(self.members_index_key(&self.node_id)).ignore();
        pipe.del(self.conns_key(&self.node_id)).ignore();
        pipe.del(self.presence_key(&self.node_id)).ignore();
        pipe.del(self.users_key(&self.node_id)).ignore();
        pipe.del(self.info_key(&self.node_id)).ignore();
        pipe.zrem(self.nodes_key(), &self.node_id).ignore();
        let _ = tokio::time::timeout(Duration::from_secs(1), self.conn.query::<()>(&pipe)).await;
    }

    /// Adds `writes` to `pipe`: hashes deleted, the index, members set and deleted, and the
    /// TTL of every member hash that remains (`ttl` seconds), in that order (a hash that
    /// exists is in the index, should the pipeline stop part-way).
    fn write_members(&self, pipe: &mut redis::Pipeline, writes: &MemberWrites, ttl: i64) {
        let node = &self.node_id;
        let index = self.members_index_key(node);
        for topic in &writes.del {
            pipe.del(self.members_key(node, topic.as_str())).ignore();
        }
        if writes.clear_index {
            pipe.del(&index).ignore();
        }
        for chunk in writes.index_rem.chunks(1000) {
            pipe.srem(&index, names(chunk)).ignore();
        }
        for chunk in writes.index_add.chunks(1000) {
            pipe.sadd(&index, names(chunk)).ignore();
        }
        for (topic, hash) in &writes.hashes {
            let key = self.members_key(node, topic.as_str());
            for chunk in hash.set.chunks(1000) {
                pipe.hset_multiple(&key, chunk).ignore();
            }
            for chunk in hash.del.chunks(1000) {
                pipe.hdel(&key, chunk).ignore();
            }
        }
        for topic in &writes.after {
            pipe.expire(self.members_key(node, topic.as_str()), ttl)
                .ignore();
        }
        pipe.expire(&index, ttl).ignore();
    }

    /// Up to `limit` members of `topic` on the live nodes, from `from` (the start when
    /// `None`), and where the next page starts (`None`: that was the last).
    ///
    /// The walk goes node by node in the order of their ids, through each node's hash with
    /// `HSCAN`; a page may hold fewer than `limit` members and still have a next one (it
    /// stops after [`MAX_SCANS`] scans). Like `SCAN`, a member that joins or leaves during
    /// the walk may be listed twice or missed; members present throughout are listed.
    pub(crate) async fn topic_members(
        &self,
        topic: &str,
        from: Option<&NodeCursor>,
        limit: usize,
    ) -> redis::RedisResult<(Vec<serde_json::Value>, Option<NodeCursor>)> {
        let mut nodes = self.live_nodes().await?;
        nodes.sort_unstable();
        let (mut i, mut scan, mut skip) = match from {
            None => (0, 0, 0),
            Some(c) => match nodes.binary_search(&c.node) {
                Ok(i) => (i, c.scan, c.skip),
                // The node left: on to the next one.
                Err(i) => (i, 0, 0),
            },
        };
        let mut page = Vec::with_capacity(limit.min(1000));
        for _ in 0..MAX_SCANS {
            let Some(node) = nodes.get(i) else {
                return Ok((page, None));
            };
            let want = limit - page.len();
            let mut pipe = redis::pipe();
            pipe.cmd("HSCAN")
                .arg(self.members_key(node, topic))
                .arg(scan)
                .arg("COUNT")
                .arg(want.max(10));
            let ((next, fields),): ((u64, Vec<(String, String)>),) = self.conn.query(&pipe).await?;
            let found = fields.len().saturating_sub(skip);
            for (conn, entry) in fields.into_iter().skip(skip).take(want) {
                let Ok(mut member) = serde_json::from_str::<serde_json::Value>(&entry) else {
                    continue;
                };
                member["conn"] = conn.into();
                member["node"] = node.as_str().into();
                page.push(member);
            }
            if found > want {
                // The scan gave more than the page takes: the next page scans from the same
                // place and skips what this one took.
                let node = node.clone();
                let skip = skip + want;
                return Ok((page, Some(NodeCursor { node, scan, skip })));
            }
            skip = 0;
            if next == 0 {
                i += 1;
                scan = 0;
            } else {
                scan = next;
            }
            if page.len() == limit {
                break;
            }
        }
        let next = nodes.get(i).map(|node| NodeCursor {
            node: node.clone(),
            scan,
            skip,
        });
        Ok((page, next))
    }

    /// Live nodes (refreshed within the TTL).
    pub(crate) async fn live_nodes(&self) -> redis::RedisResult<Vec<String>> {
        let since = now_ms().saturating_sub(self.ttl().as_millis() as u64);
        let mut pipe = redis::pipe();
        pipe.cmd("ZRANGEBYSCORE")
            .arg(self.nodes_key())
            .arg(since)
            .arg("+inf");
        let (nodes,): (Vec<String>,) = self.conn.query(&pipe).await?;
        Ok(nodes)
    }

    /// Subscribers of `topic` on each live node.
    pub(crate) async fn topic_presence(
        &self,
        topic: &str,
    ) -> redis::RedisResult<Vec<(String, u64)>> {
        let nodes = self.live_nodes().await?;
        let mut pipe = redis::pipe();
        for node in &nodes {
            pipe.hget(self.presence_key(node), topic);
        }
        let counts: Vec<Option<u64>> = self.conn.query(&pipe).await?;
        Ok(nodes
            .into_iter()
            .zip(counts)
            .map(|(n, c)| (n, c.unwrap_or(0)))
            .collect())
    }

    /// Each live node: its open connections, and the partitions of each log it reads
    /// (`{"<bridge>": [followed, total]}`, empty when not written yet).
    pub(crate) async fn nodes(&self) -> redis::RedisResult<Vec<(String, u64, serde_json::Value)>> {
        let nodes = self.live_nodes().await?;
        let mut pipe = redis::pipe();
        for node in &nodes {
            pipe.hlen(self.conns_key(node)).get(self.info_key(node));
        }
        let values: Vec<redis::Value> = self.conn.query(&pipe).await?;
        let mut values = values.into_iter();
        let mut out = Vec::with_capacity(nodes.len());
        for node in nodes {
            let count: u64 =
                redis::from_redis_value(values.next().unwrap_or(redis::Value::Nil)).unwrap_or(0);
            let info: Option<String> =
                redis::from_redis_value(values.next().unwrap_or(redis::Value::Nil)).unwrap_or(None);
            let partitions = info
                .and_then(|i| serde_json::from_str::<serde_json::Value>(&i).ok())
                .map_or_else(|| serde_json::json!({}), |i| i["groups"].clone());
            out.push((node, count, partitions));
        }
        Ok(out)
    }

    fn queue(&self, change: Change) {
        if self.tx.try_send(change).is_err() {
            // The flusher is behind (Redis slow or away): rewrite everything next time.
            self.lost.store(true, std::sync::atomic::Ordering::Relaxed);
            metrics::bridge_message(NAME, "dropped");
        }
    }
}

impl ConnectionObserver for Presence {
    fn opened(&self, id: &str, transport: &'static str, user: Option<&str>) {
        self.queue(Change::Opened {
            id: id.to_string(),
            transport,
            user: user.map(str::to_owned),
        });
    }

    fn closed(&self, id: &str, _transport: &'static str, _reason: &'static str) {
        self.queue(Change::Closed { id: id.to_string() });
    }
}

mod held;
#[cfg(test)]
mod tests;

use held::*;
