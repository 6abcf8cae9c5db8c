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
    // Three streams opened, the fourth refused before it was one.
    assert_eq!(
        metric(&gw, r#"herald_connections_opened_total{transport="sse"}"#).await,
        3.0
    );
    assert_eq!(
        metric(
            &gw,
            r#"herald_connections_refused_total{reason="connect_rate"}"#
        )
        .await,
        1.0
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn public_publishing_is_rate_limited_per_api_key() {
    let mut config = test_config();
    config.auth.api_keys = vec!["key-a".into(), "key-b".into()];
    config.limits.publish_rate_per_key = 0.01;
    config.limits.publish_burst_per_key = 3.0;
    let gw = spawn_gateway(config).await;
    let post = |key: &'static str, path: &'static str, body: serde_json::Value| {
        let req = http()
            .post(format!("http://{}{path}", gw.public_addr))
            .header("x-api-key", key)
            .json(&body);
        async move { req.send().await.unwrap() }
    };
    let one = serde_json::json!({"topic": "rl", "data": 1});
    for _ in 0..3 {
        assert_eq!(
            post("key-a", "/v1/publish", one.clone()).await.status(),
            200
        );
    }
    let refused = post("key-a", "/v1/publish", one.clone()).await;
    assert_eq!(refused.status(), 429);
    let wait: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(wait >= 1, "retry-after {wait}");
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "publish_rate");
    // Another key has its own budget; a batch must fit whole.
    let batch = serde_json::json!({"messages": [one.clone(), one.clone()]});
    assert_eq!(
        post("key-b", "/v1/publish/batch", batch.clone())
            .await
            .status(),
        200
    );
    assert_eq!(
        post("key-b", "/v1/publish/batch", batch).await.status(),
        429
    );
    assert_eq!(
        post("key-b", "/v1/publish", one.clone()).await.status(),
        200,
        "the refused batch took nothing"
    );
    // The admin listener is not limited.
    publish(&gw, "rl", serde_json::json!(2)).await;
    let metrics = metrics_text(&gw).await;
    assert!(
        metrics.contains(r#"herald_client_errors_total{transport="http",reason="publish_rate"} 2"#),
        "{metrics}"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn websocket_publishing_is_rate_limited_per_connection() {
    let mut config = test_config();
    config.dev = true;
    config.limits.publish_rate_per_connection = 0.01;
    config.limits.publish_burst_per_connection = 2.0;
    let gw = spawn_gateway(config).await;
    let mut ws = ws_connect(&gw).await;
    let frame = serde_json::json!({"type": "publish", "topic": "wsrl", "data": 1});
    for _ in 0..2 {
        ws_send(&mut ws, frame.clone()).await;
        assert_eq!(ws_next(&mut ws).await["type"], "published");
    }
    ws_send(&mut ws, frame.clone()).await;
    let refused = ws_next(&mut ws).await;
    assert_eq!(refused["type"], "error");
    assert_eq!(refused["code"], "rate_limited", "{refused}");
    // The connection stays usable, and another connection has its own budget.
    ws_send(&mut ws, serde_json::json!({"type": "ping"})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "pong");
    let mut other = ws_connect(&gw).await;
    ws_send(&mut other, frame).await;
    assert_eq!(ws_next(&mut other).await["type"], "published");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn websocket_publishers_without_a_subject_share_their_address_budget() {
    let mut config = test_config();
    config.dev = true;
    config.limits.publish_rate_per_connection = 0.0;
    config.limits.publish_rate_per_key = 0.01;
    config.limits.publish_burst_per_key = 3.0;
    let gw = spawn_gateway(config).await;
    let frame = serde_json::json!({"type": "publish", "topic": "wsaddr", "data": 1});
    let (mut a, mut b) = (ws_connect(&gw).await, ws_connect(&gw).await);
    for use_b in [false, false, true] {
        let ws = if use_b { &mut b } else { &mut a };
        ws_send(ws, frame.clone()).await;
        assert_eq!(ws_next(ws).await["type"], "published");
    }
    // Anonymous sockets from one address draw on one budget: a new socket does not reset it.
    let mut c = ws_connect(&gw).await;
    ws_send(&mut c, frame).await;
    let refused = ws_next(&mut c).await;
    assert_eq!(refused["code"], "rate_limited", "{refused}");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn spraying_subscriptions_to_new_topics_does_not_lock_out_new_topics() {
    let mut config = test_config();
    config.topics.max_topics = 20;
    let gw = spawn_gateway(config).await;
    // A client opens streams to ever new topics and drops them; nothing is published.
    for n in 0..60 {
        let resp = SseClient::request(&gw, &format!("topic=spray-{n}"), None).await;
        assert!(
            resp.status() == 200 || resp.status() == 503,
            "{}",
            resp.status()
        );
    }
    // The unused topics make room at once (at most one scan per 100 ms while full); topics
    // with history or a subscriber are kept.
    let admin = gw.admin_addr;
    eventually(WAIT, || async move {
        http()
            .post(format!("http://{admin}/v1/publish"))
            .json(&serde_json::json!({"topic": "kept", "data": 1}))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    let mut held = eventually_some(WAIT, "topic=held served", || async {
        let resp = SseClient::request(&gw, "topic=held", None).await;
        (resp.status() == 200).then(|| SseClient::from_response(resp))
    })
    .await;
    eventually(WAIT, || async {
        SseClient::request(&gw, "topic=fresh", None).await.status() == 200
    })
    .await;
    let stats = get_json(format!("http://{}/v1/topics/kept", gw.admin_addr)).await;
    assert_eq!(stats["history"], 1, "kept with its history: {stats}");
    publish(&gw, "held", serde_json::json!({"still": "served"})).await;
    assert_eq!(
        held.next_event().await.unwrap().data.as_deref(),
        Some(r#"{"still":"served"}"#)
    );
    gw.stop().await.unwrap();
}
