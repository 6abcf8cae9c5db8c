//! Production engine modes against real servers that `deploy/engines.sh` starts: Redis over
//! TLS with an ACL user and a client certificate, Redis Sentinel (master + replica) with a
//! failover, Redis Cluster (3 masters + 3 replicas, over TLS) with a master failover, and Kafka over
//! SASL_SSL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and SSL with a client certificate.
//!
//! A test binary of its own, because the failover tests kill engines. A test whose engine is
//! not configured (its environment variable unset) prints why and passes without running.

#[path = "gateway/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use common::*;
use herald_gateway::config::RedisMode;
use herald_gateway::{Config, Gateway};
use serde_json::json;

/// The failover tests stop engines that other tests here use: one test at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a failover may take (detection, election, promotion, Herald's reconnect backoff).
const FAILOVER: Duration = Duration::from_secs(45);

/// The variable `name`, or `None` after printing why the test is skipped.
fn engine(name: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            eprintln!(
                "skipped: {name} is not set (deploy/test.sh starts the engines with deploy/engines.sh and sets it)"
            );
            None
        }
    }
}

fn engines(args: &[&str]) -> String {
    try_engines(args).unwrap_or_else(|e| panic!("deploy/engines.sh {args:?} failed: {e}"))
}

/// `deploy/engines.sh ARGS`: what it printed, or what it said on failing.
fn try_engines(args: &[&str]) -> Result<String, String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/engines.sh");
    let out = Command::new(script)
        .args(args)
        .output()
        .expect("engines.sh runs");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8(out.stdout).unwrap().trim().to_string())
}

/// Starts an engine node killed by a test again when dropped, even if the test failed, so
/// that the tests after it find the whole topology.
struct Revive(String);

impl Drop for Revive {
    fn drop(&mut self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/engines.sh");
        let _ = Command::new(script).args(["start-node", &self.0]).output();
    }
}

fn unique(name: &str) -> String {
    format!("{name}-{:x}", rand::random::<u32>())
}

fn redis_node(mode: RedisMode, url: &str, prefix: &str, node: &str) -> Config {
    let mut config = test_config();
    config.cluster.redis_mode = mode;
    config.cluster.redis_url = Some(url.to_string());
    config.cluster.redis_prefix = prefix.to_string();
    config.cluster.redis_shards = 4;
    config.cluster.node_id = node.to_string();
    config.cluster.presence_interval = Duration::from_millis(200);
    config
}

fn tls_files(config: &mut Config) -> Option<()> {
    config.cluster.redis_ca_file = Some(engine("HERALD_TEST_TLS_CA")?.into());
    config.cluster.redis_cert_file = Some(engine("HERALD_TEST_TLS_CLIENT_CERT")?.into());
    config.cluster.redis_key_file = Some(engine("HERALD_TEST_TLS_CLIENT_KEY")?.into());
    Some(())
}

async fn readyz(gw: &Gateway) -> (u16, String) {
    let resp = get(format!("http://{}/readyz", gw.admin_addr), &[]).await;
    (resp.status().as_u16(), resp.text().await.unwrap())
}

async fn wait_status(gw: &Gateway, status: u16, within: Duration) {
    let admin = gw.admin_addr;
    eventually(within, || async move {
        http()
            .get(format!("http://{admin}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().as_u16() == status)
    })
    .await;
}

/// Three nodes: a message published on one reaches SSE and WebSocket subscribers on all three
/// exactly once with one id; a client that reconnects to another node with its
/// `Last-Event-ID` gets exactly what it missed.
async fn three_nodes_fan_out_and_resume(nodes: &[Gateway; 3], topic: &str) {
    let [a, b, c] = nodes;
    let mut sse_a = SseClient::connect(a, &format!("topic={topic}"), None).await;
    sse_a.next_block().await.unwrap();
    let mut sse_b = SseClient::connect(b, &format!("topic={topic}"), None).await;
    sse_b.next_block().await.unwrap();
    let mut ws_c = ws_connect(c).await;
    ws_subscribe(&mut ws_c, &[topic]).await;

    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(publish(a, topic, json!(i)).await);
    }
    ids.push(publish(c, topic, json!(3)).await);
    for (i, id) in ids.iter().enumerate() {
        for sse in [&mut sse_a, &mut sse_b] {
            let e = sse.next_event().await.unwrap();
            assert_eq!(e.data.as_deref(), Some(i.to_string().as_str()));
            assert_eq!(e.id.as_deref(), Some(format!("{topic}={id}").as_str()));
        }
        let frame = ws_next(&mut ws_c).await;
        assert_eq!(frame["data"], json!(i));
        assert_eq!(frame["id"], json!(id), "one id on every node");
    }
    // Exactly once: the next thing each sees is the next message.
    publish(b, topic, json!("end")).await;
    assert_eq!(
        sse_a.next_event().await.unwrap().data.as_deref(),
        Some("end")
    );
    assert_eq!(
        sse_b.next_event().await.unwrap().data.as_deref(),
        Some("end")
    );
    assert_eq!(ws_next(&mut ws_c).await["data"], "end");

    // Cross-node resume: b's client leaves, two messages go by, it comes back on c.
    let last = sse_b.last_event_id.clone().unwrap();
    drop(sse_b);
    publish(a, topic, json!("missed-1")).await;
    publish(b, topic, json!("missed-2")).await;
    let mut back = SseClient::connect(c, &format!("topic={topic}"), Some(&last)).await;
    for want in ["missed-1", "missed-2"] {
        let e = back.next_event().await.unwrap();
        assert_ne!(e.event.as_deref(), Some("herald.lost"), "{e:?}");
        assert_eq!(e.data.as_deref(), Some(want.to_string().as_str()));
    }
}

/// The cluster's view kept in Redis by presence: each node sees a topic's subscribers on all
/// three.
async fn presence_sees_three_nodes(nodes: &[Gateway; 3]) {
    let mut subscribers = Vec::new();
    for node in nodes {
        let mut sse = SseClient::connect(node, "topic=present", None).await;
        sse.next_block().await.unwrap();
        subscribers.push(sse);
    }
    for node in nodes {
        let url = format!("http://{}/v1/presence/present", node.admin_addr);
        eventually(WAIT, || {
            let url = url.clone();
            async move {
                let v = get_json(url).await;
                v["subscribers"] == 3 && v["nodes"].as_object().is_some_and(|n| n.len() == 3)
            }
        })
        .await;
    }
}

async fn start_three(configs: [Config; 3]) -> [Gateway; 3] {
    let [a, b, c] = configs;
    let nodes = [
        spawn_gateway(a).await,
        spawn_gateway(b).await,
        spawn_gateway(c).await,
    ];
    for node in &nodes {
        wait_ready(node, 200).await;
    }
    nodes
}

async fn stop_all(nodes: impl IntoIterator<Item = Gateway>) {
    for node in nodes {
        node.stop().await.unwrap();
    }
}

// ----------------------------------------------------------------------------- Redis TLS

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_over_tls_with_an_acl_user_and_a_client_certificate() {
    let Some(url) = engine("HERALD_TEST_REDIS_TLS_URL") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = unique("tls");
    let node = |id: &str| {
        let mut c = redis_node(RedisMode::Single, &url, &p, id);
        tls_files(&mut c).unwrap();
        c
    };
    let nodes = start_three([node("t1"), node("t2"), node("t3")]).await;
    three_nodes_fan_out_and_resume(&nodes, "secure").await;
    // Presence goes over the same TLS connection settings.
    presence_sees_three_nodes(&nodes).await;
    stop_all(nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_refusing_the_credentials_or_the_certificate_keeps_the_node_not_ready_and_says_why() {
    let Some(url) = engine("HERALD_TEST_REDIS_TLS_URL") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = unique("tls-bad");
    // A wrong password for the ACL user.
    let wrong = url.replace("herald-redis-secret", "not-the-password");
    assert_ne!(wrong, url);
    let mut config = redis_node(RedisMode::Single, &wrong, &p, "bad-pass");
    tls_files(&mut config).unwrap();
    let gw = spawn_gateway(config).await;
    let admin = gw.admin_addr;
    eventually(WAIT, || async move {
        let resp = get(format!("http://{admin}/readyz"), &[]).await;
        resp.status() == 503
            && resp
                .text()
                .await
                .unwrap()
                .to_lowercase()
                .contains("authentication failed")
    })
    .await;
    let (_, body) = readyz(&gw).await;
    assert!(body.starts_with("redis: not ready:"), "{body}");
    assert!(!body.contains("not-the-password"), "{body}");
    gw.stop().await.unwrap();

    // No client certificate, where the server requires one.
    let mut config = redis_node(RedisMode::Single, &url, &p, "no-cert");
    config.cluster.redis_ca_file = Some(engine("HERALD_TEST_TLS_CA").unwrap().into());
    let gw = spawn_gateway(config).await;
    let gw_ref = &gw;
    eventually(WAIT, || async move {
        let (status, body) = readyz(gw_ref).await;
        status == 503 && body.starts_with("redis: not ready: not connected")
    })
    .await;
    // It stays so: two more attempts, and the server never lets it in.
    let reconnects = r#"herald_bridge_reconnects_total{bridge="redis"}"#;
    let before = metric(&gw, reconnects).await;
    eventually(WAIT, || async {
        metric(&gw, reconnects).await >= before + 2.0
    })
    .await;
    assert_eq!(readyz(&gw).await.0, 503);
    gw.stop().await.unwrap();
}

// ----------------------------------------------------------------------------- Sentinel

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_three_nodes_and_a_failover_lose_nothing_redis_kept() {
    let Some(url) = engine("HERALD_TEST_REDIS_SENTINEL_URL") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = unique("sentinel");
    let node = |id: &str| redis_node(RedisMode::Sentinel, &url, &p, id);
    let nodes = start_three([node("s1"), node("s2"), node("s3")]).await;
    three_nodes_fan_out_and_resume(&nodes, "watched").await;
    presence_sees_three_nodes(&nodes).await;

    let [a, b, c] = &nodes;
    let mut sse = SseClient::connect(a, "topic=fo", None).await;
    sse.next_block().await.unwrap();
    publish(b, "fo", json!("before")).await;
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some("before")
    );
    let last = sse.last_event_id.clone().unwrap();
    publish(b, "fo", json!("kept")).await;
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some("kept")
    );

    // Which server is the master now (a previous run of this test may have failed over).
    let master = sentinel_master(&url).await;
    let (dead, alive) = if master == engine_port("s-master") {
        ("s-master", "s-replica")
    } else {
        ("s-replica", "s-master")
    };
    engines(&["kill-node", dead]);
    let revive = Revive(dead.to_string());
    for node in &nodes {
        wait_status(node, 503, FAILOVER).await;
    }
    // The sentinels promote the replica; the nodes find it and follow the streams again.
    for node in &nodes {
        wait_status(node, 200, FAILOVER).await;
    }
    assert_eq!(sentinel_master(&url).await, engine_port(alive));
    // What the old master had replicated survived: resuming from before it is exact.
    after_failover(c, &mut sse, &last).await;
    // The old master comes back (as a replica of the new one) for the tests after this one.
    drop(revive);
    stop_all(nodes).await;
}

/// After a failover: a publish on `c` reaches the live stream `sse`, and a client resuming
/// from `last` (taken before the failover) gets exactly what the old master had replicated
/// ("kept") and what came after, with no loss signal.
async fn after_failover(c: &Gateway, sse: &mut SseClient, last: &str) {
    publish(c, "fo", json!("after")).await;
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some("after")
    );
    let mut back = SseClient::connect(c, "topic=fo", Some(last)).await;
    for want in ["kept", "after"] {
        let e = back.next_event().await.unwrap();
        assert_ne!(e.event.as_deref(), Some("herald.lost"), "{e:?}");
        assert_eq!(e.data.as_deref(), Some(want));
    }
}

/// Redis replicates after answering: without `redis_wait_replicas` a publish is answered 200
/// while no replica holds it (a master dying then takes it along, and the promoted replica
/// never had it: the silent gap `herald-loadgen chaos` found on `redis_failover`). With
/// `redis_wait_replicas = 1` the same publish is answered 503, and 200 again once the
/// replica is back: an answered publish is on a replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_publish_waits_for_a_replica_when_asked() {
    let Some(url) = engine("HERALD_TEST_REDIS_SENTINEL_URL") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let p = unique("wait");
    let mut config = redis_node(RedisMode::Sentinel, &url, &p, "w1");
    config.cluster.redis_wait_replicas = 1;
    config.cluster.redis_wait_timeout = Duration::from_millis(300);
    let waits = spawn_ready(config).await;
    let asap = spawn_ready(redis_node(RedisMode::Sentinel, &url, &p, "w2")).await;
    let status = |gw: &Gateway, n: u32| {
        let admin = gw.admin_addr;
        async move {
            let body = json!({ "topic": "w", "data": n });
            post_json(format!("http://{admin}/v1/publish"), &[], &body)
                .await
                .status()
                .as_u16()
        }
    };
    // the replica confirms (it may still be syncing after the failover test)
    let waits_ref = &waits;
    eventually(
        FAILOVER,
        || async move { status(waits_ref, 1).await == 200 },
    )
    .await;

    let replica = if sentinel_master(&url).await == engine_port("s-master") {
        "s-replica"
    } else {
        "s-master"
    };
    engines(&["kill-node", replica]);
    let revive = Revive(replica.to_string());
    // The master alone: answered at once by the default node, refused by the waiting one.
    assert_eq!(status(&asap, 2).await, 200);
    let refused = post_json(
        format!("http://{}/v1/publish", waits.admin_addr),
        &[],
        &json!({ "topic": "w", "data": 3 }),
    )
    .await;
    assert_eq!(refused.status(), 503);
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "bridge_unavailable", "{body}");

    drop(revive);
    eventually(
        FAILOVER,
        || async move { status(waits_ref, 4).await == 200 },
    )
    .await;
    stop_all([waits, asap]).await;
}

fn engine_port(name: &str) -> u16 {
    let dir = std::env::var("HERALD_ENGINES_DIR").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/engines").to_string()
    });
    std::fs::read_to_string(format!("{dir}/rx/{name}/port"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// The master's port, as the first sentinel of `url` reports it.
async fn sentinel_master(url: &str) -> u16 {
    let rest = url.split_once('@').map_or(url, |(_, r)| r);
    let first = rest.split([',', '/']).next().unwrap();
    let client = redis::Client::open(format!("redis://{first}")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let master = rest.rsplit('/').next().unwrap();
    let (_, port): (String, String) = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(master)
        .query_async(&mut conn)
        .await
        .unwrap();
    port.parse().unwrap()
}

// ----------------------------------------------------------------------------- Cluster

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_spreads_streams_over_the_masters_and_survives_a_master_failover() {
    let Some(url) = engine("HERALD_TEST_REDIS_CLUSTER_URL") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let shards = 8;
    // Every shard stream and its epoch share a slot. Which masters the shards land on is the
    // hash's business: take a prefix whose shards cover all three masters, so that the nodes
    // below read from every master.
    let p = loop {
        let p = unique("rc");
        let mut masters = std::collections::BTreeSet::new();
        for shard in 0..shards {
            let stream = format!("{{{p}:{shard}}}:stream");
            let epoch = format!("{{{p}:{shard}}}:epoch");
            let owner = engines(&["cluster-master-of", &stream]);
            assert_eq!(engines(&["cluster-master-of", &epoch]), owner);
            masters.insert(owner);
        }
        if masters.len() == 3 {
            break p;
        }
    };
    let ca = engine("HERALD_TEST_TLS_CA").unwrap();
    let node = |id: &str| {
        let mut c = redis_node(RedisMode::Cluster, &url, &p, id);
        c.cluster.redis_shards = shards;
        // The test cluster speaks TLS only, like ElastiCache with in-transit encryption.
        c.cluster.redis_ca_file = Some(ca.clone().into());
        c
    };
    let nodes = start_three([node("c1"), node("c2"), node("c3")]).await;
    three_nodes_fan_out_and_resume(&nodes, "sharded").await;
    // Presence keys share one hash tag: its pipelines work on a Redis Cluster.
    presence_sees_three_nodes(&nodes).await;

    // A message on each of many topics: every node delivers each, whichever master holds it.
    let [a, b, c] = &nodes;
    let topics: Vec<String> = (0..12).map(|i| format!("spread{i}")).collect();
    let query = topics
        .iter()
        .map(|t| format!("topic={t}"))
        .collect::<Vec<_>>()
        .join("&");
    let mut on_c = SseClient::connect(c, &query, None).await;
    on_c.next_block().await.unwrap();
    for t in &topics {
        publish(a, t, json!(t)).await;
    }
    let mut got: Vec<String> = Vec::new();
    while got.len() < topics.len() {
        got.push(on_c.next_event().await.unwrap().data.unwrap());
    }
    got.sort();
    let mut want = topics.clone();
    want.sort();
    assert_eq!(got, want);

    // Kill the master of topic "fo"'s stream; its replica takes over.
    let shard = herald_gateway::shard_of("fo", shards);
    let victim = engines(&["cluster-master-of", &format!("{{{p}:{shard}}}:stream")]);
    let mut sse = SseClient::connect(b, "topic=fo", None).await;
    sse.next_block().await.unwrap();
    publish(a, "fo", json!("before")).await;
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some("before")
    );
    let last = sse.last_event_id.clone().unwrap();
    publish(a, "fo", json!("kept")).await;
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some("kept")
    );
    // Let the replica receive the last write before its master dies.
    let seed = url.split(',').next().unwrap().to_string();
    wait_replicated(&seed, &ca).await;
    engines(&["kill-node", &victim]);
    let revive = Revive(victim.clone());
    // The cluster promotes the replica. The nodes may or may not be seen not ready while it
    // does (the client can follow a fast failover by itself): what counts is that they are
    // ready afterwards and nothing the old master had replicated is lost.
    let stream = format!("{{{p}:{shard}}}:stream");
    // While no master serves the slot, the script says so and fails: not promoted yet.
    eventually(FAILOVER, || async {
        try_engines(&["cluster-master-of", &stream]).is_ok_and(|m| m != victim)
    })
    .await;
    for node in &nodes {
        wait_status(node, 200, FAILOVER).await;
    }
    after_failover(c, &mut sse, &last).await;
    // The old master rejoins as a replica.
    drop(revive);
    stop_all(nodes).await;
}

/// Waits until every master's replicas have acknowledged its writes (`WAIT 1` on each).
async fn wait_replicated(seed: &str, ca: &str) {
    use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
    let client = redis::cluster::ClusterClient::builder(vec![seed])
        .certs(redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(std::fs::read(ca).unwrap()),
        })
        .build()
        .unwrap();
    let mut conn = client.get_async_connection().await.unwrap();
    conn.route_command(
        redis::cmd("WAIT").arg(1).arg(2000).clone(),
        RoutingInfo::MultiNode((
            MultipleNodeRoutingInfo::AllMasters,
            Some(ResponsePolicy::AllSucceeded),
        )),
    )
    .await
    .unwrap();
}

// ----------------------------------------------------------------------------- Kafka

struct SaslBroker {
    brokers: String,
    plain: String,
    user: String,
    password: String,
    ca: String,
}

fn sasl_broker() -> Option<SaslBroker> {
    Some(SaslBroker {
        brokers: engine("HERALD_TEST_KAFKA_SASL_BROKERS")?,
        plain: engine("HERALD_TEST_KAFKA_BROKERS")?,
        user: engine("HERALD_TEST_KAFKA_USER")?,
        password: engine("HERALD_TEST_KAFKA_PASSWORD")?,
        ca: engine("HERALD_TEST_TLS_CA")?,
    })
}

impl SaslBroker {
    fn properties(&self, mechanism: &str, password: &str) -> BTreeMap<String, String> {
        [
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanisms", mechanism),
            ("sasl.username", self.user.as_str()),
            ("sasl.password", password),
            ("ssl.ca.location", self.ca.as_str()),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into()
    }

    fn node(&self, kt: &str, node: &str, mechanism: &str) -> Config {
        let mut config = test_config();
        config.cluster.kafka_brokers = Some(self.brokers.clone());
        config.cluster.kafka_topics = vec![kt.to_string()];
        config.cluster.node_id = node.to_string();
        config.cluster.kafka_properties = self.properties(mechanism, &self.password);
        config
    }

    /// A client of the plaintext listener of the same broker (the test's own side).
    fn plain_client(&self) -> rdkafka::ClientConfig {
        let mut c = rdkafka::ClientConfig::new();
        c.set("bootstrap.servers", &self.plain);
        c
    }

    async fn create_topic(&self, name: &str) {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        let admin: AdminClient<rdkafka::client::DefaultClientContext> =
            self.plain_client().create().unwrap();
        for r in admin
            .create_topics(
                &[NewTopic::new(name, 2, TopicReplication::Fixed(1))],
                &AdminOptions::new(),
            )
            .await
            .unwrap()
        {
            r.unwrap();
        }
    }

    async fn produce(&self, kt: &str, topic: &str, value: serde_json::Value) {
        use rdkafka::message::{Header, OwnedHeaders};
        use rdkafka::producer::{FutureProducer, FutureRecord};
        let producer: FutureProducer = self
            .plain_client()
            .set("message.timeout.ms", "60000")
            .create()
            .unwrap();
        let value = value.to_string();
        let headers = OwnedHeaders::new().insert(Header {
            key: "herald-topic",
            value: Some(topic),
        });
        producer
            .send(
                FutureRecord::to(kt)
                    .key(topic)
                    .payload(&value)
                    .headers(headers),
                Duration::from_secs(60),
            )
            .await
            .map_err(|(e, _)| e)
            .unwrap();
    }
}

/// Ingest (a record produced by another service reaches subscribers on two nodes with one
/// id) and publishing through the HTTP API (Herald's producer) over SASL_SSL.
async fn kafka_sasl_ingest_and_publish(mechanism: &str) {
    let Some(broker) = sasl_broker() else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let kt = unique(&format!("sasl-{}", mechanism.to_lowercase()));
    broker.create_topic(&kt).await;
    let a = spawn_ready(broker.node(&kt, &unique("a"), mechanism)).await;
    let b = spawn_ready(broker.node(&kt, &unique("b"), mechanism)).await;
    let mut sse = SseClient::connect(&a, "topic=orders", None).await;
    sse.next_block().await.unwrap();
    let mut ws = ws_connect(&b).await;
    ws_subscribe(&mut ws, &["orders"]).await;
    broker.produce(&kt, "orders", json!({"order": 1})).await;
    let e = sse.next_event().await.unwrap();
    assert_eq!(e.data.as_deref(), Some(r#"{"order":1}"#));
    let frame = ws_next(&mut ws).await;
    assert_eq!(
        e.id.unwrap(),
        format!("orders={}", frame["id"].as_str().unwrap())
    );
    let id = publish(&b, "orders", json!("via http")).await;
    let e = sse.next_event().await.unwrap();
    assert_eq!(e.data.as_deref(), Some("via http"));
    assert_eq!(e.id.unwrap(), format!("orders={id}"));
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_over_sasl_ssl_with_plain() {
    kafka_sasl_ingest_and_publish("PLAIN").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_over_sasl_ssl_with_scram_sha_256() {
    kafka_sasl_ingest_and_publish("SCRAM-SHA-256").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_over_sasl_ssl_with_scram_sha_512() {
    kafka_sasl_ingest_and_publish("SCRAM-SHA-512").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_over_ssl_with_a_client_certificate() {
    let (Some(brokers), Some(broker)) = (engine("HERALD_TEST_KAFKA_SSL_BROKERS"), sasl_broker())
    else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let kt = unique("mtls");
    broker.create_topic(&kt).await;
    let mut config = test_config();
    config.cluster.kafka_brokers = Some(brokers);
    config.cluster.kafka_topics = vec![kt.clone()];
    config.cluster.kafka_properties = [
        ("security.protocol", "SSL".to_string()),
        ("ssl.ca.location", broker.ca.clone()),
        (
            "ssl.certificate.location",
            engine("HERALD_TEST_TLS_CLIENT_CERT").unwrap(),
        ),
        (
            "ssl.key.location",
            engine("HERALD_TEST_TLS_CLIENT_KEY").unwrap(),
        ),
    ]
    .map(|(k, v)| (k.to_string(), v))
    .into();
    let gw = spawn_ready(config).await;
    let mut sse = SseClient::connect(&gw, "topic=m", None).await;
    sse.next_block().await.unwrap();
    broker.produce(&kt, "m", json!("mutual")).await;
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some("mutual")
    );
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_upstream_events_and_a_broker_restart_over_sasl_ssl() {
    use rdkafka::Message as _;
    use rdkafka::consumer::{Consumer as _, StreamConsumer};
    let Some(broker) = sasl_broker() else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let kt = unique("sasl-restart");
    let up = unique("sasl-upstream");
    broker.create_topic(&kt).await;
    broker.create_topic(&up).await;
    let mut config = broker.node(&kt, &unique("node"), "SCRAM-SHA-512");
    config.cluster.kafka_upstream_topic = Some(up.clone());
    config.sse.heartbeat = Duration::from_millis(200);
    let gw = spawn_ready(config).await;
    let mut sse = SseClient::connect(&gw, "topic=k", None).await;
    sse.next_block().await.unwrap();
    // The SSE connection was produced upstream over SASL_SSL.
    let consumer: StreamConsumer = broker
        .plain_client()
        .set("group.id", unique("reader"))
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&[&up]).unwrap();
    let m = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
        .await
        .expect("an upstream record")
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(m.payload().unwrap()).unwrap();
    assert_eq!(value["transport"], "sse");

    broker.produce(&kt, "k", json!(1)).await;
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("1"));
    engines(&["kill-kafka"]);
    wait_status(&gw, 503, Duration::from_secs(30)).await;
    engines(&["start-kafka"]);
    wait_status(&gw, 200, Duration::from_secs(60)).await;
    broker.produce(&kt, "k", json!(2)).await;
    broker.produce(&kt, "k", json!(3)).await;
    for want in ["2", "3"] {
        assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some(want));
    }
    gw.stop().await.unwrap();
}

/// Wrong credentials, given through the environment twins of `cluster.kafka_properties`:
/// the `herald` process says why in its log and in `/readyz`, and never prints the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_wrong_credentials_make_the_node_not_ready_with_a_clear_reason() {
    use std::io::BufRead as _;
    let Some(broker) = sasl_broker() else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let kt = unique("sasl-wrong");
    broker.create_topic(&kt).await;
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let (public, admin) = (free(), free());
    let mut child = Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["--listen", &public.to_string()])
        .args(["--admin-listen", &admin.to_string()])
        .args(["--kafka-brokers", &broker.brokers, "--kafka-topics", &kt])
        .args(["--log-format", "text"])
        .env_remove("RUST_LOG")
        .env("HERALD_KAFKA_PROPERTIES_SECURITY_PROTOCOL", "SASL_SSL")
        .env("HERALD_KAFKA_PROPERTIES_SASL_MECHANISMS", "SCRAM-SHA-256")
        .env("HERALD_KAFKA_PROPERTIES_SASL_USERNAME", &broker.user)
        .env("HERALD_KAFKA_PROPERTIES_SASL_PASSWORD", "wrong-pass-4711")
        .env("HERALD_KAFKA_PROPERTIES_SSL_CA_LOCATION", &broker.ca)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    for pipe in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut log = Vec::new();
    while !log
        .iter()
        .any(|l: &String| l.contains("Authentication failed"))
    {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => log.push(line),
            Err(_) => panic!("no authentication error logged: {log:#?}"),
        }
    }
    let url = format!("http://{admin}/readyz");
    eventually(WAIT, || async {
        let resp = get(&url, &[]).await;
        let status = resp.status();
        let body = resp.text().await.unwrap();
        status == 503
            && body.starts_with("kafka: not ready: ")
            && body.contains("Authentication failed")
    })
    .await;
    let body = get(&url, &[]).await.text().await.unwrap();
    let _ = child.kill();
    let _ = child.wait();
    while let Ok(line) = rx.try_recv() {
        log.push(line);
    }
    assert!(
        !log.iter().any(|l| l.contains("wrong-pass-4711")),
        "the password was logged"
    );
    assert!(!body.contains("wrong-pass-4711"));
}
