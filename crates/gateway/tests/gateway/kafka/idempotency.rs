//! Retry-safe publishing through Kafka, against a real broker: records another service
//! produces with the same `herald-idempotency-key` reach subscribers on every node once,
//! and a publish retried through Herald's API is answered with the first id.

use std::time::Duration;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::{Value, json};

use super::{create_topic, kafka_config, producer, unique};
use crate::common::*;

/// Produces a JSON record for `herald_topic`, with `key` as its idempotency key when given.
async fn produce_keyed(
    p: &FutureProducer,
    kafka_topic: &str,
    herald_topic: &str,
    key: Option<&str>,
    value: Value,
) {
    let mut headers = OwnedHeaders::new().insert(Header {
        key: "herald-topic",
        value: Some(herald_topic),
    });
    if let Some(key) = key {
        headers = headers.insert(Header {
            key: "herald-idempotency-key",
            value: Some(key),
        });
    }
    let value = value.to_string();
    let record = FutureRecord::to(kafka_topic)
        .key(herald_topic)
        .payload(&value)
        .headers(headers);
    p.send(record, Duration::from_secs(10))
        .await
        .map_err(|(e, _)| e)
        .unwrap();
}

/// Publishes through `gw`'s admin API with an idempotency key: the id answered.
async fn publish_keyed(
    gw: &herald_gateway::Gateway,
    topic: &str,
    key: &str,
    data: Value,
) -> String {
    let body = json!({"topic": topic, "data": data, "idempotency_key": key});
    let resp = post_json(format!("http://{}/v1/publish", gw.admin_addr), &[], &body).await;
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.unwrap();
    answer["id"].as_str().unwrap().to_string()
}

/// The next `n` messages of a WebSocket subscriber: (id, data).
async fn ws_messages(ws: &mut WsStream, n: usize) -> Vec<(String, Value)> {
    let mut got = Vec::new();
    while got.len() < n {
        let frame = ws_next(ws).await;
        if frame["type"] == "message" {
            got.push((
                frame["id"].as_str().unwrap().to_string(),
                frame["data"].clone(),
            ));
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_and_publishes_retried_with_a_key_reach_every_node_once() {
    skip_without!("HERALD_TEST_KAFKA_BROKERS");
    let kt = unique("idem");
    create_topic(&kt).await;
    let a = spawn_ready(kafka_config(&kt, &unique("a"))).await;
    let b = spawn_ready(kafka_config(&kt, &unique("b"))).await;
    let mut on_a = ws_connect(&a).await;
    ws_subscribe(&mut on_a, &["orders"]).await;
    let mut on_b = ws_connect(&b).await;
    ws_subscribe(&mut on_b, &["orders"]).await;

    // Another service retries its produce: three records of one key, then another key,
    // the first key on another topic, and a record without a key to end with.
    let p = producer();
    for attempt in 0..3 {
        produce_keyed(
            &p,
            &kt,
            "orders",
            Some("svc-1"),
            json!({"k": 1, "attempt": attempt}),
        )
        .await;
    }
    produce_keyed(&p, &kt, "orders", Some("svc-2"), json!({"k": 2})).await;
    produce_keyed(&p, &kt, "audit", Some("svc-1"), json!({"k": "audit"})).await;
    // A key that is not one (a space) is ignored: both records are delivered.
    for _ in 0..2 {
        produce_keyed(&p, &kt, "orders", Some("not a key"), json!("unkeyed")).await;
    }
    produce_keyed(&p, &kt, "orders", None, json!("end")).await;
    let mut first_ids = Vec::new();
    for ws in [&mut on_a, &mut on_b] {
        let got = ws_messages(ws, 5).await;
        let data: Vec<&Value> = got.iter().map(|(_, d)| d).collect();
        let unkeyed = json!("unkeyed");
        assert_eq!(
            data,
            [
                &json!({"k": 1, "attempt": 0}),
                &json!({"k": 2}),
                &unkeyed,
                &unkeyed,
                &json!("end")
            ],
            "each key once, the first record of it"
        );
        first_ids.push(got[0].0.clone());
    }
    assert_eq!(first_ids[0], first_ids[1], "the same id on every node");

    // A retry of the service's key through Herald's API, on a node that read the first
    // record: answered with its id, nothing produced.
    assert_eq!(
        publish_keyed(&a, "orders", "svc-1", json!("late")).await,
        first_ids[0]
    );

    // A publish through the API, retried on the same node and then on the other: one id,
    // one message on every node.
    let published = publish_keyed(&a, "orders", "api-1", json!("published")).await;
    assert_eq!(
        publish_keyed(&a, "orders", "api-1", json!("published")).await,
        published
    );
    let got_b = ws_messages(&mut on_b, 1).await;
    assert_eq!(got_b[0], (published.clone(), json!("published")));
    // Node b has read it: a retry there is answered with it too.
    assert_eq!(
        publish_keyed(&b, "orders", "api-1", json!("published")).await,
        published
    );
    produce_keyed(&p, &kt, "orders", None, json!("end 2")).await;
    for ws in [&mut on_a, &mut on_b] {
        let mut got = ws_messages(ws, 1).await;
        if got[0].1 == json!("published") {
            got = ws_messages(ws, 1).await;
        }
        assert_eq!(got[0].1, json!("end 2"), "no retry was delivered: {got:?}");
    }
    let repeats = metric(
        &a,
        r#"herald_bridge_messages_total{bridge="kafka",direction="repeat"}"#,
    )
    .await;
    assert!(repeats >= 2.0, "the dropped records are counted: {repeats}");
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}
