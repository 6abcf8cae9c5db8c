//! Herald, a real-time push gateway: clients hold Server-Sent Events, WebSocket or long-poll
//! connections; services publish to topics; every message fans out to every subscriber, and a
//! client that reconnects resumes without losing messages.
//!
//! The library exposes [`Config`], the routers and [`run`], so that tests and embedders start
//! a real server on any listener (port 0 included); `main.rs` only parses flags and calls it.

pub mod api;
pub mod app;
pub mod auth;
pub mod bridge;
pub mod cluster;
pub mod config;
pub mod error;
pub mod fast_path;
pub mod health;
pub mod hooks;
pub mod limits;
pub mod node;
pub mod publish;
pub mod routes;
pub mod server;
pub mod shutdown;
pub mod telemetry;
pub mod transport;
pub mod validate;

pub use app::AppState;
pub use config::Config;
pub use node::{Gateway, bind_listeners, run, run_validated};
pub use routes::{admin_router, public_router};
