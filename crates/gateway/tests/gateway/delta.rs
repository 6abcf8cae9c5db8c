//! Delta compression, driven by real SSE, WebSocket (JSON and MessagePack) and long-poll
//! clients: the first message after every (re)start is full, later ones are Fossil deltas
//! that rebuild exactly the bytes the publisher's message has, and requests that cannot
//! have deltas are refused with a clear code.

use herald_core::delta::apply;
use herald_gateway::Config;
use herald_gateway::config::NamespaceConfig;
use herald_gateway::config::namespaces::DeltaCodec;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::common::*;

pub(crate) fn delta_config() -> Config {
    let mut config = test_config();
    let ns = NamespaceConfig {
        delta: Some(DeltaCodec::Fossil),
        ..Default::default()
    };
    config.namespaces.insert("score".into(), ns);
    config
}

/// A match's full state after `minute` minutes (~1.5 KB): a little changes each time.
pub(crate) fn state(minute: u64) -> Value {
    let players: Vec<Value> = (0..22)
        .map(|i| {
            json!({
                "name": format!("Player {i}"),
                "number": i + 1,
                "goals": u64::from(i == 9) * (minute / 20),
                "cards": if i == 4 && minute > 30 { json!(["yellow"]) } else { json!([]) },
            })
        })
        .collect();
    json!({"home": "Herald FC", "away": "Gateway United", "minute": minute,
           "score": [minute / 20, minute / 35], "players": players})
}

/// A client's view of one topic: the base text it holds, rebuilt from full messages and
/// deltas, as docs/protocol.md says a client keeps it.
#[derive(Default)]
pub(crate) struct Rebuilt {
    pub(crate) base: Option<Vec<u8>>,
    pub(crate) deltas: usize,
    pub(crate) full: usize,
}

impl Rebuilt {
    /// Takes one JSON `message` frame's text; returns its data.
    pub(crate) fn take(&mut self, frame_text: &str) -> Value {
        let frame: Value = serde_json::from_str(frame_text).unwrap();
        assert_eq!(frame["type"], "message", "{frame_text}");
        let data = if frame["delta"] == true {
            let base = self
                .base
                .as_ref()
                .expect("a delta comes only after its base");
            let delta = frame["data"].as_str().expect("a delta is a JSON string");
            self.deltas += 1;
            apply(base, delta.as_bytes(), 1 << 20).expect("the delta applies to the base")
        } else {
            // `data` is last: the frame's text after the first `"data":`, before its `}`.
            let at = frame_text.find(r#""data":"#).unwrap() + 7;
            self.full += 1;
            frame_text.as_bytes()[at..frame_text.len() - 1].to_vec()
        };
        let value: Value = serde_json::from_slice(&data).unwrap();
        self.base = Some(data);
        value
    }
}

/// A WebSocket subscribe with deltas, answered `subscribed`.
async fn ws_subscribe_delta(ws: &mut WsStream, topic: &str, cursor: Option<&str>) {
    let mut frame = json!({"type": "subscribe", "topics": [topic], "delta": "fossil"});
    if let Some(cursor) = cursor {
        frame["cursors"] = json!({ topic: cursor });
    }
    ws_send(ws, frame).await;
    let reply = ws_next(ws).await;
    assert_eq!(reply["type"], "subscribed", "{reply}");
}

#[tokio::test]
async fn every_transport_sends_full_data_first_then_deltas_that_rebuild_each_message() {
    let gw = spawn_gateway(delta_config()).await;
    let topic = "score:final";
    let mut sse = SseClient::connect(&gw, &format!("topic={topic}&delta=fossil"), None).await;
    sse.next_block().await.unwrap(); // the opening id
    let mut ws = ws_connect(&gw).await;
    ws_subscribe_delta(&mut ws, topic, None).await;
    // A subscriber that did not ask gets full messages, as always.
    let mut plain = ws_connect(&gw).await;
    ws_subscribe(&mut plain, &[topic]).await;
    let opening = get_json(format!(
        "http://{}/v1/poll?topic={topic}&timeout=0",
        gw.public_addr
    ))
    .await["cursor"]
        .as_str()
        .unwrap()
        .to_string();

    let (mut by_sse, mut by_ws) = (Rebuilt::default(), Rebuilt::default());
    for minute in 0..12 {
        let published = state(minute * 8);
        publish(&gw, topic, published.clone()).await;
        // One at a time: each subscriber is idle in between, so the topic's publisher
        // writes to it directly (the fan-out's path) as well as through its task.
        let event = sse.next_event().await.unwrap();
        assert_eq!(by_sse.take(event.data.as_deref().unwrap()), published);
        assert_eq!(by_ws.take(&ws_next_text(&mut ws).await), published);
        let full = ws_next_text(&mut plain).await;
        assert!(!full.contains(r#""delta""#), "{full}");
    }
    for (name, got) in [("sse", &by_sse), ("ws", &by_ws)] {
        assert_eq!(
            (got.full, got.deltas),
            (1, 11),
            "{name}: the first full, then deltas"
        );
    }

    // Long-poll: every poll is a resume, its first message full, later ones deltas.
    let url = format!(
        "http://{}/v1/poll?topic={topic}&delta=fossil&timeout=0&cursor={}",
        gw.public_addr,
        form_urlencoded::byte_serialize(opening.as_bytes()).collect::<String>()
    );
    // Each frame exactly as the answer holds it (the base is its text).
    #[derive(serde::Deserialize)]
    struct Page {
        messages: Vec<Box<serde_json::value::RawValue>>,
    }
    let page: Page = get(url, &[]).await.json().await.unwrap();
    let mut by_poll = Rebuilt::default();
    assert_eq!(page.messages.len(), 12);
    for (minute, message) in page.messages.iter().enumerate() {
        assert_eq!(by_poll.take(message.get()), state(minute as u64 * 8));
    }
    assert_eq!((by_poll.full, by_poll.deltas), (1, 11));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn every_resume_starts_with_full_data() {
    let gw = spawn_gateway(delta_config()).await;
    let topic = "score:resume";
    let mut ids = Vec::new();
    for minute in 0..6 {
        ids.push(publish(&gw, topic, state(minute * 10)).await);
    }
    let after = |i: usize| format!("{topic}={}", ids[i]);

    // SSE, Last-Event-ID: the replay's first message is full, the rest deltas.
    let mut sse =
        SseClient::connect(&gw, &format!("topic={topic}&delta=fossil"), Some(&after(1))).await;
    let mut rebuilt = Rebuilt::default();
    for minute in 2..6 {
        let event = sse.next_event().await.unwrap();
        assert_eq!(
            rebuilt.take(event.data.as_deref().unwrap()),
            state(minute * 10)
        );
    }
    assert_eq!((rebuilt.full, rebuilt.deltas), (1, 3));

    // SSE, last=N: the same.
    let mut sse =
        SseClient::connect(&gw, &format!("topic={topic}&delta=fossil&last=3"), None).await;
    let mut rebuilt = Rebuilt::default();
    for minute in 3..6 {
        let event = sse.next_event().await.unwrap();
        assert_eq!(
            rebuilt.take(event.data.as_deref().unwrap()),
            state(minute * 10)
        );
    }
    assert_eq!((rebuilt.full, rebuilt.deltas), (1, 2));

    // WebSocket cursors, twice on one connection (unsubscribe, then resume): full each time.
    let mut ws = ws_connect(&gw).await;
    for _ in 0..2 {
        ws_subscribe_delta(&mut ws, topic, Some(&ids[3])).await;
        let mut rebuilt = Rebuilt::default();
        for minute in 4..6 {
            assert_eq!(
                rebuilt.take(&ws_next_text(&mut ws).await),
                state(minute * 10)
            );
        }
        assert_eq!((rebuilt.full, rebuilt.deltas), (1, 1));
        ws_send(&mut ws, json!({"type": "unsubscribe", "topics": [topic]})).await;
        assert_eq!(ws_next(&mut ws).await["type"], "unsubscribed");
    }

    // A cursor history no longer covers: the loss signal, then full data.
    let gone = format!("{topic}=1-1");
    let mut sse =
        SseClient::connect(&gw, &format!("topic={topic}&delta=fossil"), Some(&gone)).await;
    let lost = sse.next_event().await.unwrap();
    assert_eq!(lost.event.as_deref(), Some("herald.lost"));
    publish(&gw, topic, state(70)).await;
    let event = sse.next_event().await.unwrap();
    assert!(!event.data.unwrap().contains(r#""delta":true"#));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_msgpack_subscriber_gets_deltas_of_the_msgpack_data() {
    let gw = spawn_gateway(delta_config()).await;
    let topic = "score:mp";
    let mut ws = crate::msgpack::mp_connect(&gw).await;
    let subscribe = crate::msgpack::map(vec![
        ("type", "subscribe".into()),
        ("topics", rmpv::Value::Array(vec![topic.into()])),
        ("delta", "fossil".into()),
    ]);
    crate::msgpack::mp_send(&mut ws, subscribe).await;
    let reply = next_binary(&mut ws).await;
    assert_eq!(field(&reply, "type"), b"\xaasubscribed");
    let mut base: Option<Vec<u8>> = None;
    let mut deltas = 0;
    for minute in 0..5 {
        let published = state(minute * 9);
        publish(&gw, topic, published.clone()).await;
        let frame = next_binary(&mut ws).await;
        let data = field(&frame, "data");
        let bytes = if fields(&frame).iter().any(|(k, _)| k == "delta") {
            deltas += 1;
            let delta = rmpv::decode::read_value(&mut &data[..]).unwrap();
            let delta = delta.as_slice().expect("a delta is a bin").to_vec();
            apply(base.as_ref().unwrap(), &delta, 1 << 20).unwrap()
        } else {
            data.to_vec()
        };
        let json = herald_core::msgpack::to_json(&bytes).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&json).unwrap(), published);
        base = Some(bytes);
    }
    assert_eq!(deltas, 4);
    gw.stop().await.unwrap();
}

async fn next_binary(ws: &mut WsStream) -> Vec<u8> {
    match ws_next_frame(ws).await {
        WsMessage::Binary(b) => b.to_vec(),
        other => panic!("unexpected frame {other:?}"),
    }
}

fn fields(frame: &[u8]) -> Vec<(String, Vec<u8>)> {
    herald_core::msgpack::map_fields(frame)
        .unwrap()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect()
}

fn field(frame: &[u8], name: &str) -> Vec<u8> {
    fields(frame)
        .into_iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no {name}"))
        .1
}

#[tokio::test]
async fn deltas_where_a_namespace_does_not_allow_them_are_refused_on_every_path() {
    let gw = spawn_gateway(delta_config()).await;
    let base = format!("http://{}", gw.public_addr);
    for (query, code) in [
        ("topic=news&delta=fossil", "delta_not_allowed"),
        ("topic=chat:1&delta=fossil", "delta_not_allowed"),
        ("topic=score:1&topic=news&delta=fossil", "delta_not_allowed"),
        ("topic=score:1&delta=vcdiff", "bad_delta"),
        ("topic=score:1&delta=fossil&format=text", "bad_format"),
    ] {
        for path in ["sse", "poll"] {
            let resp = get(format!("{base}/v1/{path}?{query}&timeout=0"), &[]).await;
            assert_eq!(resp.status(), 400, "{path}?{query}");
            let body: Value = resp.json().await.unwrap();
            assert_eq!(body["code"], code, "{path}?{query}: {body}");
            if code == "delta_not_allowed" {
                let reason = body["reason"].as_str().unwrap();
                assert!(reason.contains("deltas are not allowed"), "{reason}");
            }
        }
    }
    let head = http()
        .head(format!("{base}/v1/sse?topic=news&delta=fossil"))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 400);
    let mut ws = ws_connect(&gw).await;
    for (delta, topics, code) in [
        ("fossil", json!(["news"]), "delta_not_allowed"),
        ("fossil", json!(["score:1", "chat:1"]), "delta_not_allowed"),
        ("xdelta", json!(["score:1"]), "bad_delta"),
    ] {
        ws_send(
            &mut ws,
            json!({"type": "subscribe", "topics": topics, "delta": delta}),
        )
        .await;
        let reply = ws_next(&mut ws).await;
        assert_eq!(reply["type"], "error", "{reply}");
        assert_eq!(reply["code"], code, "{reply}");
    }
    // All or nothing: nothing was subscribed, and the connection still works.
    ws_subscribe_delta(&mut ws, "score:1", None).await;
    assert_eq!(topic_subscribers(&gw, "score:1").await, 1);
    publish(&gw, "score:1", json!({"n": 1})).await;
    assert_eq!(ws_next(&mut ws).await["topic"], "score:1", "not chat:1");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn random_payloads_cost_nothing_with_deltas_asked() {
    let gw = spawn_gateway(delta_config()).await;
    let topic = "score:noise";
    let mut ws = ws_connect(&gw).await;
    ws_subscribe_delta(&mut ws, topic, None).await;
    let mut plain = ws_connect(&gw).await;
    ws_subscribe(&mut plain, &[topic]).await;
    let (mut with, mut without) = (0, 0);
    for i in 0..20u64 {
        let noise: String = (0..300)
            .map(|_| char::from(b'a' + rand::random::<u8>() % 26))
            .collect();
        publish(&gw, topic, json!({"i": i, "noise": noise})).await;
        with += ws_next_text(&mut ws).await.len();
        without += ws_next_text(&mut plain).await.len();
    }
    assert!(
        with <= without + without / 100,
        "{with} bytes against {without}"
    );
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn across_nodes_each_node_sends_deltas_that_rebuild_and_a_resume_elsewhere_starts_full() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let p = format!("test-delta-{:x}", rand::random::<u32>());
    let node = |name: &str| {
        let mut config = cluster_config(&p, name);
        config.namespaces = delta_config().namespaces;
        config
    };
    let (a, b) = (spawn_ready(node("a")).await, spawn_ready(node("b")).await);
    let topic = "score:nodes";
    let mut on_b = ws_connect(&b).await;
    ws_subscribe_delta(&mut on_b, topic, None).await;
    let mut rebuilt = Rebuilt::default();
    let mut ids = Vec::new();
    for minute in 0..6 {
        // Published through node a; node b computes its own deltas from the log.
        ids.push(publish(&a, topic, state(minute * 11)).await);
        let text = ws_next_text(&mut on_b).await;
        assert_eq!(rebuilt.take(&text), state(minute * 11));
    }
    assert_eq!((rebuilt.full, rebuilt.deltas), (1, 5));
    // The client moves to node a with the cursor it reached on b: full first, then deltas.
    let mut on_a = ws_connect(&a).await;
    ws_subscribe_delta(&mut on_a, topic, Some(&ids[2])).await;
    let mut moved = Rebuilt::default();
    for minute in 3..6 {
        assert_eq!(
            moved.take(&ws_next_text(&mut on_a).await),
            state(minute * 11)
        );
    }
    assert_eq!((moved.full, moved.deltas), (1, 2));
    // And over SSE on b, with the id the stream gave on a.
    let resume = format!("{topic}={}", ids[4]);
    let mut sse =
        SseClient::connect(&b, &format!("topic={topic}&delta=fossil"), Some(&resume)).await;
    let mut by_sse = Rebuilt::default();
    assert_eq!(
        by_sse.take(sse.next_event().await.unwrap().data.as_deref().unwrap()),
        state(55)
    );
    publish(&a, topic, state(66)).await;
    assert_eq!(
        by_sse.take(sse.next_event().await.unwrap().data.as_deref().unwrap()),
        state(66)
    );
    assert_eq!((by_sse.full, by_sse.deltas), (1, 1));
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coalescing_subscriber_gets_full_data_after_it_skipped() {
    let mut config = delta_config();
    config.topics.channel_capacity = 4;
    config.limits.write_timeout = std::time::Duration::from_secs(30);
    let ns = config.namespaces.get_mut("score").unwrap();
    ns.lag_policy = Some(herald_core::LagPolicy::Coalesce);
    ns.history_len = Some(4);
    let gw = spawn_gateway(config).await;
    let topic = "score:ticker";
    let mut ws = ws_connect(&gw).await;
    ws_subscribe_delta(&mut ws, topic, None).await;
    // ~50 KB states, half of it new each time: deltas of ~25 KB, more than a loopback
    // socket holds after a few while the client does not read.
    let fresh: Vec<String> = (0..=300)
        .map(|_| {
            (0..25_000)
                .map(|_| char::from(b'a' + rand::random::<u8>() % 26))
                .collect()
        })
        .collect();
    let big = |n: u64| {
        let mut s = state(n);
        s["same"] = json!("y".repeat(25_000));
        s["fresh"] = json!(fresh[n as usize]);
        s
    };
    let mut rebuilt = Rebuilt::default();
    publish(&gw, topic, big(0)).await;
    assert_eq!(rebuilt.take(&ws_next_text(&mut ws).await), big(0));
    // Not read while ~7.5 MB of deltas go out: far behind the channel and history.
    for n in 1..=300 {
        publish(&gw, topic, big(n)).await;
    }
    // Reading now: some were skipped; each message rebuilds (a delta only on its own base).
    let mut last = 0;
    while last < 300 {
        let text = ws_next_text(&mut ws).await;
        let value = rebuilt.take(&text);
        last = value["minute"].as_u64().unwrap();
        assert_eq!(value, big(last));
    }
    assert!(
        rebuilt.full >= 2,
        "full again after the skip: {} full",
        rebuilt.full
    );
    gw.stop().await.unwrap();
}
