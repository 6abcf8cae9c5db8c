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
//!
//! A node that dies stops refreshing: its keys expire after `3 × presence_interval` and it
//! drops out of the live set, so its connections and subscribers stop being counted. After a
//! Redis outage the node rewrites everything it holds. On a Redis Cluster the prefix is a hash
//! tag (`{<prefix>}`), so these keys share a slot and a flush stays one pipeline.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use herald_core::Registry;

use super::ConnectionObserver;
use crate::bridge::redis_conn::{RedisTarget, SharedConn};
use crate::config::ClusterConfig;
use crate::telemetry::metrics;

const NAME: &str = "redis_presence";
/// Connection changes queued between flushes; past it they are dropped (and counted) and the
/// next flush rewrites the node's whole entry.
const QUEUE: usize = 65_536;

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
        let ids: Vec<Option<String>> = self.query(&pipe).await?;
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

    /// Flushes changes, and `registry`'s subscriber counts, every interval until `stop`.
    pub async fn run(self: Arc<Self>, registry: Arc<Registry>, stop: CancellationToken) {
        let Some(mut rx) = self.rx.lock().take() else {
            return;
        };
        let mut conns: HashMap<String, String> = HashMap::new();
        let mut added: Vec<String> = Vec::new();
        let mut removed: Vec<String> = Vec::new();
        let mut presence: HashMap<String, usize> = HashMap::new();
        let mut users: HashMap<String, std::collections::BTreeSet<String>> = HashMap::new();
        let mut conn_user: HashMap<String, String> = HashMap::new();
        let mut changed_users: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut rewrite = true;
        let mut tick = tokio::time::interval(self.interval);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            while let Ok(change) = rx.try_recv() {
                match change {
                    Change::Opened {
                        id,
                        transport,
                        user,
                    } => {
                        let mut entry =
                            serde_json::json!({ "transport": transport, "since": now_ms() });
                        if let Some(user) = &user {
                            entry["user"] = user.as_str().into();
                            users.entry(user.clone()).or_default().insert(id.clone());
                            conn_user.insert(id.clone(), user.clone());
                            changed_users.insert(user.clone());
                        }
                        conns.insert(id.clone(), entry.to_string());
                        added.push(id);
                    }
                    Change::Closed { id } => {
                        conns.remove(&id);
                        if let Some(user) = conn_user.remove(&id) {
                            if let Some(ids) = users.get_mut(&user) {
                                ids.remove(&id);
                                if ids.is_empty() {
                                    users.remove(&user);
                                }
                            }
                            changed_users.insert(user);
                        }
                        removed.push(id);
                    }
                }
            }
            if self.lost.swap(false, std::sync::atomic::Ordering::Relaxed) {
                rewrite = true;
            }
            let now: HashMap<String, usize> = registry
                .stats(usize::MAX)
                .into_iter()
                .filter(|s| s.subscribers > 0)
                .map(|s| (s.name.to_string(), s.subscribers))
                .collect();
            let mut pipe = redis::pipe();
            let (ck, pk) = (
                self.conns_key(&self.node_id),
                self.presence_key(&self.node_id),
            );
            let uk = self.users_key(&self.node_id);
            let joined = |ids: &std::collections::BTreeSet<String>| {
                ids.iter().map(String::as_str).collect::<Vec<_>>().join(",")
            };
            if rewrite {
                pipe.del(&uk).ignore();
                for (user, ids) in &users {
                    pipe.hset(&uk, user, joined(ids)).ignore();
                }
            } else {
                for user in &changed_users {
                    match users.get(user) {
                        Some(ids) => pipe.hset(&uk, user, joined(ids)).ignore(),
                        None => pipe.hdel(&uk, user).ignore(),
                    };
                }
            }
            if rewrite {
                pipe.del(&ck).ignore().del(&pk).ignore();
                for chunk in conns.iter().collect::<Vec<_>>().chunks(1000) {
                    pipe.hset_multiple(&ck, chunk).ignore();
                }
                for chunk in now.iter().collect::<Vec<_>>().chunks(1000) {
                    pipe.hset_multiple(&pk, chunk).ignore();
                }
            } else {
                let fresh: Vec<(&String, &String)> = added
                    .iter()
                    .filter_map(|id| conns.get_key_value(id))
                    .collect();
                for chunk in fresh.chunks(1000) {
                    pipe.hset_multiple(&ck, chunk).ignore();
                }
                let gone: Vec<&String> = removed
                    .iter()
                    .filter(|id| !conns.contains_key(*id))
                    .collect();
                for chunk in gone.chunks(1000) {
                    pipe.hdel(&ck, chunk).ignore();
                }
                let changed: Vec<(&String, &usize)> = now
                    .iter()
                    .filter(|(t, n)| presence.get(*t) != Some(n))
                    .collect();
                for chunk in changed.chunks(1000) {
                    pipe.hset_multiple(&pk, chunk).ignore();
                }
                let zeroed: Vec<&String> =
                    presence.keys().filter(|t| !now.contains_key(*t)).collect();
                for chunk in zeroed.chunks(1000) {
                    pipe.hdel(&pk, chunk).ignore();
                }
            }
            let ttl = self.ttl().as_secs().max(1) as i64;
            pipe.zadd(self.nodes_key(), &self.node_id, now_ms())
                .ignore();
            pipe.expire(&ck, ttl).ignore().expire(&pk, ttl).ignore();
            pipe.expire(&uk, ttl).ignore();
            pipe.expire(self.nodes_key(), ttl * 20).ignore();
            match self.query::<()>(&pipe).await {
                Ok(()) => {
                    rewrite = false;
                    changed_users.clear();
                    added.clear();
                    removed.clear();
                    presence = now;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "presence flush failed; will rewrite");
                    rewrite = true;
                    added.clear();
                    removed.clear();
                }
            }
        }
        // Leave the cluster's view cleanly.
        let mut pipe = redis::pipe();
        pipe.del(self.conns_key(&self.node_id)).ignore();
        pipe.del(self.presence_key(&self.node_id)).ignore();
        pipe.del(self.users_key(&self.node_id)).ignore();
        pipe.zrem(self.nodes_key(), &self.node_id).ignore();
        let _ = tokio::time::timeout(Duration::from_secs(1), self.query::<()>(&pipe)).await;
    }

    /// Live nodes (refreshed within the TTL).
    pub async fn live_nodes(&self) -> redis::RedisResult<Vec<String>> {
        let since = now_ms().saturating_sub(self.ttl().as_millis() as u64);
        let mut pipe = redis::pipe();
        pipe.cmd("ZRANGEBYSCORE")
            .arg(self.nodes_key())
            .arg(since)
            .arg("+inf");
        let (nodes,): (Vec<String>,) = self.query(&pipe).await?;
        Ok(nodes)
    }

    /// Runs `pipe` on the shared connection, made again after it broke.
    async fn query<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> redis::RedisResult<T> {
        let mut conn = self.conn.get().await?;
        let result = pipe.query_async(&mut conn).await;
        if let Err(e) = &result {
            self.conn.failed(e);
        }
        result
    }

    /// Subscribers of `topic` on each live node.
    pub async fn topic_presence(&self, topic: &str) -> redis::RedisResult<Vec<(String, u64)>> {
        let nodes = self.live_nodes().await?;
        let mut pipe = redis::pipe();
        for node in &nodes {
            pipe.hget(self.presence_key(node), topic);
        }
        let counts: Vec<Option<u64>> = self.query(&pipe).await?;
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
        let counts: Vec<u64> = self.query(&pipe).await?;
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

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
