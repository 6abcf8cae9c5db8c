use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::AsyncWriteExt as _;

use crate::common::*;

#[tokio::test]
async fn shutdown_tells_clients_to_reconnect_and_finishes_within_the_grace_period() {
    let mut config = test_config();
    config.shutdown.grace = Duration::from_secs(2);
    config.shutdown.reconnect_jitter = Duration::from_millis(500);
    let gw = spawn_gateway(config).await;
    let (public, admin) = (gw.public_addr, gw.admin_addr);

    let mut sse = SseClient::connect(&gw, "topic=s", None).await;
    sse.next_block().await.unwrap();
    let mut ws = ws_connect(&gw).await;
    ws_subscribe(&mut ws, &["s"]).await;
    // A client that stopped reading: its socket buffers are full, so the server cannot
    // finish it politely; the grace period must still end the process.
    let mut stuck = tokio::net::TcpStream::connect(public).await.unwrap();
    stuck
        .write_all(b"GET /v1/sse?topic=s HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let pad = "x".repeat(60_000);
    for _ in 0..200 {
        publish(&gw, "s", json!(pad)).await;
    }
    // Drain the polite clients' backlog so they are live.
    for _ in 0..200 {
        sse.next_event().await.unwrap();
        ws_next(&mut ws).await;
    }

    let started = Instant::now();
    gw.begin_shutdown();
    let ready = get(format!("http://{admin}/readyz"), &[]).await;
    assert_eq!(ready.status(), 503);

    let last = sse.next_block().await.unwrap();
    assert_eq!(last.event.as_deref(), Some("herald.shutdown"));
    assert!(last.retry.unwrap() <= 500);
    assert!(sse.next_block().await.is_none(), "the SSE stream must end");
    let (code, _) = ws_close_code(&mut ws).await;
    assert_eq!(code, 1012);
    assert!(
        tokio::net::TcpStream::connect(public).await.is_err(),
        "new connections are refused"
    );

    tokio::time::timeout(Duration::from_secs(6), gw.wait())
        .await
        .expect("stops within the grace period")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(stuck);
}
