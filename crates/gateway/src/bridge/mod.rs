//! Bridges to the distributed engines that join nodes into a cluster. A bridge gives every
//! message its position in a shared log, so the same message has the same id on every node,
//! and feeds every node's registry from that log.

pub mod kafka;
pub mod kafka_props;
pub mod presence;
pub mod redis;
pub mod redis_conn;
pub mod upstream;

use std::future::Future;
use std::pin::Pin;

use herald_core::{Cursor, EventName, Payload, TopicName};

use crate::app::AppState;
use crate::telemetry::metrics;

/// A boxed future, for the object-safe [`Bridge`] trait.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a bridge could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// The engine cannot be reached (yet); the caller may retry.
    #[error("{bridge} is unavailable: {reason}")]
    Unavailable {
        /// Which bridge.
        bridge: &'static str,
        /// What failed.
        reason: String,
    },
}

/// A cluster bridge.
pub trait Bridge: Send + Sync + std::fmt::Debug {
    /// Short name for logs, metrics and `/readyz`.
    fn name(&self) -> &'static str;

    /// Appends a message to the shared log and returns its position. The message reaches the
    /// subscribers of every node, this one included, through the log.
    fn publish<'a>(
        &'a self,
        topic: &'a TopicName,
        event: Option<&'a EventName>,
        data: &'a Payload,
    ) -> BoxFuture<'a, Result<Cursor, BridgeError>>;

    /// Whether the engine is reachable and the node is following the log.
    fn is_ready(&self) -> bool;

    /// Why the bridge is not ready (the engine's last error, say a refused login), for
    /// `/readyz`; `None` when ready or when there is nothing more to say.
    fn not_ready_reason(&self) -> Option<String> {
        None
    }
}

/// Something told about every client connection's life (upstream events, the cluster's
/// connection registry). Called on the connection's own task: must not block.
pub trait ConnectionObserver: Send + Sync + std::fmt::Debug {
    /// Connection `id` opened over `transport`, for `user` (a token's `sub`) when known.
    fn opened(&self, id: &str, transport: &'static str, user: Option<&str>);
    /// Connection `id` closed for `reason`.
    fn closed(&self, id: &str, transport: &'static str, reason: &'static str);
}

/// Delivers a message read from `bridge`'s log to this node's subscribers, at the position the
/// log gave it; `age_ms` is how long ago it was written (for the lag metric). A position
/// already delivered (an at-least-once replay) is dropped here.
pub fn deliver(
    state: &AppState,
    bridge: &'static str,
    topic: TopicName,
    position: Cursor,
    event: Option<EventName>,
    payload: Payload,
    age_ms: u64,
) {
    match state.registry().get_or_create(&topic) {
        Ok(t) => {
            if t.ingest(position, event, payload).is_some() {
                metrics::bridge_message(bridge, "in");
                metrics::bridge_lag(bridge, age_ms);
            }
        }
        Err(e) => tracing::warn!(error = %e, %topic, bridge, "message from the log dropped"),
    }
}
