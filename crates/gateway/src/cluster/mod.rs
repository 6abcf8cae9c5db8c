//! The node's place in the cluster, seen through its client connections: the connection
//! registry and topic presence kept in Redis ([`presence`]), and client events produced to
//! Kafka ([`upstream`]). Both are [`ConnectionObserver`]s: told when a connection opens and
//! closes, never in the way of delivery.
//!
//! The logs that carry messages between nodes are in [`crate::bridge`]; this module uses the
//! bridges' connection settings ([`crate::bridge::redis_conn`], [`crate::bridge::kafka_props`])
//! and nothing imports it but the state and the server's start-up.

pub mod presence;
pub mod upstream;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::telemetry::metrics::{CloseReason, ConnectionGuard, Transport};

/// Something told about every client connection's life (upstream events, the cluster's
/// connection registry). Called on the connection's own task: must not block.
pub trait ConnectionObserver: Send + Sync + std::fmt::Debug {
    /// Connection `id` opened over `transport`, for `user` (a token's `sub`) when known.
    fn opened(&self, id: &str, transport: &'static str, user: Option<&str>);
    /// Connection `id` closed for `reason`.
    fn closed(&self, id: &str, transport: &'static str, reason: &'static str);
}

/// This node's observers of client connections, built once at start-up.
#[derive(Debug, Default)]
pub struct Cluster {
    node_id: String,
    observers: Arc<[Arc<dyn ConnectionObserver>]>,
    presence: Option<Arc<presence::Presence>>,
    upstream: Option<Arc<upstream::Upstream>>,
    ids: AtomicU64,
}

impl Cluster {
    /// A node alone: no observer, connections have no id.
    pub fn alone() -> Self {
        Self::default()
    }

    /// Node `node_id` with the Redis connection registry and presence and the Kafka upstream
    /// events, where configured, and any `others` (tests, embedders).
    pub fn new(
        node_id: &str,
        presence: Option<Arc<presence::Presence>>,
        upstream: Option<Arc<upstream::Upstream>>,
        others: Vec<Arc<dyn ConnectionObserver>>,
    ) -> Self {
        let mut observers: Vec<Arc<dyn ConnectionObserver>> = others;
        if let Some(p) = &presence {
            observers.push(p.clone());
        }
        if let Some(u) = &upstream {
            observers.push(u.clone());
        }
        Self {
            node_id: node_id.to_string(),
            observers: observers.into(),
            presence,
            upstream,
            ids: AtomicU64::new(0),
        }
    }

    /// The cluster's presence and connection registry, when Redis is configured.
    pub fn presence(&self) -> Option<&Arc<presence::Presence>> {
        self.presence.as_ref()
    }

    /// The upstream event producer, when configured.
    pub fn upstream(&self) -> Option<&Arc<upstream::Upstream>> {
        self.upstream.as_ref()
    }

    /// Opens a connection of `transport` for `user`: counted in the metrics and, when anything
    /// observes connections, given an id unique in the cluster (`<node_id>-<n>`) and reported.
    pub fn open(&self, transport: Transport, user: Option<&str>) -> Connection {
        let guard = crate::telemetry::metrics::transport(transport).open();
        let observed = (!self.observers.is_empty()).then(|| {
            let n = self.ids.fetch_add(1, Ordering::Relaxed);
            let id = format!("{}-{n}", self.node_id);
            for o in self.observers.iter() {
                o.opened(&id, transport.as_str(), user);
            }
            Box::new(Observed {
                id,
                observers: self.observers.clone(),
            })
        });
        Connection { guard, observed }
    }
}

/// One open client connection: counted as open, and reported to the observers, until dropped.
#[derive(Debug)]
pub struct Connection {
    guard: ConnectionGuard,
    /// The connection's id and who is told about its life (boxed: none on a lone node).
    observed: Option<Box<Observed>>,
}

#[derive(Debug)]
struct Observed {
    id: String,
    observers: Arc<[Arc<dyn ConnectionObserver>]>,
}

impl Connection {
    /// Sets the reason reported when the connection closes.
    pub fn closing(&mut self, reason: CloseReason) {
        self.guard.closing(reason);
    }

    /// The connection's id, when it has one.
    pub fn id(&self) -> Option<&str> {
        self.observed.as_ref().map(|o| o.id.as_str())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(o) = &self.observed {
            let (transport, reason) = (self.guard.transport(), self.guard.reason());
            for observer in o.observers.iter() {
                observer.closed(&o.id, transport.as_str(), reason.as_str());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default)]
    struct Log(parking_lot::Mutex<Vec<String>>);

    impl ConnectionObserver for Log {
        fn opened(&self, id: &str, transport: &'static str, user: Option<&str>) {
            self.0
                .lock()
                .push(format!("open {id} {transport} {user:?}"));
        }
        fn closed(&self, id: &str, transport: &'static str, reason: &'static str) {
            self.0
                .lock()
                .push(format!("close {id} {transport} {reason}"));
        }
    }

    #[test]
    fn observers_see_each_connection_open_and_close_with_its_reason() {
        let log = Arc::new(Log::default());
        let cluster = Cluster::new("n1", None, None, vec![log.clone()]);
        let mut a = cluster.open(Transport::Ws, Some("ann"));
        let b = cluster.open(Transport::Sse, None);
        assert_eq!((a.id(), b.id()), (Some("n1-0"), Some("n1-1")));
        a.closing(CloseReason::Slow);
        drop(a);
        drop(b);
        assert_eq!(
            *log.0.lock(),
            [
                "open n1-0 ws Some(\"ann\")",
                "open n1-1 sse None",
                "close n1-0 ws slow",
                "close n1-1 sse client",
            ]
        );
        assert_eq!(Cluster::alone().open(Transport::Poll, None).id(), None);
    }
}
