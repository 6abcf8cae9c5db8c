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
//! | `<prefix>:node:<id>:users` | hash | user (token `sub`) → its connection ids, comma-separated |
//! | `<prefix>:node:<id>:presence` | hash | topic → subscribers on that node |
//! | `<prefix>:node:<id>:members` | set | topics with members on that node (the hashes below) |
//! | `<prefix>:node:<id>:members:<topic>` | hash | connection id → `{"since":..,"transport":..,"user":..,"info"?:{..}}` |
//!
//! The member hashes hold every subscription of the node's connections (waiting long-polls included)
//! ([`super::members`]): a flush writes the members that joined, left or changed token since
//! the last one, deletes the hash of a topic left without members, and refreshes the TTL of
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

use super::ConnectionObserver;
use super::members::{Changes, Members};
use crate::bridge::now_ms;
use crate::bridge::redis_conn::{RedisTarget, SharedConn};
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
pub struct NodeCursor {
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

/// Feeds the connection registry and topic presence of one node into Redis.
#[derive(Debug)]
pub struct Presence {
    tx: mpsc::Sender<Change>,
    rx: parking_lot::Mutex<Option<mpsc::Receiver<Change>>>,
    lost: std::sync::atomic::AtomicBool,
    conn: SharedConn,
    prefix: String,
    node_id: String,
    interval: Duration,
}

impl Presence {
    /// For the Redis at `target` (the bridge's).
    pub fn new(config: &ClusterConfig, target: Arc<RedisTarget>) -> anyhow::Result<Arc<Self>> {
        let (tx, rx) = mpsc::channel(QUEUE);
        Ok(Arc::new(Self {
            tx,
            rx: parking_lot::Mutex::new(Some(rx)),
            lost: std::sync::atomic::AtomicBool::new(false),
            prefix: target.presence_prefix(),
            conn: SharedConn::new(target),
            node_id: config.node_id.clone(),
            interval: config.presence_interval,
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

    fn users_key(&self, node: &str) -> String {
        format!("{}:node:{node}:users", self.prefix)
    }

    /// The connections of `user` on each live node.
    pub async fn user_connections(
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
    pub async fn run(
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
    pub async fn topic_members(
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
    pub async fn live_nodes(&self) -> redis::RedisResult<Vec<String>> {
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
    pub async fn topic_presence(&self, topic: &str) -> redis::RedisResult<Vec<(String, u64)>> {
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

    /// Open connections on each live node.
    pub async fn connections(&self) -> redis::RedisResult<Vec<(String, u64)>> {
        let nodes = self.live_nodes().await?;
        let mut pipe = redis::pipe();
        for node in &nodes {
            pipe.hlen(self.conns_key(node));
        }
        let counts: Vec<u64> = self.conn.query(&pipe).await?;
        Ok(nodes.into_iter().zip(counts).collect())
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

/// What a node holds and what changed since its last flush to Redis.
#[derive(Debug)]
struct Held {
    /// Connection id → its entry (JSON).
    conns: HashMap<String, String>,
    /// User → the ids of its connections.
    users: HashMap<String, BTreeSet<String>>,
    conn_user: HashMap<String, String>,
    changed_users: HashSet<String>,
    added: Vec<String>,
    removed: Vec<String>,
    /// Subscribers per topic as last written.
    presence: HashMap<String, usize>,
    /// Topics whose member hash Redis may hold (after a failed flush, more than it does).
    member_topics: HashSet<TopicName>,
    /// Write everything (first flush, after a failed one, after dropped changes).
    rewrite: bool,
}

impl Default for Held {
    fn default() -> Self {
        Self {
            conns: HashMap::new(),
            users: HashMap::new(),
            conn_user: HashMap::new(),
            changed_users: HashSet::new(),
            added: Vec::new(),
            removed: Vec::new(),
            presence: HashMap::new(),
            member_topics: HashSet::new(),
            rewrite: true,
        }
    }
}

/// One hash's writes in a flush: replace it whole, or set and delete fields.
#[derive(Debug, Default, PartialEq)]
struct HashWrites {
    set: Vec<(String, String)>,
    del: Vec<String>,
}

/// The names of `topics`, as Redis arguments.
fn names(topics: &[TopicName]) -> Vec<&str> {
    topics.iter().map(TopicName::as_str).collect()
}

/// A flush's writes to the node's member hashes and their index (the set of their topics).
#[derive(Debug, Default, PartialEq)]
struct MemberWrites {
    /// Hashes deleted whole, first: on a rewrite every one Redis may hold, else those of the
    /// topics left without members.
    del: Vec<TopicName>,
    /// Whether the index is deleted (a rewrite), before it is added to.
    clear_index: bool,
    index_rem: Vec<TopicName>,
    index_add: Vec<TopicName>,
    /// Members set and deleted, per topic (connection ids as decimal text).
    hashes: Vec<(TopicName, HashWrites)>,
    /// The topics with a member hash once the flush is done (their TTL is refreshed).
    after: HashSet<TopicName>,
}

/// A flush's writes to the node's three hashes; `rewrite` replaces each whole.
#[derive(Debug, PartialEq)]
struct Writes {
    rewrite: bool,
    users: HashWrites,
    conns: HashWrites,
    presence: HashWrites,
}

impl Writes {
    /// Adds `hash`'s writes to `key` to `pipe`, 1000 fields a command.
    fn hash(&self, pipe: &mut redis::Pipeline, key: &str, hash: &HashWrites) {
        if self.rewrite {
            pipe.del(key).ignore();
        }
        for chunk in hash.set.chunks(1000) {
            pipe.hset_multiple(key, chunk).ignore();
        }
        for chunk in hash.del.chunks(1000) {
            pipe.hdel(key, chunk).ignore();
        }
    }
}

impl Held {
    fn apply(&mut self, change: Change, now_ms: u64) {
        match change {
            Change::Opened {
                id,
                transport,
                user,
            } => {
                let mut entry = serde_json::json!({ "transport": transport, "since": now_ms });
                if let Some(user) = &user {
                    entry["user"] = user.as_str().into();
                    self.users
                        .entry(user.clone())
                        .or_default()
                        .insert(id.clone());
                    self.conn_user.insert(id.clone(), user.clone());
                    self.changed_users.insert(user.clone());
                }
                self.conns.insert(id.clone(), entry.to_string());
                self.added.push(id);
            }
            Change::Closed { id } => {
                self.conns.remove(&id);
                if let Some(user) = self.conn_user.remove(&id) {
                    if let Some(ids) = self.users.get_mut(&user) {
                        ids.remove(&id);
                        if ids.is_empty() {
                            self.users.remove(&user);
                        }
                    }
                    self.changed_users.insert(user);
                }
                self.removed.push(id);
            }
        }
    }

    /// What the next flush writes, given the topics' subscriber counts now: everything on a
    /// rewrite, else only what changed since the last flush.
    fn writes(&self, subscribers: &HashMap<String, usize>) -> Writes {
        let joined =
            |ids: &BTreeSet<String>| ids.iter().map(String::as_str).collect::<Vec<_>>().join(",");
        let pairs = |m: &HashMap<String, usize>, keep: &dyn Fn(&String, usize) -> bool| {
            let mut v: Vec<(String, String)> = m
                .iter()
                .filter(|(k, n)| keep(k, **n))
                .map(|(k, n)| (k.clone(), n.to_string()))
                .collect();
            v.sort();
            v
        };
        if self.rewrite {
            let mut users: Vec<_> = self
                .users
                .iter()
                .map(|(u, ids)| (u.clone(), joined(ids)))
                .collect();
            let mut conns: Vec<_> = self
                .conns
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            users.sort();
            conns.sort();
            return Writes {
                rewrite: true,
                users: HashWrites {
                    set: users,
                    del: Vec::new(),
                },
                conns: HashWrites {
                    set: conns,
                    del: Vec::new(),
                },
                presence: HashWrites {
                    set: pairs(subscribers, &|_, _| true),
                    del: Vec::new(),
                },
            };
        }
        let mut users = HashWrites::default();
        let mut changed: Vec<&String> = self.changed_users.iter().collect();
        changed.sort();
        for user in changed {
            match self.users.get(user) {
                Some(ids) => users.set.push((user.clone(), joined(ids))),
                None => users.del.push(user.clone()),
            }
        }
        let conns = HashWrites {
            set: self
                .added
                .iter()
                .filter_map(|id| self.conns.get(id).map(|e| (id.clone(), e.clone())))
                .collect(),
            del: self
                .removed
                .iter()
                .filter(|id| !self.conns.contains_key(*id))
                .cloned()
                .collect(),
        };
        let mut zeroed: Vec<String> = self
            .presence
            .keys()
            .filter(|t| !subscribers.contains_key(*t))
            .cloned()
            .collect();
        zeroed.sort();
        let presence = HashWrites {
            set: pairs(subscribers, &|t, n| self.presence.get(t) != Some(&n)),
            del: zeroed,
        };
        Writes {
            rewrite: false,
            users,
            conns,
            presence,
        }
    }

    /// The member writes that replace what Redis holds with `all` (every member of the node,
    /// by topic), deleting first the hashes of `stale` (what the index names) and of every
    /// topic written before.
    fn member_rewrite(
        &self,
        stale: &[String],
        all: Vec<(TopicName, Vec<(u64, String)>)>,
    ) -> MemberWrites {
        let mut del: BTreeSet<TopicName> = self.member_topics.iter().cloned().collect();
        del.extend(stale.iter().filter_map(|t| TopicName::new(t).ok()));
        let hashes: Vec<(TopicName, HashWrites)> = all
            .into_iter()
            .map(|(topic, members)| {
                let set = members
                    .into_iter()
                    .map(|(id, json)| (id.to_string(), json))
                    .collect();
                (topic, HashWrites { set, del: vec![] })
            })
            .collect();
        MemberWrites {
            del: del.into_iter().collect(),
            clear_index: true,
            index_rem: Vec::new(),
            index_add: hashes.iter().map(|(t, _)| t.clone()).collect(),
            after: hashes.iter().map(|(t, _)| t.clone()).collect(),
            hashes,
        }
    }

    /// The member writes of `changes` (taken since the last flush).
    fn member_changes(&self, changes: Changes) -> MemberWrites {
        let mut writes = MemberWrites {
            after: self.member_topics.clone(),
            ..MemberWrites::default()
        };
        for change in changes.topics {
            let written = self.member_topics.contains(&change.topic);
            if change.empty {
                if written {
                    writes.after.remove(&change.topic);
                    writes.index_rem.push(change.topic.clone());
                    writes.del.push(change.topic);
                }
                continue;
            }
            if !written {
                writes.index_add.push(change.topic.clone());
                writes.after.insert(change.topic.clone());
            }
            let hash = HashWrites {
                set: change
                    .set
                    .into_iter()
                    .map(|(id, json)| (id.to_string(), json))
                    .collect(),
                del: change.del.iter().map(u64::to_string).collect(),
            };
            writes.hashes.push((change.topic, hash));
        }
        writes
    }

    /// The flush succeeded: `subscribers` is what Redis holds now, and the member hashes of
    /// `member_topics`.
    fn flushed(&mut self, subscribers: HashMap<String, usize>, member_topics: HashSet<TopicName>) {
        self.member_topics = member_topics;
        self.rewrite = false;
        self.changed_users.clear();
        self.added.clear();
        self.removed.clear();
        self.presence = subscribers;
    }

    /// The flush failed: the next one writes everything.
    fn failed(&mut self) {
        self.rewrite = true;
        self.added.clear();
        self.removed.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(id: &str, user: Option<&str>) -> Change {
        Change::Opened {
            id: id.into(),
            transport: "ws",
            user: user.map(str::to_owned),
        }
    }

    fn closed(id: &str) -> Change {
        Change::Closed { id: id.into() }
    }

    fn counts(pairs: &[(&str, usize)]) -> HashMap<String, usize> {
        pairs.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    fn set(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_first_flush_writes_everything_then_only_what_changed() {
        let mut held = Held::default();
        held.apply(open("n-0", Some("ann")), 5);
        held.apply(open("n-1", Some("ann")), 6);
        held.apply(open("n-2", None), 7);
        let writes = held.writes(&counts(&[("news", 2), ("chat", 1)]));
        assert!(writes.rewrite);
        assert_eq!(writes.users.set, set(&[("ann", "n-0,n-1")]));
        assert_eq!(
            writes.conns.set,
            set(&[
                ("n-0", r#"{"transport":"ws","since":5,"user":"ann"}"#),
                ("n-1", r#"{"transport":"ws","since":6,"user":"ann"}"#),
                ("n-2", r#"{"transport":"ws","since":7}"#),
            ])
        );
        assert_eq!(writes.presence.set, set(&[("chat", "1"), ("news", "2")]));
        held.flushed(counts(&[("news", 2), ("chat", 1)]), HashSet::new());

        // Nothing changed: nothing but the refresh.
        let idle = held.writes(&counts(&[("news", 2), ("chat", 1)]));
        assert_eq!(
            (idle.rewrite, idle.users, idle.conns, idle.presence),
            (
                false,
                HashWrites::default(),
                HashWrites::default(),
                HashWrites::default()
            )
        );

        // One of ann's connections closes, one opens and closes between flushes, a topic
        // empties and another changes.
        held.apply(closed("n-0"), 8);
        held.apply(open("n-3", Some("bob")), 9);
        held.apply(closed("n-3"), 10);
        let writes = held.writes(&counts(&[("news", 3)]));
        assert!(!writes.rewrite);
        assert_eq!(writes.users.set, set(&[("ann", "n-1")]));
        assert_eq!(writes.users.del, ["bob"]);
        assert_eq!(writes.conns.set, set(&[]));
        assert_eq!(writes.conns.del, ["n-0", "n-3"]);
        assert_eq!(writes.presence.set, set(&[("news", "3")]));
        assert_eq!(writes.presence.del, ["chat"]);
    }

    #[test]
    fn a_failed_flush_is_followed_by_a_rewrite_of_what_is_held() {
        let mut held = Held::default();
        held.apply(open("n-0", Some("ann")), 1);
        held.flushed(counts(&[("news", 1)]), HashSet::new());
        held.apply(closed("n-0"), 2);
        held.apply(open("n-1", None), 3);
        held.failed();
        let writes = held.writes(&counts(&[("news", 1)]));
        assert!(
            writes.rewrite,
            "Redis may hold anything after a failed flush"
        );
        assert_eq!(writes.users.set, set(&[]));
        assert_eq!(
            writes.conns.set,
            set(&[("n-1", r#"{"transport":"ws","since":3}"#)])
        );
        assert_eq!(writes.presence.set, set(&[("news", "1")]));
    }

    fn topic(name: &str) -> TopicName {
        TopicName::new(name).unwrap()
    }

    fn topics(list: &[&str]) -> HashSet<TopicName> {
        list.iter().map(|t| topic(t)).collect()
    }

    #[test]
    fn member_changes_set_delete_and_drop_the_hashes_of_emptied_topics() {
        use crate::cluster::members::TopicChange;
        let mut held = Held {
            member_topics: topics(&["chat", "news"]),
            ..Held::default()
        };
        let changes = Changes {
            overflow: false,
            topics: vec![
                TopicChange {
                    topic: topic("chat"),
                    set: vec![],
                    del: vec![7],
                    empty: true,
                },
                TopicChange {
                    topic: topic("fresh"),
                    set: vec![(9, "{}".into())],
                    del: vec![],
                    empty: false,
                },
                TopicChange {
                    topic: topic("gone"),
                    set: vec![],
                    del: vec![3],
                    empty: true,
                },
                TopicChange {
                    topic: topic("news"),
                    set: vec![(1, "{}".into())],
                    del: vec![2],
                    empty: false,
                },
            ],
        };
        let writes = held.member_changes(changes);
        assert_eq!(
            writes.del,
            [topic("chat")],
            "a topic never written is not deleted"
        );
        assert!(!writes.clear_index);
        assert_eq!(writes.index_rem, [topic("chat")]);
        assert_eq!(writes.index_add, [topic("fresh")]);
        assert_eq!(
            writes.hashes,
            [
                (
                    topic("fresh"),
                    HashWrites {
                        set: set(&[("9", "{}")]),
                        del: vec![]
                    }
                ),
                (
                    topic("news"),
                    HashWrites {
                        set: set(&[("1", "{}")]),
                        del: vec!["2".into()]
                    }
                ),
            ]
        );
        assert_eq!(writes.after, topics(&["fresh", "news"]));
        held.flushed(HashMap::new(), writes.after);
        assert_eq!(held.member_topics, topics(&["fresh", "news"]));
    }

    #[test]
    fn a_member_rewrite_deletes_whatever_redis_may_hold_first() {
        let held = Held {
            member_topics: topics(&["old"]),
            ..Held::default()
        };
        let all = vec![(topic("news"), vec![(1, "{}".to_string()), (2, "{}".into())])];
        let writes = held.member_rewrite(&["stale".into(), "news".into()], all);
        assert_eq!(writes.del, [topic("news"), topic("old"), topic("stale")]);
        assert!(writes.clear_index);
        assert_eq!(writes.index_add, [topic("news")]);
        assert_eq!(writes.hashes[0].1.set, set(&[("1", "{}"), ("2", "{}")]));
        assert_eq!(writes.after, topics(&["news"]));
    }
}
