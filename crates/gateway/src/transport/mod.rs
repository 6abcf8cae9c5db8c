//! Client transports: SSE, WebSocket and long-poll, and what they share: who may connect and
//! subscribe ([`access`]), adding topics to a feed ([`topics`]), what a feed event means for a
//! client ([`deliver`](mod@deliver)), keep-alive timing ([`keep_alive`]) and CORS headers
//! ([`cors`]).

pub(crate) mod access;
pub(crate) mod answer;
pub(crate) mod cors;
pub(crate) mod deliver;
pub(crate) mod keep_alive;
pub(crate) mod poll;
pub(crate) mod sse;
pub(crate) mod topics;
pub(crate) mod ws;

pub(crate) use access::{SubscribeQuery, may_subscribe, peer_ip};
pub(crate) use deliver::{Delivery, deliver, lost_json};
pub(crate) use keep_alive::{asked_interval, jitter, next_keep_alive};
pub(crate) use topics::{
    open_feed, open_query_feed, start_of, subscribe_from_server, unsubscribe_from_server,
};
