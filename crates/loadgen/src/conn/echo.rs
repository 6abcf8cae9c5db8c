//! Echo client: sends fixed-size frames at a steady rate and times the answers.
//!
//! Herald mode sends `{"type":"ping","data":{"ts":..,"seq":..,"pad":".."}}` and expects
//! `{"type":"pong","data":<same>}`; raw mode sends the data object as plain text and expects
//! the same text back (any echo server). The round trip is `now - ts` of the answer.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::lifecycle::{Client, Session};
use super::ws::{Data, Ws, close, data, handshake, ws_err};
use super::{ConnCtx, ConnOutcome};
use crate::clock::unix_micros;
use crate::error::{ConnError, ErrorKind};
use crate::payload::{self, echo_frame};
use crate::proto::herald_ws::{ServerFrame, classify};
use crate::seq::SeqTracker;
use crate::target::Target;

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

/// An echo client before it is connected.
pub(crate) struct Echo {
    conn: u64,
    raw: bool,
    size: usize,
    period: Duration,
}

impl Echo {
    /// Client `conn`: `raw` text frames of `size` bytes, `rate` requests per second.
    pub(crate) fn new(conn: u64, raw: bool, size: usize, rate: f64) -> Self {
        let period = if rate > 0.0 && rate.is_finite() {
            Duration::from_secs_f64((1.0 / rate).min(3600.0))
        } else {
            Duration::from_secs(3600)
        };
        Self {
            conn,
            raw,
            size,
            period,
        }
    }
}

impl Client for Echo {
    type Session = EchoSession;

    async fn open(
        self,
        ctx: &ConnCtx,
        target: &Target,
        stream: TcpStream,
    ) -> Result<EchoSession, ConnError> {
        Ok(EchoSession {
            ws: handshake(&ctx.spec, target, stream).await?,
            client: self,
            tracker: SeqTracker::new(),
            sent: 0,
            sending: false,
            next: tokio::time::Instant::now(),
        })
    }
}

/// A ready echo client: sends from the start of the measured phase until quiesce.
pub(crate) struct EchoSession {
    ws: Ws,
    client: Echo,
    tracker: SeqTracker,
    sent: u64,
    sending: bool,
    next: tokio::time::Instant,
}

/// What an echo client reacts to.
pub(crate) enum EchoEvent {
    /// The measured phase began.
    Start,
    /// Sending must stop.
    Quiesce,
    /// Time for the next request.
    Send,
    /// Something arrived.
    Frame(Option<Result<Message, WsError>>),
}

impl Session for EchoSession {
    type Event = EchoEvent;

    async fn next(&mut self, ctx: &ConnCtx) -> EchoEvent {
        tokio::select! {
            biased;
            _ = ctx.start.cancelled(), if !self.sending && !ctx.quiesce.is_cancelled() && self.sent == 0 => EchoEvent::Start,
            _ = ctx.quiesce.cancelled(), if self.sending => EchoEvent::Quiesce,
            _ = tokio::time::sleep_until(self.next), if self.sending => EchoEvent::Send,
            msg = self.ws.next() => EchoEvent::Frame(msg),
        }
    }

    async fn handle(&mut self, ctx: &ConnCtx, event: EchoEvent) -> Result<(), ConnError> {
        let period = self.client.period;
        match event {
            EchoEvent::Start => {
                self.sending = true;
                self.next = tokio::time::Instant::now() + period.mul_f64(phase(self.client.conn));
            }
            EchoEvent::Quiesce => self.sending = false,
            EchoEvent::Send => {
                let frame =
                    echo_frame(unix_micros(), self.sent, self.client.size, !self.client.raw);
                self.ws
                    .send(Message::Text(frame.into()))
                    .await
                    .map_err(ws_err)?;
                self.sent += 1;
                ctx.stats.echo_sent.fetch_add(1, Relaxed);
                self.next += period;
                let now = tokio::time::Instant::now();
                if self.next + period * 10 < now {
                    // far behind schedule (the server is slow): do not burst to catch up
                    self.next = now;
                }
            }
            EchoEvent::Frame(msg) => {
                let now = unix_micros();
                let hint = self.client.conn as usize;
                let raw = self.client.raw;
                match data(&mut self.ws, msg).await? {
                    Some(Data::Text(t)) => {
                        answer(t.as_bytes(), raw, ctx, hint, now, &mut self.tracker)
                    }
                    Some(Data::Binary(b)) => answer(&b, raw, ctx, hint, now, &mut self.tracker),
                    None => {}
                }
            }
        }
        Ok(())
    }

    async fn close(&mut self) {
        close(&mut self.ws).await;
    }

    fn finish(self, _churn: bool, outcome: &mut ConnOutcome) {
        outcome.echo = Some((self.sent, self.tracker));
    }
}
