//! Herald, a real-time push gateway: clients hold Server-Sent Events, WebSocket or long-poll
//! connections; services publish to topics; every message fans out to every subscriber, and a
//! client that reconnects resumes without losing messages.
//!
//! The library exposes [`Config`], [`Gateway`] and [`run_validated`], so that tests start a
//! real server on any listener (port 0 included); `main.rs` only parses flags and calls it.

mod api;
mod app;
mod auth;
mod bridge;
mod cluster;
pub mod config;
mod error;
mod fast_path;
mod health;
mod hooks;
mod limits;
mod node;
mod publish;
mod routes;
mod server;
mod shutdown;
mod telemetry;
mod transport;
mod validate;

// The crate's surface: what the binary and the integration tests use (listed in
// docs/architecture.md, "The public surface"); everything else is pub(crate), which the
// `unreachable_pub` lint keeps true.
pub use app::AppState;
pub use bridge::redis::shard_of;
pub use cluster::ids::{ConnectionIds, node_of};
pub use config::Config;
pub use health::main as health_main;
pub use node::{Gateway, bind_listeners, run_validated};
pub use routes::public_router;
pub use shutdown::{spawn_connection, spawn_signal_handler};
pub use telemetry::init_logging;
pub use telemetry::metrics::install as install_metrics;
