//! The cluster's live path over a real Redis: notices on pub/sub, the stream read only to
//! start following a group or to fill a gap, and the opening id of a topic nobody published
//! to yet being one the log honours.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::*;

fn prefix(test: &str) -> String {
    format!("test-live-{test}-{:x}", rand::random::<u32>())
}

async fn redis_conn() -> redis::aio::MultiplexedConnection {
    redis::Client::open(test_redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Kills every pub/sub connection of Redis (the nodes' live connections among them).
async fn kill_pubsub(conn: &mut redis::aio::MultiplexedConnection) -> i64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_pubsub_connection_loses_nothing_and_reorders_nothing() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let p = prefix("kill");
    let mut a = cluster_config(&p, "a");
    a.cluster.redis_shards = 16;
    let mut b = cluster_config(&p, "b");
    b.cluster.redis_shards = 16;
    let (a, b) = (spawn_ready(a).await, spawn_ready(b).await);
    let topics: Vec<String> = (0..6).map(|i| format!("live.{i}")).collect();
    let query = topics
        .iter()
        .map(|t| format!("topic={t}"))
        .collect::<Vec<_>>()
        .join("&");
    let mut clients = Vec::new();
    for gw in [&a, &b] {
        let mut sse = SseClient::connect(gw, &query, None).await;
        sse.next_block().await.unwrap();
        clients.push(sse);
    }
    let mut redis = redis_conn().await;
    let per_topic = 40;
    let mut killed = 0;
    for i in 0..per_topic {
        for (k, t) in topics.iter().enumerate() {
            let via = if (i + k) % 2 == 0 { &a } else { &b };
            // A publish can meet a node whose reader is reconnecting (503): retried with
            // its idempotency key it is appended once.
            publish_until_ok(via, t, json!({"t": t, "i": i})).await;
        }
        if i % 8 == 3 {
            killed += kill_pubsub(&mut redis).await;
        }
    }
    assert!(
        killed >= 2,
        "the nodes' live connections were killed ({killed})"
    );
    for sse in &mut clients {
        let mut next: HashMap<String, i64> = HashMap::new();
        for _ in 0..topics.len() * per_topic {
            let e = sse.next_event().await.expect("every message arrives");
            assert_ne!(e.event.as_deref(), Some("herald.lost"), "{e:?}");
            let data: Value = serde_json::from_str(e.data.as_deref().unwrap()).unwrap();
            let (t, i) = (data["t"].as_str().unwrap(), data["i"].as_i64().unwrap());
            let expected = next.entry(t.to_string()).or_insert(0);
            assert_eq!(i, *expected, "{t}: in order, none twice, none missing");
            *expected += 1;
        }
    }
    // Nothing more: the next message on each node is the one published now.
    let last = kill_pubsub(&mut redis).await;
    assert!(last >= 1);
    publish_until_ok(&a, &topics[0], json!("end")).await;
    for sse in &mut clients {
        let e = sse.next_event().await.unwrap();
        assert_eq!(e.data.as_deref(), Some("end"), "{e:?}");
    }
    for gw in [a, b] {
        gw.stop().await.unwrap();
    }
}

/// Publishes through `gw`'s admin API until it is answered 200 (a 503 while the node's
/// reader reconnects), with one idempotency key for every try.
async fn publish_until_ok(gw: &herald_gateway::Gateway, topic: &str, data: Value) -> String {
    let key = format!("k-{:x}", rand::random::<u64>());
    let body = json!({ "topic": topic, "data": data });
    for _ in 0..100 {
        let resp = post_json(
            format!("http://{}/v1/publish", gw.admin_addr),
            &[("idempotency-key", key.as_str())],
            &body,
        )
        .await;
        if resp.status() == 200 {
            let reply: Value = resp.json().await.unwrap();
            return reply["id"].as_str().unwrap().to_string();
        }
        assert_eq!(resp.status(), 503, "{}", resp.text().await.unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{topic}: no publish went through in 100 tries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_nobody_published_to_resumes_from_its_opening_id_on_every_node() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let p = prefix("opening");
    let (a, b) = (
        spawn_ready(cluster_config(&p, "a")).await,
        spawn_ready(cluster_config(&p, "b")).await,
    );
    // Opening ids of topics that never had a message, on node a: SSE's opening block,
    // WebSocket's `subscribed` cursors, long-poll's cursor.
    let mut sse = SseClient::connect(&a, "topic=fresh.sse", None).await;
    let opening = sse.next_block().await.unwrap().id.expect("an opening id");
    let mut ws = ws_connect(&a).await;
    let subscribed = ws_subscribe(&mut ws, &["fresh.ws"]).await;
    let ws_cursor = subscribed["cursors"]["fresh.ws"]
        .as_str()
        .unwrap()
        .to_string();
    let poll: Value = get_json(format!(
        "http://{}/v1/poll?topic=fresh.poll&timeout=0",
        a.public_addr
    ))
    .await;
    let poll_cursor = poll["cursor"].as_str().unwrap().to_string();
    drop((sse, ws));
    // Three messages each, published through node b.
    for i in 0..3 {
        for t in ["fresh.sse", "fresh.ws", "fresh.poll"] {
            publish(&b, t, json!(i)).await;
        }
    }
    for gw in [&a, &b] {
        // SSE: Last-Event-ID from the opening block replays 0, 1, 2.
        let mut sse = SseClient::connect(gw, "topic=fresh.sse", Some(&opening)).await;
        for i in 0..3 {
            let e = sse.next_event().await.unwrap();
            assert_ne!(e.event.as_deref(), Some("herald.lost"), "{e:?}");
            assert_eq!(e.data.as_deref(), Some(i.to_string().as_str()), "{e:?}");
        }
        // WebSocket: the `subscribed` cursor.
        let mut ws = ws_connect(gw).await;
        ws_send(
            &mut ws,
            json!({"type": "subscribe", "topics": ["fresh.ws"], "cursors": {"fresh.ws": ws_cursor}}),
        )
        .await;
        assert_eq!(ws_next(&mut ws).await["type"], "subscribed");
        for i in 0..3 {
            let m = ws_next(&mut ws).await;
            assert_eq!(m["type"], "message", "{m}");
            assert_eq!(m["data"], json!(i), "{m}");
        }
        // Long-poll: the poll cursor.
        let cursor: String = form_urlencoded::byte_serialize(poll_cursor.as_bytes()).collect();
        let page: Value = get_json(format!(
            "http://{}/v1/poll?topic=fresh.poll&cursor={cursor}&timeout=0",
            gw.public_addr
        ))
        .await;
        let lost = page["lost"].as_array().map_or(0, Vec::len);
        assert_eq!(lost, 0, "nothing lost: {page}");
        let got: Vec<Value> = page["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["data"].clone())
            .collect();
        assert_eq!(got, vec![json!(0), json!(1), json!(2)], "{page}");
    }
    for gw in [a, b] {
        gw.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_retried_with_its_key_on_another_node_returns_the_first_id_and_arrives_once() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let p = prefix("idem");
    let (a, b) = (
        spawn_ready(cluster_config(&p, "a")).await,
        spawn_ready(cluster_config(&p, "b")).await,
    );
    let mut sse = SseClient::connect(&b, "topic=orders&topic=invoices", None).await;
    sse.next_block().await.unwrap();
    let keyed = |gw: &herald_gateway::Gateway, topic: &str, key: &str, data: Value| {
        let url = format!("http://{}/v1/publish", gw.admin_addr);
        let (topic, key) = (topic.to_string(), key.to_string());
        async move {
            // As a publisher would: a 503 (its fate unknown) is tried again with the key.
            let body = json!({"topic": topic, "data": data});
            for _ in 0..50 {
                let headers = [("idempotency-key", key.as_str())];
                let resp = post_json(url.clone(), &headers, &body).await;
                if resp.status() == 503 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                assert_eq!(resp.status(), 200);
                let answer: Value = resp.json().await.unwrap();
                return answer["id"].as_str().unwrap().to_string();
            }
            panic!("{topic}: no answer but 503 in 50 tries");
        }
    };
    let first = keyed(&a, "orders", "order-1", json!(1)).await;
    // The publisher did not hear back and tries again, through the other node: same id.
    assert_eq!(keyed(&b, "orders", "order-1", json!(1)).await, first);
    assert_eq!(keyed(&a, "orders", "order-1", json!(1)).await, first);
    // Another key, or the same key on another topic, is another message.
    let second = keyed(&b, "orders", "order-2", json!(2)).await;
    assert_ne!(second, first);
    let other = keyed(&a, "invoices", "order-1", json!(3)).await;
    assert_ne!(other, first);
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(sse.next_event().await.unwrap().data.unwrap());
    }
    got.sort();
    assert_eq!(got, vec!["1", "2", "3"], "each message once");
    // Nothing else arrives: the next one is the one published now.
    publish(&a, "orders", json!("end")).await;
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("end"));
    for gw in [a, b] {
        gw.stop().await.unwrap();
    }
}
