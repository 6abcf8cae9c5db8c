//! Connection limits, as a client hitting them sees them.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};

use crate::common::*;

/// Opens an SSE request from `source` and returns the first bytes of the answer.
async fn sse_from(target: SocketAddr, source: &str) -> (TcpStream, String) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    let mut stream = socket.connect(target).await.unwrap();
    stream
        .write_all(b"GET /v1/sse?topic=lim HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(WAIT, stream.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    (stream, String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[tokio::test]
async fn per_address_and_global_limits_answer_with_a_reason() {
    let mut config = test_config();
    config.limits.max_connections_per_address = 2;
    config.limits.max_connections = 4;
    let gw = spawn_gateway(config).await;
    let (_a1, r) = sse_from(gw.public_addr, "127.0.0.1").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let (_a2, _) = sse_from(gw.public_addr, "127.0.0.1").await;
    let (_a3, r) = sse_from(gw.public_addr, "127.0.0.1").await;
    assert!(r.starts_with("HTTP/1.1 429"), "{r}");
    assert!(
        r.contains("too_many_connections_from_address") && r.contains("retry-after"),
        "{r}"
    );
    // Another address is still welcome, until the global limit.
    let (_b1, r) = sse_from(gw.public_addr, "127.0.0.2").await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    let (_b2, _) = sse_from(gw.public_addr, "127.0.0.2").await;
    let (_c1, r) = sse_from(gw.public_addr, "127.0.0.3").await;
    assert!(
        r.starts_with("HTTP/1.1 503") && r.contains("too_many_connections"),
        "{r}"
    );
    // Closing frees the place (SSE streams are served on tasks of their own; they must keep
    // their place until they end).
    drop(_a1);
    eventually(WAIT, || async {
        sse_from(gw.public_addr, "127.0.0.1")
            .await
            .1
            .starts_with("HTTP/1.1 200")
    })
    .await;
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn an_address_opening_connections_too_fast_is_slowed_down() {
    let mut config = test_config();
    config.limits.connect_rate_per_address = 0.01;
    config.limits.connect_burst_per_address = 3.0;
    let gw = spawn_gateway(config).await;
    for _ in 0..3 {
        let (_s, r) = sse_from(gw.public_addr, "127.0.0.4").await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    }
    let (_s, r) = sse_from(gw.public_addr, "127.0.0.4").await;
    assert!(
        r.starts_with("HTTP/1.1 429") && r.contains("connect_rate"),
        "{r}"
    );
    let text = get_json(format!("http://{}/v1/topics/lim", gw.admin_addr)).await;
    assert!(text["subscribers"].as_u64().is_some());
    let metrics = metrics_text(&gw).await;
    assert!(
        metrics.contains("herald_connections_refused_total{reason=\"connect_rate\"}"),
        "{metrics}"
    );
    gw.stop().await.unwrap();
}
