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
