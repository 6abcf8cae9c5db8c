//! The Kafka bridge against a real broker (`deploy/test.sh` starts one).

use std::time::Duration;

use herald_gateway::Config;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::json;

use crate::common::*;

fn brokers() -> String {
    std::env::var("HERALD_TEST_KAFKA_BROKERS").expect(
        "HERALD_TEST_KAFKA_BROKERS is not set: run the suite with deploy/test.sh, which starts a real Kafka broker",
    )
}

async fn create_topic(name: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap();
    let results = admin
        .create_topics(
            &[NewTopic::new(name, 3, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    for r in results {
        r.unwrap();
    }
}

fn kafka_config(kafka_topic: &str, node: &str) -> Config {
    let mut config = test_config();
    config.cluster.kafka_brokers = Some(brokers());
    config.cluster.kafka_topics = vec![kafka_topic.to_string()];
    config.cluster.node_id = node.to_string();
    config
}

fn producer() -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap()
}

/// Produces a record the way another service would: routing in headers, JSON value.
async fn produce(
    p: &FutureProducer,
    kafka_topic: &str,
    herald_topic: &str,
    event: Option<&str>,
    value: serde_json::Value,
) {
    let mut headers = OwnedHeaders::new()
        .insert(Header {
            key: "herald-topic",
            value: Some(herald_topic),
        })
        .insert(Header {
            key: "trace-id",
            value: Some("abc123"),
        });
    if let Some(e) = event {
        headers = headers.insert(Header {
            key: "herald-event",
            value: Some(e),
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

fn unique(name: &str) -> String {
    format!("{name}-{:x}", rand::random::<u32>())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_record_reaches_sse_and_websocket_subscribers_on_every_node() {
    let kt = unique("ingest");
    create_topic(&kt).await;
    let a = spawn_gateway(kafka_config(&kt, &unique("a"))).await;
    let b = spawn_gateway(kafka_config(&kt, &unique("b"))).await;
    wait_ready(&a, 200).await;
    wait_ready(&b, 200).await;
    let mut sse = SseClient::connect(&a, "topic=orders", None).await;
    sse.next_block().await.unwrap();
    let mut ws = ws_connect(&b).await;
    ws_subscribe(&mut ws, &["orders"]).await;

    let p = producer();
    for i in 0..3 {
        produce(
            &p,
            &kt,
            "orders",
            Some("order.created"),
            json!({"order": i}),
        )
        .await;
    }
    for i in 0..3 {
        let e = sse.next_event().await.unwrap();
        assert_eq!(e.event.as_deref(), Some("order.created"));
        assert_eq!(e.data.unwrap(), json!({"order": i}).to_string());
        let frame = ws_next(&mut ws).await;
        assert_eq!(frame["data"], json!({"order": i}));
        assert_eq!(frame["event"], "order.created");
        assert_eq!(
            e.id.unwrap(),
            format!("orders={}", frame["id"].as_str().unwrap()),
            "one id on every node"
        );
    }
    // Publishing through the HTTP API of a Kafka-only node goes through Kafka too.
    let id = publish(&b, "orders", json!("via http")).await;
    let e = sse.next_event().await.unwrap();
    assert_eq!(e.data.as_deref(), Some("via http"));
    assert_eq!(e.id.unwrap(), format!("orders={id}"));
    assert_eq!(ws_next(&mut ws).await["id"], json!(id));
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_loses_no_record_and_clients_resume_on_it() {
    let kt = unique("restart");
    create_topic(&kt).await;
    let node = unique("node");
    let gw = spawn_gateway(kafka_config(&kt, &node)).await;
    wait_ready(&gw, 200).await;
    let mut sse = SseClient::connect(&gw, "topic=r", None).await;
    sse.next_block().await.unwrap();
    let p = producer();
    produce(&p, &kt, "r", None, json!(1)).await;
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("1"));
    let last = sse.last_event_id.clone().unwrap();
    drop(sse);
    // Let the position be committed, then stop the node.
    tokio::time::sleep(Duration::from_secs(1)).await;
    gw.stop().await.unwrap();

    for i in 2..=4 {
        produce(&p, &kt, "r", None, json!(i)).await;
    }
    let gw = spawn_gateway(kafka_config(&kt, &node)).await;
    wait_ready(&gw, 200).await;
    let mut sse = SseClient::connect(&gw, "topic=r", Some(&last)).await;
    let mut got = Vec::new();
    while got.len() < 3 {
        let e = sse.next_event().await.unwrap();
        assert_ne!(e.event.as_deref(), Some("herald.lost"), "{e:?}");
        got.push(e.data.unwrap());
    }
    assert_eq!(got, ["2", "3", "4"]);
    gw.stop().await.unwrap();
}
