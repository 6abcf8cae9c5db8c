//! HTTP hooks against a real backend: a small axum server on 127.0.0.1:0 inside each test
//! answers the gateway's hook requests, and real SSE, WebSocket, long-poll and HTTP clients
//! see the decisions. One file per concern: the connect and refresh hooks, the subscribe
//! hook, the publish hook, and a backend that is unavailable.

mod availability;
mod backend;
mod connect;
mod publish;
mod subscribe;

pub(crate) use backend::{
    Backend, PATHS, Path, Reply, allow, dead_url, deny, hooked, subscribe_with,
};
