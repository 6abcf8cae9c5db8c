//! Interest routing over a real Redis: a node reads only the streams (the log's partitions) holding
//! a topic it has a subscriber for, and every promise of a node that reads everything holds.

use std::collections::HashMap;
use std::time::Duration;

use herald_gateway::Gateway;
use serde_json::{Value, json};

use crate::common::*;

const PARTITIONS: u32 = 64;

fn prefix(test: &str) -> String {
    format!("test-interest-{test}-{:x}", rand::random::<u32>())
}

/// A node with the default routing (interest) over `PARTITIONS` streams.
fn node(prefix: &str, id: &str) -> herald_gateway::Config {
    let mut c = cluster_config(prefix, id);
    c.cluster.redis_shards = PARTITIONS;
    c
}

/// `n` topic names `<stem>.<i>`, each in a partition none of `taken` is in and none other of
/// them is in; their partitions are added to `taken`.
fn topics_in_own_partitions(stem: &str, n: usize, taken: &mut Vec<u32>) -> Vec<String> {
    let mut found = Vec::new();
    for i in 0.. {
        let name = format!("{stem}.{i}");
        let partition = herald_gateway::shard_of(&name, PARTITIONS);
        if !taken.contains(&partition) {
            taken.push(partition);
            found.push(name);
            if found.len() == n {
                break;
            }
        }
    }
    found
}

async fn redis_in(gw: &Gateway) -> f64 {
    metric(
        gw,
        r#"herald_bridge_messages_total{bridge="redis",direction="in"}"#,
    )
    .await
}

async fn partitions_followed(gw: &Gateway) -> f64 {
    metric(gw, r#"herald_bridge_groups_followed{bridge="redis"}"#).await
}

fn query(topics: &[String]) -> String {
    topics
        .iter()
        .map(|t| format!("topic={t}"))
        .collect::<Vec<_>>()
        .join("&")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_reads_only_what_its_subscribers_need_and_every_message_arrives_once_in_order() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let p = prefix("disjoint");
    let nodes = [
        spawn_ready(node(&p, "a")).await,
        spawn_ready(node(&p, "b")).await,
        spawn_ready(node(&p, "c")).await,
    ];
    let mut taken = Vec::new();
    let topics: Vec<Vec<String>> = ["a", "b", "c"]
        .iter()
        .map(|n| topics_in_own_partitions(&format!("room-{n}"), 4, &mut taken))
        .collect();
    let mut clients = Vec::new();
    for (gw, topics) in nodes.iter().zip(&topics) {
        let mut sse = SseClient::connect(gw, &query(topics), None).await;
        sse.next_block().await.unwrap();
        clients.push(sse);
    }
    for gw in &nodes {
        assert_eq!(
            partitions_followed(gw).await,
            4.0,
            "one partition per topic"
        );
    }
    // Every topic gets 10 messages, published through every node in turn.
    let per_topic = 10;
    let mut published = 0;
    for i in 0..per_topic {
        for (k, t) in topics.iter().flatten().enumerate() {
            publish(&nodes[(i + k) % 3], t, json!({"t": t, "i": i})).await;
            published += 1;
        }
    }
    for (sse, topics) in clients.iter_mut().zip(&topics) {
        let mut next: HashMap<String, i64> = HashMap::new();
        for _ in 0..topics.len() * per_topic {
            let e = sse.next_event().await.unwrap();
            let data: Value = serde_json::from_str(e.data.as_deref().unwrap()).unwrap();
            let (t, i) = (data["t"].as_str().unwrap(), data["i"].as_i64().unwrap());
            assert!(topics.iter().any(|x| x == t), "{t} is not subscribed here");
            let expected = next.entry(t.to_string()).or_insert(0);
            assert_eq!(i, *expected, "{t}: in order, none twice, none missing");
            *expected += 1;
        }
        assert!(next.values().all(|n| *n == per_topic as i64));
    }
    // Exactly once: a last message per node arrives next, nothing else before it.
    for (k, (gw, sse)) in nodes.iter().zip(clients.iter_mut()).enumerate() {
        publish(gw, &topics[k][0], json!("end")).await;
        assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("end"));
    }
    for gw in &nodes {
        let read = redis_in(gw).await;
        assert!(
            read <= published as f64 / 2.0,
            "a node read {read} of {published} messages: it should read only its own topics"
        );
        assert!(read >= (4 * per_topic) as f64);
    }
    for gw in nodes {
        gw.stop().await.unwrap();
    }
}

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// The data of the messages of a poll answer or history page.
fn data(page: &Value) -> Vec<Value> {
    page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["data"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_never_followed_a_topic_resumes_replays_and_answers_history_exactly() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let p = prefix("resume");
    let a = spawn_ready(node(&p, "a")).await;
    let b = spawn_ready(node(&p, "b")).await;
    let mut taken = Vec::new();
    let t = topics_in_own_partitions("doc", 5, &mut taken);
    let (sse_t, ws_t, poll_t, last_t, hist_t) = (&t[0], &t[1], &t[2], &t[3], &t[4]);
    // A client on `a` reads the first three messages of each topic: its cursors.
    let mut on_a = SseClient::connect(&a, &query(&t), None).await;
    on_a.next_block().await.unwrap();
    let mut cursors = HashMap::new();
    for i in 0..3 {
        for topic in &t {
            let id = publish(&a, topic, json!(i)).await;
            cursors.insert(topic.clone(), id);
        }
    }
    for _ in 0..15 {
        on_a.next_event().await.unwrap();
    }
    // Three more each while nobody on `b` wants them: `b` reads none of it.
    for i in 3..6 {
        for topic in &t {
            publish(&a, topic, json!(i)).await;
        }
    }
    assert_eq!(partitions_followed(&b).await, 0.0);
    assert_eq!(redis_in(&b).await, 0.0);

    // SSE with Last-Event-ID from `a`: exactly 3, 4, 5, then live.
    let last = format!("{sse_t}={}", cursors[sse_t]);
    let mut sse = SseClient::connect(&b, &format!("topic={sse_t}"), Some(&last)).await;
    for i in 3..6 {
        let e = sse.next_event().await.unwrap();
        assert_ne!(e.event.as_deref(), Some("herald.lost"), "{e:?}");
        assert_eq!(e.data.as_deref(), Some(i.to_string().as_str()));
    }
    publish(&a, sse_t, json!(6)).await;
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("6"));

    // WebSocket with a cursor.
    let mut ws = ws_connect(&b).await;
    ws_send(
        &mut ws,
        json!({"type": "subscribe", "topics": [ws_t], "cursors": {ws_t.as_str(): cursors[ws_t]}}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await["type"], "subscribed");
    for i in 3..6 {
        let m = ws_next(&mut ws).await;
        assert_eq!(m["data"], json!(i), "{m}");
    }
    publish(&a, ws_t, json!(6)).await;
    assert_eq!(ws_next(&mut ws).await["data"], json!(6));

    // Long-poll with a cursor.
    let cursor = enc(&format!("{poll_t}={}", cursors[poll_t]));
    let resp = get(
        format!(
            "http://{}/v1/poll?topic={poll_t}&cursor={cursor}",
            b.public_addr
        ),
        &[],
    )
    .await;
    assert_eq!(resp.status(), 200);
    let page: Value = resp.json().await.unwrap();
    assert_eq!(data(&page), [json!(3), json!(4), json!(5)]);

    // `last=2`: the two newest.
    let mut sse = SseClient::connect(&b, &format!("topic={last_t}&last=2"), None).await;
    for i in 4..6 {
        assert_eq!(
            sse.next_event().await.unwrap().data.as_deref(),
            Some(i.to_string().as_str())
        );
    }

    // The history API, on a node that did not follow the topic until this request.
    let page = get_json(format!(
        "http://{}/v1/topics/{hist_t}/history?since={}",
        b.admin_addr,
        enc(&cursors[hist_t])
    ))
    .await;
    assert_eq!(data(&page), [json!(3), json!(4), json!(5)], "{page}");
    assert_eq!(partitions_followed(&b).await, 5.0);
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_over_many_partitions_stays_within_the_linger_bound_and_costs_no_message() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let p = prefix("churn");
    let mut config = node(&p, "a");
    config.cluster.interest_linger = Duration::from_secs(1);
    let a = spawn_ready(config).await;
    let b = spawn_ready(node(&p, "b")).await;
    let mut taken = Vec::new();
    let flips = topics_in_own_partitions("flip", 12, &mut taken);
    let steady = topics_in_own_partitions("steady", 1, &mut taken).remove(0);
    // One client stays on `steady`, fed all along; another flips between twelve topics of
    // twelve partitions, one subscription at a time.
    let mut ws = ws_connect(&a).await;
    ws_subscribe(&mut ws, &[&steady]).await;
    let publisher = {
        let (b_admin, steady) = (b.admin_addr, steady.clone());
        tokio::spawn(async move {
            for i in 0..60 {
                let body = json!({"topic": steady, "data": i});
                let r = post_json(format!("http://{b_admin}/v1/publish"), &[], &body).await;
                assert_eq!(r.status(), 200);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let mut flipper = ws_connect(&a).await;
    for topic in &flips {
        ws_subscribe(&mut flipper, &[topic]).await;
        ws_send(
            &mut flipper,
            json!({"type": "unsubscribe", "topics": [topic]}),
        )
        .await;
        assert_eq!(ws_next(&mut flipper).await["type"], "unsubscribed");
    }
    publisher.await.unwrap();
    for i in 0..60 {
        assert_eq!(
            ws_next(&mut ws).await["data"],
            json!(i),
            "no message lost to churn"
        );
    }
    // At most the steady partition and the flipped ones within the linger; after it, only
    // the steady one is read.
    assert!(partitions_followed(&a).await <= 13.0);
    eventually(Duration::from_secs(10), || async {
        partitions_followed(&a).await == 1.0
    })
    .await;
    publish(&b, &steady, json!("after")).await;
    assert_eq!(ws_next(&mut ws).await["data"], json!("after"));
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_dropped_and_followed_again_resumes_without_a_hole() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let p = prefix("refollow");
    let mut config = node(&p, "a");
    config.cluster.interest_linger = Duration::from_secs(1);
    let a = spawn_ready(config).await;
    let b = spawn_ready(node(&p, "b")).await;
    let topic = topics_in_own_partitions("again", 1, &mut Vec::new()).remove(0);
    let mut sse = SseClient::connect(&a, &format!("topic={topic}"), None).await;
    sse.next_block().await.unwrap();
    publish(&b, &topic, json!(0)).await;
    sse.next_event().await.unwrap();
    let last = sse.last_event_id.clone().unwrap();
    drop(sse);
    // `a` drops the partition once nobody subscribes to it for the linger...
    eventually(Duration::from_secs(10), || async {
        partitions_followed(&a).await == 0.0
    })
    .await;
    // ...misses what is published meanwhile, and reads it back when the client returns.
    for i in 1..4 {
        publish(&b, &topic, json!(i)).await;
    }
    let mut sse = SseClient::connect(&a, &format!("topic={topic}"), Some(&last)).await;
    for i in 1..4 {
        let e = sse.next_event().await.unwrap();
        assert_ne!(e.event.as_deref(), Some("herald.lost"), "{e:?}");
        assert_eq!(e.data.as_deref(), Some(i.to_string().as_str()));
    }
    publish(&b, &topic, json!(4)).await;
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("4"));
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_makes_its_node_follow_every_partition() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let p = prefix("pattern");
    let a = spawn_ready(node(&p, "a")).await;
    let b = spawn_ready(node(&p, "b")).await;
    let mut sse = SseClient::connect(&a, "topic=orders.*", None).await;
    sse.next_block().await.unwrap();
    assert_eq!(partitions_followed(&a).await, f64::from(PARTITIONS));
    for i in 0..5 {
        publish(&b, &format!("orders.{i}"), json!(i)).await;
    }
    for i in 0..5 {
        assert_eq!(
            sse.next_event().await.unwrap().data.as_deref(),
            Some(i.to_string().as_str())
        );
    }
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_routing_reads_every_partition_from_the_start() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let p = prefix("broadcast");
    let mut config = node(&p, "a");
    config.cluster.routing = herald_gateway::config::Routing::Broadcast;
    let a = spawn_ready(config).await;
    let b = spawn_ready(node(&p, "b")).await;
    assert_eq!(partitions_followed(&a).await, f64::from(PARTITIONS));
    publish(&b, "anything", json!(1)).await;
    eventually(WAIT, || async { redis_in(&a).await == 1.0 }).await;
    assert_eq!(
        redis_in(&b).await,
        0.0,
        "b has no subscriber: it reads nothing"
    );
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

/// A Redis of the test's own (`redis-server` on a free port), killed when dropped.
struct OwnRedis {
    child: std::process::Child,
    port: u16,
}

impl OwnRedis {
    async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server runs");
        eventually(WAIT, || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        Self { child, port }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_waits_no_longer_than_the_backfill_timeout_when_redis_is_gone() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let redis = OwnRedis::start().await;
    let mut config = node(&prefix("timeout"), "a");
    config.cluster.redis_url = Some(redis.url());
    config.cluster.backfill_timeout = Duration::from_millis(500);
    let a = spawn_ready(config).await;
    drop(redis);
    for path in ["/v1/sse?topic=cold", "/v1/poll?topic=cold&timeout=1"] {
        let started = std::time::Instant::now();
        let resp = get(format!("http://{}{path}", a.public_addr), &[]).await;
        assert_eq!(resp.status(), 503, "{path}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "bridge_unavailable", "{body}");
        assert!(started.elapsed() < Duration::from_secs(5), "{path}");
    }
    let mut ws = ws_connect(&a).await;
    ws_send(&mut ws, json!({"type": "subscribe", "topics": ["cold"]})).await;
    let reply = ws_next(&mut ws).await;
    assert_eq!(reply["type"], "error", "{reply}");
    assert_eq!(reply["code"], "bridge_unavailable", "{reply}");
    a.stop().await.unwrap();
}
