//! `GET /v1/ws`: WebSocket with JSON text frames, or MessagePack binary frames with the
//! `herald.msgpack` subprotocol ([`format`]).
//!
//! The accept loop recognises an HTTP/1.1 upgrade to `/v1/ws` and hands the raw socket to
//! [`upgrade_raw`], which answers the handshake and runs tungstenite's protocol directly on
//! the TCP stream ([`socket::WebSocket`]): no hyper connection or boxed upgraded I/O stays
//! behind for the connection's life, and the connection runs on a task of its own, sized for
//! it alone.
//!
//! Client commands are parsed by [`herald_core::protocol`].
//!
//! Every incoming frame is counted by [`inbound::Inbound`] before tungstenite reassembles
//! it (the inbound rate, the fragment cap, activity). Every close the server starts or
//! answers ends with a lingering close ([`Connection::linger`]): the Close frame, a half-close,
//! then the client's input drained for a bounded time and byte count, so the client reads the
//! close code instead of a reset.
//!
//! One task per connection selects over the socket, the feed, the ping timer and the
//! shutdown token: no reader/writer task pair (measured to triple CPU per delivery).
//!
//! Compression (permessage-deflate, RFC 7692) is negotiated in the handshake and done without
//! context takeover, once per message for all subscribers (module `deflate`).

use std::collections::HashMap;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use futures_util::{SinkExt as _, StreamExt as _};
use herald_core::protocol::{self, Command};
use herald_core::{Cursor, Feed, TopicName};
use tokio::time::Instant;
use tungstenite::protocol::frame::CloseFrame;
use tungstenite::protocol::{Role, WebSocketConfig};
use tungstenite::{Message as WsMessage, Utf8Bytes};

mod deflate;
mod direct;
pub mod format;
pub mod inbound;
mod socket;

use format::Format;

use super::lost_json;
use crate::app::AppState;
use crate::cluster::control::Action;
use crate::error::ApiError;
use crate::hooks::{Caller, Forwarded};
use crate::limits::{Rate, TokenBucket};
use crate::publish::{self, Publisher};
use crate::server::stream::{ClientStream, PeerStream};
use crate::telemetry::metrics::{self, CloseReason, Transport, TransportMetrics};

/// WebSocket close codes used by Herald.
pub mod close_code {
    /// Idle timeout: nothing heard from the client.
    pub const GOING_AWAY: u16 = 1001;
    /// A frame that breaks RFC 6455 (an orphan continuation, an oversized control frame, ...).
    pub const PROTOCOL: u16 = 1002;
    /// Invalid UTF-8 in a text frame.
    pub const INVALID_DATA: u16 = 1007;
    /// Policy violation: slow consumer.
    pub const POLICY: u16 = 1008;
    /// Inbound message over the size limit.
    pub const TOO_BIG: u16 = 1009;
    /// The server is restarting: reconnect (with a little random delay).
    pub const RESTART: u16 = 1012;
    /// The server ended the connection on a command (the admin API); the client may come
    /// back. The close reason is the command's.
    pub const DISCONNECTED: u16 = 4000;
    /// As [`DISCONNECTED`], and the client should not come back (logged out, banned).
    pub const DISCONNECTED_STAY_AWAY: u16 = 4001;
}

/// The route.
pub const PATH: &str = "/v1/ws";

/// A connection's WebSocket: its frames counted by [`inbound::Inbound`] on the client's stream.
type Socket<S> = socket::WebSocket<inbound::Inbound<S>>;

/// How long a closing connection drains what the client still sends.
const LINGER: Duration = Duration::from_secs(2);
/// Most bytes a closing connection drains (a client still sending a 4 MiB frame when its
/// 1009 goes out gets the close frame; one sending more is cut off).
const LINGER_BYTES: usize = 16 << 20;

/// Whether `key` is a `Sec-WebSocket-Key`: base64 of 16 bytes (RFC 6455 4.1), which is 22
/// base64 characters, the last carrying 2 bits only, and `==`.
fn is_websocket_key(key: &str) -> bool {
    let b = key.as_bytes();
    b.len() == 24
        && b[..22]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/')
        && matches!(b[21], b'A' | b'Q' | b'g' | b'w')
        && &b[22..] == b"=="
}

/// The route on the router: WebSocket upgrades are taken over by the accept loop before the
/// router sees them, so a request that gets here was not a valid HTTP/1.1 upgrade.
pub async fn handler() -> ApiError {
    ApiError::new(
        StatusCode::UPGRADE_REQUIRED,
        "upgrade_required",
        "GET /v1/ws needs an HTTP/1.1 WebSocket upgrade (Connection: Upgrade, Upgrade: websocket)",
    )
}

/// Answers a WebSocket handshake on `stream` and runs the connection on a task of its own.
/// `headers` are the request's; a request that is not a valid version-13 handshake gets a
/// JSON error and is closed.
pub async fn upgrade_raw(
    state: &AppState,
    mut stream: ClientStream,
    headers: &HeaderMap,
    query: Option<&str>,
    peer: std::net::IpAddr,
    permits: crate::limits::Permits,
) {
    let id = state.cluster().next_id();
    let forwarded = state.hooks().forwarded(headers);
    let handshake = async {
        let key = validate_handshake(state, headers)?;
        // A page from an origin that is not allowed must not get a socket (cross-site
        // WebSocket hijacking), whatever credentials its browser attaches.
        state.auth().check_origin(headers)?;
        let token = form_urlencoded::parse(query.unwrap_or("").as_bytes())
            .find(|(k, _)| k == "token")
            .map(|(_, v)| v.into_owned());
        let mut who = state.auth().identify(headers, token.as_deref())?;
        // The application decides before the upgrade, so that a refusal is an HTTP answer
        // with its reason.
        let caller = Caller {
            transport: "ws",
            client: Some(id),
            remote: peer,
            who: &who,
            headers: &forwarded,
        };
        let granted = match state.hooks().connect(&caller, &[]).await? {
            Some(grant) => {
                grant.apply(&mut who);
                grant.topics
            }
            None => Vec::new(),
        };
        Ok::<_, ApiError>((key, who, granted))
    }
    .await;
    let (format, subprotocol) = format::negotiate(headers);
    let (key, who, granted) = match handshake {
        Ok(pair) => pair,
        Err(e) => {
            metrics::client_error("ws", e.code());
            let extra: &[(&str, &str)] = if e.status() == StatusCode::UPGRADE_REQUIRED {
                &[("sec-websocket-version", "13")]
            } else {
                &[]
            };
            let _ =
                crate::server::head::write_response(&mut stream, e.status(), extra, &e.json_body())
                    .await;
            return;
        }
    };
    let protocol_line = subprotocol
        .map(|p| format!("sec-websocket-protocol: {p}\r\n"))
        .unwrap_or_default();
    let deflate = state
        .config()
        .ws
        .permessage_deflate
        .then(|| deflate::Deflate::negotiate(headers))
        .flatten();
    let extensions = deflate.map_or(String::new(), |d| {
        format!("sec-websocket-extensions: {}\r\n", d.response())
    });
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-accept: {}\r\n{protocol_line}{extensions}\r\n",
        tungstenite::handshake::derive_accept_key(key.as_bytes())
    );
    let write = async {
        tokio::io::AsyncWriteExt::write_all(&mut stream, response.as_bytes()).await?;
        tokio::io::AsyncWriteExt::flush(&mut stream).await
    };
    if !matches!(
        tokio::time::timeout(state.config().limits.write_timeout, write).await,
        Ok(Ok(()))
    ) {
        return;
    }
    let opened = Opened {
        id: Some(id),
        forwarded,
        granted,
        format,
        deflate,
    };
    match stream {
        // Plain TCP is shared with the topic's fan-out while the connection is idle.
        ClientStream::Plain(tcp) if state.config().topics.direct_delivery => {
            let socket = direct::SharedSocket::new(
                tcp,
                format,
                deflate,
                state.config().ws.deflate_min_size,
                metrics::transport(Transport::Ws),
            );
            serve(state, socket, who, opened, permits).await;
        }
        stream => serve(state, stream, who, opened, permits).await,
    }
}

/// What the handshake settled besides the identity.
#[derive(Debug, Default)]
struct Opened {
    /// The connection's id, named to the connect hook.
    id: Option<u64>,
    /// The upgrade request's headers the hooks forward.
    forwarded: Forwarded,
    /// Topics the connect hook subscribed the connection to.
    granted: Vec<String>,
    /// The wire format the subprotocol named.
    format: Format,
    /// permessage-deflate, when negotiated.
    deflate: Option<deflate::Deflate>,
}

/// Runs an accepted WebSocket connection on `stream`, on a task of its own.
async fn serve<S: PeerStream>(
    state: &AppState,
    stream: S,
    who: crate::auth::Identity,
    mut opened: Opened,
    permits: crate::limits::Permits,
) {
    let ws = &state.config().ws;
    let mut stream = inbound::Inbound::new(stream, Rate::new(ws.inbound_rate, ws.inbound_burst));
    if opened.deflate.is_some() {
        stream.expect_deflate();
    }
    let config = WebSocketConfig::default()
        .read_buffer_size(ws.read_buffer_size)
        .write_buffer_size(ws.write_buffer_size)
        .max_write_buffer_size(ws.max_message_size.max(ws.write_buffer_size + 1) * 4)
        .max_message_size(Some(ws.max_message_size))
        .max_frame_size(Some(ws.max_message_size));
    let socket = socket::WebSocket::new(stream, Role::Server, Some(config));
    let granted = std::mem::take(&mut opened.granted);
    let mut connection = Connection::new(state.clone(), socket, who, opened);
    // The connect hook's topics are subscribed and told here, before the connection's task
    // starts, so that its state holds nothing for them.
    if !granted.is_empty()
        && let Flow::Close(reason) = connection.subscribed_by_server(&granted, None).await
    {
        connection.guard.closing(reason);
        return;
    }
    // Combinators, not an `async move` block (see `spawn_connection`): a block would keep the
    // connection a second time beside `run`'s state (measured: ~1 KB per idle connection).
    use futures_util::FutureExt as _;
    let served = connection.run().map(move |()| drop(permits));
    crate::shutdown::spawn_connection(state.tracker(), "ws", served);
}

fn validate_handshake(state: &AppState, headers: &HeaderMap) -> Result<String, ApiError> {
    if state.shutdown().is_cancelled() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the gateway is shutting down; reconnect to another node",
        ));
    }
    let has_token = |name: &str, token: &str| {
        headers.get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    if !has_token("connection", "upgrade") || !has_token("upgrade", "websocket") {
        return Err(ApiError::bad_request(
            "bad_handshake",
            "a WebSocket upgrade needs Connection: Upgrade and Upgrade: websocket",
        ));
    }
    if headers
        .get("sec-websocket-version")
        .and_then(|v| v.to_str().ok())
        != Some("13")
    {
        return Err(ApiError::new(
            StatusCode::UPGRADE_REQUIRED,
            "bad_handshake",
            "only WebSocket version 13 is supported",
        ));
    }
    match headers
        .get("sec-websocket-key")
        .and_then(|v| v.to_str().ok())
    {
        Some(key) if is_websocket_key(key) => Ok(key.to_string()),
        _ => Err(ApiError::bad_request(
            "bad_handshake",
            "missing or malformed Sec-WebSocket-Key",
        )),
    }
}

/// A refusal sent back as an error frame; the connection stays open.
struct FrameError {
    code: &'static str,
    reason: String,
}

impl FrameError {
    fn new(code: &'static str, reason: impl Into<String>) -> Self {
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

enum Flow {
    Continue,
    Close(CloseReason),
}

/// One WebSocket connection's life, on any client stream (a socket in production, an
/// in-memory pipe in the unit tests below).
struct Connection<S> {
    state: AppState,
    socket: Socket<S>,
    feed: Feed,
    metrics: &'static TransportMetrics,
    guard: crate::cluster::Connection,
    who: crate::auth::Identity,
    /// When the client's token expires, if it presented one (boxed only then).
    expiry: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    /// This connection's publish rate limit, from its first publish on (boxed: most
    /// connections never publish).
    publish_bucket: Option<Box<TokenBucket>>,
    /// The topics this connection's subscriptions created, charged to its client while
    /// subscribed (most connections create none).
    charges: Vec<(TopicName, crate::limits::QuotaCharge)>,
    /// The upgrade request's headers the hooks forward (none without hooks).
    forwarded: Forwarded,
    /// The ping interval in milliseconds: `ws.ping_interval`, or what the client asked for.
    ping_ms: u32,
    /// JSON text frames, or MessagePack binary frames (`herald.msgpack`).
    format: Format,
    /// permessage-deflate, when negotiated.
    deflate: Option<deflate::Deflate>,
}

fn expiry_of(who: &crate::auth::Identity) -> Option<std::pin::Pin<Box<tokio::time::Sleep>>> {
    who.time_left()
        .map(|left| Box::pin(tokio::time::sleep(left)))
}

async fn expired(expiry: &mut Option<std::pin::Pin<Box<tokio::time::Sleep>>>) {
    match expiry {
        Some(sleep) => sleep.as_mut().await,
        None => std::future::pending().await,
    }
}

impl<S: PeerStream> Connection<S> {
    fn new(state: AppState, socket: Socket<S>, who: crate::auth::Identity, opened: Opened) -> Self {
        let config = state.config();
        let metrics = metrics::transport(Transport::Ws);
        let guard = match opened.id {
            Some(id) => state.open_connection_as(id, Transport::Ws, &who),
            None => state.open_connection(Transport::Ws, &who),
        };
        Self {
            expiry: expiry_of(&who),
            publish_bucket: None,
            charges: Vec::new(),
            forwarded: opened.forwarded,
            deflate: opened.deflate,
            ping_ms: u32::try_from(config.ws.ping_interval.as_millis()).unwrap_or(u32::MAX),
            format: opened.format,
            who,
            feed: Feed::new(config.lag_policy, config.limits.max_subscriptions),
            socket,
            metrics,
            guard,
            state,
        }
    }

    async fn run(mut self) {
        // Polled on every wake-up: one atomic load (see `crate::shutdown::Drain`).
        let mut shutdown = self.state.drain().wait();
        let mut ping = Box::pin(tokio::time::sleep_until(super::next_keep_alive(
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
                action = self.guard.next_action() => Box::pin(self.on_action(action)).await,
                _ = expired(&mut self.expiry) => Box::pin(self.on_expiry()).await,
                // Boxed too (384 bytes: the write and its timeout): inline, it sized every
                // connection's task (measured: the task's future 2,144 -> ~1,800 bytes). A
                // linked feed's messages are written by the fan-out and never come here; those
                // that do (several topics, TLS, a parked link) pay one allocation each.
                event = self.feed.next() => Box::pin(self.on_event(event)).await,
                _ = ping.as_mut() => {
                    ping.as_mut().reset(super::next_keep_alive(Instant::now(), self.ping_every()));
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
                ping.as_mut()
                    .reset(super::next_keep_alive(Instant::now(), self.ping_every()));
            }
            self.relink();
        };
        self.guard.closing(reason);
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
    fn relink(&mut self) {
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
    fn members_follow(&mut self) {
        self.guard
            .subscribed_to(self.feed.positions().map(|(t, _)| t));
    }

    /// A command of the application's (the admin API): an end with its reason, or a
    /// server-side subscription told to the client as if it had asked (`"by": "server"`);
    /// or a member's join or leave (`{"type":"join",...}`, [`crate::cluster::join_leave`]).
    async fn on_action(&mut self, action: Action) -> Flow {
        match action {
            Action::Disconnect(disconnect) => {
                let code = if disconnect.reconnect {
                    close_code::DISCONNECTED
                } else {
                    close_code::DISCONNECTED_STAY_AWAY
                };
                self.close(code, &disconnect.reason).await;
                Flow::Close(CloseReason::Disconnected)
            }
            Action::Subscribe(topics) => self.subscribed_by_server(&topics, None).await,
            Action::Receive { topic, after } => {
                self.subscribed_by_server(&[topic], after.parse().ok())
                    .await
            }
            Action::Presence(event) => self.send_text(event.typed_json()).await,
            Action::Unsubscribe(topics) => {
                let removed = super::unsubscribe_from_server(&mut self.feed, &topics);
                if removed.is_empty() {
                    return Flow::Continue;
                }
                self.members_follow();
                self.charges
                    .retain(|(name, _)| !removed.iter().any(|r| r == name.as_str()));
                let reply = serde_json::json!({ "type": "unsubscribed", "topics": removed, "by": "server" });
                self.send_text(reply.to_string()).await
            }
        }
    }

    /// Subscribes to `topics` on the application's command (from their head, or after
    /// `after`), telling the client with a `subscribed` frame marked `"by": "server"` when
    /// anything is new; a refusal is counted.
    async fn subscribed_by_server(
        &mut self,
        topics: &[String],
        after: Option<herald_core::Cursor>,
    ) -> Flow {
        match super::subscribe_from_server(&self.state, &mut self.feed, topics, after) {
            Ok(started) if started.is_empty() => Flow::Continue,
            Ok(started) => {
                self.members_follow();
                let cursors: serde_json::Map<String, serde_json::Value> = started
                    .iter()
                    .map(|(t, c)| (t.to_string(), c.to_string().into()))
                    .collect();
                let names: Vec<&String> = cursors.keys().collect();
                let reply = serde_json::json!({
                    "type": "subscribed", "topics": names, "cursors": cursors, "by": "server",
                });
                self.send_text(reply.to_string()).await
            }
            Err(e) => {
                metrics::client_error("ws", e.code());
                Flow::Continue
            }
        }
    }

    async fn on_frame(&mut self, frame: Option<Result<WsMessage, tungstenite::Error>>) -> Flow {
        let message = match frame {
            None => return Flow::Close(CloseReason::Client),
            Some(Ok(message)) => message,
            Some(Err(e)) => return self.on_read_error(e).await,
        };
        if let WsMessage::Text(_) | WsMessage::Binary(_) = &message {
            let sent = self.socket.get_mut().next_message();
            if let (
                inbound::Sent::DeflatedText | inbound::Sent::DeflatedBinary,
                WsMessage::Binary(data),
            ) = (sent, &message)
            {
                return self.on_deflated(sent, data).await;
            }
        }
        match (message, self.format) {
            (WsMessage::Text(text), Format::Json) => match self.on_command(&text, None).await {
                Ok(flow) => flow,
                Err(e) => self.error_frame(e).await,
            },
            (WsMessage::Binary(frame), Format::Msgpack) => {
                match Box::pin(self.on_msgpack_command(&frame)).await {
                    Ok(flow) => flow,
                    Err(e) => self.error_frame(e).await,
                }
            }
            (WsMessage::Binary(_), Format::Json) => {
                self.error_frame(FrameError::new(
                    "unsupported_frame",
                    "binary frames are not supported; send JSON text frames (or connect with \
                     the herald.msgpack subprotocol)",
                ))
                .await
            }
            (WsMessage::Text(_), Format::Msgpack) => {
                self.error_frame(FrameError::new(
                    "unsupported_frame",
                    "text frames are not supported on a herald.msgpack connection; send \
                     MessagePack binary frames",
                ))
                .await
            }
            (WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_), _) => Flow::Continue,
            (WsMessage::Close(_), _) => {
                // tungstenite queued the reply (the client's code echoed, 1002 for an invalid
                // one): send it, then close the TCP connection cleanly.
                let limit = Duration::from_secs(1).min(self.state.config().limits.write_timeout);
                self.rest_first();
                let _ = tokio::time::timeout(limit, self.socket.flush()).await;
                self.linger().await;
                Flow::Close(CloseReason::Client)
            }
        }
    }

    async fn on_read_error(&mut self, error: tungstenite::Error) -> Flow {
        if let Some(violation) = self.socket.get_ref().violation() {
            metrics::client_error("ws", violation.metric());
            self.close(close_code::POLICY, violation.reason()).await;
            return Flow::Close(CloseReason::Protocol);
        }
        match error {
            tungstenite::Error::Capacity(e) => {
                metrics::client_error("ws", "too_big");
                let reason = format!("message too big: {e}");
                self.close(close_code::TOO_BIG, &reason).await;
                Flow::Close(CloseReason::Protocol)
            }
            tungstenite::Error::Utf8(_) => {
                metrics::client_error("ws", "invalid_utf8");
                self.close(close_code::INVALID_DATA, "text frame is not valid UTF-8")
                    .await;
                Flow::Close(CloseReason::Protocol)
            }
            // A client that just went away (closed its socket without a close frame).
            tungstenite::Error::Protocol(
                tungstenite::error::ProtocolError::ResetWithoutClosingHandshake,
            ) => Flow::Close(CloseReason::Client),
            tungstenite::Error::Protocol(e) => {
                metrics::client_error("ws", "protocol");
                tracing::debug!(error = %e, "websocket protocol error");
                let reason = format!("protocol error: {e}");
                self.close(close_code::PROTOCOL, &reason).await;
                Flow::Close(CloseReason::Protocol)
            }
            _ => Flow::Close(CloseReason::Client),
        }
    }

    /// A `herald.msgpack` command: read as its JSON form, so that the same rules apply, with
    /// its `data` carried as sent (checked, never converted to JSON).
    async fn on_msgpack_command(&mut self, frame: &[u8]) -> Result<Flow, FrameError> {
        // `data` is checked, not converted: a ping's is echoed as given, a publish's payload
        // is made from the bytes.
        let read =
            protocol::command_from_msgpack(frame).map_err(|e| FrameError::new(e.code, e.reason))?;
        let data = read.data.unwrap_or(&[0xc0]);
        self.on_command(&read.json, Some(data)).await
    }

    /// A command; `msgpack` is the MessagePack bytes of its `data` on a `herald.msgpack`
    /// connection (nil when it has none).
    async fn on_command(&mut self, text: &str, msgpack: Option<&[u8]>) -> Result<Flow, FrameError> {
        let command = protocol::parse(text).map_err(|e| FrameError::new(e.code, e.reason))?;
        match command {
            Command::Subscribe {
                topics,
                cursors,
                last,
            } => self.subscribe(topics, cursors, last).await,
            Command::Unsubscribe { topics } => {
                let mut removed = Vec::with_capacity(topics.len());
                for topic in topics
                    .iter()
                    .take(self.state.config().limits.max_subscriptions)
                {
                    if self.feed.unsubscribe(topic) {
                        removed.push(topic.as_str());
                        self.charges.retain(|(name, _)| name.as_str() != topic);
                    }
                }
                let reply = serde_json::json!({ "type": "unsubscribed", "topics": removed });
                if !removed.is_empty() {
                    self.members_follow();
                }
                Ok(self.send_text(reply.to_string()).await)
            }
            Command::Auth { token } => self.authenticate(&token).await,
            Command::Heartbeat { interval } => {
                let ws = &self.state.config().ws;
                let asked =
                    super::asked_interval(interval, ws.min_ping_interval, ws.max_ping_interval)?;
                // At most `ws.max_ping_interval`: 4 bytes rather than a `Duration`'s 16.
                self.ping_ms = u32::try_from(asked.as_millis()).unwrap_or(u32::MAX);
                let reply = format!(
                    r#"{{"type":"heartbeat","interval":{}}}"#,
                    asked.as_secs_f64()
                );
                Ok(self.send_text(reply).await)
            }
            Command::Ping { data } if msgpack.is_some() => {
                let pong = format::msgpack_pong(data.and(msgpack));
                self.metrics.sent(pong.len());
                Ok(self.send(WsMessage::Binary(pong.into())).await)
            }
            Command::Ping { data } => {
                let reply = match data {
                    Some(data) => format!(r#"{{"type":"pong","data":{}}}"#, data.get()),
                    None => r#"{"type":"pong"}"#.to_string(),
                };
                Ok(self.send_text(reply).await)
            }
            Command::Publish { topic, event, data } => {
                let data = match msgpack {
                    Some(bytes) => publish::Data::Msgpack(bytes),
                    None => publish::Data::Json(data),
                };
                self.publish(&topic, data, event.as_deref()).await
            }
        }
    }

    /// A token for an anonymous connection, or a fresh one before the current one expires.
    /// Every subscription held is checked against the new identity: those it does not allow
    /// are dropped, and an error frame names them.
    async fn authenticate(&mut self, token: &str) -> Result<Flow, FrameError> {
        let mut who = self.state.auth().verify(token)?;
        // The new token's `info` claim when it has one, else what the connection had (the
        // connect hook's, or the previous token's) while it stays the same user.
        if who.info.is_none() && who.sub == self.who.sub {
            who.info = self.who.info.take();
        }
        // The application decides again about a connection that now acts for someone else,
        // as it did at the upgrade: a token must not get past the connect hook.
        let Some(peer) = self.socket.get_ref().get_ref().peer_ip() else {
            return Ok(Flow::Close(CloseReason::Client)); // the socket is gone
        };
        {
            let caller = Caller {
                transport: "ws",
                client: Some(self.guard.id()),
                remote: peer,
                who: &who,
                headers: &self.forwarded,
            };
            if let Some(grant) = self.state.hooks().connect(&caller, &[]).await? {
                grant.apply(&mut who);
            }
        }
        // With the subscribe hook, the application allowed what is held: a new token
        // changes nothing there, except for the personal topics, whose rule is Herald's own.
        let hooked = self.state.hooks().has(crate::hooks::Hook::Subscribe);
        let own = format!("conn:{}", self.guard.id());
        let denied: Vec<TopicName> = self
            .feed
            .subscriptions()
            .filter(|topic| {
                let topic = topic.as_str();
                let by_hook = hooked
                    && !crate::auth::is_personal(topic)
                    && (self.state.config()).hook_applies(crate::hooks::Hook::Subscribe, topic);
                topic != own && !by_hook && !self.state.auth().may_subscribe(&who, topic)
            })
            .cloned()
            .collect();
        for topic in &denied {
            self.feed.unsubscribe(topic.as_str());
        }
        self.charges.retain(|(name, _)| !denied.contains(name));
        self.expiry = expiry_of(&who);
        if !denied.is_empty() {
            self.members_follow();
        }
        self.guard
            .set_identity(who.sub.as_deref(), who.info.clone());
        let expires = who
            .expires
            .and_then(|e| e.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs());
        let reply =
            serde_json::json!({ "type": "authenticated", "sub": who.sub, "expires": expires });
        self.who = who;
        if let Flow::Close(reason) = self.send_text(reply.to_string()).await {
            return Ok(Flow::Close(reason));
        }
        if denied.is_empty() {
            return Ok(Flow::Continue);
        }
        metrics::client_error("ws", "forbidden");
        let names: Vec<&str> = denied.iter().map(TopicName::as_str).collect();
        let frame = serde_json::json!({
            "type": "error",
            "code": "forbidden",
            "reason": format!("the new token does not allow {names:?}; unsubscribed"),
            "topics": names,
        });
        Ok(self.send_text(frame.to_string()).await)
    }

    async fn subscribe(
        &mut self,
        topics: Vec<String>,
        cursors: HashMap<String, String>,
        last: Option<usize>,
    ) -> Result<Flow, FrameError> {
        let max = self.state.config().limits.max_subscriptions;
        if topics.len() > max {
            return Err(FrameError::new(
                "too_many_topics",
                format!("at most {max} topics per connection"),
            ));
        }
        // One cursor per topic named, and as many for topics of patterns as a connection's
        // patterns track: a longer list is refused, not read (each entry is a history read).
        let most_cursors = max + herald_core::pattern::MAX_PATTERN_TOPICS;
        if cursors.len() > most_cursors {
            return Err(FrameError::new(
                "bad_cursor",
                format!("at most {most_cursors} cursors in one subscribe"),
            ));
        }
        let mut wanted = Vec::with_capacity(topics.len());
        let mut patterns = Vec::new();
        for topic in &topics {
            let name = TopicName::subscription(topic).map_err(ApiError::from)?;
            if name.is_pattern() {
                if cursors.contains_key(topic) {
                    return Err(FrameError::new(
                        "bad_cursor",
                        format!(
                            "a pattern has no cursor: give the cursors of the topics of {topic:?} it delivered"
                        ),
                    ));
                }
                if !patterns.contains(&name) {
                    patterns.push(name);
                }
                continue;
            }
            let from = match cursors.get(topic) {
                Some(c) => Some(c.parse::<Cursor>().map_err(ApiError::from)?),
                None => None,
            };
            wanted.push((name, super::start_of(from, last)));
        }
        // The cursors of topics a pattern matches resume them under the pattern.
        let mut resume = Vec::new();
        for (name, cursor) in &cursors {
            if topics.contains(name) {
                continue;
            }
            if !patterns
                .iter()
                .any(|p| herald_core::pattern::matches(p.prefix(), name))
            {
                return Err(FrameError::new(
                    "bad_cursor",
                    format!("cursor for {name:?}, which is not in topics nor matched by a pattern"),
                ));
            }
            let topic = TopicName::new(name).map_err(ApiError::from)?;
            resume.push((topic, cursor.parse::<Cursor>().map_err(ApiError::from)?));
        }
        let new = wanted
            .iter()
            .map(|(n, _)| n)
            .chain(&patterns)
            .filter(|n| !self.feed.holds(n.as_str()))
            .count();
        if self.feed.len() + new > max {
            return Err(FrameError::new(
                "too_many_topics",
                format!("at most {max} topics per connection"),
            ));
        }
        let Some(peer) = self.socket.get_ref().get_ref().peer_ip() else {
            return Ok(Flow::Close(CloseReason::Client)); // the socket is gone
        };
        let names: Vec<&str> = (wanted.iter().map(|(n, _)| n))
            .chain(&patterns)
            .map(TopicName::as_str)
            .collect();
        super::may_subscribe(&self.state, &self.caller(peer), &names).await?;
        // All or nothing: every topic is found or created before any is subscribed, so a
        // refusal part-way (the topic limit) leaves the connection as it was.
        let client = crate::limits::publisher_key(self.who.sub.as_deref(), peer);
        let topics = wanted
            .into_iter()
            .map(|(name, from)| {
                let (topic, charge) = super::topic_for_subscriber(&self.state, &name, &client)?;
                Ok((topic, charge, from))
            })
            .collect::<Result<Vec<_>, ApiError>>()?;
        // Patterns first: the node may refuse one (its limit of distinct patterns), and
        // those this frame added are then dropped again, leaving the connection as it was.
        let mut added: Vec<(TopicName, Option<crate::limits::QuotaCharge>)> = Vec::new();
        for pattern in &patterns {
            if self.feed.holds(pattern.as_str()) {
                continue;
            }
            let subscribed =
                super::pattern_charge(&self.state, pattern, &client).and_then(|charge| {
                    let resume = resume.iter().map(|(t, c)| (t, *c));
                    self.feed
                        .subscribe_pattern(self.state.registry(), pattern.clone(), resume)
                        .map_err(super::feed_error)?;
                    Ok(charge)
                });
            match subscribed {
                Ok(charge) => added.push((pattern.clone(), charge)),
                Err(e) => {
                    for (pattern, _) in &added {
                        self.feed.unsubscribe(pattern.as_str());
                    }
                    return Err(e.into());
                }
            }
        }
        for (pattern, charge) in added {
            if let Some(charge) = charge {
                self.charges.push((pattern, charge));
            }
        }
        let mut started = serde_json::Map::new();
        let mut names: Vec<String> = Vec::with_capacity(topics.len() + patterns.len());
        for (topic, charge, from) in topics {
            if let Some(charge) = charge {
                self.charges.push((topic.name().clone(), charge));
            }
            let name = topic.name().to_string();
            let start = self
                .feed
                .subscribe_from(topic, from)
                .map_err(|e| FrameError::new("too_many_topics", e.to_string()))?;
            names.push(name.clone());
            started.insert(name, start.to_string().into());
        }
        names.extend(patterns.iter().map(TopicName::to_string));
        self.members_follow();
        let reply =
            serde_json::json!({ "type": "subscribed", "topics": names, "cursors": started });
        Ok(self.send_text(reply.to_string()).await)
    }

    async fn publish(
        &mut self,
        topic: &str,
        data: publish::Data<'_>,
        event: Option<&str>,
    ) -> Result<Flow, FrameError> {
        self.admit_connection_publish()?;
        // The peer is asked for only when publishing (rare), rather than kept per connection.
        let Some(peer) = self.socket.get_ref().get_ref().peer_ip() else {
            return Ok(Flow::Close(CloseReason::Client)); // the socket is gone
        };
        let publisher = if self.state.config().dev {
            Publisher::Trusted
        } else {
            Publisher::Client(self.caller(peer))
        };
        let key = crate::limits::publisher_key(self.who.sub.as_deref(), peer);
        let prepared = publish::prepare(&self.state, &publisher, Some(&key), topic, event, data)
            .await
            .map_err(|e| {
                if e.code() == "publish_rate" {
                    metrics::client_error("ws", "publish_rate");
                    FrameError::new("rate_limited", FrameError::from(e).reason)
                } else {
                    FrameError::from(e)
                }
            })?;
        if let Some(upstream) = self.state.upstream() {
            upstream.publish_event(
                &self.guard.id().to_string(),
                &prepared.topic,
                prepared.event.as_ref(),
                &prepared.payload,
            );
        }
        let (name, id) = publish::route(&self.state, prepared, "ws").await?;
        let reply = format!(r#"{{"type":"published","topic":"{name}","id":"{id}"}}"#);
        Ok(self.send_text(reply).await)
    }

    /// The credentials expired: the refresh hook, when configured, may extend them (and
    /// name the user again); otherwise, or when it refuses, the connection closes with 1008
    /// and the reason.
    async fn on_expiry(&mut self) -> Flow {
        let mut reason = "token expired".to_string();
        if self.state.hooks().has(crate::hooks::Hook::Refresh)
            && let Some(peer) = self.socket.get_ref().get_ref().peer_ip()
        {
            match self.state.hooks().refresh(&self.caller(peer)).await {
                Ok(Some(grant)) => {
                    grant.apply(&mut self.who);
                    self.guard
                        .set_identity(self.who.sub.as_deref(), self.who.info.clone());
                    self.expiry = expiry_of(&self.who);
                    return Flow::Continue;
                }
                Ok(None) => {}
                Err(e) => reason = crate::hooks::close_reason(&FrameError::from(e).reason),
            }
        }
        self.close(close_code::POLICY, &reason).await;
        Flow::Close(CloseReason::Expired)
    }

    /// The connection as the hooks are told about it.
    fn caller(&self, peer: std::net::IpAddr) -> Caller<'_> {
        Caller {
            transport: "ws",
            client: Some(self.guard.id()),
            remote: peer,
            who: &self.who,
            headers: &self.forwarded,
        }
    }

    /// Counts one publish against this connection's own rate (the publisher's rate is the
    /// pipeline's).
    fn admit_connection_publish(&mut self) -> Result<(), FrameError> {
        let limits = &self.state.config().limits;
        if let Some(rate) = Rate::new(
            limits.publish_rate_per_connection,
            limits.publish_burst_per_connection,
        ) {
            let bucket = self
                .publish_bucket
                .get_or_insert_with(|| Box::new(rate.bucket()));
            bucket.take(rate, 1.0).map_err(|wait| {
                metrics::client_error("ws", "publish_rate");
                FrameError::new(
                    "rate_limited",
                    format!(
                        "over the publish rate of {}/s per connection; retry in {} ms",
                        limits.publish_rate_per_connection,
                        wait.as_millis().max(1)
                    ),
                )
            })?;
        }
        Ok(())
    }

    async fn on_event(&mut self, event: herald_core::FeedEvent) -> Flow {
        match super::deliver(event, "ws", self.state.config()) {
            super::Delivery::Message(message) if self.format == Format::Msgpack => {
                let frame = message.ws_msgpack_frame();
                self.metrics
                    .delivered(frame.len(), message.published_at().elapsed());
                self.send(WsMessage::Binary(frame.clone())).await
            }
            super::Delivery::Message(message) => {
                let frame = message.ws_frame();
                if let Some(packed) = self.deflated_message(&message) {
                    // Counted as it crosses the wire: compressed.
                    let bytes = message.ws_deflate_payload().map_or(0, |p| p.len());
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
            super::Delivery::Lost { topic, reason } => {
                let body = lost_json(&topic, reason);
                let frame = format!(r#"{{"type":"lost",{}"#, &body[1..]);
                Box::pin(self.send_text(frame)).await
            }
            super::Delivery::Nothing => Flow::Continue,
            // The fan-out wrote part of a frame and stopped: the rest goes out first.
            super::Delivery::Rest(rest) => {
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
            super::Delivery::Disconnect { .. } => {
                Box::pin(self.close(close_code::POLICY, "slow consumer")).await;
                Flow::Close(CloseReason::Slow)
            }
        }
    }

    async fn error_frame(&mut self, error: FrameError) -> Flow {
        metrics::client_error("ws", error.code);
        let frame =
            serde_json::json!({ "type": "error", "code": error.code, "reason": error.reason });
        self.send_text(frame.to_string()).await
    }

    /// Sends a control frame built as JSON text: as it is, or as a MessagePack binary frame
    /// on a `herald.msgpack` connection.
    async fn send_text(&mut self, text: String) -> Flow {
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
    async fn send(&mut self, message: WsMessage) -> Flow {
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

    /// Sends a close frame (best effort, bounded in time), then closes the TCP connection
    /// with a lingering close.
    async fn close(&mut self, code: u16, reason: &str) {
        let frame = CloseFrame {
            code: code.into(),
            reason: Utf8Bytes::from(reason),
        };
        let limit = Duration::from_secs(1).min(self.state.config().limits.write_timeout);
        self.rest_first();
        let _ = tokio::time::timeout(limit, self.socket.send(WsMessage::Close(Some(frame)))).await;
        self.linger().await;
    }

    /// Queues, ahead of tungstenite's next bytes, the rest of a frame the topic's fan-out
    /// wrote in part and the feed holds ([`herald_core::Feed::hold`]): the link parks itself
    /// before tungstenite writes, but a feed that just unlinked (an unsubscribe, a second
    /// topic) took that rest over, and a reply written before it would cut the frame.
    fn rest_first(&mut self) {
        if let Some(rest) = self.feed.hold() {
            self.socket.get_mut().get_mut().write_rest(rest);
        }
    }

    /// Half-closes and drains what the client still sends (its close reply, the rest of a
    /// frame too big to read), up to [`LINGER`] and [`LINGER_BYTES`]. Closing a socket with
    /// unread input makes the kernel reset it, and a reset can destroy the close frame before
    /// the client reads it (it would see 1006 instead of the code sent).
    async fn linger(&mut self) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let stream = self.socket.get_mut().get_mut();
        let _ = tokio::time::timeout(LINGER, async {
            let _ = stream.shutdown().await;
            let mut scratch = vec![0u8; 16 * 1024];
            let mut drained = 0;
            while drained < LINGER_BYTES {
                match stream.read(&mut scratch).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => drained += n,
                }
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::is_websocket_key;

    #[test]
    fn websocket_keys_are_base64_of_16_bytes() {
        assert!(is_websocket_key("dGhlIHNhbXBsZSBub25jZQ=="));
        assert!(is_websocket_key("AAAAAAAAAAAAAAAAAAAAAA=="));
        assert!(
            !is_websocket_key("dGhlIHNhbXBsZSBub25jZR=="),
            "extra bits set"
        );
        assert!(!is_websocket_key("!!!!!!!!!!!!!!!!!!!!!!=="));
        assert!(!is_websocket_key("dGhlIHNhbXBsZSBub25jZQ=!"));
        assert!(!is_websocket_key("123456789012345678901234"));
        assert!(!is_websocket_key("dGhlIHNhbXBsZSBub25jZQ="));
    }
}

/// The connection's life driven over an in-memory pipe: no socket, no server.
#[cfg(test)]
mod lifecycle_tests {
    use std::time::SystemTime;

    use herald_core::Payload;
    use serde_json::{Value, json};
    use tokio::io::DuplexStream;
    use tokio_tungstenite::WebSocketStream;
    use tokio_util::sync::CancellationToken;

    use super::*;

    struct Client {
        ws: WebSocketStream<DuplexStream>,
        state: AppState,
        shutdown: CancellationToken,
        task: tokio::task::JoinHandle<()>,
    }

    async fn connect(config: crate::Config, who: crate::auth::Identity) -> Client {
        let (state, shutdown) = AppState::for_test(config);
        let (server, client) = tokio::io::duplex(64 * 1024);
        let ws = &state.config().ws;
        let server = inbound::Inbound::new(server, Rate::new(ws.inbound_rate, ws.inbound_burst));
        let server = socket::WebSocket::new(server, Role::Server, None);
        let client = WebSocketStream::from_raw_socket(client, Role::Client, None).await;
        let task =
            tokio::spawn(Connection::new(state.clone(), server, who, Opened::default()).run());
        Client {
            ws: client,
            state,
            shutdown,
            task,
        }
    }

    impl Client {
        async fn send(&mut self, frame: Value) {
            self.ws
                .send(WsMessage::Text(frame.to_string().into()))
                .await
                .unwrap();
        }

        /// The next text frame, as JSON (pings skipped).
        async fn next(&mut self) -> Value {
            loop {
                let frame = tokio::time::timeout(Duration::from_secs(5), self.ws.next())
                    .await
                    .expect("a frame in time")
                    .expect("the connection is open")
                    .unwrap();
                match frame {
                    WsMessage::Text(text) => return serde_json::from_str(&text).unwrap(),
                    WsMessage::Ping(_) | WsMessage::Pong(_) => {}
                    other => panic!("expected a text frame, got {other:?}"),
                }
            }
        }

        /// The close frame the server sends, and the connection's task ending after it.
        async fn closed(mut self) -> (u16, String) {
            let close = loop {
                let frame = tokio::time::timeout(Duration::from_secs(5), self.ws.next())
                    .await
                    .expect("a close in time");
                match frame {
                    Some(Ok(WsMessage::Close(Some(frame)))) => {
                        break (u16::from(frame.code), frame.reason.to_string());
                    }
                    Some(Ok(_)) => {}
                    other => panic!("expected a close frame, got {other:?}"),
                }
            };
            drop(self.ws);
            tokio::time::timeout(Duration::from_secs(5), self.task)
                .await
                .expect("the connection ends")
                .unwrap();
            close
        }
    }

    #[tokio::test]
    async fn a_subscriber_gets_its_messages_and_its_close_back() {
        let mut client = connect(crate::Config::default(), Default::default()).await;
        client
            .send(json!({"type": "subscribe", "topics": ["news"]}))
            .await;
        let subscribed = client.next().await;
        assert_eq!(subscribed["type"], "subscribed");
        assert_eq!(subscribed["topics"], json!(["news"]));
        let topic = TopicName::new("news").unwrap();
        let published = client
            .state
            .registry()
            .publish(&topic, None, Payload::from_value(&json!({"n": 1})))
            .unwrap();
        let message = client.next().await;
        assert_eq!(message["type"], "message");
        assert_eq!(message["data"], json!({"n": 1}));
        assert_eq!(message["id"], published.cursor().to_string());

        client
            .ws
            .send(WsMessage::Close(Some(CloseFrame {
                code: 4321.into(),
                reason: "bye".into(),
            })))
            .await
            .unwrap();
        assert_eq!(client.closed().await.0, 4321, "the client's own code back");
    }

    #[tokio::test]
    async fn commands_are_answered_and_bad_frames_get_an_error() {
        let mut client = connect(crate::Config::default(), Default::default()).await;
        client.send(json!({"type": "ping"})).await;
        assert_eq!(client.next().await["type"], "pong");
        client
            .ws
            .send(WsMessage::Text("not json".into()))
            .await
            .unwrap();
        let error = client.next().await;
        assert_eq!(
            (error["type"].clone(), error["code"].clone()),
            (json!("error"), json!("bad_json"))
        );
        client
            .ws
            .send(WsMessage::Binary(vec![1, 2, 3].into()))
            .await
            .unwrap();
        assert_eq!(client.next().await["code"], "unsupported_frame");
        client
            .send(json!({"type": "subscribe", "topics": ["no spaces"]}))
            .await;
        assert_eq!(client.next().await["type"], "error");
        // Still open and answering.
        client.send(json!({"type": "ping"})).await;
        assert_eq!(client.next().await["type"], "pong");
    }

    #[tokio::test]
    async fn a_drain_closes_with_1012() {
        let client = connect(crate::Config::default(), Default::default()).await;
        client.shutdown.cancel();
        assert_eq!(client.closed().await.0, close_code::RESTART);
    }

    #[tokio::test]
    async fn an_expired_token_closes_with_1008() {
        let mut who = crate::auth::Identity::default();
        who.expires = Some(SystemTime::now() + Duration::from_millis(200));
        let client = connect(crate::Config::default(), who).await;
        assert_eq!(
            client.closed().await,
            (close_code::POLICY, "token expired".to_string())
        );
    }

    #[tokio::test]
    async fn a_silent_client_is_closed_after_the_idle_timeout() {
        let mut config = crate::Config::default();
        config.ws.ping_interval = Duration::from_millis(100);
        config.ws.idle_timeout = Duration::from_millis(300);
        let client = connect(config, Default::default()).await;
        // The client reads nothing (so answers no ping) and sends nothing.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            client.closed().await,
            (close_code::GOING_AWAY, "idle timeout".to_string())
        );
    }
}
