//! Bridges to the distributed logs that join nodes into a cluster. A bridge gives every
//! message its position in a shared log, so the same message has the same id on every node,
//! and delivers that log's records to every node's registry.
//!
//! Each topic is carried by exactly one log ([`Logs`], decided by configuration): publishes to it
//! go to that log, and a record for it read from another log is refused (counted in
//! `herald_bridge_messages_total{direction="refused"}` and logged), because two logs give one
//! topic two position streams and every switch between them would look like lost history.
//!
//! A bridge owns its loop ([`Bridge::run`]) and gets only what that loop uses: an
//! [`Ingest`](logs::Ingest) (the registry, and which topics are its own) and a stop signal.
//! [`reconnect_loop`] is the one reconnect-with-backoff loop every bridge runs its passes in.
//! The trait, [`Logs`] and `Ingest` are in `logs.rs`, the loop in `reconnect.rs`.

pub(crate) mod idempotency;
pub(crate) mod interest;
pub(crate) mod kafka;
pub(crate) mod kafka_props;
pub(crate) mod logs;
mod reconnect;
pub(crate) mod redis;
pub(crate) mod redis_conn;
mod together;

pub(crate) use logs::{Bridge, Logs, Share, now_ms};
pub(crate) use reconnect::{PassResult, reconnect_loop};
