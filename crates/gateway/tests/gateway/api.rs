use serde_json::{Value, json};

use crate::common::*;

async fn post(
    gw: &herald_gateway::Gateway,
    path: &str,
    body: impl Into<reqwest::Body>,
) -> (u16, Value) {
    let resp = http()
        .post(format!("http://{}{path}", gw.admin_addr))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn bad_publish_requests_get_clear_errors() {
    let mut config = test_config();
    config.limits.max_payload_bytes = 1024;
    let gw = spawn_gateway(config).await;
    let big = json!({"topic": "t", "data": "x".repeat(2000)}).to_string();
    let huge = json!({"topic": "t", "data": "x".repeat(100_000)}).to_string();
    let cases: Vec<(String, u16, &str)> = vec![
        ("{".into(), 400, "bad_json"),
        (r#"{"topic":"t"}"#.into(), 400, "bad_json"),
        (
            r#"{"topic":"t","data":1,"extra":true}"#.into(),
            400,
            "bad_json",
        ),
        (r#"{"topic":"a b","data":1}"#.into(), 400, "bad_topic"),
        (r#"{"topic":"","data":1}"#.into(), 400, "bad_topic"),
        (
            format!(r#"{{"topic":"{}","data":1}}"#, "x".repeat(129)),
            400,
            "bad_topic",
        ),
        (
            r#"{"topic":"t","data":1,"event":"herald.lost"}"#.into(),
            400,
            "bad_event",
        ),
        (
            r#"{"topic":"t","data":1,"event":"a\nb"}"#.into(),
            400,
            "bad_event",
        ),
        (big, 413, "too_large"),
        (huge, 413, "too_large"),
    ];
    for (body, status, code) in cases {
        let (got, reply) = post(&gw, "/v1/publish", body.clone()).await;
        assert_eq!(got, status, "{}: {reply}", &body[..body.len().min(80)]);
        assert_eq!(reply["code"], code, "{reply}");
        assert!(!reply["reason"].as_str().unwrap().is_empty());
    }
    let text = metrics_text(&gw).await;
    for (reason, n) in [
        ("bad_json", 3),
        ("bad_topic", 3),
        ("bad_event", 2),
        ("too_large", 2),
    ] {
        let line =
            format!(r#"herald_client_errors_total{{transport="http",reason="{reason}"}} {n}"#);
        assert!(text.contains(&line), "{line} in {text}");
    }
    // Publishing is not served on the public listener outside dev mode.
    let resp = post_json(
        format!("http://{}/v1/publish", gw.public_addr),
        &[],
        &json!({"topic": "t", "data": 1}),
    )
    .await;
    assert_eq!(resp.status(), 404);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn batch_publish_answers_per_message() {
    let gw = spawn_gateway(test_config()).await;
    let mut ws = ws_connect(&gw).await;
    ws_subscribe(&mut ws, &["b"]).await;
    let body = json!({"messages": [
        {"topic": "b", "data": 1},
        {"topic": "bad topic", "data": 2},
        {"topic": "b", "data": 3, "event": "e"},
    ]});
    let (status, reply) = post(&gw, "/v1/publish/batch", body.to_string()).await;
    assert_eq!(status, 200);
    let results = reply["results"].as_array().unwrap();
    assert!(results[0]["id"].is_string());
    assert_eq!(results[1]["code"], "bad_topic");
    assert!(results[2]["id"].is_string());
    assert_eq!(ws_next(&mut ws).await["data"], 1);
    assert_eq!(ws_next(&mut ws).await["data"], 3);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn health_readiness_stats_and_metrics() {
    let gw = spawn_gateway(test_config()).await;
    let admin = format!("http://{}", gw.admin_addr);
    assert_eq!(get(format!("{admin}/healthz"), &[]).await.status(), 200);
    assert_eq!(get(format!("{admin}/readyz"), &[]).await.status(), 200);

    let mut sse = SseClient::connect(&gw, "topic=m", None).await;
    sse.next_block().await.unwrap();
    let mut ws = ws_connect(&gw).await;
    ws_subscribe(&mut ws, &["m"]).await;
    publish(&gw, "m", json!({"x": 1})).await;
    sse.next_event().await.unwrap();
    ws_next(&mut ws).await;

    let stats: Value = get(format!("{admin}/v1/topics/m"), &[])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(stats["subscribers"], 2);
    assert_eq!(stats["history"], 1);
    let list: Value = get(format!("{admin}/v1/topics"), &[])
        .await
        .json()
        .await
        .unwrap();
    assert!(list["count"].as_u64().unwrap() >= 1);
    let missing = get(format!("{admin}/v1/topics/nope"), &[]).await;
    assert_eq!(missing.status(), 404);

    let text = get(format!("{admin}/metrics"), &[])
        .await
        .text()
        .await
        .unwrap();
    for name in [
        "herald_connections{transport=\"sse\"}",
        "herald_connections{transport=\"ws\"}",
        "herald_connections_opened_total",
        "herald_messages_published_total",
        "herald_messages_delivered_total{transport=\"sse\"}",
        "herald_messages_delivered_total{transport=\"ws\"}",
        "herald_bytes_sent_total",
        "herald_delivery_latency_seconds_bucket",
        "herald_topics",
    ] {
        assert!(text.contains(name), "missing {name} in:\n{text}");
    }
    assert!(!text.contains("topic=\""), "a topic must never be a label");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn demo_page_and_unknown_routes() {
    let gw = spawn_gateway(test_config()).await;
    let resp = get(format!("http://{}/", gw.public_addr), &[]).await;
    assert_eq!(resp.status(), 200);
    let page = resp.text().await.unwrap();
    assert!(page.contains("EventSource") && page.contains("WebSocket"));
    let resp = get(format!("http://{}/nope", gw.public_addr), &[]).await;
    assert_eq!(resp.status(), 404);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "not_found");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn dev_mode_serves_publish_on_the_public_listener() {
    let mut config = test_config();
    config.dev = true;
    let gw = spawn_gateway(config).await;
    let resp = post_json(
        format!("http://{}/v1/publish", gw.public_addr),
        &[],
        &json!({"topic": "demo", "data": "hello"}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    gw.stop().await.unwrap();
}
