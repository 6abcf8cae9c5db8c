//! Faults of the engines under a running cluster: Redis killed and restarted. A test binary
//! of its own, because it stops the Redis every other cluster test uses.

#[path = "gateway/common/mod.rs"]
mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::json;

fn engines(command: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/engines.sh");
    let status = Command::new(script)
        .arg(command)
        .status()
        .expect("engines.sh runs");
    assert!(status.success(), "deploy/engines.sh {command} failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_survive_a_redis_restart_and_say_what_may_have_been_lost() {
    let p = format!("test-faults-{:x}", rand::random::<u32>());
    let mut config_a = cluster_config(&p, "a");
    config_a.sse.heartbeat = Duration::from_millis(200);
    let a = spawn_gateway(config_a).await;
    let b = spawn_gateway(cluster_config(&p, "b")).await;
    wait_ready(&a, 200).await;
    wait_ready(&b, 200).await;
    let mut sse = SseClient::connect(&a, "topic=f", None).await;
    sse.next_block().await.unwrap();
    publish(&b, "f", json!("before")).await;
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some("before")
    );

    engines("kill-redis");
    wait_ready(&a, 503).await;
    wait_ready(&b, 503).await;
    // Publishing needs the bridge: a clear 503, not a silent local-only delivery.
    let resp = http()
        .post(format!("http://{}/v1/publish", b.admin_addr))
        .json(&json!({"topic": "f", "data": "during"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "bridge_unavailable");
    // Local connections keep being served: heartbeats still flow on the open stream.
    let raw = sse.rest(Duration::from_millis(700)).await;
    assert!(raw.contains(": ping"), "{raw:?}");

    engines("start-redis");
    wait_ready(&a, 200).await;
    wait_ready(&b, 200).await;
    publish(&b, "f", json!("after")).await;
    // Redis kept no data, so the nodes cannot know what they missed: the client is told,
    // then gets the new message.
    let lost = sse.next_event().await.unwrap();
    assert_eq!(lost.event.as_deref(), Some("herald.lost"), "{lost:?}");
    assert!(lost.data.unwrap().contains("epoch"));
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some("after")
    );
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_survives_a_kafka_broker_restart_without_losing_records() {
    use rdkafka::ClientConfig;
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{FutureProducer, FutureRecord};

    let brokers = std::env::var("HERALD_TEST_KAFKA_BROKERS")
        .expect("HERALD_TEST_KAFKA_BROKERS is not set: run the suite with deploy/test.sh");
    let kt = format!("faults-{:x}", rand::random::<u32>());
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create()
        .unwrap();
    for r in admin
        .create_topics(
            &[NewTopic::new(&kt, 1, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .unwrap()
    {
        r.unwrap();
    }
    let mut config = test_config();
    config.cluster.kafka_brokers = Some(brokers.clone());
    config.cluster.kafka_topics = vec![kt.clone()];
    config.sse.heartbeat = Duration::from_millis(200);
    let gw = spawn_gateway(config).await;
    wait_ready(&gw, 200).await;
    let mut sse = SseClient::connect(&gw, "topic=k", None).await;
    sse.next_block().await.unwrap();
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("message.timeout.ms", "60000")
        .create()
        .unwrap();
    let produce = |n: i32| {
        let value = n.to_string();
        let producer = producer.clone();
        let kt = kt.clone();
        async move {
            let headers = OwnedHeaders::new().insert(Header {
                key: "herald-topic",
                value: Some("k"),
            });
            let record = FutureRecord::to(&kt)
                .key("k")
                .payload(&value)
                .headers(headers);
            producer
                .send(record, Duration::from_secs(60))
                .await
                .map_err(|(e, _)| e)
                .unwrap();
        }
    };
    produce(1).await;
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("1"));

    engines("kill-kafka");
    wait_ready(&gw, 503).await;
    let raw = sse.rest(Duration::from_millis(700)).await;
    assert!(
        raw.contains(": ping"),
        "local connections keep being served: {raw:?}"
    );
    engines("start-kafka");
    wait_ready(&gw, 200).await;
    produce(2).await;
    produce(3).await;
    let mut got = Vec::new();
    while got.len() < 2 {
        let e = sse.next_event().await.unwrap();
        got.push(e.data.unwrap());
    }
    assert_eq!(got, ["2", "3"]);
    gw.stop().await.unwrap();
}
