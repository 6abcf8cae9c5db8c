//! Client transports: SSE, WebSocket and long-poll, and what they share: who may connect and
//! subscribe ([`access`]), adding topics to a feed ([`topics`]), what a feed event means for a
//! client ([`deliver`](mod@deliver)), keep-alive timing ([`keep_alive`]) and CORS headers
//! ([`cors`]).

pub(crate) mod access;
pub(crate) mod answer;
pub(crate) mod cors;
pub(crate) mod deliver;
pub(crate) mod keep_alive;
pub mod poll;
pub mod sse;
pub(crate) mod topics;
pub mod ws;

pub use access::{SubscribeQuery, may_subscribe, peer_ip};
pub use deliver::{Delivery, deliver, lost_json};
pub use keep_alive::{asked_interval, jitter, next_keep_alive};
pub use topics::{
    Charges, feed_error, open_feed, pattern_charge, start_of, subscribe_from_server,
    topic_for_subscriber, unsubscribe_from_server,
};

/// The form of an SSE stream's messages (`format` query parameter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// `format=text` (the default): `event:` when named, the payload as `data:` lines, as a
    /// browser's `EventSource` expects it.
    #[default]
    Text,
    /// `format=json`: one `data:` line per message holding `{"type":"message","topic":..,
    /// "id":..,"event":..,"data":..}` (the WebSocket frame); long-poll always answers in it.
    Json,
}
