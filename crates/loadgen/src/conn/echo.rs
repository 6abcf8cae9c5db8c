//! Echo client: sends fixed-size frames at a steady rate and times the answers.
//!
//! Herald mode sends `{"type":"ping","data":{"ts":..,"seq":..,"pad":".."}}` and expects
//! `{"type":"pong","data":<same>}`; raw mode sends the data object as plain text and expects
//! the same text back (any echo server). The round trip is `now - ts` of the answer.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use super::ws::{handshake, ws_err};
use super::{ConnCtx, ConnOutcome, Life, Role};
use crate::clock::unix_micros;
use crate::error::{ConnError, ErrorKind};
use crate::payload::{self, echo_frame};
use crate::proto::herald_ws::{ServerFrame, classify};
use crate::seq::SeqTracker;

/// Spreads the clients' send times evenly over one period.
fn phase(conn: u64) -> f64 {
    (conn as f64 * 0.618_033_988_749_895).fract()
}

/// Accounts one answer frame.
fn answer(bytes: &[u8], raw: bool, ctx: &ConnCtx, hint: usize, now: u64, tracker: &mut SeqTracker) {
    let stats = &ctx.stats;
    let fields = if raw {
        payload::scan(bytes)
    } else {
        match std::str::from_utf8(bytes).map(classify) {
            Ok(ServerFrame::Pong(f)) => f,
            Ok(ServerFrame::Error) => {
                stats.error(ErrorKind::ServerErrorFrame);
                return;
            }
            _ => {
                stats.error(ErrorKind::BadFrame);
                return;
            }
        }
    };
    match (fields.ts, fields.seq) {
        (Some(ts), Some(seq)) => {
            stats.latency.record(hint, now.saturating_sub(ts));
            tracker.record(seq);
            stats.echo_received.fetch_add(1, Relaxed);
        }
        _ => stats.error(ErrorKind::BadFrame),
    }
}

/// Runs one echo client.
pub async fn run(ctx: Arc<ConnCtx>, conn: u64, raw: bool, size: usize, rate: f64) -> ConnOutcome {
    let spec = &ctx.spec;
    let stats = &ctx.stats;
    let life = Life::begin(&ctx, conn, Role::Main);
    let limit = Duration::from_millis(spec.connect_timeout_ms);
    let Some(mut ws) = life.open(limit, handshake(&ctx, conn)).await else {
        return ConnOutcome::default();
    };
    let hint = conn as usize;
    let cohort = life.cohort();
    let period = if rate > 0.0 && rate.is_finite() {
        Duration::from_secs_f64((1.0 / rate).min(3600.0))
    } else {
        Duration::from_secs(3600)
    };
    let mut tracker = SeqTracker::new();
    let mut sent: u64 = 0;
    let mut sending = false;
    let mut next = tokio::time::Instant::now();
    let mut stopped = false;
    let mut result: Result<(), ConnError> = Ok(());
    while result.is_ok() {
        tokio::select! {
            biased;
            _ = ctx.stop.cancelled() => { stopped = true; break; }
            _ = ctx.start.cancelled(), if !sending && !ctx.quiesce.is_cancelled() && sent == 0 => {
                sending = true;
                next = tokio::time::Instant::now() + period.mul_f64(phase(conn));
            }
            _ = ctx.quiesce.cancelled(), if sending => { sending = false; }
            _ = tokio::time::sleep_until(next), if sending => {
                let frame = echo_frame(unix_micros(), sent, size, !raw);
                match ws.send(Message::Text(frame.into())).await {
                    Ok(()) => {
                        sent += 1;
                        stats.echo_sent.fetch_add(1, Relaxed);
                    }
                    Err(e) => result = Err(ws_err(e)),
                }
                next += period;
                let now = tokio::time::Instant::now();
                if next + period * 10 < now {
                    // far behind schedule (the server is slow): do not burst to catch up
                    next = now;
                }
            }
            msg = ws.next() => {
                let now = unix_micros();
                match super::ws::frame(&mut ws, msg).await {
                    Ok(Some(Message::Text(t))) => answer(t.as_bytes(), raw, &ctx, hint, now, &mut tracker),
                    Ok(Some(Message::Binary(b))) => answer(&b, raw, &ctx, hint, now, &mut tracker),
                    Ok(_) => {}
                    Err(e) => result = Err(e),
                }
            }
        }
    }
    let stopped = super::ws::end(life, ws, &result, stopped).await;
    ConnOutcome {
        ready: true,
        cohort,
        stayed: stopped,
        topics: Vec::new(),
        echo: Some((sent, tracker)),
    }
}
