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

mod idempotency;
mod interest;

fn brokers() -> String {
    std::env::var("HERALD_TEST_KAFKA_BROKERS").expect(
        "HERALD_TEST_KAFKA_BROKERS is not set: run the suite with deploy/test.sh, which starts a real Kafka broker",
    )
}

pub(crate) async fn create_topic(name: &str) {
    create_topic_with(name, 3).await;
}

async fn create_topic_with(name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap();
    let results = admin
        .create_topics(
            &[NewTopic::new(name, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    for r in results {
        r.unwrap();
    }
}

pub(crate) fn kafka_config(kafka_topic: &str, node: &str) -> Config {
    let mut config = test_config();
    config.cluster.kafka_brokers = Some(brokers());
    config.cluster.kafka_topics = vec![kafka_topic.to_string()];
    config.cluster.node_id = node.to_string();
    config
}

pub(crate) fn producer() -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap()
}

/// Produces a record the way another service would: routing in headers, JSON value.
pub(crate) async fn produce(
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

/// Waits until consumer group `group` has committed, over every partition of `kafka_topic`,
/// offsets that add up to at least `records` (the node has stored its position).
async fn committed_past(group: &str, kafka_topic: &str, records: i64) {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", group)
        .create()
        .unwrap();
    let mut partitions = rdkafka::TopicPartitionList::new();
    for p in 0..3 {
        partitions.add_partition(kafka_topic, p);
    }
    eventually(WAIT, || {
        let committed = consumer
            .committed_offsets(partitions.clone(), Duration::from_secs(5))
            .map(|list| {
                list.elements()
                    .iter()
                    .filter_map(|e| match e.offset() {
                        rdkafka::Offset::Offset(o) => Some(o),
                        _ => None,
                    })
                    .sum::<i64>()
            })
            .unwrap_or(0);
        async move { committed >= records }
    })
    .await;
}

pub(crate) fn unique(name: &str) -> String {
    format!("{name}-{:x}", rand::random::<u32>())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_record_reaches_sse_and_websocket_subscribers_on_every_node() {
    skip_without!("HERALD_TEST_KAFKA_BROKERS");
    let kt = unique("ingest");
    create_topic(&kt).await;
    let a = spawn_ready(kafka_config(&kt, &unique("a"))).await;
    let b = spawn_ready(kafka_config(&kt, &unique("b"))).await;
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
    skip_without!("HERALD_TEST_KAFKA_BROKERS");
    let kt = unique("restart");
    create_topic(&kt).await;
    let node = unique("node");
    let gw = spawn_ready(kafka_config(&kt, &node)).await;
    let mut sse = SseClient::connect(&gw, "topic=r", None).await;
    sse.next_block().await.unwrap();
    let p = producer();
    produce(&p, &kt, "r", None, json!(1)).await;
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("1"));
    let last = sse.last_event_id.clone().unwrap();
    drop(sse);
    // Once the node's group has committed past the record, stop the node.
    committed_past(&format!("herald-{node}"), &kt, 1).await;
    gw.stop().await.unwrap();

    for i in 2..=4 {
        produce(&p, &kt, "r", None, json!(i)).await;
    }
    let gw = spawn_ready(kafka_config(&kt, &node)).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_events_are_produced_upstream_with_headers() {
    skip_without!("HERALD_TEST_KAFKA_BROKERS");
    use rdkafka::Message as _;
    use rdkafka::consumer::{Consumer as _, StreamConsumer};
    use rdkafka::message::Headers as _;

    let kt = unique("ingest");
    let up = unique("upstream");
    create_topic(&kt).await;
    create_topic(&up).await;
    let node = unique("up-node");
    let mut config = kafka_config(&kt, &node);
    config.cluster.kafka_upstream_topic = Some(up.clone());
    config.dev = true;
    let gw = spawn_ready(config).await;

    let mut ws = ws_connect(&gw).await;
    ws_send(
        &mut ws,
        json!({"type": "publish", "topic": "chat", "data": {"text": "hi"}, "event": "said"}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await["type"], "published");
    drop(ws);

    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", unique("reader"))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[&up]).unwrap();
    let mut seen: Vec<(
        String,
        std::collections::HashMap<String, String>,
        serde_json::Value,
    )> = Vec::new();
    while seen.len() < 3 {
        let m = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .expect("upstream record")
            .unwrap();
        let headers: std::collections::HashMap<String, String> = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| {
                        (
                            h.key.to_string(),
                            String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let value: serde_json::Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
        seen.push((headers["herald-type"].clone(), headers, value));
    }
    let kinds: Vec<&str> = seen.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(kinds, ["connect", "publish", "disconnect"]);
    let connection = seen[0].1["herald-connection"].clone();
    // A cluster-unique id: a Kafka-only node's number is a hash of its node id.
    let id: u64 = connection.parse().expect("a decimal connection id");
    assert_eq!(
        herald_gateway::node_of(id),
        herald_gateway::ConnectionIds::hashed(&node)
    );
    for (_, headers, _) in &seen {
        assert_eq!(headers["herald-connection"], connection);
        assert_eq!(headers["herald-node"], node);
    }
    assert_eq!(seen[0].2["transport"], "ws");
    assert_eq!(seen[1].1["herald-topic"], "chat");
    assert_eq!(seen[1].1["herald-event"], "said");
    assert_eq!(seen[1].2, json!({"text": "hi"}));
    assert_eq!(seen[2].2["reason"], "client");
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_topic_is_carried_by_one_log_and_records_from_the_other_are_refused() {
    skip_without!("HERALD_TEST_KAFKA_BROKERS", "HERALD_TEST_REDIS_URL");
    let kt = unique("carried");
    create_topic(&kt).await;
    let node = unique("both");
    let mut config = cluster_config(&unique("test-carried"), &node);
    config.cluster.kafka_brokers = Some(brokers());
    config.cluster.kafka_topics = vec![kt.clone()];
    // Both logs and no say in which carries what: refused at start, not an epoch flip later.
    let refused = herald_gateway::Gateway::start(config.clone())
        .await
        .unwrap_err();
    assert!(
        format!("{refused:#}").contains("cluster.kafka_prefixes"),
        "{refused:#}"
    );
    config.cluster.kafka_prefixes = vec!["orders.".into()];
    // Every partition read: under interest routing a record for `chat` lands in a partition
    // this node need not follow (only `orders.1`'s), and would never be seen to be refused.
    config.cluster.routing = herald_gateway::config::Routing::Broadcast;
    let gw = spawn_ready(config).await;
    let mut orders = SseClient::connect(&gw, "topic=orders.1", None).await;
    orders.next_block().await.unwrap();
    let mut chat = SseClient::connect(&gw, "topic=chat", None).await;
    chat.next_block().await.unwrap();

    // The HTTP API publishes each topic to the log that carries it: orders.* to Kafka (the
    // position is a Kafka offset: sequence 1 of a fresh partition), the rest to Redis.
    let via_kafka = publish(&gw, "orders.1", json!("o1")).await;
    assert_eq!(
        orders.next_event().await.unwrap().data.as_deref(),
        Some("o1")
    );
    assert!(
        via_kafka.ends_with("-1"),
        "a Kafka offset position: {via_kafka}"
    );
    let via_redis = publish(&gw, "chat", json!("c1")).await;
    assert_eq!(chat.next_event().await.unwrap().data.as_deref(), Some("c1"));
    assert_ne!(
        via_kafka.split('-').next(),
        via_redis.split('-').next(),
        "two logs, two epochs"
    );

    // A record for a Redis-fed topic produced to Kafka is refused, loudly.
    let p = producer();
    produce(&p, &kt, "chat", None, json!("from kafka")).await;
    produce(&p, &kt, "orders.1", None, json!("o2")).await;
    assert_eq!(
        orders.next_event().await.unwrap().data.as_deref(),
        Some("o2")
    );
    let refused = r#"herald_bridge_messages_total{bridge="kafka",direction="refused"} 1"#;
    eventually(Duration::from_secs(10), || async {
        metrics_text(&gw).await.contains(refused)
    })
    .await;
    // The chat topic kept its Redis history and epoch: the next message follows c1 directly.
    publish(&gw, "chat", json!("c2")).await;
    let next = chat.next_event().await.unwrap();
    assert_eq!(next.data.as_deref(), Some("c2"), "{next:?}");
    gw.stop().await.unwrap();
}

/// A record whose `herald-format` header says `msgpack` reaches a `herald.msgpack` socket as
/// produced and an SSE stream in its JSON form; a MessagePack publish through the HTTP API of
/// a Kafka node is produced with the header and the payload as sent; a record that is not
/// valid MessagePack is skipped and the next one still arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_msgpack_record_reaches_msgpack_and_json_subscribers() {
    use crate::msgpack::{field, map, mp_connect, mp_next, mp_subscribe, post_msgpack};
    use rmpv::Value as Mp;
    skip_without!("HERALD_TEST_KAFKA_BROKERS");
    let kt = unique("msgpack");
    create_topic(&kt).await;
    let a = spawn_ready(kafka_config(&kt, &unique("a"))).await;
    let b = spawn_ready(kafka_config(&kt, &unique("b"))).await;
    let mut sse = SseClient::connect(&a, "topic=packed", None).await;
    sse.next_block().await.unwrap();
    let mut ws = mp_connect(&b).await;
    mp_subscribe(&mut ws, &["packed"]).await;

    let produce_raw = async |format: &str, value: &[u8]| {
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "herald-topic",
                value: Some("packed"),
            })
            .insert(Header {
                key: "herald-format",
                value: Some(format),
            });
        let record = FutureRecord::to(&kt)
            .key("packed")
            .payload(value)
            .headers(headers);
        producer()
            .send(record, Duration::from_secs(10))
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    };
    let data = map(vec![("bin", Mp::Binary(vec![1, 2, 3])), ("n", 5.into())]);
    let mut value = Vec::new();
    rmpv::encode::write_value(&mut value, &data).unwrap();
    // Not MessagePack at all (a reserved marker): skipped.
    produce_raw("msgpack", &[0xc1]).await;
    produce_raw("msgpack", &value).await;
    let message = mp_next(&mut ws).await;
    assert_eq!(field(&message, "data"), &data);
    let e = sse.next_event().await.unwrap();
    assert_eq!(e.data.as_deref(), Some(r#"{"bin":"AQID","n":5}"#));

    // Through the HTTP API of a Kafka node: produced as MessagePack, delivered as sent.
    let sent = map(vec![
        ("topic", "packed".into()),
        ("data", Mp::Binary(vec![0xff])),
    ]);
    assert_eq!(post_msgpack(&a, "/v1/publish", &sent).await.status(), 200);
    assert_eq!(
        field(&mp_next(&mut ws).await, "data"),
        &Mp::Binary(vec![0xff])
    );
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some("/w=="),
        "a string is sent as its text"
    );
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}
