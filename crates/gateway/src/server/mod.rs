//! The accept loop: HTTP/1.1 connections, each on a tracked task, bounded by a connection
//! limit and a header-read timeout.
//!
//! On the public listener the first request head is read here and the listener's
//! [`FastPath`] (the transports' classifier, given in [`ServeOptions`]) says whether it takes
//! it: SSE streams and WebSocket upgrades are served straight on the socket; everything else
//! goes to hyper's HTTP/1 builder and the axum router with the bytes already read put back.
//! Why: an idle SSE stream served through hyper keeps hyper's per-connection read and write
//! buffers (8 KiB each, the first pages resident) for its whole life, and `axum::serve` adds
//! per-connection state; served directly, an idle stream holds its task, socket and feed only
//! (BENCHMARKS.md has the figures). This module knows no transport: it reads heads, limits,
//! times out and hands over.
//!
//! With TLS configured ([`tls`]) the handshake comes first; HTTP/1.1 then takes the same path,
//! and HTTP/2 (negotiated by ALPN) is served by hyper's HTTP/2 builder and the router.

pub(crate) mod head;
pub(crate) mod raw;
pub(crate) mod stalled;
pub(crate) mod stream;
pub(crate) mod tls;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::StatusCode;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt as _;

use crate::limits::{AddressLimits, Permits, Refusal};
use crate::telemetry::metrics;
use head::{Head, Rewind};
pub(crate) use raw::{FastPath, HeadShape, RawRequest};
use stream::ClientStream;
use tls::Tls;

/// Streams one HTTP/2 connection may carry at once (each SSE stream is one).
const H2_MAX_STREAMS: u32 = 100;
/// Refusals being answered at once. Past it a refused connection is closed without an
/// answer: answering (over TLS, a handshake first) must not cost more than the flood.
const MAX_REFUSALS_IN_FLIGHT: usize = 256;
/// An HTTP/2 connection with no open stream for this long is closed (GOAWAY). The first
/// stream must open within the header read timeout instead.
const H2_IDLE: Duration = Duration::from_secs(60);

/// How one listener serves.
#[derive(Clone, Debug)]
pub(crate) struct ServeOptions {
    /// Stops accepting when cancelled and asks open connections to finish.
    pub stop: CancellationToken,
    /// Tracks every connection task.
    pub tracker: TaskTracker,
    /// Time a client has to send its request headers.
    pub header_read_timeout: Duration,
    /// Longest wait of one write for a client that does not read (slow consumer), on every
    /// path; also how long a connection may take to finish once the listener stops.
    pub write_timeout: Duration,
    /// Open connections allowed at once; `None` for no limit.
    pub max_connections: Option<usize>,
    /// What is served directly on the socket (the public listener's SSE streams and
    /// WebSocket upgrades); `None`: everything goes to the router.
    pub fast_path: Option<Arc<dyn FastPath>>,
    /// Largest request head.
    pub max_header_bytes: usize,
    /// Per-address connection limits, if any.
    pub per_address: Option<Arc<AddressLimits>>,
    /// TLS, if the listener serves it.
    pub tls: Option<Arc<Tls>>,
}

/// A non-blocking listening socket on `addr` with a `listen(2)` backlog of `backlog`, for
/// [`serve`] (through `TcpListener::from_std` on the runtime that serves it). Tokio's own
/// `bind` fixes the backlog at 1024: a burst of 256 connects per 100 ms overflows it, and the
/// clients over it wait a second for their SYN to be sent again.
pub(crate) fn bind(addr: SocketAddr, backlog: u32) -> std::io::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    // A restarted node binds its port again while the old one's connections linger.
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    Ok(socket.into())
}

/// Accepts connections on `listener` until `options.stop` is cancelled.
pub(crate) async fn serve(listener: TcpListener, router: Router, options: ServeOptions) {
    let permits = options.max_connections.map(|n| Arc::new(Semaphore::new(n)));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSALS_IN_FLIGHT));
    loop {
        let accepted = tokio::select! {
            biased;
            _ = options.stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let global = match &permits {
            None => None,
            Some(sem) => match sem.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    metrics::connection_refused("max_connections");
                    spawn_refusal(&options, &refusing, stream, Refused::Global);
                    continue;
                }
            },
        };
        let address = match &options.per_address {
            None => None,
            Some(limits) => match limits.admit(peer.ip()) {
                Ok(permit) => Some(permit),
                Err(refusal) => {
                    let (reason, refused) = match refusal {
                        Refusal::TooManyFromAddress => ("per_address", Refused::Address),
                        Refusal::ConnectRate => ("connect_rate", Refused::Rate),
                    };
                    metrics::connection_refused(reason);
                    spawn_refusal(&options, &refusing, stream, refused);
                    continue;
                }
            },
        };
        let permits = Permits { global, address };
        let router = router.clone();
        let tracker = options.tracker.clone();
        let options = options.clone();
        let fut = async move {
            serve_connection(stream, peer, router, &options, permits).await;
        };
        crate::shutdown::spawn_connection(&tracker, "connection", fut);
    }
}

async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    router: Router,
    options: &ServeOptions,
    permits: Permits,
) {
    let _ = tcp.set_nodelay(true);
    let mut stream = match &options.tls {
        None => ClientStream::Plain(tcp),
        Some(tls) => {
            let handshake =
                tokio::time::timeout(options.header_read_timeout, tls.accept(tcp, false));
            let done = tokio::select! {
                done = handshake => done,
                _ = options.stop.cancelled() => return,
            };
            match done {
                Ok(Ok(tls)) => ClientStream::Tls(Box::new(tls)),
                Ok(Err(e)) => {
                    metrics::client_error("tls", "handshake");
                    tracing::debug!(error = %e, %peer, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    metrics::client_error("tls", "handshake_timeout");
                    return;
                }
            }
        }
    };
    if stream.is_h2() {
        serve_h2(stream, peer, router, options).await;
        drop(permits);
        return;
    }
    let head = tokio::select! {
        head = head::read_head(
            &mut stream,
            options.header_read_timeout,
            options.max_header_bytes,
            options.fast_path.as_deref(),
        ) => head,
        _ = options.stop.cancelled() => return,
    };
    let prefix = match head {
        Head::Done => return,
        Head::Other(prefix) => prefix,
        Head::Raw(request) => {
            if let Some(fast_path) = &options.fast_path {
                fast_path.serve(request, stream, peer, permits).await;
            }
            return;
        }
    };
    let service = service_fn(move |req| route(router.clone(), peer, req));
    let io = stalled::Stalled::new(Rewind::new(prefix, stream), options.write_timeout);
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout)
        .keep_alive(true)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::trace!(error = %e, %peer, "connection ended with an error");
            }
        }
        _ = options.stop.cancelled() => finish(conn, options.write_timeout).await,
    }
}

/// Ends a hyper connection after its listener stopped: no new request, and the one in
/// flight finishes (an SSE stream ends by itself on the drain). A response its client does
/// not read holds it no longer than a write may wait anywhere else.
async fn finish<C>(mut conn: Pin<&mut C>, write_timeout: Duration)
where
    C: GracefulShutdown,
{
    conn.as_mut().begin_shutdown();
    if tokio::time::timeout(write_timeout, conn).await.is_err() {
        metrics::slow_consumer("disconnected");
    }
}

/// hyper's HTTP/1 and HTTP/2 connections, both shut down gracefully the same way.
trait GracefulShutdown: std::future::Future {
    fn begin_shutdown(self: Pin<&mut Self>);
}

impl<I, S> GracefulShutdown for hyper::server::conn::http1::UpgradeableConnection<I, S>
where
    S: hyper::service::HttpService<Incoming>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S::ResBody: 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn begin_shutdown(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

impl<I, S, E> GracefulShutdown for hyper::server::conn::http2::Connection<I, S, E>
where
    S: hyper::service::HttpService<Incoming>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    S::ResBody: 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, S::ResBody>,
{
    fn begin_shutdown(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// Serves an HTTP/2 connection (TLS with ALPN `h2`) through the router until it ends, the
/// listener stops, or it stays without an open stream too long: its first stream must open
/// within the header read timeout (like an HTTP/1.1 request head), later it may idle for
/// [`H2_IDLE`]. Otherwise a client that finished the handshake and sent nothing would hold its
/// connection slot for ever.
async fn serve_h2(stream: ClientStream, peer: SocketAddr, router: Router, options: &ServeOptions) {
    let streams = Arc::new(H2Streams::new());
    let counted = streams.clone();
    let service = service_fn(move |req| {
        let open = H2Streams::open(&counted);
        let router = router.clone();
        async move {
            let response = route(router, peer, req).await?;
            // The stream counts as open until its response body is done or dropped.
            Ok::<_, Infallible>(response.map(|body| {
                axum::body::Body::new(body.map_frame(move |frame| {
                    let _open = &open;
                    frame
                }))
            }))
        }
    });
    let conn = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_header_list_size(u32::try_from(options.max_header_bytes).unwrap_or(u32::MAX))
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .serve_connection(
            TokioIo::new(stalled::Stalled::new(stream, options.write_timeout)),
            service,
        );
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::trace!(error = %e, %peer, "HTTP/2 connection ended with an error");
            }
        }
        _ = streams.idle(options.header_read_timeout) => {
            metrics::client_error("h2", "idle");
            conn.as_mut().graceful_shutdown();
            if streams.open.load(Ordering::Acquire) > 0 {
                // A stream opened just now: GOAWAY lets it finish.
                let _ = conn.await;
            } else {
                // Before the client's preface there is nothing to say goodbye to: bounded.
                let _ = tokio::time::timeout(Duration::from_secs(1), conn.as_mut()).await;
            }
        }
        _ = options.stop.cancelled() => finish(conn, options.write_timeout).await,
    }
}

/// The streams open on one HTTP/2 connection, and since when none has been.
struct H2Streams {
    open: AtomicUsize,
    /// When the last stream closed, in ms after `born` plus one; 0 while none ever opened.
    idle_since_ms: AtomicU64,
    born: Instant,
}

/// One open stream of an [`H2Streams`]; closing it is dropping it.
struct H2Stream(Arc<H2Streams>);

impl H2Streams {
    fn new() -> Self {
        Self {
            open: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
            born: Instant::now(),
        }
    }

    fn open(this: &Arc<Self>) -> H2Stream {
        this.open.fetch_add(1, Ordering::AcqRel);
        H2Stream(this.clone())
    }

    /// Resolves once no stream has been open for the allowance: `first` before any stream
    /// opened, [`H2_IDLE`] after. Sleeps until the next possible deadline, so an idle
    /// connection costs one timer, not a tick.
    async fn idle(&self, first: Duration) {
        let mut deadline = self.born + first;
        loop {
            tokio::time::sleep_until(deadline).await;
            if self.open.load(Ordering::Acquire) > 0 {
                deadline = Instant::now() + H2_IDLE;
                continue;
            }
            let since = self.idle_since_ms.load(Ordering::Acquire);
            if since == 0 {
                return; // no stream within `first`
            }
            let due = self.born + Duration::from_millis(since - 1) + H2_IDLE;
            if due <= Instant::now() {
                return;
            }
            deadline = due;
        }
    }
}

impl Drop for H2Stream {
    fn drop(&mut self) {
        let streams = &self.0;
        if streams.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            let now = u64::try_from(streams.born.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
            streams.idle_since_ms.store(now + 1, Ordering::Release);
        }
    }
}

/// One request through the router, with the client's address attached. An HTTP/2 request
/// names its host in the `:authority` pseudo-header, which hyper keeps in the URI: it is
/// copied to `Host` so that every check of the host (the admin listener's, the same-origin
/// rule) reads one header on every path.
async fn route(
    router: Router,
    peer: SocketAddr,
    mut req: hyper::Request<Incoming>,
) -> Result<axum::response::Response, Infallible> {
    req.extensions_mut().insert(ConnectInfo(peer));
    if !req.headers().contains_key(hyper::header::HOST)
        && let Some(authority) = req.uri().authority()
        && let Ok(host) = hyper::header::HeaderValue::from_str(authority.as_str())
    {
        req.headers_mut().insert(hyper::header::HOST, host);
    }
    Ok(router.oneshot(req).await.unwrap_or_else(|e| match e {}))
}

/// Which limit refused a connection.
#[derive(Clone, Copy, Debug)]
enum Refused {
    Global,
    Address,
    Rate,
}

/// Answers a refused connection on a task of its own, or closes it at once when
/// [`MAX_REFUSALS_IN_FLIGHT`] answers are already under way.
fn spawn_refusal(
    options: &ServeOptions,
    refusing: &Arc<Semaphore>,
    stream: TcpStream,
    refused: Refused,
) {
    match refusing.clone().try_acquire_owned() {
        Ok(permit) => {
            let tls = options.tls.clone();
            crate::shutdown::spawn_connection(&options.tracker, "refusal", async move {
                let _permit = permit;
                refuse(stream, refused, tls).await;
            });
        }
        Err(_) => {
            metrics::client_error("tcp", "refusal_unanswered");
            drop(stream);
        }
    }
}

/// Answers a connection over a limit (503 or 429), without reading its request. Over TLS the
/// handshake offers HTTP/1.1 only, so that the answer is one the client can read.
async fn refuse(tcp: TcpStream, refused: Refused, tls: Option<Arc<Tls>>) {
    let mut stream = match tls {
        None => ClientStream::Plain(tcp),
        Some(tls) => {
            match tokio::time::timeout(Duration::from_secs(2), tls.accept(tcp, true)).await {
                Ok(Ok(tls)) => ClientStream::Tls(Box::new(tls)),
                _ => return,
            }
        }
    };
    let (status, code, reason) = match refused {
        Refused::Global => (
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_connections",
            "the gateway holds its maximum of connections; retry later",
        ),
        Refused::Address => (
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_connections_from_address",
            "this address holds its maximum of connections",
        ),
        Refused::Rate => (
            StatusCode::TOO_MANY_REQUESTS,
            "connect_rate",
            "this address opens connections too fast; slow down",
        ),
    };
    let _ = head::write_status(&mut stream, status, code, reason).await;
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    /// A fast path that takes `GET /fast` and answers it itself.
    #[derive(Debug)]
    struct Fast;

    impl FastPath for Fast {
        fn classify(&self, path: &str, _: HeadShape) -> Option<&'static str> {
            (path == "/fast").then_some("fast")
        }

        fn serve(
            &self,
            request: RawRequest,
            mut stream: ClientStream,
            _: SocketAddr,
            _: Permits,
        ) -> Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
            Box::pin(async move {
                let body = format!("raw {} {:?}", request.route, request.query);
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body.as_bytes()).await;
            })
        }
    }

    fn options(max: Option<usize>, per_address: Option<Arc<AddressLimits>>) -> ServeOptions {
        ServeOptions {
            stop: CancellationToken::new(),
            tracker: TaskTracker::new(),
            header_read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(5),
            max_connections: max,
            fast_path: Some(Arc::new(Fast)),
            max_header_bytes: 16 * 1024,
            per_address,
            tls: None,
        }
    }

    /// A router answering `/peer` with the client's address and `Host`.
    fn router() -> Router {
        Router::new().route(
            "/peer",
            axum::routing::get(
                |ConnectInfo(peer): ConnectInfo<SocketAddr>, headers: axum::http::HeaderMap| async move {
                    let host = headers.get("host").map(|h| h.to_str().unwrap().to_owned());
                    format!("{} {host:?}", peer.ip())
                },
            ),
        )
    }

    async fn start(options: ServeOptions) -> (SocketAddr, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        (addr, tokio::spawn(serve(listener, router(), options)))
    }

    /// Sends `GET path` on a fresh connection; the whole answer.
    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        let request =
            format!("GET {path} HTTP/1.1\r\nhost: h.example\r\nconnection: close\r\n\r\n");
        tcp.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(5), tcp.read_to_string(&mut answer))
            .await
            .expect("answered")
            .unwrap();
        answer
    }

    #[tokio::test]
    async fn a_request_goes_to_the_fast_path_or_the_router_with_its_peer() {
        let (addr, _) = start(options(None, None)).await;
        let fast = get(addr, "/fast?x=1").await;
        assert!(fast.starts_with("HTTP/1.1 200"), "{fast}");
        assert!(fast.ends_with(r#"raw fast Some("x=1")"#), "{fast}");
        let routed = get(addr, "/peer").await;
        assert!(routed.starts_with("HTTP/1.1 200"), "{routed}");
        assert!(
            routed.ends_with(r#"127.0.0.1 Some("h.example")"#),
            "{routed}"
        );
    }

    #[tokio::test]
    async fn past_the_connection_limits_connections_are_refused_with_their_reason() {
        let (addr, _) = start(options(Some(1), None)).await;
        // One connection holds the only permit (it has sent nothing yet).
        let held = TcpStream::connect(addr).await.unwrap();
        let refused = get(addr, "/peer").await;
        assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
        // Closed, it gives the permit back.
        drop(held);
        let mut answer = String::new();
        for _ in 0..100 {
            answer = get(addr, "/peer").await;
            if answer.starts_with("HTTP/1.1 200") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

        let per_address = AddressLimits::new(1, 0.0, 0.0, 64, 64);
        let (addr, _) = start(options(None, Some(per_address))).await;
        let _held = TcpStream::connect(addr).await.unwrap();
        let refused = get(addr, "/peer").await;
        assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
    }

    #[tokio::test]
    async fn stopping_ends_the_accept_loop() {
        let options = options(None, None);
        let stop = options.stop.clone();
        let (addr, serving) = start(options).await;
        assert!(get(addr, "/peer").await.starts_with("HTTP/1.1 200"));
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), serving)
            .await
            .expect("serve returns once stopped")
            .unwrap();
    }
}
