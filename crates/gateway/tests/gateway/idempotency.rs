//! Retry-safe publishing on a lone node, as a publisher that retries sees it: a publish
//! retried with its idempotency key (HTTP header or body field, batch message, WebSocket
//! `publish`) is answered with the first one's id and reaches subscribers once; other keys
//! and other topics are distinct; bad keys are refused with a JSON error; the window and the
//! bound on remembered keys hold.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::*;

/// `POST /v1/publish` (or `/v1/publish/batch`) on the admin listener with `headers`: the
/// status and the JSON answer.
async fn post(
    gw: &herald_gateway::Gateway,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (u16, Value) {
    let resp = post_json(format!("http://{}{path}", gw.admin_addr), headers, body).await;
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Publishes `data` to `topic` with the idempotency key in the body: the id answered.
async fn publish_keyed(
    gw: &herald_gateway::Gateway,
    topic: &str,
    key: &str,
    data: Value,
) -> String {
    let body = json!({"topic": topic, "data": data, "idempotency_key": key});
    let (status, answer) = post(gw, "/v1/publish", &[], &body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["topic"], topic, "{answer}");
    answer["id"].as_str().unwrap().to_string()
}

/// The data of every event the SSE client has received, until nothing more comes for a
/// moment (the stream stays open).
async fn sse_data(sse: &mut SseClient) -> Vec<String> {
    let text = sse.rest(Duration::from_millis(300)).await;
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.trim().to_string())
        .collect()
}

#[tokio::test]
async fn an_http_publish_retried_with_its_key_returns_the_first_id_and_is_delivered_once() {
    let gw = spawn_gateway(test_config()).await;
    let mut sse = SseClient::connect(&gw, "topic=orders&topic=audit", None).await;
    let url = format!("http://{}/v1/publish", gw.admin_addr);
    let first = json!({"topic": "orders", "data": {"n": 1}});

    // The header, three times: one message, one id.
    let mut ids = Vec::new();
    for _ in 0..3 {
        let resp = post_json(&url, &[("Idempotency-Key", "order-1")], &first).await;
        assert_eq!(resp.status(), 200);
        let answer: Value = resp.json().await.unwrap();
        assert_eq!(answer["topic"], "orders");
        ids.push(answer["id"].as_str().unwrap().to_string());
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    // The body field is the same key: the same answer, even with other data (a retry is
    // answered, not compared).
    let again = publish_keyed(&gw, "orders", "order-1", json!({"n": "changed"})).await;
    assert_eq!(again, ids[0]);
    // Header and body naming the same key agree.
    let both = json!({"topic": "orders", "data": 1, "idempotency_key": "order-1"});
    let (status, answer) = post(&gw, "/v1/publish", &[("idempotency-key", "order-1")], &both).await;
    assert_eq!(
        (status, answer["id"].as_str()),
        (200, Some(ids[0].as_str()))
    );

    // Another key, the same key on another topic, no key at all: each is a publish.
    let other_key = publish_keyed(&gw, "orders", "order-2", json!({"n": 2})).await;
    let other_topic = publish_keyed(&gw, "audit", "order-1", json!({"n": 3})).await;
    let unkeyed = publish(&gw, "orders", json!({"n": 4})).await;
    let unkeyed_again = publish(&gw, "orders", json!({"n": 4})).await;
    let mut distinct = vec![&ids[0], &other_key, &other_topic, &unkeyed, &unkeyed_again];
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 5, "{distinct:?}");

    // The subscriber got each publish once, the retried one too.
    let mut received = Vec::new();
    while received.len() < 5 {
        let event = sse.next_event().await.expect("an event");
        received.push((event.id.unwrap(), event.data.unwrap()));
    }
    let data: Vec<&str> = received.iter().map(|(_, d)| d.as_str()).collect();
    assert_eq!(
        data,
        [
            r#"{"n":1}"#,
            r#"{"n":2}"#,
            r#"{"n":3}"#,
            r#"{"n":4}"#,
            r#"{"n":4}"#
        ]
    );
    assert!(received[0].0.contains(&ids[0]), "{received:?} {ids:?}");
    assert!(sse_data(&mut sse).await.is_empty(), "nothing more");
    let history = get_json(format!("http://{}/v1/topics/orders/history", gw.admin_addr)).await;
    assert_eq!(
        history["messages"].as_array().map(Vec::len),
        Some(4),
        "{history}"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_page_retries_on_the_public_listener_with_the_idempotency_key_header() {
    let mut config = test_config();
    config.auth.api_keys = vec!["0123456789abcdef-public".into()];
    let gw = spawn_gateway(config).await;
    let url = format!("http://{}/v1/publish", gw.public_addr);
    let headers = [
        ("x-api-key", "0123456789abcdef-public"),
        ("idempotency-key", "page-7f3a"),
    ];
    let body = json!({"topic": "room", "data": "hello"});
    let mut ids = Vec::new();
    for _ in 0..2 {
        let resp = post_json(&url, &headers, &body).await;
        assert_eq!(resp.status(), 200);
        let answer: Value = resp.json().await.unwrap();
        ids.push(answer["id"].clone());
    }
    assert_eq!(ids[0], ids[1]);
    let history = get_json(format!("http://{}/v1/topics/room/history", gw.admin_addr)).await;
    assert_eq!(
        history["messages"].as_array().map(Vec::len),
        Some(1),
        "{history}"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_batch_carries_a_key_per_message_and_a_retried_batch_publishes_nothing_twice() {
    let gw = spawn_gateway(test_config()).await;
    let batch = json!({"messages": [
        {"topic": "t", "data": "a", "idempotency_key": "a"},
        {"topic": "t", "data": "a again", "idempotency_key": "a"},
        {"topic": "t", "data": "b", "idempotency_key": "b"},
        {"topic": "t", "data": "no key"},
        {"topic": "t", "data": "bad", "idempotency_key": "no spaces"},
    ]});
    let ids = |answer: &Value| -> Vec<Value> {
        (answer["results"].as_array().unwrap().iter())
            .map(|r| r.get("id").cloned().unwrap_or_else(|| r["code"].clone()))
            .collect()
    };
    let (status, first) = post(&gw, "/v1/publish/batch", &[], &batch).await;
    assert_eq!(status, 200, "{first}");
    let first = ids(&first);
    assert_eq!(first[0], first[1], "{first:?}");
    assert_ne!(first[0], first[2]);
    assert_eq!(first[4], "bad_idempotency_key");
    // The whole batch again (its answer was lost, say): the keyed messages are answered
    // with their first ids; the one without a key is published again.
    let (_, retried) = post(&gw, "/v1/publish/batch", &[], &batch).await;
    let retried = ids(&retried);
    assert_eq!(retried[..3], first[..3]);
    assert_ne!(retried[3], first[3]);
    // A single publish with a key a batch used is a retry of it.
    assert_eq!(publish_keyed(&gw, "t", "b", json!("b")).await, first[2]);
    let history = get_json(format!("http://{}/v1/topics/t/history", gw.admin_addr)).await;
    let data: Vec<&Value> = (history["messages"].as_array().unwrap().iter())
        .map(|m| &m["data"])
        .collect();
    assert_eq!(
        data,
        [&json!("a"), &json!("b"), &json!("no key"), &json!("no key")]
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_websocket_publish_retried_with_its_key_is_published_once() {
    let mut config = test_config();
    config.dev = true;
    let gw = spawn_gateway(config).await;
    let mut sub = ws_connect(&gw).await;
    ws_subscribe(&mut sub, &["chat"]).await;
    let mut publisher = ws_connect(&gw).await;
    let frame = json!({"type": "publish", "topic": "chat", "data": "hi", "idempotency_key": "m-1"});
    let mut ids = Vec::new();
    for _ in 0..2 {
        ws_send(&mut publisher, frame.clone()).await;
        let answer = ws_next(&mut publisher).await;
        assert_eq!(answer["type"], "published", "{answer}");
        ids.push(answer["id"].clone());
    }
    assert_eq!(ids[0], ids[1]);
    // The key is the topic's, whatever the path: an HTTP retry gets the same id.
    assert_eq!(
        json!(publish_keyed(&gw, "chat", "m-1", json!("hi")).await),
        ids[0]
    );
    // A new key is a new message.
    ws_send(
        &mut publisher,
        json!({"type": "publish", "topic": "chat", "data": "second", "idempotency_key": "m-2"}),
    )
    .await;
    let second = ws_next(&mut publisher).await;
    assert_ne!(second["id"], ids[0]);

    let got = ws_next(&mut sub).await;
    assert_eq!((&got["data"], &got["id"]), (&json!("hi"), &ids[0]));
    let got = ws_next(&mut sub).await;
    assert_eq!(
        got["data"], "second",
        "the retries were not delivered: {got}"
    );

    // A bad key is an error frame; the connection stays.
    ws_send(
        &mut publisher,
        json!({"type": "publish", "topic": "chat", "data": 1, "idempotency_key": ""}),
    )
    .await;
    let error = ws_next(&mut publisher).await;
    assert_eq!(
        (&error["type"], &error["code"]),
        (&json!("error"), &json!("bad_idempotency_key")),
        "{error}"
    );
    assert!(!error["reason"].as_str().unwrap().is_empty());
    ws_send(&mut publisher, json!({"type": "ping"})).await;
    assert_eq!(ws_next(&mut publisher).await["type"], "pong");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn bad_idempotency_keys_are_refused_with_a_json_error() {
    let gw = spawn_gateway(test_config()).await;
    let long = "k".repeat(129);
    let body = |key: &str| json!({"topic": "t", "data": 1, "idempotency_key": key});
    let plain = json!({"topic": "t", "data": 1});
    // Path, headers, body.
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, Value);
    let cases: Vec<Case<'_>> = vec![
        ("/v1/publish", vec![], body("")),
        ("/v1/publish", vec![], body(&long)),
        ("/v1/publish", vec![], body("with space")),
        ("/v1/publish", vec![], body("tab\there")),
        ("/v1/publish", vec![], body("clé")),
        (
            "/v1/publish",
            vec![("idempotency-key", "a b")],
            plain.clone(),
        ),
        (
            "/v1/publish",
            vec![("idempotency-key", &long)],
            plain.clone(),
        ),
        // The header and the body disagree.
        ("/v1/publish", vec![("idempotency-key", "x")], body("y")),
        // A batch's keys are per message.
        (
            "/v1/publish/batch",
            vec![("idempotency-key", "x")],
            json!({"messages": [plain.clone()]}),
        ),
    ];
    for (path, headers, body) in cases {
        let (status, answer) = post(&gw, path, &headers, &body).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (400, Some("bad_idempotency_key")),
            "{path} {headers:?} {body}: {answer}"
        );
        assert!(
            !answer["reason"].as_str().unwrap_or("").is_empty(),
            "{answer}"
        );
    }
    // A key that is not a string is a malformed request.
    let (status, answer) = post(
        &gw,
        "/v1/publish",
        &[],
        &json!({"topic": "t", "data": 1, "idempotency_key": 7}),
    )
    .await;
    assert_eq!((status, answer["code"].as_str()), (400, Some("bad_json")));
    // Nothing was published; the longest key is fine.
    assert_eq!(
        get(format!("http://{}/v1/topics/t/history", gw.admin_addr), &[])
            .await
            .status(),
        404
    );
    publish_keyed(&gw, "t", &"k".repeat(128), json!(1)).await;
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_key_is_remembered_for_the_window_and_the_keys_remembered_are_bounded() {
    let mut config = test_config();
    config.cluster.idempotency_window = Duration::from_secs(1);
    config.cluster.idempotency_max_keys = 32;
    let gw = spawn_gateway(config).await;

    // Within the window a retry is answered; past it the key is new again.
    let first = publish_keyed(&gw, "w", "k", json!(1)).await;
    assert_eq!(publish_keyed(&gw, "w", "k", json!(1)).await, first);
    eventually(Duration::from_secs(5), || async {
        publish_keyed(&gw, "w", "k", json!(1)).await != first
    })
    .await;

    // A publisher sending a fresh key with every message pushes the oldest keys out rather
    // than growing the node: after 2,000 fresh keys (in batches of 100), the first one is
    // forgotten (its retry is published again), and the newest is still remembered.
    let oldest = publish_keyed(&gw, "b", "oldest", json!(0)).await;
    let mut newest = Value::Null;
    for batch in 0..20 {
        let messages: Vec<Value> = (0..100)
            .map(|i| json!({"topic": "b", "data": i, "idempotency_key": format!("fresh-{batch}-{i}")}))
            .collect();
        let body = json!({ "messages": messages });
        let (status, answer) = post(&gw, "/v1/publish/batch", &[], &body).await;
        assert_eq!(status, 200, "{answer}");
        newest = answer["results"][99]["id"].clone();
    }
    assert_ne!(publish_keyed(&gw, "b", "oldest", json!(0)).await, oldest);
    let retried = publish_keyed(&gw, "b", "fresh-19-99", json!(99)).await;
    assert_eq!(json!(retried), newest);
    gw.stop().await.unwrap();
}

/// A WebSocket authenticated as `sub`, allowed to publish to `chat.*`.
async fn ws_as(gw: &herald_gateway::Gateway, sub: &str) -> WsStream {
    let mut ws = ws_connect(gw).await;
    let claims = json!({"sub": sub, "exp": unix_now() + 600, "publish": ["chat.*"]});
    ws_send(&mut ws, json!({"type": "auth", "token": token(claims)})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "authenticated");
    ws
}

/// Publishes over `ws` with `key`: the id answered.
async fn ws_publish_keyed(ws: &mut WsStream, topic: &str, key: &str, data: Value) -> Value {
    let frame = json!({"type": "publish", "topic": topic, "data": data, "idempotency_key": key});
    ws_send(ws, frame).await;
    let answer = ws_next(ws).await;
    assert_eq!(answer["type"], "published", "{answer}");
    answer["id"].clone()
}

#[tokio::test]
async fn a_client_s_keys_are_its_own_so_no_other_client_can_swallow_its_publishes() {
    let gw = spawn_gateway(token_config()).await;
    let mut alice = ws_as(&gw, "alice").await;
    let mut bob = ws_as(&gw, "bob").await;
    // Both count their keys from 1 on one topic: two messages, each retry its own id.
    let from_alice = ws_publish_keyed(&mut alice, "chat.room", "1", json!("alice")).await;
    let from_bob = ws_publish_keyed(&mut bob, "chat.room", "1", json!("bob")).await;
    assert_ne!(from_alice, from_bob);
    assert_eq!(
        ws_publish_keyed(&mut bob, "chat.room", "1", json!("bob")).await,
        from_bob
    );
    // Alice again, on a new connection (a reconnect): her key, her first id.
    let mut alice_again = ws_as(&gw, "alice").await;
    assert_eq!(
        ws_publish_keyed(&mut alice_again, "chat.room", "1", json!("alice")).await,
        from_alice
    );
    // A trusted publisher's key "1" is another key again.
    let trusted = publish_keyed(&gw, "chat.room", "1", json!("admin")).await;
    assert!(json!(trusted) != from_alice && json!(trusted) != from_bob);
    let history = get_json(format!(
        "http://{}/v1/topics/chat.room/history",
        gw.admin_addr
    ))
    .await;
    let data: Vec<&Value> = (history["messages"].as_array().unwrap().iter())
        .map(|m| &m["data"])
        .collect();
    assert_eq!(data, [&json!("alice"), &json!("bob"), &json!("admin")]);
    gw.stop().await.unwrap();
}
