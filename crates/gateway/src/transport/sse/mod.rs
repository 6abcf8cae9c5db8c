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

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::future::Either;
use herald_core::{DirectSub, ResumeList};
use tokio::time::Instant;

mod sink;
mod stream;

pub(crate) use sink::{BodySink, Sink};
use sink::{FrameWriter, SharedTcp};
pub(crate) use stream::SseStream;
use stream::{Refresh, lifetime_deadline};

use crate::app::AppState;
use crate::error::ApiError;
use crate::server::stream::{ClientStream, PeerInput};
use crate::telemetry::metrics::{self, CloseReason, Transport};
use crate::transport::access::authorize;
use crate::transport::{SubscribeQuery, open_query_feed};

/// The route.
pub(crate) const PATH: &str = "/v1/sse";

/// Bytes an SSE client may send after its request before it is closed (a client sends
/// nothing on an event stream; a few stray bytes, such as a pipelined request, are dropped).
const MAX_UNEXPECTED_INPUT: usize = 64 * 1024;

/// The response head of a directly served stream.
const RESPONSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nx-accel-buffering: no\r\nconnection: close\r\n\r\n";

/// An SSE answer carrying `body`: the event-stream type, no caching, no proxy buffering.
pub(crate) fn event_stream(body: Body) -> Response {
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
pub(crate) async fn handler(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let headers = request.headers();
    let query = request.uri().query();
    let peer = crate::transport::peer_ip(&request);
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

/// Serves `sse` directly on `socket`: the response head, then [`serve`]. A single-topic
/// stream on plain TCP is written to by its topic's publisher while idle
/// ([`herald_core::direct`]): a message does not wake this stream's task.
pub(crate) fn serve_raw(
    socket: ClientStream,
    mut sse: SseStream,
    write_timeout: Duration,
) -> impl Future<Output = ()> + Send {
    let head = match sse.cors.take() {
        None => Bytes::from_static(RESPONSE_HEAD),
        Some(origin) => {
            let mut head = RESPONSE_HEAD[..RESPONSE_HEAD.len() - 2].to_vec();
            head.extend_from_slice(crate::transport::cors::lines(&sse.state, &origin).as_bytes());
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
pub(crate) async fn serve<S: Sink>(mut sink: S, mut sse: SseStream, write_timeout: Duration) {
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
                        sse.connection.closing(CloseReason::Protocol);
                        break;
                    }
                    continue;
                }
            },
        };
        let Some(mut chunk) = chunk else { break };
        // The topic's fan-out stops writing before this task does; what it left half-written
        // goes first.
        if let Some(rest) = sse.feed.park() {
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
                sse.connection.closing(CloseReason::Slow);
                sink.abort();
                break;
            }
        }
    }
}

/// Validates an SSE request from `peer` (asking the application's hooks when configured) and
/// subscribes: the stream to serve, or why not.
pub(crate) async fn open(
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
        Some(asked) => crate::transport::asked_interval(
            asked,
            config.sse.min_heartbeat,
            config.sse.max_heartbeat,
        )?,
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
    let client = state.client_key(who.sub.as_deref(), peer);
    let (feed, charges) = open_query_feed(state, &query, &resume, &client).await?;
    let metrics = metrics::transport(Transport::Sse);
    let mut stream = SseStream {
        multi: feed.len() > 1 || feed.has_patterns(),
        json: query.format == crate::transport::access::SseForm::Json,
        feed,
        metrics,
        connection: state.open_connection_as(id, Transport::Sse, &who),
        state: state.clone(),
        sleep: Box::pin(tokio::time::sleep_until(crate::transport::next_keep_alive(
            Instant::now(),
            heartbeat,
        ))),
        // At most `sse.max_heartbeat`, checked above; 4 bytes rather than a `Duration`'s 16.
        heartbeat_ms: u32::try_from(heartbeat.as_millis()).unwrap_or(u32::MAX),
        last_write: Instant::now(),
        shutdown: state.drain().wait(),
        id: String::new(),
        queued: None,
        pending: None,
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
        .connection
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

#[cfg(test)]
mod tests;
