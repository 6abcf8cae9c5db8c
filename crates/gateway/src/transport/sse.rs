//! `GET /v1/sse`: Server-Sent Events.
//!
//! The stream starts with `retry:` and an `id:` naming every subscribed topic's starting
//! position (an event with no data, which a browser's `EventSource` records as its last event
//! id without dispatching anything), so that even a client that received nothing resumes
//! exactly. A single-topic stream writes each message's shared frame as is; a multi-topic
//! stream writes its own `id:` line (every topic's position) followed by the shared frame
//! body, a zero-copy slice.
//!
//! HTTP/1.1 streams are served straight on the socket by [`serve_raw`] (the accept loop
//! recognises the request): the response is delimited by the connection's end, so each frame
//! is one `write` of the shared bytes, with no chunk framing and no hyper buffers held for the
//! stream's life. The axum [`handler`] serves the same stream through hyper otherwise.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::future::Either;
use herald_core::{DirectSub, DirectWriter, Feed, FeedEvent, Message, ResumeList};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::access::authorize;
use super::{Delivery, SubscribeQuery, deliver, jitter, lost_json, open_feed};
use crate::app::AppState;
use crate::cluster::control::Action;
use crate::error::ApiError;
use crate::server::stream::{ClientStream, PeerInput, plain_peer_input};
use crate::shutdown::DrainWait;
use crate::telemetry::metrics::{self, CloseReason, Transport, TransportMetrics};

const PING: Bytes = Bytes::from_static(b": ping\n\n");

/// The route.
pub const PATH: &str = "/v1/sse";

/// Bytes an SSE client may send after its request before it is closed (a client sends
/// nothing on an event stream; a few stray bytes, such as a pipelined request, are dropped).
const MAX_UNEXPECTED_INPUT: usize = 64 * 1024;

/// The response head of a directly served stream.
const RESPONSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nx-accel-buffering: no\r\nconnection: close\r\n\r\n";

/// An SSE answer carrying `body`: the event-stream type, no caching, no proxy buffering.
pub fn event_stream(body: Body) -> Response {
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// Opens an SSE stream through hyper (the axum route: HTTP/2, and HTTP/1.1 requests the
/// accept loop does not take, such as absolute-form URIs). The stream runs the same
/// lifecycle as a direct one ([`serve`]) on a task of its own, writing into a one-chunk
/// channel that the response body reads: a client that does not read leaves the channel
/// full, the write times out, and it is dropped as a slow consumer exactly as on the direct
/// path. `HEAD` checks the request like `GET` and answers with the stream's headers only,
/// subscribing to nothing.
pub async fn handler(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let headers = request.headers();
    let query = request.uri().query();
    let peer = super::peer_ip(&request);
    if request.method() == axum::http::Method::HEAD {
        check(&state, headers, query, None, peer).await?;
        return Ok(([(header::CONTENT_TYPE, "text/event-stream")], ()).into_response());
    }
    let mut stream = open(&state, headers, query, peer).await?;
    // The router's CORS layer adds the CORS headers (`api::cors`).
    stream.cors = None;
    let (sink, body) = BodySink::new();
    let write_timeout = state.config().limits.write_timeout;
    crate::shutdown::spawn_connection(state.tracker(), "sse", serve(sink, stream, write_timeout));
    Ok(event_stream(Body::from_stream(body)))
}

/// Where a stream's chunks are written: the client's socket (the direct path) or a hyper
/// response body ([`BodySink`]).
pub trait Sink {
    /// Writes `chunk` whole; waits while the client does not take it.
    fn write(&mut self, chunk: Bytes) -> impl Future<Output = io::Result<()>> + Send;
    /// Waits until the client sends something or goes away. Cancel-safe.
    fn peer_input(&mut self) -> impl Future<Output = PeerInput> + Send;
    /// The stream ended because the client is too slow: make it see an error, not an end.
    fn abort(&mut self) {}
}

impl Sink for ClientStream {
    async fn write(&mut self, chunk: Bytes) -> io::Result<()> {
        // The flush matters for TLS only: rustls may hold encrypted records the socket had no
        // room for.
        self.write_all(&chunk).await?;
        self.flush().await
    }

    fn peer_input(&mut self) -> impl Future<Output = PeerInput> + Send {
        ClientStream::peer_input(self)
    }
}

/// The writing end of a hyper response body: a channel of one chunk.
pub struct BodySink {
    tx: tokio::sync::mpsc::Sender<Bytes>,
    aborted: Arc<AtomicBool>,
}

/// The body end of a [`BodySink`].
pub struct SinkBody {
    rx: tokio::sync::mpsc::Receiver<Bytes>,
    aborted: Arc<AtomicBool>,
}

impl BodySink {
    fn new() -> (Self, SinkBody) {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let aborted = Arc::new(AtomicBool::new(false));
        (
            Self {
                tx,
                aborted: aborted.clone(),
            },
            SinkBody { rx, aborted },
        )
    }
}

impl Sink for BodySink {
    async fn write(&mut self, chunk: Bytes) -> io::Result<()> {
        self.tx
            .send(chunk)
            .await
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))
    }

    async fn peer_input(&mut self) -> PeerInput {
        // hyper drops the body when the client goes away (a closed connection, an HTTP/2
        // reset); what the client sends is hyper's to read.
        self.tx.closed().await;
        PeerInput::Gone
    }

    fn abort(&mut self) {
        self.aborted.store(true, Ordering::Release);
    }
}

impl futures_util::Stream for SinkBody {
    type Item = io::Result<Bytes>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        match self.rx.poll_recv(cx) {
            std::task::Poll::Ready(None) if self.aborted.swap(false, Ordering::AcqRel) => {
                // An error rather than the end: hyper resets the stream (HTTP/2) or closes the
                // connection without the final chunk (HTTP/1.1), so the client knows.
                std::task::Poll::Ready(Some(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "slow consumer",
                ))))
            }
            other => other.map(|chunk| chunk.map(Ok)),
        }
    }
}

/// A plain TCP socket shared by a stream's task and its topic's fan-out, which writes to it
/// while the stream is idle ([`herald_core::direct`]); the task writes only after
/// [`Feed::hold`], so the two never write at once. The socket lives in the link itself
/// ([`DirectSub`]): the fan-out reaches it with no pointer of its own to follow.
struct SharedTcp(Arc<DirectSub<FrameWriter>>);

impl Sink for SharedTcp {
    async fn write(&mut self, chunk: Bytes) -> io::Result<()> {
        let socket = &self.0.writer().socket;
        let mut buf = &chunk[..];
        while !buf.is_empty() {
            std::future::poll_fn(|cx| socket.poll_write_ready(cx)).await?;
            match socket.try_write(buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn peer_input(&mut self) -> impl Future<Output = PeerInput> + Send {
        plain_peer_input(&self.0.writer().socket)
    }
}

/// What the topic's fan-out writes to a directly served stream: the message's shared frame.
struct FrameWriter {
    socket: TcpStream,
    json: bool,
    metrics: &'static TransportMetrics,
}

impl DirectWriter for FrameWriter {
    fn frame<'m>(&self, message: &'m Message) -> &'m Bytes {
        if self.json {
            message.sse_json_frame()
        } else {
            message.sse_frame()
        }
    }

    fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        crate::server::stream::direct_send(&self.socket, buf)
    }

    fn counter(&self) -> &'static dyn herald_core::DeliveryCounter {
        self.metrics
    }
}

/// Serves `sse` directly on `socket`: the response head, then [`serve`]. A single-topic
/// stream on plain TCP is written to by its topic's publisher while idle
/// ([`herald_core::direct`]): a message does not wake this stream's task.
pub fn serve_raw(
    socket: ClientStream,
    mut sse: SseStream,
    write_timeout: Duration,
) -> impl Future<Output = ()> + Send {
    let head = match sse.cors.take() {
        None => Bytes::from_static(RESPONSE_HEAD),
        Some(origin) => {
            let mut head = RESPONSE_HEAD[..RESPONSE_HEAD.len() - 2].to_vec();
            head.extend_from_slice(super::cors::lines(&sse.state, &origin).as_bytes());
            head.extend_from_slice(b"\r\n");
            Bytes::from(head)
        }
    };
    // The head goes out with the opening chunk, in one write under the same timeout. Not an
    // `async fn` around `serve`: its state would hold the socket and the stream a second time
    // beside the future it awaits (measured: +270 bytes per idle stream).
    let opening = sse.queued.take().unwrap_or_default();
    let mut first = Vec::with_capacity(head.len() + opening.len());
    first.extend_from_slice(&head);
    first.extend_from_slice(&opening);
    sse.queued = Some(Bytes::from(first));
    match socket {
        ClientStream::Plain(tcp) if !sse.multi && sse.state.config().topics.direct_delivery => {
            let link = Arc::new(DirectSub::new(FrameWriter {
                socket: tcp,
                json: sse.json,
                metrics: sse.metrics,
            }));
            sse.feed.link(link.clone());
            Either::Left(serve(SharedTcp(link), sse, write_timeout))
        }
        socket => Either::Right(serve(socket, sse, write_timeout)),
    }
}

/// An SSE stream's life on any path: each chunk written as one write, ending when the stream
/// ends (drain, token expiry, lifetime, slow-consumer policy), the client goes away or keeps
/// sending, or a write waits longer than `write_timeout` (a slow consumer).
pub async fn serve<S: Sink>(mut sink: S, mut sse: SseStream, write_timeout: Duration) {
    let mut unexpected = 0usize;
    loop {
        let chunk = tokio::select! {
            chunk = sse.next_chunk() => chunk,
            // A client that closes its side makes the socket readable: notice at once instead
            // of at the next heartbeat. What it sends is read and dropped, up to a bound: an
            // SSE client has nothing to send, and one that keeps sending is closed.
            input = sink.peer_input() => match input {
                PeerInput::Gone => break,
                PeerInput::Sent(n) => {
                    unexpected += n;
                    if unexpected > MAX_UNEXPECTED_INPUT {
                        metrics::client_error("sse", "unexpected_input");
                        sse.guard.closing(CloseReason::Protocol);
                        break;
                    }
                    continue;
                }
            },
        };
        let Some(mut chunk) = chunk else { break };
        // The topic's fan-out stops writing before this task does; what it left half-written
        // goes first.
        if let Some(rest) = sse.feed.hold() {
            let mut whole = Vec::with_capacity(rest.len() + chunk.len());
            whole.extend_from_slice(&rest);
            whole.extend_from_slice(&chunk);
            chunk = Bytes::from(whole);
        }
        match tokio::time::timeout(write_timeout, sink.write(chunk)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => break,
            Err(_) => {
                metrics::slow_consumer("disconnected");
                sse.guard.closing(CloseReason::Slow);
                sink.abort();
                break;
            }
        }
    }
}

/// Validates an SSE request from `peer` (asking the application's hooks when configured) and
/// subscribes: the stream to serve, or why not.
pub async fn open(
    state: &AppState,
    headers: &HeaderMap,
    query: Option<&str>,
    peer: std::net::IpAddr,
) -> Result<SseStream, ApiError> {
    let result = try_open(state, headers, query, peer).await;
    if let Err(e) = &result {
        metrics::client_error("sse", e.code());
    }
    result
}

/// What an SSE request asks for, checked: topics, resume list, origin and identity.
struct Checked {
    query: SubscribeQuery,
    resume: ResumeList,
    cors: Option<String>,
    who: crate::auth::Identity,
    /// The request's headers the hooks forward.
    forwarded: crate::hooks::Forwarded,
    /// The heartbeat interval: `sse.heartbeat`, or the client's `heartbeat`.
    heartbeat: Duration,
}

async fn check(
    state: &AppState,
    headers: &HeaderMap,
    query: Option<&str>,
    client: Option<u64>,
    peer: std::net::IpAddr,
) -> Result<Checked, ApiError> {
    if state.shutdown().is_cancelled() {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the gateway is shutting down; reconnect to another node",
        ));
    }
    let config = state.config();
    let hooked = state.hooks().has(crate::hooks::Hook::Connect);
    let mut query = SubscribeQuery::parse(query, config.limits.max_subscriptions, hooked)?;
    let heartbeat = match query.heartbeat {
        Some(asked) => {
            super::asked_interval(asked, config.sse.min_heartbeat, config.sse.max_heartbeat)?
        }
        None => config.sse.heartbeat,
    };
    let last_event_id = match headers.get("last-event-id") {
        Some(v) => Some(
            v.to_str()
                .map_err(|_| ApiError::bad_request("bad_cursor", "Last-Event-ID is not ASCII"))?
                .to_owned(),
        ),
        None => query.last_event_id.clone(),
    };
    let resume: ResumeList = match &last_event_id {
        Some(id) => id.parse()?,
        None => ResumeList::new(),
    };
    let admitted = authorize(state, headers, &mut query, "sse", client, peer).await?;
    Ok(Checked {
        query,
        resume,
        cors: admitted.origin,
        who: admitted.who,
        forwarded: admitted.forwarded,
        heartbeat,
    })
}

async fn try_open(
    state: &AppState,
    headers: &HeaderMap,
    query: Option<&str>,
    peer: std::net::IpAddr,
) -> Result<SseStream, ApiError> {
    let config = state.config();
    let id = state.cluster().next_id();
    let Checked {
        query,
        resume,
        cors,
        who,
        forwarded,
        heartbeat,
    } = check(state, headers, query, Some(id), peer).await?;
    let client = crate::limits::publisher_key(who.sub.as_deref(), peer);
    let (feed, charges) = open_feed(state, &query.topics, &resume, query.last, &client)?;
    let metrics = metrics::transport(Transport::Sse);
    let mut stream = SseStream {
        multi: feed.len() > 1 || feed.has_patterns(),
        json: query.format == super::Format::Json,
        feed,
        metrics,
        guard: state.open_connection_as(id, Transport::Sse, &who),
        state: state.clone(),
        sleep: Box::pin(tokio::time::sleep_until(super::next_keep_alive(
            Instant::now(),
            heartbeat,
        ))),
        // At most `sse.max_heartbeat`, checked above; 4 bytes rather than a `Duration`'s 16.
        heartbeat_ms: u32::try_from(heartbeat.as_millis()).unwrap_or(u32::MAX),
        last_write: Instant::now(),
        shutdown: state.drain().wait(),
        id: String::new(),
        queued: None,
        done: false,
        lifetime: lifetime_deadline(config.sse.max_lifetime),
        expiry: who
            .time_left()
            .map(|left| Box::pin(tokio::time::sleep(left))),
        cors: cors.map(String::into_boxed_str),
        _charges: charges.into_boxed_slice(),
        refresh: None,
    };
    stream
        .guard
        .subscribed_to(stream.feed.positions().map(|(t, _)| t));
    if who.expires.is_some() && state.hooks().has(crate::hooks::Hook::Refresh) {
        stream.refresh = Some(Box::new(Refresh {
            forwarded,
            who,
            peer,
        }));
    }
    let first = stream.opening(config.sse.retry);
    metrics.sent(first.len());
    stream.queued = Some(first);
    Ok(stream)
}

/// One subscriber's stream of SSE chunks.
pub struct SseStream {
    feed: Feed,
    multi: bool,
    /// `format=json`: messages in their JSON form.
    json: bool,
    metrics: &'static TransportMetrics,
    guard: crate::cluster::Connection,
    /// For server-side subscriptions (the registry, the topic limit).
    state: AppState,
    /// The heartbeat interval, in milliseconds (`sse.heartbeat`, or the client's `heartbeat`).
    heartbeat_ms: u32,
    /// Fires `heartbeat` after the last write. Not re-armed on every message (that takes
    /// the timer wheel's lock on every delivery): when it fires early it is moved to
    /// `last_write + heartbeat`.
    sleep: Pin<Box<Sleep>>,
    last_write: Instant,
    /// The drain, waited for with one atomic load per wake-up (see [`crate::shutdown::Drain`]).
    shutdown: DrainWait,
    /// Scratch space for the multi-topic `id:` line.
    id: String,
    /// A chunk to send before anything else (the body after a multi-topic `id:` line).
    queued: Option<Bytes>,
    done: bool,
    /// When the client's token expires, if it presented one (boxed only then).
    expiry: Option<Pin<Box<Sleep>>>,
    /// The browser origin allowed to read the stream (CORS), when the request had one.
    cors: Option<Box<str>>,
    /// When the stream ends by itself (`sse.max_lifetime`), if ever (boxed only when set).
    lifetime: Option<Pin<Box<Sleep>>>,
    /// The topics this stream's subscription created, charged to its client.
    _charges: Box<[crate::limits::QuotaCharge]>,
    /// What the refresh hook is told, when it is configured and the stream's credentials
    /// expire (boxed, only then).
    refresh: Option<Box<Refresh>>,
}

/// An SSE client as the refresh hook is told about it.
struct Refresh {
    who: crate::auth::Identity,
    peer: std::net::IpAddr,
    forwarded: crate::hooks::Forwarded,
}

/// `event: herald.disconnect` for a connection the server ended on a command.
fn disconnect_event(disconnect: &crate::cluster::control::Disconnect) -> Bytes {
    let data = serde_json::to_string(disconnect).expect("a disconnect serialises");
    Bytes::from(format!("event: herald.disconnect\ndata: {data}\n\n"))
}

/// The end of a stream's life: `max` ±10 % at random, or never for zero.
fn lifetime_deadline(max: Duration) -> Option<Pin<Box<Sleep>>> {
    if max.is_zero() {
        return None;
    }
    let spread = max / 5;
    let life = max - max / 10 + jitter(spread);
    Some(Box::pin(tokio::time::sleep(life)))
}

/// Waits for the stream's end of life; never, when it has none.
async fn end_of_life(lifetime: &mut Option<Pin<Box<Sleep>>>) {
    match lifetime {
        Some(sleep) => sleep.as_mut().await,
        None => std::future::pending().await,
    }
}

impl SseStream {
    fn opening(&mut self, retry: Duration) -> Bytes {
        self.id_line();
        Bytes::from(format!("retry: {}\n{}\n", retry.as_millis(), self.id))
    }

    /// Subscribes to `topics` on the application's command (from their head, or after
    /// `after`): an event naming them, with the `id:` of every position (so that a resume
    /// includes them), or `None` when there is nothing new or it was refused (counted).
    fn subscribed_by_server(
        &mut self,
        topics: &[String],
        after: Option<herald_core::Cursor>,
    ) -> Option<Bytes> {
        match super::subscribe_from_server(&self.state, &mut self.feed, topics, after) {
            Ok(started) if started.is_empty() => None,
            Ok(started) => {
                self.multi = self.feed.len() > 1 || self.feed.has_patterns();
                self.guard
                    .subscribed_to(self.feed.positions().map(|(t, _)| t));
                let names: Vec<String> = started.iter().map(|(t, _)| t.to_string()).collect();
                Some(self.topics_event("herald.subscribed", &names))
            }
            Err(e) => {
                metrics::client_error("sse", e.code());
                None
            }
        }
    }

    /// The credentials expired: the refresh hook, when configured, may extend them;
    /// otherwise, or when it refuses, the stream ends with `herald.disconnect` and the
    /// reason. `None`: extended.
    async fn on_expiry(&mut self) -> Option<Bytes> {
        let mut reason = "token expired".to_string();
        if let Some(refresh) = &mut self.refresh {
            let caller = crate::hooks::Caller {
                transport: "sse",
                client: Some(self.guard.id()),
                remote: refresh.peer,
                who: &refresh.who,
                headers: &refresh.forwarded,
            };
            match self.state.hooks().refresh(&caller).await {
                Ok(Some(grant)) => {
                    grant.apply(&mut refresh.who);
                    self.guard
                        .set_identity(refresh.who.sub.as_deref(), refresh.who.info.clone());
                    self.expiry = refresh
                        .who
                        .time_left()
                        .map(|left| Box::pin(tokio::time::sleep(left)));
                    return None;
                }
                Ok(None) => {}
                Err(e) => {
                    let text = e.to_string();
                    reason = text
                        .split_once(": ")
                        .map_or(text.clone(), |(_, r)| r.to_string());
                }
            }
        }
        self.done = true;
        self.guard.closing(CloseReason::Expired);
        let data = serde_json::json!({ "reason": reason });
        Some(Bytes::from(format!(
            "event: herald.disconnect\ndata: {data}\n\n"
        )))
    }

    /// `event: <event>` with `data: {"topics": [...]}` and the `id:` of every position.
    fn topics_event(&mut self, event: &str, topics: &[String]) -> Bytes {
        self.id_line();
        let data = serde_json::json!({ "topics": topics });
        self.last_write = Instant::now();
        Bytes::from(format!("{}event: {event}\ndata: {data}\n\n", self.id))
    }

    /// `id: topic=cursor,...\n` for every subscribed topic, into `self.id`.
    fn id_line(&mut self) {
        let mut list = std::mem::take(&mut self.id);
        ResumeList::write_entries(&mut list, self.feed.resume_positions());
        self.id = format!("id: {list}\n");
    }

    /// The next chunk to write, or `None` when the stream is over. Cancel-safe.
    pub async fn next_chunk(&mut self) -> Option<Bytes> {
        if let Some(chunk) = self.queued.take() {
            return Some(chunk);
        }
        if self.done {
            return None;
        }
        loop {
            tokio::select! {
                biased;
                _ = &mut self.shutdown => {
                    self.done = true;
                    self.guard.closing(CloseReason::Shutdown);
                    let retry = jitter(self.state.config().shutdown.reconnect_jitter).as_millis();
                    let frame = format!(
                        "retry: {retry}\nevent: herald.shutdown\ndata: {{\"reason\":\"shutdown\",\"retry_ms\":{retry}}}\n\n"
                    );
                    return Some(Bytes::from(frame));
                }
                action = self.guard.next_action() => match action {
                    Action::Disconnect(disconnect) => {
                        self.done = true;
                        return Some(disconnect_event(&disconnect));
                    }
                    Action::Subscribe(topics) => {
                        if let Some(chunk) = self.subscribed_by_server(&topics, None) {
                            return Some(chunk);
                        }
                    }
                    Action::Receive { topic, after } => {
                        let after = after.parse().ok();
                        if let Some(chunk) = self.subscribed_by_server(&[topic], after) {
                            return Some(chunk);
                        }
                    }
                    Action::Presence(event) => {
                        // Not a message: no `id:` line, the client's position stays.
                        let frame = format!(
                            "event: herald.{}\ndata: {}\n\n",
                            event.kind.as_str(),
                            event.member
                        );
                        self.metrics.sent(frame.len());
                        self.last_write = Instant::now();
                        return Some(Bytes::from(frame));
                    }
                    Action::Unsubscribe(topics) => {
                        let removed = super::unsubscribe_from_server(&mut self.feed, &topics);
                        if !removed.is_empty() {
                            self.guard
                                .subscribed_to(self.feed.positions().map(|(t, _)| t));
                            return Some(self.topics_event("herald.unsubscribed", &removed));
                        }
                    }
                },
                _ = end_of_life(&mut self.expiry) => {
                    if let Some(chunk) = Box::pin(self.on_expiry()).await {
                        return Some(chunk);
                    }
                }
                _ = end_of_life(&mut self.lifetime) => {
                    self.done = true;
                    self.guard.closing(CloseReason::Done);
                    // The lifetime itself is jittered; the client comes back after `sse.retry`.
                    let retry = self.state.config().sse.retry;
                    return Some(Bytes::from(format!("retry: {}\n\n", retry.as_millis())));
                }
                event = self.feed.next() => {
                    if let Some(chunk) = self.on_event(event) {
                        self.last_write = Instant::now();
                        return Some(chunk);
                    }
                }
                _ = self.sleep.as_mut() => {
                    // The topic's fan-out writes too, while the stream is direct.
                    let direct = self.feed.last_direct_write().map(Instant::from_std);
                    let last = direct.map_or(self.last_write, |d| d.max(self.last_write));
                    let heartbeat = Duration::from_millis(self.heartbeat_ms.into());
                    let due = super::next_keep_alive(last, heartbeat);
                    if due > Instant::now() {
                        self.sleep.as_mut().reset(due);
                        continue;
                    }
                    self.last_write = Instant::now();
                    let next = super::next_keep_alive(self.last_write, heartbeat);
                    self.sleep.as_mut().reset(next);
                    self.metrics.sent(PING.len());
                    // While the topic's fan-out writes this stream, its link writes the
                    // heartbeat under the fan-out's lock and the stream stays direct (as a
                    // WebSocket's ping): no leaving direct delivery and coming back for it.
                    if self.feed.is_direct()
                        && let Some(link) = self.feed.direct_link()
                        && link.write_while_direct(&PING)
                    {
                        continue;
                    }
                    return Some(PING);
                }
            }
        }
    }

    fn on_event(&mut self, event: FeedEvent) -> Option<Bytes> {
        match deliver(event, "sse", self.state.config()) {
            Delivery::Message(message) => {
                let since = message.published_at().elapsed();
                let frame = if self.multi {
                    self.id_line();
                    let body = if self.json {
                        message.sse_json_body()
                    } else {
                        message.sse_body()
                    };
                    self.metrics.delivered(self.id.len() + body.len(), since);
                    self.queued = Some(body);
                    Bytes::from(self.id.clone())
                } else {
                    let frame = if self.json {
                        message.sse_json_frame()
                    } else {
                        message.sse_frame()
                    }
                    .clone();
                    self.metrics.delivered(frame.len(), since);
                    frame
                };
                Some(frame)
            }
            Delivery::Lost { topic, reason } => {
                self.id_line();
                let frame = format!(
                    "{}event: herald.lost\ndata: {}\n\n",
                    self.id,
                    lost_json(&topic, reason)
                );
                self.metrics.sent(frame.len());
                Some(Bytes::from(frame))
            }
            Delivery::Nothing => None,
            Delivery::Rest(rest) => Some(rest),
            Delivery::Disconnect { topic } => {
                self.done = true;
                self.guard.closing(CloseReason::Slow);
                Some(Bytes::from(format!(
                    "event: herald.disconnect\ndata: {{\"reason\":\"slow consumer\",\"topic\":\"{topic}\"}}\n\n"
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The stream's lifecycle driven without a socket: a sink in memory stands for the client.

    use super::*;
    use herald_core::{Payload, TopicName};
    use std::sync::Mutex;
    use tokio_util::sync::CancellationToken;

    /// A client in memory: takes chunks (or, when `stalled`, never does), may send input.
    #[derive(Clone, Default)]
    struct TestClient {
        chunks: Arc<Mutex<Vec<Bytes>>>,
        stalled: bool,
        input: Arc<Mutex<Vec<usize>>>,
        aborted: Arc<AtomicBool>,
    }

    impl Sink for TestClient {
        async fn write(&mut self, chunk: Bytes) -> io::Result<()> {
            if self.stalled {
                std::future::pending::<()>().await;
            }
            self.chunks.lock().unwrap().push(chunk);
            Ok(())
        }

        async fn peer_input(&mut self) -> PeerInput {
            loop {
                let next = self.input.lock().unwrap().pop();
                if let Some(n) = next {
                    return PeerInput::Sent(n);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }

        fn abort(&mut self) {
            self.aborted.store(true, Ordering::Release);
        }
    }

    fn state() -> (AppState, CancellationToken) {
        let mut config = crate::Config::default();
        config.limits.write_timeout = Duration::from_millis(200);
        config.sse.heartbeat = Duration::from_secs(60);
        AppState::for_test(config)
    }

    fn text(client: &TestClient) -> String {
        let chunks = client.chunks.lock().unwrap();
        chunks
            .iter()
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect()
    }

    async fn eventually(mut condition: impl FnMut() -> bool) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while !condition() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("condition met in time");
    }

    /// A stream on topic `t` for a client at 127.0.0.1 that sent no headers.
    async fn open_t(state: &AppState) -> SseStream {
        open(
            state,
            &HeaderMap::new(),
            Some("topic=t"),
            [127, 0, 0, 1].into(),
        )
        .await
        .unwrap()
    }

    #[tokio::test]
    async fn delivers_then_ends_on_the_drain_with_a_retry_hint() {
        let (state, shutdown) = state();
        let sse = open_t(&state).await;
        let client = TestClient::default();
        let served = tokio::spawn(serve(client.clone(), sse, Duration::from_millis(200)));
        let topic = TopicName::new("t").unwrap();
        state
            .registry()
            .publish(
                &topic,
                None,
                Payload::from_value(&serde_json::json!({"n": 1})),
            )
            .unwrap();
        eventually(|| text(&client).contains(r#"data: {"n":1}"#)).await;
        assert!(text(&client).starts_with("retry: "), "{}", text(&client));
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .expect("the stream ends on the drain")
            .unwrap();
        assert!(text(&client).contains("event: herald.shutdown"));
        assert!(!client.aborted.load(Ordering::Acquire));
    }

    #[tokio::test]
    async fn a_client_that_takes_nothing_is_dropped_within_the_write_timeout() {
        let (state, _shutdown) = state();
        let sse = open_t(&state).await;
        let client = TestClient {
            stalled: true,
            ..Default::default()
        };
        let served = serve(client.clone(), sse, Duration::from_millis(200));
        tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .expect("dropped as slow");
        assert!(
            client.aborted.load(Ordering::Acquire),
            "the body is aborted"
        );
        assert_eq!(
            state.registry().get("t").unwrap().subscriber_count(),
            0,
            "its subscription is gone"
        );
    }

    #[tokio::test]
    async fn a_client_that_keeps_sending_is_closed() {
        let (state, _shutdown) = state();
        let sse = open_t(&state).await;
        let client = TestClient::default();
        // A few stray bytes are tolerated...
        client.input.lock().unwrap().push(100);
        let served = tokio::spawn(serve(client.clone(), sse, Duration::from_millis(200)));
        eventually(|| client.input.lock().unwrap().is_empty()).await;
        assert!(!served.is_finished());
        // ...a stream of them is not.
        client
            .input
            .lock()
            .unwrap()
            .extend(std::iter::repeat_n(1024, 70));
        tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .expect("closed")
            .unwrap();
    }
}
