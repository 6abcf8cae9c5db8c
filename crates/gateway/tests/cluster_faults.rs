//! Faults of the engines under a running cluster: Redis killed and restarted. A test binary
//! of its own, because it stops the Redis every other cluster test uses.

#[path = "gateway/common/mod.rs"]
#[macro_use]
mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::json;

/// The tests here stop and start the shared engines: they run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
    skip_without!("HERALD_TEST_REDIS_URL");
    let _serial = SERIAL.lock().await;
    let p = format!("test-faults-{:x}", rand::random::<u32>());
    let mut config_a = cluster_config(&p, "a");
    config_a.sse.heartbeat = Duration::from_millis(200);
    let a = spawn_ready(config_a).await;
    let b = spawn_ready(cluster_config(&p, "b")).await;
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
    let resp = post_json(
        format!("http://{}/v1/publish", b.admin_addr),
        &[],
        &json!({"topic": "f", "data": "during"}),
    )
    .await;
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
    skip_without!("HERALD_TEST_REDIS_URL", "HERALD_TEST_KAFKA_BROKERS");
    let _serial = SERIAL.lock().await;
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
    let gw = spawn_ready(config).await;
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

#[path = "support/process.rs"]
mod process;

/// A `herald` process of the test cluster, on ports the kernel picks.
fn node(redis: &str, prefix: &str, id: &str) -> process::Herald {
    let mut command = process::herald();
    command
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(["--redis-url", redis, "--node-id", id])
        .env("HERALD_CONFIG", write_prefix_config(prefix));
    process::Herald::start(command)
}

fn write_prefix_config(prefix: &str) -> String {
    let path = std::env::temp_dir().join(format!("{prefix}.toml"));
    std::fs::write(
        &path,
        format!("[cluster]\nredis_prefix = \"{prefix}\"\nredis_shards = 4\n"),
    )
    .unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_s_clients_resume_exactly_on_another_node() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let _serial = SERIAL.lock().await;
    let redis = test_redis_url();
    let prefix = format!("test-kill-{:x}", rand::random::<u32>());
    let mut a = node(&redis, &prefix, "a");
    let b = node(&redis, &prefix, "b");
    for node in [&a, &b] {
        wait_ready_at(node.admin, 200).await;
    }
    let publish_to = |admin: std::net::SocketAddr, data: serde_json::Value| async move {
        let resp = post_json(
            format!("http://{admin}/v1/publish"),
            &[],
            &json!({"topic": "k", "data": data}),
        )
        .await;
        assert_eq!(resp.status(), 200);
    };
    // A raw SSE reader on node a.
    let read_events = |public: std::net::SocketAddr, last: Option<String>, n: usize| async move {
        let mut req = http().get(format!("http://{public}/v1/sse?topic=k"));
        if let Some(id) = last {
            req = req.header("Last-Event-ID", id);
        }
        let resp = req.send().await.unwrap();
        let mut stream = resp.bytes_stream();
        let mut text = String::new();
        let mut events: Vec<(String, String)> = Vec::new();
        let mut last_id = None;
        use futures_util::StreamExt as _;
        while events.len() < n {
            let chunk = tokio::time::timeout(WAIT, stream.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            text.push_str(std::str::from_utf8(&chunk).unwrap());
            while let Some(end) = text.find("\n\n") {
                let block: String = text.drain(..end + 2).collect();
                let id = block
                    .lines()
                    .find_map(|l| l.strip_prefix("id: "))
                    .map(str::to_string);
                if id.is_some() {
                    last_id = id.clone();
                }
                if let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) {
                    let event = block
                        .lines()
                        .find_map(|l| l.strip_prefix("event: "))
                        .unwrap_or("");
                    events.push((event.to_string(), data.to_string()));
                }
            }
        }
        (events, last_id.unwrap())
    };
    let reader = tokio::spawn(read_events(a.public, None, 2));
    // Published once node a holds the subscriber (its admin API says so).
    let topic_on_a = format!("http://{}/v1/topics/k", a.admin);
    eventually(WAIT, || {
        let url = topic_on_a.clone();
        async move {
            let Ok(resp) = http().get(url).send().await else {
                return false;
            };
            resp.json::<serde_json::Value>()
                .await
                .is_ok_and(|v| v["subscribers"] == 1)
        }
    })
    .await;
    publish_to(b.admin, json!(1)).await;
    publish_to(b.admin, json!(2)).await;
    let (events, last) = reader.await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.1.as_str()).collect::<Vec<_>>(),
        ["1", "2"]
    );

    // Node a dies without a goodbye; messages keep coming on b.
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    publish_to(b.admin, json!(3)).await;
    publish_to(b.admin, json!(4)).await;
    // The client reconnects to b with its Last-Event-ID: exactly what it missed.
    let (events, _) = read_events(b.public, Some(last), 2).await;
    assert_eq!(
        events,
        [
            (String::new(), "3".to_string()),
            (String::new(), "4".to_string())
        ]
    );
}
