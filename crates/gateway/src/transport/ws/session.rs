//! A WebSocket connection's [`Session`], what it opens with ([`Opened`]), and its run loop
//! and what every path of it shares: keep-alive, the direct link, delivery, and sending frames.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use herald_core::batch::{self, BatchFormat};
use herald_core::{Feed, TopicName};
use tokio::time::Instant;
use tungstenite::{Message as WsMessage, Utf8Bytes};

use super::socket::Socket;
use super::{close_code, deflate, format};
use crate::app::AppState;
use crate::error::ApiError;
use crate::hooks::{Caller, Forwarded};
use crate::limits::TokenBucket;
use crate::server::stream::PeerStream;
use crate::telemetry::metrics::{self, CloseReason, Transport, TransportMetrics};
use crate::transport::lost_json;
use format::Format;

/// What the handshake settled besides the identity.
#[derive(Debug, Default)]
pub(super) struct Opened {
    /// The connection's id, named to the connect hook.
    pub(super) id: Option<u64>,
    /// The upgrade request's headers the hooks forward.
    pub(super) forwarded: Forwarded,
    /// Topics the connect hook subscribed the connection to.
    pub(super) granted: Vec<String>,
    /// The wire format the subprotocol named.
    pub(super) format: Format,
    /// permessage-deflate, when negotiated.
    pub(super) deflate: Option<deflate::Deflate>,
    /// Batch frames, when the client asked (`batch=1`) and compression is off.
    pub(super) batch: Option<herald_core::batch::BatchFormat>,
}

/// A refusal sent back as an error frame; the connection stays open.
pub(super) struct FrameError {
    pub(super) code: &'static str,
    pub(super) reason: String,
}

impl FrameError {
    pub(super) fn new(code: &'static str, reason: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.into(),
        }
    }
}

impl From<ApiError> for FrameError {
    fn from(e: ApiError) -> Self {
        let text = e.to_string();
        let reason = text
            .split_once(": ")
            .map_or(text.clone(), |(_, r)| r.to_string());
        Self {
            code: e.code(),
            reason,
        }
    }
}

pub(super) enum Flow {
    Continue,
    Close(CloseReason),
}

/// One WebSocket connection's life, on any client stream (a socket in production, an
/// in-memory pipe in the unit tests): the WebSocket side of a connection, beside its
/// cluster-side [`crate::cluster::Connection`] (`connection`).
pub(super) struct Session<S> {
    pub(super) state: AppState,
    pub(super) socket: Socket<S>,
    pub(super) feed: Feed,
    pub(super) metrics: &'static TransportMetrics,
    pub(super) connection: crate::cluster::Connection,
    pub(super) who: crate::auth::Identity,
    /// When the client's token expires, if it presented one (boxed only then).
    pub(super) expiry: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// This connection's publish rate limit, from its first publish on (boxed: most
    /// connections never publish).
    pub(super) publish_bucket: Option<Box<TokenBucket>>,
    /// The topics this connection's subscriptions created, charged to its client while
    /// subscribed (most connections create none).
    pub(super) charges: Vec<(TopicName, crate::limits::QuotaCharge)>,
    /// The upgrade request's headers the hooks forward (none without hooks).
    pub(super) forwarded: Forwarded,
    /// The ping interval in milliseconds: `ws.ping_interval`, or what the client asked for.
    pub(super) ping_ms: u32,
    /// JSON text frames, or MessagePack binary frames (`herald.msgpack`).
    pub(super) format: Format,
    /// permessage-deflate, when negotiated.
    pub(super) deflate: Option<deflate::Deflate>,
    /// Batch frames ([`herald_core::batch`]): the messages ready at once in one frame, when
    /// the client asked (`batch=1`) and compression is off.
    pub(super) batch: Option<herald_core::batch::BatchFormat>,
}

pub(super) fn expiry_of(
    who: &crate::auth::Identity,
) -> Option<std::pin::Pin<Box<tokio::time::Sleep>>> {
    who.time_left()
        .map(|left| Box::pin(tokio::time::sleep(left)))
}

async fn expired(expiry: &mut Option<std::pin::Pin<Box<tokio::time::Sleep>>>) {
    match expiry {
        Some(sleep) => sleep.as_mut().await,
        None => std::future::pending().await,
    }
}

impl<S: PeerStream> Session<S> {
    pub(super) fn new(
        state: AppState,
        socket: Socket<S>,
        who: crate::auth::Identity,
        opened: Opened,
    ) -> Self {
        let config = state.config();
        let metrics = metrics::transport(Transport::Ws);
        let connection = match opened.id {
            Some(id) => state.open_connection_as(id, Transport::Ws, &who),
            None => state.open_connection(Transport::Ws, &who),
        };
        Self {
            expiry: expiry_of(&who),
            publish_bucket: None,
            charges: Vec::new(),
            forwarded: opened.forwarded,
            deflate: opened.deflate,
            batch: opened.batch,
            ping_ms: u32::try_from(config.ws.ping_interval.as_millis()).unwrap_or(u32::MAX),
            format: opened.format,
            who,
            feed: herald_core::Feed::new(config.lag_policy, config.limits.max_subscriptions),
            socket,
            metrics,
            connection,
            state,
        }
    }

    pub(super) async fn run(mut self) {
        // Polled on every wake-up: one atomic load (see `crate::shutdown::Drain`).
        let mut shutdown = self.state.drain().wait();
        let mut ping = Box::pin(tokio::time::sleep_until(crate::transport::next_keep_alive(
            Instant::now(),
            self.ping_every(),
        )));
        let reason = loop {
            let ping_ms = self.ping_ms;
            let flow = tokio::select! {
                biased;
                _ = &mut shutdown => {
                    Box::pin(self.close(close_code::RESTART, "server shutting down; reconnect")).await;
                    Flow::Close(CloseReason::Shutdown)
                }
                // Boxed: inbound frames are rare on a subscriber, and inlining this path would
                // size every idle connection's task for it (measured: 2.2 KB vs 1 KB).
                frame = self.socket.next() => Box::pin(self.on_frame(frame)).await,
                action = self.connection.next_action() => Box::pin(self.on_action(action)).await,
                _ = expired(&mut self.expiry) => Box::pin(self.on_expiry()).await,
                // Boxed too (384 bytes: the write and its timeout): inline, it sized every
                // connection's task (measured: the task's future 2,144 -> ~1,800 bytes). A
                // linked feed's messages are written by the fan-out and never come here; those
                // that do (several topics, TLS, a parked link) pay one allocation each.
                event = self.feed.next() => Box::pin(self.on_event(event)).await,
                _ = ping.as_mut() => {
                    ping.as_mut().reset(crate::transport::next_keep_alive(Instant::now(), self.ping_every()));
                    if self.socket.get_ref().last_frame().elapsed() > self.idle_timeout() {
                        Box::pin(self.close(close_code::GOING_AWAY, "idle timeout")).await;
                        Flow::Close(CloseReason::Idle)
                    } else {
                        // Boxed, as every rare path here: an idle connection's task is sized
                        // by the largest path it may take.
                        Box::pin(self.ping()).await
                    }
                }
            };
            if let Flow::Close(reason) = flow {
                break reason;
            }
            if self.ping_ms != ping_ms {
                // The client asked for another interval.
                ping.as_mut().reset(crate::transport::next_keep_alive(
                    Instant::now(),
                    self.ping_every(),
                ));
            }
            self.relink();
        };
        self.connection.closing(reason);
    }

    /// How often the server pings the client.
    fn ping_every(&self) -> Duration {
        Duration::from_millis(self.ping_ms.into())
    }

    /// How long the client may stay silent: `ws.idle_timeout`, longer in proportion for a
    /// client that asked for a longer ping interval.
    fn idle_timeout(&self) -> Duration {
        let ws = &self.state.config().ws;
        let scale = self.ping_every().as_secs_f64() / ws.ping_interval.as_secs_f64();
        ws.idle_timeout.mul_f64(scale.max(1.0))
    }

    /// Links a feed of one topic to its topic's fan-out when the socket can be written to
    /// directly ([`direct`]): the socket parks it before it writes.
    pub(super) fn relink(&mut self) {
        let stream = self.socket.get_mut().get_mut();
        if self.feed.direct_link().is_none()
            && self.feed.len() == 1
            && let Some(link) = stream.direct_link()
        {
            self.feed.link(link);
        }
    }

    /// Tells the presence members this connection's topics, after they changed (never on
    /// delivery).
    pub(super) fn members_follow(&mut self) {
        self.connection
            .subscribed_to(self.feed.positions().map(|(t, _)| t));
    }

    /// The connection as the hooks are told about it.
    pub(super) fn caller(&self, peer: std::net::IpAddr) -> Caller<'_> {
        Caller {
            transport: "ws",
            client: Some(self.connection.id()),
            remote: peer,
            who: &self.who,
            headers: &self.forwarded,
        }
    }

    async fn on_event(&mut self, event: herald_core::FeedEvent) -> Flow {
        let mut next = Some(crate::transport::deliver(event, "ws", self.state.config()));
        while let Some(delivery) = next.take() {
            let flow = match (delivery, self.batch) {
                (crate::transport::Delivery::Message(message, delta), Some(form)) => {
                    let (flow, after) = self.send_batch(form, message, delta).await;
                    next = after;
                    flow
                }
                (delivery, _) => self.on_delivery(delivery).await,
            };
            if let Flow::Close(_) = flow {
                return flow;
            }
        }
        Flow::Continue
    }

    /// Sends `first` and the messages ready after it in one batch frame (at most
    /// [`batch::MAX_MESSAGES`] and [`batch::MAX_BYTES`], unless `first` is larger alone; a
    /// batch of one is a frame of its own). Returns the delivery that ended the batch, if
    /// any, to handle next.
    async fn send_batch(
        &mut self,
        form: BatchFormat,
        first: Arc<herald_core::Message>,
        delta: bool,
    ) -> (Flow, Option<crate::transport::Delivery>) {
        let frame = |message: &Arc<herald_core::Message>, delta: bool| {
            let sent = herald_core::Outbound::new(message, delta);
            match form {
                BatchFormat::Json => sent.ws_frame().clone(),
                BatchFormat::Msgpack => sent.ws_msgpack_frame().clone(),
            }
        };
        // Each message with its frame, made (shared, once per message) only here.
        let mut batch = vec![(frame(&first, delta), first, delta)];
        let mut bytes = batch[0].0.len();
        let mut after = None;
        while batch.len() < batch::MAX_MESSAGES {
            let Some(event) = self.feed.next_ready() else {
                break;
            };
            match crate::transport::deliver(event, "ws", self.state.config()) {
                crate::transport::Delivery::Message(message, delta) => {
                    let framed = frame(&message, delta);
                    if bytes + framed.len() > batch::MAX_BYTES {
                        after = Some(crate::transport::Delivery::Message(message, delta));
                        break;
                    }
                    bytes += framed.len();
                    batch.push((framed, message, delta));
                }
                other => {
                    after = Some(other);
                    break;
                }
            }
        }
        if batch.len() == 1 {
            let (_, message, delta) = batch.swap_remove(0);
            let delivery = crate::transport::Delivery::Message(message, delta);
            return (self.on_delivery(delivery).await, after);
        }
        for (framed, message, _) in &batch {
            self.metrics
                .delivered(framed.len(), message.published_at().elapsed());
        }
        let elements: Vec<&[u8]> = batch.iter().map(|(f, ..)| &f[..]).collect();
        let payload = form.payload(&elements);
        let message = match form {
            // Made of JSON frames: valid UTF-8.
            BatchFormat::Json => match Utf8Bytes::try_from(payload) {
                Ok(text) => WsMessage::Text(text),
                Err(_) => return (Flow::Continue, after),
            },
            BatchFormat::Msgpack => WsMessage::Binary(payload),
        };
        (self.send(message).await, after)
    }

    async fn on_delivery(&mut self, delivery: crate::transport::Delivery) -> Flow {
        match delivery {
            crate::transport::Delivery::Message(message, delta)
                if self.format == Format::Msgpack =>
            {
                let frame = herald_core::Outbound::new(&message, delta).ws_msgpack_frame();
                self.metrics
                    .delivered(frame.len(), message.published_at().elapsed());
                self.send(WsMessage::Binary(frame.clone())).await
            }
            crate::transport::Delivery::Message(message, delta) => {
                let sent = herald_core::Outbound::new(&message, delta);
                let frame = sent.ws_frame();
                if let Some(packed) = self.deflated_message(sent) {
                    // Counted as it crosses the wire: compressed.
                    let bytes = sent.ws_deflate_payload().map_or(0, |p| p.len());
                    self.metrics
                        .delivered(bytes, message.published_at().elapsed());
                    return self.send(packed).await;
                }
                self.metrics
                    .delivered(frame.len(), message.published_at().elapsed());
                // The frame is built from validated names and a JSON payload: valid UTF-8.
                match Utf8Bytes::try_from(frame.clone()) {
                    Ok(text) => self.send(WsMessage::Text(text)).await,
                    Err(_) => Flow::Continue,
                }
            }
            crate::transport::Delivery::Lost { topic, reason } => {
                let body = lost_json(&topic, reason);
                let frame = format!(r#"{{"type":"lost",{}"#, &body[1..]);
                Box::pin(self.send_text(frame)).await
            }
            crate::transport::Delivery::Nothing => Flow::Continue,
            // The fan-out wrote part of a frame and stopped: the rest goes out first.
            crate::transport::Delivery::Rest(rest) => {
                self.socket.get_mut().get_mut().write_rest(rest);
                let timeout = self.state.config().limits.write_timeout;
                match tokio::time::timeout(timeout, self.socket.flush()).await {
                    Ok(Ok(())) => Flow::Continue,
                    Ok(Err(_)) => Flow::Close(CloseReason::Client),
                    Err(_) => {
                        metrics::slow_consumer("disconnected");
                        Flow::Close(CloseReason::Slow)
                    }
                }
            }
            crate::transport::Delivery::Disconnect { .. } => {
                Box::pin(self.close(close_code::POLICY, "slow consumer")).await;
                Flow::Close(CloseReason::Slow)
            }
        }
    }

    pub(super) async fn error_frame(&mut self, error: FrameError) -> Flow {
        metrics::client_error("ws", error.code);
        let frame =
            serde_json::json!({ "type": "error", "code": error.code, "reason": error.reason });
        self.send_text(frame.to_string()).await
    }

    /// Sends a control frame built as JSON text: as it is, or as a MessagePack binary frame
    /// on a `herald.msgpack` connection.
    pub(super) async fn send_text(&mut self, text: String) -> Flow {
        match self.format {
            Format::Json => {
                let message = self.deflated_text(text);
                // Counted as it crosses the wire (compressed or not), payload only.
                self.metrics.sent(match &message {
                    WsMessage::Frame(frame) => frame.payload().len(),
                    message => message.len(),
                });
                self.send(message).await
            }
            // MessagePack frames go uncompressed: they are compact already, and each
            // connection's own replies are small.
            Format::Msgpack => {
                let frame = WsMessage::Binary(format::json_to_msgpack(&text).into());
                self.metrics.sent(frame.len());
                self.send(frame).await
            }
        }
    }

    /// Pings the client. While the topic's fan-out writes to this connection the link writes
    /// the two-byte frame itself, under the fan-out's lock, and the connection stays direct
    /// (measured, W3 at 15,000 connections and a 30 s ping: ~0.9 µs per delivery went to
    /// leaving direct delivery for each ping and coming back); otherwise tungstenite does.
    async fn ping(&mut self) -> Flow {
        /// An empty ping as a server sends it (FIN, opcode 0x9, unmasked, no payload).
        const PING: [u8; 2] = [0x89, 0x00];
        if self.feed.is_direct()
            && let Some(link) = self.feed.direct_link()
            && link.write_while_direct(&PING)
        {
            return Flow::Continue;
        }
        self.send(WsMessage::Ping(Default::default())).await
    }

    /// Sends one frame; a client that does not take it within the write timeout is a slow
    /// consumer and is dropped.
    pub(super) async fn send(&mut self, message: WsMessage) -> Flow {
        self.rest_first();
        let mut send = self.socket.send(message);
        // Nearly every send is taken at once by the socket: the timeout (a clock read and a
        // timer) is set only for one that has to wait.
        let sent = match futures_util::poll!(&mut send) {
            std::task::Poll::Ready(sent) => Ok(sent),
            std::task::Poll::Pending => {
                let timeout = self.state.config().limits.write_timeout;
                tokio::time::timeout(timeout, send).await
            }
        };
        match sent {
            Ok(Ok(())) => Flow::Continue,
            Ok(Err(_)) => Flow::Close(CloseReason::Client),
            Err(_) => {
                metrics::slow_consumer("disconnected");
                Flow::Close(CloseReason::Slow)
            }
        }
    }

    /// Queues, ahead of tungstenite's next bytes, the rest of a frame the topic's fan-out
    /// wrote in part and the feed keeps ([`herald_core::Feed::park`] hands it over): the link parks itself
    /// before tungstenite writes, but a feed that just unlinked (an unsubscribe, a second
    /// topic) took that rest over, and a reply written before it would cut the frame.
    pub(super) fn rest_first(&mut self) {
        if let Some(rest) = self.feed.park() {
            self.socket.get_mut().get_mut().write_rest(rest);
        }
    }
}
