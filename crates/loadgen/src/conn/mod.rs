//! Client connections: dialing, one connection lifecycle ([`lifecycle::run`]), and the
//! per-protocol part of each client kind (`sse`, `ws`, `echo`).

pub(crate) mod dial;
pub(crate) mod echo;
pub(crate) mod lifecycle;
pub(crate) mod receiver;
pub(crate) mod sse;
pub(crate) mod ws;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::seq::SeqTracker;
use crate::spec::WorkerSpec;
use crate::stats::Stats;

/// Shared state of a worker's connection tasks.
#[derive(Debug)]
pub(crate) struct ConnCtx {
    /// The worker's spec.
    pub spec: Arc<WorkerSpec>,
    /// Counters.
    pub stats: Arc<Stats>,
    /// Set when the measured phase begins: clients ready after it are late joiners.
    pub started: AtomicBool,
    /// Cancelled when the measured phase begins (echo clients wait for it).
    pub start: CancellationToken,
    /// Cancelled when sending must stop (echo, churn).
    pub quiesce: CancellationToken,
    /// Cancelled when every connection must close.
    pub stop: CancellationToken,
    /// Bounds connection attempts in progress (permits are held from dial to ready).
    pub pending: Semaphore,
}

/// Main client, or a churn client that leaves after `hold`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// A main client: stays until the run ends.
    Main,
    /// A churn client.
    Churn {
        /// How long it stays once ready.
        hold: Duration,
    },
}

/// What a connection task hands back when it ends.
#[derive(Debug, Default)]
pub(crate) struct ConnOutcome {
    /// It became ready.
    pub ready: bool,
    /// It was ready before the measured phase began.
    pub cohort: bool,
    /// It stayed open until the run told it to close.
    pub stayed: bool,
    /// Per subscribed topic: (topic index, tracker, loss notifications).
    pub topics: Vec<(u32, SeqTracker, u64)>,
    /// Echo requests sent, and the tracker of answers (echo clients).
    pub echo: Option<(u64, SeqTracker)>,
}

/// Topics of connection `conn` as (index, name).
pub(crate) fn topics_of(spec: &WorkerSpec, conn: u64) -> Vec<(u32, String)> {
    spec.topics
        .topics_for(conn)
        .into_iter()
        .map(|i| (i, spec.topics.name(i)))
        .collect()
}

/// Sleeps for `hold` for churn clients; never completes for main clients.
pub(crate) async fn hold_timer(role: Role) {
    match role {
        Role::Main => std::future::pending::<()>().await,
        Role::Churn { hold } => tokio::time::sleep(hold).await,
    }
}
