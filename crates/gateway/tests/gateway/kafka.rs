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
async fn each_topic_is_fed_by_one_log_and_records_from_the_other_are_refused() {
    skip_without!("HERALD_TEST_KAFKA_BROKERS", "HERALD_TEST_REDIS_URL");
    let kt = unique("feeds");
    create_topic(&kt).await;
    let node = unique("both");
    let mut config = cluster_config(&unique("test-feeds"), &node);
    config.cluster.kafka_brokers = Some(brokers());
    config.cluster.kafka_topics = vec![kt.clone()];
    // Both logs and no say in who feeds what: refused at start, not an epoch flip later.
    let refused = herald_gateway::Gateway::start(config.clone())
        .await
        .unwrap_err();
    assert!(
        format!("{refused:#}").contains("cluster.kafka_feeds"),
        "{refused:#}"
    );
    config.cluster.kafka_feeds = vec!["orders.".into()];
    // Every partition read: under interest routing a record for `chat` lands in a partition
    // this node need not follow (only `orders.1`'s), and would never be seen to be refused.
    config.cluster.routing = herald_gateway::config::Routing::Broadcast;
    let gw = spawn_ready(config).await;
    let mut orders = SseClient::connect(&gw, "topic=orders.1", None).await;
    orders.next_block().await.unwrap();
    let mut chat = SseClient::connect(&gw, "topic=chat", None).await;
    chat.next_block().await.unwrap();

    // The HTTP API publishes each topic to the log that feeds it: orders.* to Kafka (the
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

/// `count` Herald topics that a producer keying records by the Herald topic (librdkafka's
/// default partitioner, as Herald's `cluster.kafka_partitioner = "consistent"`) puts in
/// distinct partitions of a topic with `partitions` partitions: found by producing to a probe
/// topic of that many partitions and reading where each record landed.
async fn topics_in_distinct_partitions(prefix: &str, partitions: i32, count: usize) -> Vec<String> {
    let probe = unique("probe");
    create_topic_with(&probe, partitions).await;
    let p = producer();
    let mut found: Vec<(String, i32)> = Vec::new();
    for i in 0.. {
        let name = format!("{prefix}-{i}");
        let record = FutureRecord::to(&probe).key(&name).payload("probe");
        let delivery = p
            .send(record, Duration::from_secs(10))
            .await
            .map_err(|(e, _)| e)
            .unwrap();
        if !found
            .iter()
            .any(|(_, partition)| *partition == delivery.partition)
        {
            found.push((name, delivery.partition));
        }
        if found.len() == count {
            break;
        }
    }
    found.into_iter().map(|(name, _)| name).collect()
}

const GROUPS_FOLLOWED: &str = r#"herald_bridge_groups_followed{bridge="kafka"}"#;
const MESSAGES_IN: &str = r#"herald_bridge_messages_total{bridge="kafka",direction="in"}"#;

/// Interest routing: two nodes over a Kafka topic of 6 partitions, each with subscribers for
/// its own topics (in distinct partitions), read only the partitions of those topics, while
/// every subscriber gets every message of its topics once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_reads_only_the_partitions_of_its_subscribed_topics() {
    skip_without!("HERALD_TEST_KAFKA_BROKERS");
    let kt = unique("interest");
    create_topic_with(&kt, 6).await;
    let topics = topics_in_distinct_partitions("room", 6, 4).await;
    let a = spawn_ready(kafka_config(&kt, &unique("a"))).await;
    let b = spawn_ready(kafka_config(&kt, &unique("b"))).await;
    assert_eq!(
        metric(&a, GROUPS_FOLLOWED).await,
        0.0,
        "nothing subscribed yet"
    );
    let query = format!("topic={}&topic={}", topics[0], topics[1]);
    let mut sse = SseClient::connect(&a, &query, None).await;
    sse.next_block().await.unwrap();
    let mut ws = ws_connect(&b).await;
    ws_subscribe(&mut ws, &[&topics[2], &topics[3]]).await;
    assert_eq!(metric(&a, GROUPS_FOLLOWED).await, 2.0);
    assert_eq!(metric(&b, GROUPS_FOLLOWED).await, 2.0);

    let p = producer();
    const EACH: usize = 5;
    for i in 0..EACH {
        for topic in &topics {
            produce(&p, &kt, topic, None, json!({"topic": topic, "n": i})).await;
        }
    }
    let produced = (EACH * topics.len()) as f64;
    // Node a: its two topics, each message once and in order.
    let mut seen: std::collections::HashMap<String, Vec<u64>> = Default::default();
    for _ in 0..2 * EACH {
        let e = sse.next_event().await.unwrap();
        let data: serde_json::Value = serde_json::from_str(&e.data.unwrap()).unwrap();
        let topic = data["topic"].as_str().unwrap().to_string();
        assert!(topic == topics[0] || topic == topics[1], "{data}");
        seen.entry(topic)
            .or_default()
            .push(data["n"].as_u64().unwrap());
    }
    let in_order: Vec<u64> = (0..EACH as u64).collect();
    assert_eq!(seen[&topics[0]], in_order);
    assert_eq!(seen[&topics[1]], in_order);
    // Node b: the same over a WebSocket.
    let mut seen: std::collections::HashMap<String, Vec<u64>> = Default::default();
    for _ in 0..2 * EACH {
        let frame = ws_next(&mut ws).await;
        let topic = frame["data"]["topic"].as_str().unwrap().to_string();
        assert!(topic == topics[2] || topic == topics[3], "{frame}");
        seen.entry(topic)
            .or_default()
            .push(frame["data"]["n"].as_u64().unwrap());
    }
    assert_eq!(seen[&topics[2]], in_order);
    assert_eq!(seen[&topics[3]], in_order);
    // Nothing more (no duplicate) on either.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), sse.next_event())
            .await
            .is_err(),
        "a duplicate reached node a's subscriber"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(500), ws_next(&mut ws))
            .await
            .is_err(),
        "a duplicate reached node b's subscriber"
    );
    // Each node read its own partitions only: below the 6 partitions and what was produced.
    for gw in [&a, &b] {
        assert_eq!(metric(gw, GROUPS_FOLLOWED).await, 2.0);
        let read = metric(gw, MESSAGES_IN).await;
        assert_eq!(
            read,
            2.0 * EACH as f64,
            "read its two topics' messages only"
        );
        assert!(read < produced);
    }
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

/// Interest routing: a client resumes, with a cursor issued by another node, on a node that
/// never followed its topic's partition: exactly the messages after the cursor, then live;
/// `last=N` and the history API on a third such node answer as everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_resumes_exactly_on_a_node_that_never_followed_its_partition() {
    skip_without!("HERALD_TEST_KAFKA_BROKERS");
    let kt = unique("resume");
    create_topic_with(&kt, 6).await;
    let a = spawn_ready(kafka_config(&kt, &unique("a"))).await;
    let b = spawn_ready(kafka_config(&kt, &unique("b"))).await;
    let c = spawn_ready(kafka_config(&kt, &unique("c"))).await;
    // Another topic's traffic, in whatever partitions it lands.
    let p = producer();
    for i in 0..5 {
        produce(&p, &kt, &format!("noise-{i}"), None, json!("noise")).await;
    }
    let mut sse = SseClient::connect(&a, "topic=doc", None).await;
    sse.next_block().await.unwrap();
    let mut ids = Vec::new();
    for i in 1..=4 {
        ids.push(publish(&a, "doc", json!(i)).await);
        let e = sse.next_event().await.unwrap();
        assert_eq!(e.data.as_deref(), Some(i.to_string().as_str()));
    }
    // A cursor from node a, after message 2.
    let cursor = format!("doc={}", ids[1]);
    drop(sse);
    assert_eq!(metric(&b, GROUPS_FOLLOWED).await, 0.0, "b follows nothing");

    let mut resumed = SseClient::connect(&b, "topic=doc", Some(&cursor)).await;
    for i in 3..=4 {
        let e = resumed.next_event().await.unwrap();
        assert_ne!(e.event.as_deref(), Some("herald.lost"), "{e:?}");
        assert_eq!(e.data.as_deref(), Some(i.to_string().as_str()));
        assert_eq!(
            e.id.unwrap(),
            format!("doc={}", ids[i - 1]),
            "one id everywhere"
        );
    }
    assert_eq!(metric(&b, GROUPS_FOLLOWED).await, 1.0);
    // Then live, from a publish on another node.
    let id = publish(&a, "doc", json!(5)).await;
    let e = resumed.next_event().await.unwrap();
    assert_eq!(
        (e.data.as_deref(), e.id),
        (Some("5"), Some(format!("doc={id}")))
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(500), resumed.next_event())
            .await
            .is_err(),
        "nothing more: no duplicate"
    );
    ids.push(id);

    // Node c never followed it either: the history API, then `last=2`.
    let page = get_json(format!(
        "http://{}/v1/topics/doc/history?limit=10",
        c.admin_addr
    ))
    .await;
    let messages = page["messages"].as_array().unwrap();
    let got: Vec<(serde_json::Value, String)> = messages
        .iter()
        .map(|m| (m["data"].clone(), m["id"].as_str().unwrap().to_string()))
        .collect();
    let expected: Vec<(serde_json::Value, String)> = (1..=5)
        .map(|i| (json!(i), ids[i as usize - 1].clone()))
        .collect();
    assert_eq!(got, expected, "{page}");
    let mut last = SseClient::connect(&c, "topic=doc&last=2", None).await;
    for i in 4..=5 {
        let e = last.next_event().await.unwrap();
        assert_eq!(e.data.as_deref(), Some(i.to_string().as_str()));
    }
    // A node that follows the partition reads only it: below the 6 partitions.
    assert_eq!(metric(&c, GROUPS_FOLLOWED).await, 1.0);
    a.stop().await.unwrap();
    b.stop().await.unwrap();
    c.stop().await.unwrap();
}

/// Broadcast routing: every partition of every configured topic, whatever is subscribed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_routing_reads_every_partition() {
    skip_without!("HERALD_TEST_KAFKA_BROKERS");
    let kt = unique("broadcast");
    create_topic_with(&kt, 6).await;
    let mut config = kafka_config(&kt, &unique("all"));
    config.cluster.routing = herald_gateway::config::Routing::Broadcast;
    let gw = spawn_ready(config).await;
    assert_eq!(metric(&gw, GROUPS_FOLLOWED).await, 6.0);
    let p = producer();
    for i in 0..6 {
        produce(&p, &kt, &format!("t-{i}"), None, json!(i)).await;
    }
    eventually(WAIT, || async { metric(&gw, MESSAGES_IN).await == 6.0 }).await;
    // A record written to a partition its key does not hash to is delivered here (this node
    // reads them all) and counted: the check to make before switching to interest routing.
    for partition in 0..6 {
        let record = FutureRecord::to(&kt)
            .key("placed")
            .partition(partition)
            .payload("1");
        p.send(record, Duration::from_secs(10))
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }
    let misrouted = r#"herald_bridge_messages_total{bridge="kafka",direction="misrouted"}"#;
    eventually(WAIT, || async { metric(&gw, misrouted).await == 5.0 }).await;
    gw.stop().await.unwrap();
}

/// Interest routing: a partition with no subscriber left is dropped after the linger (its
/// topics forgotten), and read again from the history window when a subscription wants it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_is_dropped_after_the_linger_and_read_again_when_wanted() {
    skip_without!("HERALD_TEST_KAFKA_BROKERS");
    let kt = unique("linger");
    create_topic_with(&kt, 6).await;
    let mut config = kafka_config(&kt, &unique("linger"));
    config.cluster.interest_linger = Duration::from_secs(1);
    let gw = spawn_ready(config).await;
    let mut sse = SseClient::connect(&gw, "topic=note", None).await;
    sse.next_block().await.unwrap();
    let mut ids = Vec::new();
    for i in 1..=2 {
        ids.push(publish(&gw, "note", json!(i)).await);
        assert_eq!(
            sse.next_event().await.unwrap().data.as_deref(),
            Some(i.to_string().as_str())
        );
    }
    assert_eq!(metric(&gw, GROUPS_FOLLOWED).await, 1.0);
    drop(sse);
    eventually(WAIT, || async { metric(&gw, GROUPS_FOLLOWED).await == 0.0 }).await;
    // Published while the node does not read the partition.
    ids.push(publish(&gw, "note", json!(3)).await);
    let mut sse = SseClient::connect(&gw, "topic=note&last=10", None).await;
    for i in 1..=3 {
        let e = sse.next_event().await.unwrap();
        assert_eq!(
            (e.data.as_deref(), e.id),
            (
                Some(i.to_string().as_str()),
                Some(format!("note={}", ids[i - 1]))
            )
        );
    }
    let id = publish(&gw, "note", json!(4)).await;
    let e = sse.next_event().await.unwrap();
    assert_eq!(
        (e.data.as_deref(), e.id),
        (Some("4"), Some(format!("note={id}")))
    );
    assert_eq!(metric(&gw, GROUPS_FOLLOWED).await, 1.0);
    gw.stop().await.unwrap();
}

/// `cluster.kafka_partitioner = "murmur2"` (Java's): Herald's producer places each topic where
/// the nodes look for it, so a node that follows only those partitions gets every publish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_murmur2_partitioner_publishes_land_where_nodes_read() {
    skip_without!("HERALD_TEST_KAFKA_BROKERS");
    let kt = unique("murmur2");
    create_topic_with(&kt, 6).await;
    let node = |name: &str| {
        let mut config = kafka_config(&kt, &unique(name));
        config.cluster.kafka_partitioner = herald_gateway::config::KafkaPartitioner::Murmur2;
        config
    };
    let a = spawn_ready(node("a")).await;
    let b = spawn_ready(node("b")).await;
    let topics: Vec<String> = (0..8).map(|i| format!("m-{i}")).collect();
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let mut ws = ws_connect(&b).await;
    ws_subscribe(&mut ws, &names).await;
    for topic in &topics {
        let id = publish(&a, topic, json!(topic)).await;
        let frame = ws_next(&mut ws).await;
        assert_eq!((&frame["topic"], &frame["id"]), (&json!(topic), &json!(id)));
    }
    // Every record b read was in the partition b computed for its topic.
    let misrouted = r#"herald_bridge_messages_total{bridge="kafka",direction="misrouted"}"#;
    assert_eq!(metric(&b, misrouted).await, 0.0);
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}
