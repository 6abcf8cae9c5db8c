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

use std::convert::Infallible;
use std::pin::Pin;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use herald_core::{Feed, FeedEvent, ResumeList};
use tokio::io::AsyncWriteExt as _;
use tokio::time::{Instant, Sleep};

use super::{SubscribeQuery, authorize, jitter, lost_json, open_feed};
use crate::app::AppState;
use crate::error::ApiError;
use crate::server::tls::ClientStream;
use crate::shutdown::DrainWait;
use crate::telemetry::metrics::{self, CloseReason, ConnectionGuard, Transport, TransportMetrics};

const PING: Bytes = Bytes::from_static(b": ping\n\n");

/// The route.
pub const PATH: &str = "/v1/sse";

/// The response head of a directly served stream.
const RESPONSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nx-accel-buffering: no\r\nconnection: close\r\n\r\n";

/// Opens an SSE stream through hyper (the axum route).
pub async fn handler(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let stream = open(&state, &headers, query.as_deref())?;
    let cors = stream.cors.clone();
    let body = Body::from_stream(futures_util::stream::unfold(stream, |mut s| async move {
        s.next_chunk()
            .await
            .map(|chunk| (Ok::<_, Infallible>(chunk), s))
    }));
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    if let Some(origin) = cors.and_then(|o| HeaderValue::from_str(&o).ok()) {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        h.insert(header::VARY, HeaderValue::from_static("origin"));
    }
    Ok(response)
}

/// Serves `sse` directly on `socket`: the response head, then each chunk as one write. Ends
/// when the stream ends, the client goes away, or a write waits longer than `write_timeout`
/// (a slow consumer).
pub async fn serve_raw(mut socket: ClientStream, mut sse: SseStream, write_timeout: Duration) {
    let head = match sse.cors.take() {
        None => std::borrow::Cow::Borrowed(RESPONSE_HEAD),
        Some(origin) => {
            let mut head = RESPONSE_HEAD[..RESPONSE_HEAD.len() - 2].to_vec();
            head.extend_from_slice(
                format!(
                    "access-control-allow-origin: {origin}\r\nvary: origin\r\n{}\r\n",
                    if sse.credentials {
                        "access-control-allow-credentials: true\r\n"
                    } else {
                        ""
                    }
                )
                .as_bytes(),
            );
            std::borrow::Cow::Owned(head)
        }
    };
    if write_all(&mut socket, &head, write_timeout).await.is_err() {
        return;
    }
    drop(head);
    loop {
        let chunk = tokio::select! {
            chunk = sse.next_chunk() => chunk,
            // A client that closes its side makes the socket readable: notice at once instead
            // of at the next heartbeat. Anything it sends is read and dropped.
            gone = socket.peer_gone() => {
                if gone {
                    break;
                }
                continue;
            }
        };
        let Some(chunk) = chunk else { break };
        match write_all(&mut socket, &chunk, write_timeout).await {
            Ok(()) => {}
            Err(WriteError::TimedOut) => {
                metrics::slow_consumer("disconnected");
                sse.guard.closing(CloseReason::Slow);
                break;
            }
            Err(WriteError::Io) => break,
        }
    }
}

enum WriteError {
    TimedOut,
    Io,
}

async fn write_all(
    socket: &mut ClientStream,
    bytes: &[u8],
    timeout: Duration,
) -> Result<(), WriteError> {
    // The flush matters for TLS only: rustls may hold encrypted records the socket had no
    // room for.
    let write = async {
        socket.write_all(bytes).await?;
        socket.flush().await
    };
    match tokio::time::timeout(timeout, write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(WriteError::Io),
        Err(_) => Err(WriteError::TimedOut),
    }
}

/// Validates an SSE request and subscribes: the stream to serve, or why not.
pub fn open(
    state: &AppState,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<SseStream, ApiError> {
    let result = try_open(state, headers, query);
    if let Err(e) = &result {
        metrics::client_error("sse", e.code());
    }
    result
}

fn try_open(
    state: &AppState,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<SseStream, ApiError> {
    if state.shutdown().is_cancelled() {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the gateway is shutting down; reconnect to another node",
        ));
    }
    let config = state.config();
    let query = SubscribeQuery::parse(query, config.limits.max_subscriptions)?;
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
    let (cors, who) = authorize(state, headers, &query)?;
    let feed = open_feed(state, &query.topics, &resume)?;
    let metrics = metrics::transport(Transport::Sse);
    let mut stream = SseStream {
        multi: feed.len() > 1,
        json: query.format == super::Format::Json,
        credentials: config.auth.cors_credentials,
        feed,
        metrics,
        guard: state.open_connection(Transport::Sse, who.sub.as_deref()),
        heartbeat: config.sse.heartbeat,
        sleep: Box::pin(tokio::time::sleep(config.sse.heartbeat)),
        last_write: Instant::now(),
        shutdown: state.drain().wait(),
        jitter: config.shutdown.reconnect_jitter,
        id: String::new(),
        queued: None,
        done: false,
        lifetime: lifetime_deadline(config.sse.max_lifetime),
        expiry: who
            .time_left()
            .map(|left| Box::pin(tokio::time::sleep(left))),
        cors,
        retry: config.sse.retry,
    };
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
    /// `auth.cors_credentials`: a cross-origin page may send cookies.
    credentials: bool,
    metrics: &'static TransportMetrics,
    guard: ConnectionGuard,
    heartbeat: Duration,
    /// Fires `heartbeat` after the last write. Not re-armed on every message (that takes
    /// the timer wheel's lock on every delivery): when it fires early it is moved to
    /// `last_write + heartbeat`.
    sleep: Pin<Box<Sleep>>,
    last_write: Instant,
    /// The drain, waited for with one atomic load per wake-up (see [`crate::shutdown::Drain`]).
    shutdown: DrainWait,
    jitter: Duration,
    /// Scratch space for the multi-topic `id:` line.
    id: String,
    /// A chunk to send before anything else (the body after a multi-topic `id:` line).
    queued: Option<Bytes>,
    done: bool,
    /// When the client's token expires, if it presented one (boxed only then).
    expiry: Option<Pin<Box<Sleep>>>,
    /// The browser origin allowed to read the stream (CORS), when the request had one.
    cors: Option<String>,
    /// When the stream ends by itself (`sse.max_lifetime`), if ever (boxed only when set).
    lifetime: Option<Pin<Box<Sleep>>>,
    retry: Duration,
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

    /// `id: topic=cursor,...\n` for every subscribed topic, into `self.id`.
    fn id_line(&mut self) {
        let mut list = std::mem::take(&mut self.id);
        ResumeList::write_entries(&mut list, self.feed.positions());
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
                    let retry = jitter(self.jitter).as_millis();
                    let frame = format!(
                        "retry: {retry}\nevent: herald.shutdown\ndata: {{\"reason\":\"shutdown\",\"retry_ms\":{retry}}}\n\n"
                    );
                    return Some(Bytes::from(frame));
                }
                _ = end_of_life(&mut self.expiry) => {
                    self.done = true;
                    self.guard.closing(CloseReason::Expired);
                    return Some(Bytes::from_static(
                        b"event: herald.disconnect\ndata: {\"reason\":\"token expired\"}\n\n",
                    ));
                }
                _ = end_of_life(&mut self.lifetime) => {
                    self.done = true;
                    self.guard.closing(CloseReason::Done);
                    // The lifetime itself is jittered; the client comes back after `sse.retry`.
                    return Some(Bytes::from(format!("retry: {}\n\n", self.retry.as_millis())));
                }
                event = self.feed.next() => {
                    if let Some(chunk) = self.on_event(event) {
                        self.last_write = Instant::now();
                        return Some(chunk);
                    }
                }
                _ = self.sleep.as_mut() => {
                    let due = self.last_write + self.heartbeat;
                    if due > Instant::now() {
                        self.sleep.as_mut().reset(due);
                        continue;
                    }
                    self.last_write = Instant::now();
                    self.sleep.as_mut().reset(self.last_write + self.heartbeat);
                    self.metrics.sent(PING.len());
                    return Some(PING);
                }
            }
        }
    }

    fn on_event(&mut self, event: FeedEvent) -> Option<Bytes> {
        match event {
            FeedEvent::Message(message) => {
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
            FeedEvent::Lost { topic, reason } => {
                if reason == herald_core::LossReason::Lagged {
                    metrics::slow_consumer("lost");
                }
                self.id_line();
                let frame = format!(
                    "{}event: herald.lost\ndata: {}\n\n",
                    self.id,
                    lost_json(&topic, reason)
                );
                self.metrics.sent(frame.len());
                Some(Bytes::from(frame))
            }
            FeedEvent::Recovered { .. } => {
                metrics::slow_consumer("recovered");
                None
            }
            FeedEvent::Disconnect { topic, missed } => {
                metrics::slow_consumer("disconnected");
                tracing::debug!(%topic, missed, "disconnecting a slow SSE consumer");
                self.done = true;
                self.guard.closing(CloseReason::Slow);
                Some(Bytes::from(format!(
                    "event: herald.disconnect\ndata: {{\"reason\":\"slow consumer\",\"topic\":\"{topic}\"}}\n\n"
                )))
            }
        }
    }
}
