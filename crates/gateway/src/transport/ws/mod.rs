//! `GET /v1/ws`: WebSocket with JSON text frames, or MessagePack binary frames with the
//! `herald.msgpack` subprotocol ([`format`]).
//!
//! The accept loop recognises an HTTP/1.1 upgrade to `/v1/ws` and hands the raw socket to
//! [`upgrade_raw`], which answers the handshake and runs tungstenite's protocol directly on
//! the TCP stream ([`socket::WebSocket`]): no hyper connection or boxed upgraded I/O stays
//! behind for the connection's life, and the connection runs on a task of its own, sized for
//! it alone.
//!
//! Client commands are parsed by [`herald_core::protocol`].
//!
//! Every incoming frame is counted by [`inbound::Inbound`] before tungstenite reassembles
//! it (the inbound rate, the fragment cap, activity). Every close the server starts or
//! answers ends with a lingering close (`Session::linger`, in `close.rs`): the Close frame,
//! a half-close, then the client's input drained for a bounded time and byte count, so the
//! client reads the close code instead of a reset.
//!
//! One task per connection selects over the socket, the feed, the ping timer and the
//! shutdown token: no reader/writer task pair (measured to triple CPU per delivery).
//!
//! Compression (permessage-deflate, RFC 7692) is negotiated in the handshake and done without
//! context takeover, once per message for all subscribers (module `deflate`).
//!
//! The connection's life is one [`Session`]: its handshake (`handshake.rs`), its run loop and
//! its sends (`session.rs`), the client's commands (`commands.rs`), `subscribe`
//! (`subscribe.rs`), `publish` (`publish.rs`), a new token and expiry (`refresh.rs`), and the
//! close (`close.rs`).

use axum::http::StatusCode;
use herald_core::{Feed, TopicName};

mod close;
mod commands;
mod deflate;
mod direct;
pub(crate) mod format;
mod handshake;
pub(crate) mod inbound;
mod publish;
mod refresh;
mod session;
mod socket;
mod subscribe;
#[cfg(test)]
mod tests;

pub(crate) use handshake::upgrade_raw;

use crate::app::AppState;
use crate::error::ApiError;
use crate::hooks::Forwarded;
use crate::limits::TokenBucket;
use crate::telemetry::metrics::{CloseReason, TransportMetrics};
use format::Format;

/// WebSocket close codes used by Herald.
pub(crate) mod close_code {
    /// Idle timeout: nothing heard from the client.
    pub(crate) const GOING_AWAY: u16 = 1001;
    /// A frame that breaks RFC 6455 (an orphan continuation, an oversized control frame, ...).
    pub(crate) const PROTOCOL: u16 = 1002;
    /// Invalid UTF-8 in a text frame.
    pub(crate) const INVALID_DATA: u16 = 1007;
    /// Policy violation: slow consumer.
    pub(crate) const POLICY: u16 = 1008;
    /// Inbound message over the size limit.
    pub(crate) const TOO_BIG: u16 = 1009;
    /// The server is restarting: reconnect (with a little random delay).
    pub(crate) const RESTART: u16 = 1012;
    /// The server ended the connection on a command (the admin API); the client may come
    /// back. The close reason is the command's.
    pub(crate) const DISCONNECTED: u16 = 4000;
    /// As [`DISCONNECTED`], and the client should not come back (logged out, banned).
    pub(crate) const DISCONNECTED_STAY_AWAY: u16 = 4001;
}

/// The route.
pub(crate) const PATH: &str = "/v1/ws";

/// A connection's WebSocket: its frames counted by [`inbound::Inbound`] on the client's stream.
type Socket<S> = socket::WebSocket<inbound::Inbound<S>>;

/// The route on the router: WebSocket upgrades are taken over by the accept loop before the
/// router sees them, so a request that gets here was not a valid HTTP/1.1 upgrade.
pub(crate) async fn handler() -> ApiError {
    ApiError::new(
        StatusCode::UPGRADE_REQUIRED,
        "upgrade_required",
        "GET /v1/ws needs an HTTP/1.1 WebSocket upgrade (Connection: Upgrade, Upgrade: websocket)",
    )
}

/// What the handshake settled besides the identity.
#[derive(Debug, Default)]
struct Opened {
    /// The connection's id, named to the connect hook.
    id: Option<u64>,
    /// The upgrade request's headers the hooks forward.
    forwarded: Forwarded,
    /// Topics the connect hook subscribed the connection to.
    granted: Vec<String>,
    /// The wire format the subprotocol named.
    format: Format,
    /// permessage-deflate, when negotiated.
    deflate: Option<deflate::Deflate>,
    /// Batch frames, when the client asked (`batch=1`) and compression is off.
    batch: Option<herald_core::batch::BatchFormat>,
}

/// A refusal sent back as an error frame; the connection stays open.
struct FrameError {
    code: &'static str,
    reason: String,
}

impl FrameError {
    fn new(code: &'static str, reason: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.into(),
        }
    }
}

impl From<ApiError> for FrameError {
    fn from(e: ApiError) -> Self {
        let text = e.to_string();
        let reason = text
            .split_once(": ")
            .map_or(text.clone(), |(_, r)| r.to_string());
        Self {
            code: e.code(),
            reason,
        }
    }
}

enum Flow {
    Continue,
    Close(CloseReason),
}

/// One WebSocket connection's life, on any client stream (a socket in production, an
/// in-memory pipe in the unit tests): the WebSocket side of a connection, beside its
/// cluster-side [`crate::cluster::Connection`] (`connection`).
struct Session<S> {
    state: AppState,
    socket: Socket<S>,
    feed: Feed,
    metrics: &'static TransportMetrics,
    connection: crate::cluster::Connection,
    who: crate::auth::Identity,
    /// When the client's token expires, if it presented one (boxed only then).
    expiry: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// This connection's publish rate limit, from its first publish on (boxed: most
    /// connections never publish).
    publish_bucket: Option<Box<TokenBucket>>,
    /// The topics this connection's subscriptions created, charged to its client while
    /// subscribed (most connections create none).
    charges: Vec<(TopicName, crate::limits::QuotaCharge)>,
    /// The upgrade request's headers the hooks forward (none without hooks).
    forwarded: Forwarded,
    /// The ping interval in milliseconds: `ws.ping_interval`, or what the client asked for.
    ping_ms: u32,
    /// JSON text frames, or MessagePack binary frames (`herald.msgpack`).
    format: Format,
    /// permessage-deflate, when negotiated.
    deflate: Option<deflate::Deflate>,
    /// Batch frames ([`herald_core::batch`]): the messages ready at once in one frame, when
    /// the client asked (`batch=1`) and compression is off.
    batch: Option<herald_core::batch::BatchFormat>,
}
