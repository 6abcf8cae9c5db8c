//! Batch frames (`GET /v1/ws?batch=1`), driven by real WebSocket clients: the messages ready
//! for a subscriber at once arrive in one frame (a JSON array, or a MessagePack array), in
//! order, at most 64 to a frame, on every path that writes to a WebSocket: the topic's
//! publisher writing to an idle subscriber's socket itself (a batch publish), and the
//! connection's own task (a replay, over plain TCP and TLS). A client that did not ask gets
//! a frame per message; a bad value is refused before the upgrade.

use serde_json::{Value, json};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::common::*;

async fn ws_connect_query(gw: &herald_gateway::Gateway, query: &str) -> WsStream {
    let (ws, _) =
        tokio_tungstenite::connect_async(format!("ws://{}/v1/ws?{query}", gw.public_addr))
            .await
            .expect("websocket connects");
    ws
}

/// Publishes `{"n": i}` for each `i` of `range` to `topic` in one `POST /v1/publish/batch`.
async fn publish_numbered(gw: &herald_gateway::Gateway, topic: &str, range: std::ops::Range<u64>) {
    publish_batch(
        gw,
        range
            .map(|n| json!({"topic": topic, "data": {"n": n}}))
            .collect(),
    )
    .await;
}

/// A data frame's value: JSON text, or MessagePack in its JSON form.
async fn next_value<S>(ws: &mut WebSocketStream<S>) -> Value
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    match ws_next_frame(ws).await {
        WsMessage::Text(text) => serde_json::from_str(&text).unwrap(),
        WsMessage::Binary(bytes) => {
            serde_json::from_slice(&herald_core::msgpack::to_json(&bytes).unwrap()).unwrap()
        }
        other => panic!("unexpected frame {other:?}"),
    }
}

/// Reads data frames until `n` messages came: how many each frame carried (1 for a frame of
/// its own), and the messages in order. A batch is an array of ordinary frames.
async fn read_messages<S>(ws: &mut WebSocketStream<S>, n: usize) -> (Vec<usize>, Vec<Value>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut sizes, mut messages) = (Vec::new(), Vec::new());
    while messages.len() < n {
        match next_value(ws).await {
            Value::Array(items) => {
                assert!(items.len() > 1, "a batch of one is a frame of its own");
                sizes.push(items.len());
                messages.extend(items);
            }
            frame => {
                sizes.push(1);
                messages.push(frame);
            }
        }
    }
    for m in &messages {
        assert_eq!(m["type"], "message", "{m}");
    }
    (sizes, messages)
}

/// Reads round `round`'s 100 messages (`{"n": 100 * round + i}`), checks them in order, and
/// returns how many each frame carried.
async fn read_round(ws: &mut WsStream, round: u64) -> Vec<usize> {
    let (sizes, messages) = read_messages(ws, 100).await;
    assert_eq!(
        numbers(&messages),
        (round * 100..round * 100 + 100).collect::<Vec<_>>()
    );
    sizes
}

/// At most 64 messages to a frame, and at least one batch among them.
fn assert_batched(sizes: &[usize]) {
    assert!(sizes.iter().all(|&s| s <= 64), "{sizes:?}");
    assert!(sizes.len() < sizes.iter().sum(), "no batch: {sizes:?}");
}

fn numbers(messages: &[Value]) -> Vec<u64> {
    messages
        .iter()
        .map(|m| m["data"]["n"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn a_batch_publish_reaches_an_idle_subscriber_in_batch_frames() {
    let gw = spawn_gateway(test_config()).await;
    let mut ws = ws_connect_query(&gw, "batch=1").await;
    ws_subscribe(&mut ws, &["burst"]).await;
    let mut plain = ws_connect(&gw).await;
    ws_subscribe(&mut plain, &["burst"]).await;
    for round in 0..3 {
        publish_numbered(&gw, "burst", round * 100..round * 100 + 100).await;
        let (sizes, messages) = read_messages(&mut ws, 100).await;
        assert_eq!(
            numbers(&messages),
            (round * 100..round * 100 + 100).collect::<Vec<_>>()
        );
        assert!(
            sizes.iter().any(|&s| s > 1) && sizes.iter().all(|&s| s <= 64),
            "{sizes:?}"
        );
        // Another subscriber on the same topic that did not ask: a frame per message.
        let (sizes, messages) = read_messages(&mut plain, 100).await;
        assert_eq!(sizes, vec![1; 100]);
        assert_eq!(
            numbers(&messages),
            (round * 100..round * 100 + 100).collect::<Vec<_>>()
        );
    }
    // A message published alone is a frame of its own.
    publish(&gw, "burst", json!({"n": 300})).await;
    let (sizes, _) = read_messages(&mut ws, 1).await;
    assert_eq!(sizes, [1]);
    gw.stop().await.unwrap();
}

/// Publishes 100 messages one by one, then subscribes `ws` (asking for the newest 100): the
/// replay is ready at once.
async fn replay_of_100<S>(gw: &herald_gateway::Gateway, ws: &mut WebSocketStream<S>, topic: &str)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use futures_util::SinkExt as _;
    for n in 0..100 {
        publish(gw, topic, json!({"n": n})).await;
    }
    let subscribe = json!({"type": "subscribe", "topics": [topic], "last": 100}).to_string();
    ws.send(WsMessage::text(subscribe)).await.unwrap();
}

#[tokio::test]
async fn a_replay_arrives_in_batches_of_at_most_64() {
    let gw = spawn_gateway(test_config()).await;
    let mut ws = ws_connect_query(&gw, "batch=1").await;
    replay_of_100(&gw, &mut ws, "replayed").await;
    assert_eq!(ws_next(&mut ws).await["type"], "subscribed");
    let (sizes, messages) = read_messages(&mut ws, 100).await;
    assert_eq!(sizes, [64, 36]);
    assert_eq!(numbers(&messages), (0..100).collect::<Vec<_>>());

    // MessagePack: a binary frame holding a MessagePack array.
    let url = format!("ws://{}/v1/ws?batch=1", gw.public_addr);
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(url)
            .unwrap();
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "herald.msgpack".parse().unwrap());
    let (mut mp, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    {
        use futures_util::SinkExt as _;
        let subscribe = herald_core::msgpack::from_json(
            &json!({"type": "subscribe", "topics": ["replayed"], "last": 100}),
        );
        mp.send(WsMessage::Binary(subscribe.into())).await.unwrap();
    }
    let (sizes, messages) = read_messages_after_subscribed(&mut mp, 100).await;
    assert_eq!(sizes, [64, 36]);
    assert_eq!(numbers(&messages), (0..100).collect::<Vec<_>>());

    // Without `batch`: a frame per message.
    let mut plain = ws_connect(&gw).await;
    ws_send(
        &mut plain,
        json!({"type": "subscribe", "topics": ["replayed"], "last": 100}),
    )
    .await;
    assert_eq!(ws_next(&mut plain).await["type"], "subscribed");
    let (sizes, _) = read_messages(&mut plain, 100).await;
    assert_eq!(sizes, vec![1; 100]);
    gw.stop().await.unwrap();
}

/// [`read_messages`] after the `subscribed` answer (skipped, in either format).
async fn read_messages_after_subscribed<S>(
    ws: &mut WebSocketStream<S>,
    n: usize,
) -> (Vec<usize>, Vec<Value>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let value = next_value(ws).await;
    assert_eq!(value["type"], "subscribed", "{value}");
    read_messages(ws, n).await
}

#[tokio::test]
async fn a_replay_over_tls_arrives_in_batch_frames_too() {
    let gw = spawn_gateway(crate::tls::tls_config()).await;
    let tls = crate::tls::tls_connect(&gw, &[b"http/1.1"]).await;
    let (mut ws, _) = tokio_tungstenite::client_async("wss://localhost/v1/ws?batch=1", tls)
        .await
        .expect("wss handshake");
    replay_of_100(&gw, &mut ws, "sealed").await;
    let (sizes, messages) = read_messages_after_subscribed(&mut ws, 100).await;
    assert_eq!(sizes, [64, 36]);
    assert_eq!(numbers(&messages), (0..100).collect::<Vec<_>>());
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn two_topics_published_in_one_batch_arrive_each_in_order() {
    let gw = spawn_gateway(test_config()).await;
    let mut ws = ws_connect_query(&gw, "batch=1").await;
    ws_subscribe(&mut ws, &["pair.a", "pair.b"]).await;
    let messages: Vec<Value> = (0..100)
        .map(|n| json!({"topic": if n % 2 == 0 { "pair.a" } else { "pair.b" }, "data": {"n": n}}))
        .collect();
    publish_batch(&gw, messages).await;
    let (sizes, got) = read_messages(&mut ws, 100).await;
    assert!(sizes.iter().all(|&s| s <= 64), "{sizes:?}");
    for (topic, parity) in [("pair.a", 0), ("pair.b", 1)] {
        let of: Vec<u64> = got
            .iter()
            .filter(|m| m["topic"] == topic)
            .map(|m| m["data"]["n"].as_u64().unwrap())
            .collect();
        assert_eq!(of, (0..100).filter(|n| n % 2 == parity).collect::<Vec<_>>());
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_bad_batch_value_is_refused_before_the_upgrade() {
    let gw = spawn_gateway(test_config()).await;
    for query in ["batch=yes", "batch=2", "batch="] {
        let url = format!("ws://{}/v1/ws?{query}", gw.public_addr);
        match tokio_tungstenite::connect_async(url).await {
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                assert_eq!(resp.status(), 400, "{query}");
                let body: Value = serde_json::from_slice(resp.body().as_deref().unwrap()).unwrap();
                assert_eq!(body["code"], "bad_batch", "{query}: {body}");
            }
            other => panic!("{query}: {other:?}"),
        }
    }
    for query in ["batch=0", "batch=false", "batch=true"] {
        let mut ws = ws_connect_query(&gw, query).await;
        ws_subscribe(&mut ws, &["fine"]).await;
    }
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_nodes_a_burst_read_from_redis_arrives_in_batch_frames() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let p = format!("test-batch-{:x}", rand::random::<u32>());
    let (a, b) = (
        spawn_ready(cluster_config(&p, "a")).await,
        spawn_ready(cluster_config(&p, "b")).await,
    );
    let mut on_b = ws_connect_query(&b, "batch=1").await;
    ws_subscribe(&mut on_b, &["relayed"]).await;
    // Node b reads what node a appended in batches of notices, each batch's records fanned
    // out once: the subscriber takes several in one frame.
    let mut sizes = Vec::new();
    for round in 0..5 {
        publish_numbered(&a, "relayed", round * 100..round * 100 + 100).await;
        sizes.extend(read_round(&mut on_b, round).await);
    }
    assert_batched(&sizes);
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_read_from_kafka_arrives_in_batch_frames() {
    skip_without!("HERALD_TEST_KAFKA_BROKERS");
    let kt = crate::kafka::unique("batch");
    crate::kafka::create_topic(&kt).await;
    let node = spawn_ready(crate::kafka::kafka_config(&kt, &crate::kafka::unique("n"))).await;
    let mut ws = ws_connect_query(&node, "batch=1").await;
    ws_subscribe(&mut ws, &["bursty"]).await;
    // The records the consumer has received already are ingested together and fanned out
    // once: the subscriber takes several in one frame. Produced as a service would, many at
    // once (the node's own publish API waits for each record's acknowledgement in turn).
    let producer = crate::kafka::producer();
    let mut sizes = Vec::new();
    for round in 0..5 {
        let records = (round * 100..round * 100 + 100)
            .map(|n| crate::kafka::produce(&producer, &kt, "bursty", None, json!({"n": n})));
        futures_util::future::join_all(records).await;
        sizes.extend(read_round(&mut ws, round).await);
    }
    assert_batched(&sizes);
    node.stop().await.unwrap();
}

#[tokio::test]
async fn a_batch_longer_than_the_live_channel_and_the_history_loses_nothing() {
    let mut config = test_config();
    config.limits.max_batch_publish = 300;
    config.topics.history_len = 10;
    let gw = spawn_gateway(config).await;
    let mut batched = ws_connect_query(&gw, "batch=1").await;
    ws_subscribe(&mut batched, &["long"]).await;
    let mut plain = ws_connect(&gw).await;
    ws_subscribe(&mut plain, &["long"]).await;
    // 300 messages in one request: more than a topic's fan-out queue and live channel
    // (channel_capacity, 128) and its history (10).
    publish_numbered(&gw, "long", 0..300).await;
    for ws in [&mut batched, &mut plain] {
        let (_, messages) = read_messages(ws, 300).await;
        assert_eq!(numbers(&messages), (0..300).collect::<Vec<_>>());
    }
    gw.stop().await.unwrap();
}
