//! One connection's life, written once for every client kind.
//!
//! [`run`] waits for a connection-attempt permit, dials from the connection's source address,
//! lets the client kind speak its handshake ([`Client::open`]), records readiness, then reads
//! until the run stops it, its hold time ends (churn) or it fails, and finally closes and hands
//! back its [`ConnOutcome`]. What differs between SSE, WebSocket and echo clients — the
//! handshake, what a read means, what is sent — is a [`Client`] and its [`Session`].

use std::sync::Arc;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use super::dial::dial;
use super::{ConnCtx, ConnOutcome, Role, hold_timer};
use crate::error::ConnError;
use crate::spec::WorkerSpec;
use crate::target::Target;

/// A client kind before it is connected: how it turns a socket into a ready [`Session`].
pub(crate) trait Client: Send {
    /// The connection once ready.
    type Session: Session;

    /// Time the handshake may take beyond the connect timeout (a subscription's
    /// acknowledgement).
    fn handshake_allowance(&self, _spec: &WorkerSpec) -> Duration {
        Duration::ZERO
    }

    /// Speaks the protocol over a connected socket until the connection is ready.
    async fn open(
        self,
        ctx: &ConnCtx,
        target: &Target,
        stream: TcpStream,
    ) -> Result<Self::Session, ConnError>;
}

/// A ready connection: the per-protocol part of the read loop.
pub(crate) trait Session: Send {
    /// Something that happened on the connection (bytes read, a frame, a timer).
    type Event: Send;

    /// Runs once the connection counts as ready (before the first [`Session::next`]).
    fn on_ready(&mut self) -> Result<(), ConnError> {
        Ok(())
    }

    /// Waits for the next event. Must be cancel-safe: the run's stop and the hold time race it.
    async fn next(&mut self, ctx: &ConnCtx) -> Self::Event;

    /// Handles one event to completion; an error ends the connection.
    async fn handle(&mut self, ctx: &ConnCtx, event: Self::Event) -> Result<(), ConnError>;

    /// Says goodbye when the run (or the hold time) ended the connection.
    async fn close(&mut self) {}

    /// Puts what was received into the outcome (`churn`: churn clients are not accounted).
    fn finish(self, churn: bool, outcome: &mut ConnOutcome);
}

/// Runs connection `conn` of the worker until the run stops it, its hold time ends (churn),
/// or it fails.
pub(crate) async fn run<C: Client>(
    ctx: Arc<ConnCtx>,
    conn: u64,
    role: Role,
    client: C,
) -> ConnOutcome {
    let spec = &ctx.spec;
    let stats = &ctx.stats;
    let churn = matches!(role, Role::Churn { .. });
    if churn {
        stats.churn_attempts.fetch_add(1, Relaxed);
    } else {
        stats.attempts.fetch_add(1, Relaxed);
    }
    let permit = tokio::select! {
        p = ctx.pending.acquire() => p.ok(),
        _ = ctx.stop.cancelled() => return ConnOutcome::default(),
    };
    let t0 = Instant::now();
    let connect_timeout = Duration::from_millis(spec.connect_timeout_ms);
    let limit = connect_timeout + client.handshake_allowance(spec);
    let target = spec.target_for(conn);
    let opening = async {
        let stream = dial(target.addr, spec.source_for(conn), connect_timeout).await?;
        client.open(&ctx, target, stream).await
    };
    let opened = tokio::select! {
        r = tokio::time::timeout(limit, opening) => r.unwrap_or(Err(ConnError::ConnectTimeout)),
        _ = ctx.stop.cancelled() => return ConnOutcome::default(),
    };
    let mut session = match opened {
        Ok(session) => session,
        Err(e) => {
            stats.error(e.kind());
            if churn {
                stats.churn_failed.fetch_add(1, Relaxed);
            } else {
                stats.failed.fetch_add(1, Relaxed);
            }
            return ConnOutcome::default();
        }
    };
    drop(permit);
    let connect_us = t0.elapsed().as_micros() as u64;
    let hint = conn as usize;
    if churn {
        stats.churn_connect.record(hint, connect_us);
        stats.churn_connected.fetch_add(1, Relaxed);
    } else {
        stats.connect.record(hint, connect_us);
        stats.connected.fetch_add(1, Relaxed);
        stats.opened();
    }
    let cohort = !churn && !ctx.started.load(SeqCst);
    let mut result = session.on_ready();
    let hold = hold_timer(role);
    tokio::pin!(hold);
    let mut stopped = false;
    while result.is_ok() {
        let event = tokio::select! {
            biased;
            _ = ctx.stop.cancelled() => { stopped = true; break; }
            _ = &mut hold => { stopped = true; break; }
            event = session.next(&ctx) => event,
        };
        result = session.handle(&ctx, event).await;
    }
    // An end (a shutdown event, a close) that arrives once the run is stopping is not an error.
    if let Err(e) = &result {
        if ctx.stop.is_cancelled() {
            stopped = true;
        } else {
            stats.error(e.kind());
            if !churn {
                stats.dropped.fetch_add(1, Relaxed);
            }
        }
    }
    if stopped {
        session.close().await;
    }
    if churn {
        if stopped {
            stats.churn_closed.fetch_add(1, Relaxed);
        }
    } else {
        stats.closed();
    }
    let mut outcome = ConnOutcome {
        ready: true,
        cohort,
        stayed: stopped,
        ..ConnOutcome::default()
    };
    session.finish(churn, &mut outcome);
    outcome
}
