//! The accept loop: HTTP/1.1 connections served by hyper directly (not `axum::serve`), each
//! on a tracked task, bounded by a connection limit and a header-read timeout.
//!
//! Why not `axum::serve`: its per-connection state and hyper-util's HTTP/1+2 auto builder
//! cost measurably more memory per idle long-lived connection than hyper's HTTP/1 builder
//! (see BENCHMARKS.md), and this loop also gives us the connection limit and slowloris
//! timeout in one place.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt as _;

use crate::telemetry::metrics;

/// How one listener serves.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Stops accepting when cancelled and asks open connections to finish.
    pub stop: CancellationToken,
    /// Tracks every connection task.
    pub tracker: TaskTracker,
    /// Time a client has to send its request headers.
    pub header_read_timeout: Duration,
    /// Open connections allowed at once; `None` for no limit.
    pub max_connections: Option<usize>,
}

/// Accepts connections on `listener` until `options.stop` is cancelled.
pub async fn serve(listener: TcpListener, router: Router, options: ServeOptions) {
    let permits = options.max_connections.map(|n| Arc::new(Semaphore::new(n)));
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
        let permit = match &permits {
            None => None,
            Some(sem) => match sem.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    metrics::connection_refused();
                    options.tracker.spawn(refuse(stream));
                    continue;
                }
            },
        };
        let router = router.clone();
        let options = options.clone();
        options.tracker.clone().spawn(async move {
            let _permit = permit;
            serve_connection(stream, peer, router, &options).await;
        });
    }
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    options: &ServeOptions,
) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        let router = router.clone();
        async move { Ok::<_, Infallible>(router.oneshot(req).await.unwrap_or_else(|e| match e {})) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout)
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(e) = result {
                tracing::trace!(error = %e, %peer, "connection ended with an error");
            }
        }
        _ = options.stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// Answers 503 to a connection over the limit, without reading its request.
async fn refuse(mut stream: TcpStream) {
    let body = r#"{"code":"too_many_connections","reason":"the gateway holds its maximum of connections; retry later"}"#;
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 5\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(
        Duration::from_secs(1),
        stream.write_all(response.as_bytes()),
    )
    .await;
}
