//! In-process integration tests: a real gateway on 127.0.0.1:0 driven by real SSE, WebSocket
//! and HTTP clients.

#[macro_use]
mod common;

mod admin_auth;
mod api;
mod auth;
mod batch;
mod clients;
mod cluster;
mod control;
mod costs;
mod deflate;
mod delta;
mod fanout;
mod following;
mod history;
mod hooks;
mod hostile;
mod idempotency;
mod interest;
mod join_leave;
mod kafka;
mod lifecycle;
mod limits;
mod live_path;
mod msgpack;
mod namespaces;
mod neighbours;
mod poll;
mod presence;
mod rejections;
mod shutdown;
mod sse;
mod tls;
mod traces;
mod trust;
mod wildcard;
mod ws;
