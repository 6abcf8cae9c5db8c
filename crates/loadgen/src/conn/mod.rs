//! Client connections: dialing, and one task type per client kind.

pub mod dial;
pub mod echo;
pub mod receiver;
pub mod sse;
pub mod ws;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::error::ConnError;
use crate::seq::SeqTracker;
use crate::stats::Stats;
use crate::worker::spec::WorkerSpec;

/// Shared state of a worker's connection tasks.
#[derive(Debug)]
pub struct ConnCtx {
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
pub enum Role {
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
pub struct ConnOutcome {
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

/// Sleeps for `hold` for churn clients; never completes for main clients.
pub async fn hold_timer(role: Role) {
    match role {
        Role::Main => std::future::pending::<()>().await,
        Role::Churn { hold } => tokio::time::sleep(hold).await,
    }
}

/// The part of a client's life that is the same for every kind (SSE, WebSocket, echo),
/// written once: counted as an attempt, opened under the pending-connection permit and a
/// time limit, counted connected or failed, and at its end counted closed or dropped. Churn
/// clients are counted apart from the main ones.
#[derive(Debug)]
pub struct Life<'a> {
    ctx: &'a ConnCtx,
    churn: bool,
    hint: usize,
}

impl<'a> Life<'a> {
    /// Connection `conn` of `role` begins: counted as an attempt.
    pub fn begin(ctx: &'a ConnCtx, conn: u64, role: Role) -> Self {
        let churn = matches!(role, Role::Churn { .. });
        let attempts = if churn {
            &ctx.stats.churn_attempts
        } else {
            &ctx.stats.attempts
        };
        attempts.fetch_add(1, Relaxed);
        Self {
            ctx,
            churn,
            hint: conn as usize,
        }
    }

    /// Whether this is a churn client.
    pub fn churn(&self) -> bool {
        self.churn
    }

    /// Opens the connection with `open` (dial, handshake, subscribe) once a pending-connection
    /// permit is free, within `limit`: counted and timed when it opens; counted failed (with
    /// why) when it does not. `None` when it failed or the run stopped first.
    pub async fn open<T>(
        &self,
        limit: Duration,
        open: impl Future<Output = Result<T, ConnError>>,
    ) -> Option<T> {
        let (ctx, stats) = (self.ctx, &self.ctx.stats);
        let permit = tokio::select! {
            p = ctx.pending.acquire() => p.ok(),
            _ = ctx.stop.cancelled() => return None,
        };
        let t0 = Instant::now();
        let opened = tokio::select! {
            r = tokio::time::timeout(limit, open) => r.unwrap_or(Err(ConnError::ConnectTimeout)),
            _ = ctx.stop.cancelled() => return None,
        };
        drop(permit);
        match opened {
            Ok(open) => {
                let connect_us = t0.elapsed().as_micros() as u64;
                if self.churn {
                    stats.churn_connect.record(self.hint, connect_us);
                    stats.churn_connected.fetch_add(1, Relaxed);
                } else {
                    stats.connect.record(self.hint, connect_us);
                    stats.connected.fetch_add(1, Relaxed);
                    stats.opened();
                }
                Some(open)
            }
            Err(e) => {
                stats.error(e.kind());
                let failed = if self.churn {
                    &stats.churn_failed
                } else {
                    &stats.failed
                };
                failed.fetch_add(1, Relaxed);
                None
            }
        }
    }

    /// Whether the connection was ready before the measured phase began (main clients).
    pub fn cohort(&self) -> bool {
        !self.churn && !self.ctx.started.load(SeqCst)
    }

    /// The connection ends with `result` (`stopped`: the run or its hold time ended it):
    /// counted closed, or dropped with why. An error once the run is stopping (a shutdown
    /// event, a close) counts as stopped. Returns whether it stayed until told to close.
    pub fn end(self, result: &Result<(), ConnError>, mut stopped: bool) -> bool {
        let stats = &self.ctx.stats;
        if let Err(e) = result {
            if self.ctx.stop.is_cancelled() {
                stopped = true;
            } else {
                stats.error(e.kind());
                if !self.churn {
                    stats.dropped.fetch_add(1, Relaxed);
                }
            }
        }
        if !self.churn {
            stats.closed();
        } else if stopped {
            stats.churn_closed.fetch_add(1, Relaxed);
        }
        stopped
    }
}
