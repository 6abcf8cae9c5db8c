//! Production engine modes against real servers that `deploy/engines.sh` starts: Redis over
//! TLS with an ACL user and a client certificate, Redis Sentinel (master + replica) with a
//! failover, Redis Cluster (3 masters + 3 replicas, over TLS) with a master failover, and Kafka over
//! SASL_SSL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and SSL with a client certificate.
//!
//! A test binary of its own, because the failover tests kill engines. A test whose engine is
//! not configured (its environment variable unset) prints why and passes without running,
//! unless `HERALD_REQUIRE_ENGINES=1` (deploy/test.sh) makes it fail (`common::engine`).

#[path = "../gateway/common/mod.rs"]
mod common;
mod kafka_modes;
mod redis_modes;

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
