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
//! The connection's life is one [`Session`](session::Session) (`session.rs` declares it, with
//! what it opens with): its handshake (`handshake.rs`), its run loop and its sends
//! (`session.rs`), its compressed frames (`compressed.rs`), the client's commands
//! (`commands.rs`), `subscribe` (`subscribe.rs`), `publish` (`publish.rs`), a new token and
//! expiry (`refresh.rs`), and the close (`close.rs`, with the codes in `close_code.rs`).

use axum::http::StatusCode;

mod close;
pub(crate) mod close_code;
mod commands;
mod compressed;
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

use crate::error::ApiError;

/// The route.
pub(crate) const PATH: &str = "/v1/ws";

/// The route on the router: WebSocket upgrades are taken over by the accept loop before the
/// router sees them, so a request that gets here was not a valid HTTP/1.1 upgrade.
pub(crate) async fn handler() -> ApiError {
    ApiError::new(
        StatusCode::UPGRADE_REQUIRED,
        "upgrade_required",
        "GET /v1/ws needs an HTTP/1.1 WebSocket upgrade (Connection: Upgrade, Upgrade: websocket)",
    )
}
