//! Interest routing over Kafka: a node reads the partitions of its subscribed topics only.

use super::*;

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

const PARTITIONS_FOLLOWED: &str = r#"herald_bridge_groups_followed{bridge="kafka"}"#;
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
        metric(&a, PARTITIONS_FOLLOWED).await,
        0.0,
        "nothing subscribed yet"
    );
    let query = format!("topic={}&topic={}", topics[0], topics[1]);
    let mut sse = SseClient::connect(&a, &query, None).await;
    sse.next_block().await.unwrap();
    let mut ws = ws_connect(&b).await;
    ws_subscribe(&mut ws, &[&topics[2], &topics[3]]).await;
    assert_eq!(metric(&a, PARTITIONS_FOLLOWED).await, 2.0);
    assert_eq!(metric(&b, PARTITIONS_FOLLOWED).await, 2.0);

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
        assert_eq!(metric(gw, PARTITIONS_FOLLOWED).await, 2.0);
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
    assert_eq!(
        metric(&b, PARTITIONS_FOLLOWED).await,
        0.0,
        "b follows nothing"
    );

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
    assert_eq!(metric(&b, PARTITIONS_FOLLOWED).await, 1.0);
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
    assert_eq!(metric(&c, PARTITIONS_FOLLOWED).await, 1.0);
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
    assert_eq!(metric(&gw, PARTITIONS_FOLLOWED).await, 6.0);
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
    assert_eq!(metric(&gw, PARTITIONS_FOLLOWED).await, 1.0);
    drop(sse);
    eventually(WAIT, || async {
        metric(&gw, PARTITIONS_FOLLOWED).await == 0.0
    })
    .await;
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
    assert_eq!(metric(&gw, PARTITIONS_FOLLOWED).await, 1.0);
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
