//! TLS on the public listener: SSE over HTTP/1.1 (the raw path) and HTTP/2 (ALPN, through
//! the router), WebSocket over TLS, refusals readable over TLS, and plain-text clients turned
//! away without harm to the others.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt as _;
use herald_gateway::{Config, Gateway};
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::common::*;

pub(crate) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tls")
        .join(name)
}

pub(crate) fn tls_config() -> Config {
    let mut config = test_config();
    config.tls.cert_file = Some(fixture("server-a.pem"));
    config.tls.key_file = Some(fixture("server-a.key"));
    config
}

/// `request` over HTTP/2 on TLS to `gw`'s public listener: the response.
pub(crate) async fn h2_request(
    gw: &Gateway,
    request: hyper::Request<http_body_util::Empty<bytes::Bytes>>,
) -> hyper::Response<hyper::body::Incoming> {
    let tls = tls_connect(gw, &[b"h2"]).await;
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    sender.send_request(request).await.unwrap()
}

/// Connects with TLS, trusting the test CA, offering `alpn`.
pub(crate) async fn tls_connect(gw: &Gateway, alpn: &[&[u8]]) -> TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(fixture("ca.pem")).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = TcpStream::connect(gw.public_addr).await.unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("TLS handshake with the test CA")
}

fn sse_request(query: &str) -> hyper::Request<Empty<Bytes>> {
    hyper::Request::get(format!("https://localhost/v1/sse?{query}"))
        .body(Empty::new())
        .unwrap()
}

fn body_stream(body: hyper::body::Incoming) -> BodyStream {
    Box::pin(body.into_data_stream().map(|c| c.map_err(Into::into)))
}

#[tokio::test]
async fn sse_over_tls_http1_is_served_on_the_direct_path() {
    let gw = spawn_gateway(tls_config()).await;
    let tls = tls_connect(&gw, &[b"http/1.1"]).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let resp = sender
        .send_request(sse_request("topic=secure"))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut sse = SseClient::from_body(body_stream(resp.into_body()));
    assert!(sse.next_block().await.unwrap().id.is_some(), "opening id");
    publish(&gw, "secure", json!({"n": 1})).await;
    let event = sse.next_event().await.unwrap();
    assert_eq!(event.data.as_deref(), Some(r#"{"n":1}"#));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn sse_over_http2_carries_several_streams_on_one_connection() {
    let gw = spawn_gateway(tls_config()).await;
    let tls = tls_connect(&gw, &[b"h2", b"http/1.1"]).await;
    assert_eq!(
        tls.get_ref().1.alpn_protocol(),
        Some(&b"h2"[..]),
        "h2 chosen"
    );
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut streams = Vec::new();
    for topic in ["h2-a", "h2-b"] {
        let mut sender = sender.clone();
        let resp = sender
            .send_request(sse_request(&format!("topic={topic}")))
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.version(), hyper::Version::HTTP_2);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let mut sse = SseClient::from_body(body_stream(resp.into_body()));
        assert!(sse.next_block().await.unwrap().id.is_some(), "opening id");
        streams.push(sse);
    }
    eventually(WAIT, || async { topic_subscribers(&gw, "h2-b").await == 1 }).await;
    publish(&gw, "h2-a", json!({"to": "a"})).await;
    publish(&gw, "h2-b", json!({"to": "b"})).await;
    assert_eq!(
        streams[0].next_event().await.unwrap().data.as_deref(),
        Some(r#"{"to":"a"}"#)
    );
    assert_eq!(
        streams[1].next_event().await.unwrap().data.as_deref(),
        Some(r#"{"to":"b"}"#)
    );
    // Resuming over HTTP/2 with Last-Event-ID works as over HTTP/1.1.
    let last = streams[0].last_event_id.clone().unwrap();
    publish(&gw, "h2-a", json!({"missed": true})).await;
    let mut sender = sender.clone();
    let resp = sender
        .send_request(
            hyper::Request::get("https://localhost/v1/sse?topic=h2-a")
                .header("last-event-id", last)
                .body(Empty::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let mut resumed = SseClient::from_body(body_stream(resp.into_body()));
    assert_eq!(
        resumed.next_event().await.unwrap().data.as_deref(),
        Some(r#"{"missed":true}"#)
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn an_http2_connection_without_streams_does_not_hold_its_slot() {
    let mut config = tls_config();
    config.limits.header_read_timeout = std::time::Duration::from_millis(300);
    let gw = spawn_gateway(config).await;
    // Handshake done, nothing sent: closed after the header read timeout.
    let mut silent = tls_connect(&gw, &[b"h2"]).await;
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(WAIT, async {
        loop {
            match silent.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => continue,
            }
        }
    });
    assert!(read.await.is_ok(), "a silent HTTP/2 connection is closed");
    // The client's preface and settings, but no request: told GOAWAY and closed as well.
    let tls = tls_connect(&gw, &[b"h2"]).await;
    let (_sender, conn) = hyper::client::conn::http2::handshake::<_, _, Empty<Bytes>>(
        TokioExecutor::new(),
        TokioIo::new(tls),
    )
    .await
    .unwrap();
    assert!(
        tokio::time::timeout(WAIT, conn).await.is_ok(),
        "an HTTP/2 connection that opens no stream is closed"
    );
    let metrics = metrics_text(&gw).await;
    assert!(
        metrics.contains(r#"herald_client_errors_total{transport="h2",reason="idle"} 2"#),
        "{metrics}"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn websocket_over_tls() {
    let gw = spawn_gateway(tls_config()).await;
    let tls = tls_connect(&gw, &[b"http/1.1"]).await;
    let (mut ws, _) = tokio_tungstenite::client_async("wss://localhost/v1/ws", tls)
        .await
        .expect("wss handshake");
    ws_send_raw(&mut ws, json!({"type": "subscribe", "topics": ["wss"]})).await;
    let reply = ws_next_raw(&mut ws).await;
    assert_eq!(reply["type"], "subscribed");
    publish(&gw, "wss", json!({"over": "tls"})).await;
    let message = ws_next_raw(&mut ws).await;
    assert_eq!(message["data"], json!({"over": "tls"}));
    gw.stop().await.unwrap();
}

async fn ws_send_raw<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>, frame: serde_json::Value)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use futures_util::SinkExt as _;
    ws.send(tokio_tungstenite::tungstenite::Message::text(
        frame.to_string(),
    ))
    .await
    .unwrap();
}

async fn ws_next_raw<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>) -> serde_json::Value
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    match ws_next_frame(ws).await {
        tokio_tungstenite::tungstenite::Message::Text(text) => serde_json::from_str(&text).unwrap(),
        other => panic!("unexpected frame {other:?}"),
    }
}

#[tokio::test]
async fn plain_http_on_a_tls_listener_is_turned_away_and_others_keep_working() {
    let gw = spawn_gateway(tls_config()).await;
    let mut plain = TcpStream::connect(gw.public_addr).await.unwrap();
    plain
        .write_all(b"GET /v1/sse?topic=x HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(WAIT, plain.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "the server closes the connection");
    assert!(!String::from_utf8_lossy(&buf).contains("text/event-stream"));
    let metrics = metrics_text(&gw).await;
    assert!(
        metrics.contains(r#"herald_client_errors_total{transport="tls",reason="handshake"}"#),
        "counted: {metrics}"
    );
    // A TLS client is served as usual.
    let tls = tls_connect(&gw, &[b"http/1.1"]).await;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let resp = sender.send_request(sse_request("topic=x")).await.unwrap();
    assert_eq!(resp.status(), 200);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_refusal_over_tls_is_a_readable_status() {
    let mut config = tls_config();
    config.limits.max_connections = 1;
    let gw = spawn_gateway(config).await;
    let first = tls_connect(&gw, &[b"h2", b"http/1.1"]).await;
    // The refusal is answered over HTTP/1.1 even though the client offered h2.
    let mut second = tls_connect(&gw, &[b"h2", b"http/1.1"]).await;
    assert_eq!(second.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let mut answer = Vec::new();
    tokio::time::timeout(WAIT, second.read_to_end(&mut answer))
        .await
        .expect("answered in time")
        .ok();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("too_many_connections"), "{answer}");
    drop(first);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_flood_of_refused_connections_is_not_answered_past_the_cap() {
    let mut config = tls_config();
    config.limits.max_connections = 1;
    let gw = spawn_gateway(config).await;
    let first = tls_connect(&gw, &[b"http/1.1"]).await;
    // 300 refused connections that never start their TLS handshake: 256 refusals wait for
    // it (up to 2 s each); the rest are closed at once, unanswered.
    let mut silent = Vec::new();
    for _ in 0..300 {
        silent.push(TcpStream::connect(gw.public_addr).await.unwrap());
    }
    // Read them all at once, well within the 2 s the answered ones wait.
    let reads = silent.into_iter().map(|mut tcp| async move {
        let mut buf = [0u8; 16];
        let read = tokio::time::timeout(std::time::Duration::from_millis(500), tcp.read(&mut buf));
        matches!(read.await, Ok(Ok(0)))
    });
    let closed_at_once = futures_util::future::join_all(reads)
        .await
        .into_iter()
        .filter(|closed| *closed)
        .count();
    assert!(
        (1..=100).contains(&closed_at_once),
        "{closed_at_once} of 300 closed at once"
    );
    let metrics = metrics_text(&gw).await;
    assert!(
        metrics
            .contains(r#"herald_client_errors_total{transport="tcp",reason="refusal_unanswered"}"#),
        "{metrics}"
    );
    drop(first);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_missing_or_mismatched_key_is_a_configuration_error() {
    let mut config = tls_config();
    config.tls.key_file = Some(fixture("server-b.key"));
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("tls:"), "{err}");
    let mut config = tls_config();
    config.tls.key_file = None;
    let err = config.validate().unwrap_err().to_string();
    assert!(
        err.contains("cert_file and tls.key_file must be set together"),
        "{err}"
    );
    let mut config = tls_config();
    config.tls.cert_file = Some(fixture("missing.pem"));
    let err = format!("{:#}", config.validate().unwrap_err());
    assert!(err.contains("missing.pem"), "{err}");
}
