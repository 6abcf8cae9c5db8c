//! The node's identity in Redis: a lease on its node id, so that two nodes started with one
//! id cannot both run, and a lease on a node number (0 to 1023), the middle bits of its
//! connection ids ([`super::ids`]), so that no two live nodes make the same id.
//!
//! | key | value | |
//! | --- | --- | --- |
//! | `<prefix>:lease:node:<node_id>` | the process's random instance token | held by one process |
//! | `<prefix>:lease:number:<n>` | the node id | held by one node |
//!
//! Both expire after `3 × cluster.presence_interval` and are renewed every interval (only by
//! their holder: check-and-extend in one script). At start a node waits up to one lease
//! period for its id to be free (a crashed predecessor's lease runs out) and then refuses to
//! start. A node that finds its id taken later (after a Redis outage longer than the lease)
//! is not ready until it holds it again. A node that cannot reach Redis at start runs with a
//! number hashed from its id and takes its lease once Redis answers.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::ids::{ConnectionIds, NODES};
use crate::bridge::redis_conn::{RedisTarget, SharedConn};

/// Extends `KEYS[1]` by `ARGV[2]` ms if it holds `ARGV[1]`; 1 if it did, else 0.
const EXTEND: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
    return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";
/// Deletes `KEYS[1]` if it holds `ARGV[1]`.
const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
    return redis.call('DEL', KEYS[1]) else return 0 end";

/// This node's leases on its id and its node number.
#[derive(Debug)]
pub(crate) struct Lease {
    conn: SharedConn,
    prefix: String,
    node_id: String,
    instance: String,
    ttl: Duration,
    interval: Duration,
    ids: Arc<ConnectionIds>,
    /// The node number held, once leased.
    number: Mutex<Option<u16>>,
    /// Why the node does not hold its id (another process does), for `/readyz`.
    lost: Mutex<Option<String>>,
}

/// What one attempt to take or renew the leases found.
#[derive(Debug, PartialEq)]
enum Held {
    /// Both leases are this node's.
    Yes(u16),
    /// Another process holds the node id (its instance token).
    IdTaken(String),
}

impl Lease {
    /// Leases for node `node_id` in the Redis at `target`, renewed every `interval`; sets the
    /// node number of `ids`.
    pub(crate) fn new(
        target: Arc<RedisTarget>,
        node_id: &str,
        interval: Duration,
        ids: Arc<ConnectionIds>,
    ) -> Arc<Self> {
        Arc::new(Self {
            prefix: target.presence_prefix(),
            conn: SharedConn::new(target),
            node_id: node_id.to_string(),
            instance: format!("{:016x}", rand::random::<u64>()),
            ttl: (interval * 3).max(Duration::from_secs(1)),
            interval,
            ids,
            number: Mutex::new(None),
            lost: Mutex::new(None),
        })
    }

    fn id_key(&self) -> String {
        format!("{}:lease:node:{}", self.prefix, self.node_id)
    }

    fn number_key(&self, n: u16) -> String {
        format!("{}:lease:number:{n}", self.prefix)
    }

    /// Takes both leases before the node serves, waiting up to one lease period for its id to
    /// be free. Fails when another running process holds the id; a Redis that does not answer
    /// only delays the leases (logged), since the node is not ready without Redis anyway.
    pub(crate) async fn acquire(&self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + self.ttl + Duration::from_millis(500);
        loop {
            match tokio::time::timeout(Duration::from_secs(5), self.hold()).await {
                Ok(Ok(Held::Yes(n))) => {
                    tracing::info!(node_id = %self.node_id, number = n, "node id and number leased");
                    return Ok(());
                }
                Ok(Ok(Held::IdTaken(other))) if tokio::time::Instant::now() >= deadline => {
                    anyhow::bail!(
                        "cluster.node_id {:?} is in use by another running node (instance {other}); \
                         give each node its own id",
                        self.node_id
                    );
                }
                Ok(Ok(Held::IdTaken(_))) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "cannot lease the node id yet; will retry");
                    return Ok(());
                }
                Err(_) => {
                    tracing::warn!("redis did not answer the node id lease; will retry");
                    return Ok(());
                }
            }
        }
    }

    /// Renews the leases every interval until `stop`, then gives them up.
    pub(crate) async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.interval);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {}
            }
            match self.hold().await {
                Ok(Held::Yes(_)) => {
                    if self.lost.lock().take().is_some() {
                        tracing::info!(node_id = %self.node_id, "node id leased again");
                    }
                }
                Ok(Held::IdTaken(other)) => {
                    let why = format!(
                        "cluster.node_id {:?} is held by another running node (instance {other})",
                        self.node_id
                    );
                    if self.lost.lock().replace(why.clone()).is_none() {
                        tracing::error!("{why}; this node is not ready until it holds its id");
                    }
                }
                Err(e) => tracing::debug!(error = %e, "lease renewal failed; will retry"),
            }
        }
        let mut pipe = redis::pipe();
        pipe.cmd("EVAL")
            .arg(RELEASE)
            .arg(1)
            .arg(self.id_key())
            .arg(&self.instance)
            .ignore();
        if let Some(n) = *self.number.lock() {
            pipe.cmd("EVAL")
                .arg(RELEASE)
                .arg(1)
                .arg(self.number_key(n))
                .arg(&self.node_id)
                .ignore();
        }
        let _ = tokio::time::timeout(Duration::from_secs(1), self.conn.query::<()>(&pipe)).await;
    }

    /// Why the node does not hold its id, when it does not.
    pub(crate) fn not_ready_reason(&self) -> Option<String> {
        self.lost.lock().clone()
    }

    /// Takes or renews both leases.
    async fn hold(&self) -> anyhow::Result<Held> {
        let ttl = self.ttl.as_millis() as u64;
        let id_key = self.id_key();
        let mut set = redis::pipe();
        set.cmd("SET")
            .arg(&id_key)
            .arg(&self.instance)
            .arg("NX")
            .arg("PX")
            .arg(ttl);
        set.cmd("EVAL")
            .arg(EXTEND)
            .arg(1)
            .arg(&id_key)
            .arg(&self.instance)
            .arg(ttl);
        set.cmd("GET").arg(&id_key);
        let (_, _, holder): (Option<String>, i64, Option<String>) = self.conn.query(&set).await?;
        if let Some(other) = holder.filter(|h| *h != self.instance) {
            return Ok(Held::IdTaken(other));
        }
        let held = *self.number.lock();
        let start = held.unwrap_or_else(|| ConnectionIds::hashed(&self.node_id));
        // The number held (or the hashed one) first, then the next free one. A number whose
        // key names this node id is this node's: the id lease says no other process has it.
        for i in 0..NODES {
            let n = (start + i) % NODES;
            let key = self.number_key(n);
            let mut take = redis::pipe();
            take.cmd("SET")
                .arg(&key)
                .arg(&self.node_id)
                .arg("NX")
                .arg("PX")
                .arg(ttl);
            take.cmd("EVAL")
                .arg(EXTEND)
                .arg(1)
                .arg(&key)
                .arg(&self.node_id)
                .arg(ttl);
            let (_, extended): (Option<String>, i64) = self.conn.query(&take).await?;
            if extended == 1 {
                if held != Some(n) {
                    if let Some(old) = held {
                        tracing::warn!(old, new = n, "node number moved (the old one was taken)");
                    }
                    *self.number.lock() = Some(n);
                    self.ids.set_node(n);
                }
                return Ok(Held::Yes(n));
            }
        }
        anyhow::bail!("every node number ({NODES}) is leased")
    }
}
