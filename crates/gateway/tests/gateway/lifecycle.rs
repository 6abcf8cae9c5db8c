//! One SSE lifecycle on every serving path. The same checks run over each path a client can
//! reach an SSE stream by: the direct HTTP/1.1 path on the socket, hyper's HTTP/1.1 (an
//! absolute-form request), TLS with HTTP/1.1 (direct) and TLS with HTTP/2 (hyper): delivery
//! and heartbeat, the drain, token expiry, a disconnect by the admin API, and the
//! slow-consumer policy for a client that stops reading.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt as _;
use herald_gateway::{Config, Gateway};
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::common::*;

const SECRET: &str = "lifecycle-test-secret-0123456789abcdef";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Path {
    /// HTTP/1.1, origin-form: served straight on the socket.
    Direct,
    /// HTTP/1.1, absolute-form: served by hyper and the router.
    AbsoluteForm,
    /// TLS, HTTP/1.1: served straight on the TLS stream.
    TlsDirect,
    /// TLS, HTTP/2: served by hyper's HTTP/2 and the router.
    TlsH2,
}

const PATHS: [Path; 4] = [
    Path::Direct,
    Path::AbsoluteForm,
    Path::TlsDirect,
    Path::TlsH2,
];

impl Path {
    fn tls(self) -> bool {
        matches!(self, Path::TlsDirect | Path::TlsH2)
    }
}

fn config(path: Path) -> Config {
    let mut config = if path.tls() {
        crate::tls::tls_config()
    } else {
        test_config()
    };
    config.auth.hs256_secret = Some(SECRET.into());
    config.auth.public_prefixes = vec!["life".into()];
    config.sse.heartbeat = Duration::from_millis(200);
    config.limits.write_timeout = Duration::from_millis(800);
    config.shutdown.grace = Duration::from_secs(20);
    config
}

/// A client stream whose reading can be stopped, as a client that stops reading does.
struct Pausable<S> {
    inner: S,
    paused: Arc<AtomicBool>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Pausable<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.paused.load(Ordering::Acquire) {
            return Poll::Pending; // never woken: this client reads no more
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Pausable<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S> Pausable<S> {
    fn new(inner: S, paused: &Arc<AtomicBool>) -> Self {
        Self {
            inner,
            paused: paused.clone(),
        }
    }
}

/// One request over HTTP/1.1 on `io`.
async fn http1<S>(
    io: S,
    request: hyper::Request<Empty<Bytes>>,
) -> hyper::Response<hyper::body::Incoming>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender.send_request(request).await.unwrap()
}

/// An open SSE stream over `path`, and the switch that stops its client reading.
struct Stream {
    sse: SseClient,
    pause: Arc<AtomicBool>,
}

async fn open(gw: &Gateway, path: Path, query: &str, token: Option<&str>) -> Stream {
    let pause = Arc::new(AtomicBool::new(false));
    let uri = match path {
        Path::AbsoluteForm => format!("http://{}/v1/sse?{query}", gw.public_addr),
        Path::TlsH2 => format!("https://localhost/v1/sse?{query}"),
        Path::Direct | Path::TlsDirect => format!("/v1/sse?{query}"),
    };
    let mut request = hyper::Request::get(uri).header("host", "localhost");
    if path == Path::TlsH2 {
        request = hyper::Request::get(format!("https://localhost/v1/sse?{query}"));
    }
    if let Some(t) = token {
        request = request.header("authorization", format!("Bearer {t}"));
    }
    let request = request.body(Empty::<Bytes>::new()).unwrap();
    let response = match path {
        Path::Direct | Path::AbsoluteForm => {
            let tcp = TcpStream::connect(gw.public_addr).await.unwrap();
            http1(Pausable::new(tcp, &pause), request).await
        }
        Path::TlsDirect => {
            let tls = crate::tls::tls_connect(gw, &[b"http/1.1"]).await;
            http1(Pausable::new(tls, &pause), request).await
        }
        Path::TlsH2 => {
            let tls = crate::tls::tls_connect(gw, &[b"h2"]).await;
            let io = TokioIo::new(Pausable::new(tls, &pause));
            let (mut sender, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .unwrap();
            tokio::spawn(conn);
            sender.send_request(request).await.unwrap()
        }
    };
    assert_eq!(response.status(), 200, "{path:?}");
    let body = response
        .into_body()
        .into_data_stream()
        .map(|c| c.map_err(Into::into));
    Stream {
        sse: SseClient::from_body(Box::pin(body)),
        pause,
    }
}

#[tokio::test]
async fn delivery_and_heartbeat_on_every_path() {
    for path in PATHS {
        let gw = spawn_gateway(config(path)).await;
        let mut s = open(&gw, path, "topic=life-a", None).await;
        let opening = s.sse.next_block().await.unwrap();
        assert!(opening.retry.is_some(), "{path:?}: opening retry");
        publish(&gw, "life-a", json!({"n": 1})).await;
        let event = s.sse.next_event().await.unwrap();
        assert_eq!(event.data.as_deref(), Some(r#"{"n":1}"#), "{path:?}");
        let idle = s.sse.rest(Duration::from_millis(700)).await;
        assert!(idle.contains(": ping"), "{path:?}: heartbeat in {idle:?}");
        gw.stop().await.unwrap();
    }
}

#[tokio::test]
async fn the_drain_ends_streams_with_a_reconnect_hint_on_every_path() {
    for path in PATHS {
        let gw = spawn_gateway(config(path)).await;
        let mut s = open(&gw, path, "topic=life-b", None).await;
        s.sse.next_block().await.unwrap();
        gw.begin_shutdown();
        let event = s.sse.next_event().await.unwrap();
        assert_eq!(event.event.as_deref(), Some("herald.shutdown"), "{path:?}");
        assert!(event.retry.is_some(), "{path:?}: retry hint");
        assert!(s.sse.next_event().await.is_none(), "{path:?}: stream ends");
        tokio::time::timeout(Duration::from_secs(10), gw.wait())
            .await
            .expect("drained before the grace period")
            .unwrap();
    }
}

#[tokio::test]
async fn token_expiry_ends_streams_on_every_path() {
    for path in PATHS {
        let gw = spawn_gateway(config(path)).await;
        let token = hs256_token(
            SECRET,
            &json!({"sub": "brief", "exp": unix_now() + 2, "topics": ["private"]}),
        );
        let mut s = open(&gw, path, "topic=private", Some(&token)).await;
        let event = s.sse.next_event().await.unwrap();
        assert_eq!(
            event.event.as_deref(),
            Some("herald.disconnect"),
            "{path:?}"
        );
        assert!(
            event.data.as_deref().unwrap().contains("token expired"),
            "{path:?}"
        );
        assert!(s.sse.next_event().await.is_none(), "{path:?}: stream ends");
        gw.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_user_disconnected_by_the_admin_api_is_told_why_on_every_path() {
    for path in PATHS {
        let gw = spawn_gateway(config(path)).await;
        let token = hs256_token(
            SECRET,
            &json!({"sub": "leaving", "exp": unix_now() + 3600, "topics": ["private"]}),
        );
        let mut s = open(&gw, path, "topic=private", Some(&token)).await;
        s.sse.next_block().await.unwrap();
        let resp = post_json(
            format!("http://{}/v1/users/leaving/disconnect", gw.admin_addr),
            &[],
            &json!({"reason": "logged out", "reconnect": false}),
        )
        .await;
        assert_eq!(resp.status(), 200, "{path:?}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["disconnected_here"], 1, "{path:?}");
        let event = s.sse.next_event().await.unwrap();
        assert_eq!(
            event.event.as_deref(),
            Some("herald.disconnect"),
            "{path:?}"
        );
        let data: serde_json::Value = serde_json::from_str(event.data.as_deref().unwrap()).unwrap();
        assert_eq!(
            data,
            json!({"reason": "logged out", "reconnect": false}),
            "{path:?}"
        );
        assert!(s.sse.next_event().await.is_none(), "{path:?}: stream ends");
        gw.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_client_that_stops_reading_is_dropped_as_slow_on_every_path() {
    for path in PATHS {
        let gw = spawn_gateway(config(path)).await;
        let mut s = open(&gw, path, "topic=life-slow", None).await;
        s.sse.next_block().await.unwrap();
        s.pause.store(true, Ordering::Release);
        assert_eq!(topic_subscribers(&gw, "life-slow").await, 1);
        // Large messages until the socket buffers are full and writes wait.
        let big = "x".repeat(60 * 1024);
        let started = std::time::Instant::now();
        let mut published = 0;
        while topic_subscribers(&gw, "life-slow").await > 0 {
            if published < 400 {
                publish(&gw, "life-slow", json!(big)).await;
                published += 1;
            } else {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{path:?}: a client that does not read was never dropped"
            );
        }
        // The drain is not held by it either.
        tokio::time::timeout(Duration::from_secs(10), gw.stop())
            .await
            .expect("drained promptly")
            .unwrap();
    }
}

#[tokio::test]
async fn deltas_on_every_path() {
    // The stream's first message is full, the rest deltas that rebuild each message, however
    // the client reached the stream.
    for path in PATHS {
        let mut config = config(path);
        config.namespaces = crate::delta::delta_config().namespaces;
        config.auth.public_prefixes.push("score".into());
        let gw = spawn_gateway(config).await;
        let mut s = open(&gw, path, "topic=score:life&delta=fossil", None).await;
        s.sse.next_block().await.unwrap();
        let mut rebuilt = crate::delta::Rebuilt::default();
        for minute in 0..4 {
            let published = crate::delta::state(minute * 13);
            publish(&gw, "score:life", published.clone()).await;
            let event = s.sse.next_event().await.unwrap();
            assert_eq!(
                rebuilt.take(event.data.as_deref().unwrap()),
                published,
                "{path:?}"
            );
        }
        assert_eq!((rebuilt.full, rebuilt.deltas), (1, 3), "{path:?}");
        gw.stop().await.unwrap();
    }
}
