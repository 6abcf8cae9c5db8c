//! What a node follows is charged to whoever asked, after every refusal (interest routing
//! over a real Redis): a refused subscription makes the node follow no partition, and long-polls
//! and history reads, which hold no subscription, cannot walk a node onto every partition.

use crate::common::*;

/// A node under interest routing over 1,024 partitions, alone in its cluster.
fn node(test: &str) -> herald_gateway::Config {
    let prefix = format!("test-following-{test}-{:x}", rand::random::<u32>());
    let mut config = cluster_config(&prefix, "a");
    config.cluster.redis_shards = 1024;
    config
}

async fn partitions_followed(gw: &herald_gateway::Gateway) -> f64 {
    metric(gw, r#"herald_bridge_groups_followed{bridge="redis"}"#).await
}

/// `n` topic names `<stem>.<i>`, as a query string.
fn query(stem: &str, n: usize) -> String {
    (0..n)
        .map(|i| format!("topic={stem}.{i}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// Checks a refusal: `status`, the documented JSON error `code`, and a `retry-after` on a
/// rate's 429.
async fn refused(resp: reqwest::Response, code: &str, status: u16) {
    assert_eq!(resp.status().as_u16(), status);
    let retry = resp.headers().get("retry-after").cloned();
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["code"], code, "{body}");
    assert!(body["reason"].as_str().is_some_and(|r| !r.is_empty()));
    if code == "cold_topics" {
        assert!(retry.is_some(), "a 429 says when to come back");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_subscription_makes_the_node_follow_no_partition() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let mut config = node("refused");
    config.topics.max_patterns = 0;
    config.limits.max_new_topics_per_client = 4;
    let gw = spawn_ready(config).await;
    let base = format!("http://{}", gw.public_addr);
    assert_eq!(partitions_followed(&gw).await, 0.0);
    // A pattern on a node that takes none (`topics.max_patterns = 0`): before the fix, the
    // node followed all 1,024 partitions before it refused.
    for path in ["/v1/sse?topic=x.*", "/v1/poll?topic=x.*&timeout=0"] {
        refused(get(format!("{base}{path}"), &[]).await, "topic_limit", 503).await;
        assert_eq!(partitions_followed(&gw).await, 0.0, "{path}");
    }
    // Over the topic quota: nothing followed either.
    let resp = get(format!("{base}/v1/poll?{}&timeout=0", query("q", 8)), &[]).await;
    refused(resp, "topic_quota", 429).await;
    // The same over WebSocket.
    let mut ws = ws_connect(&gw).await;
    ws_send(
        &mut ws,
        serde_json::json!({"type": "subscribe", "topics": ["y.*"]}),
    )
    .await;
    let answer = ws_next(&mut ws).await;
    assert_eq!(answer["type"], "error", "{answer}");
    assert_eq!(partitions_followed(&gw).await, 0.0);
    // A subscription that is not refused is followed: the test can fail.
    let resp = get(format!("{base}/v1/poll?{}&timeout=0", query("q", 2)), &[]).await;
    assert_eq!(resp.status().as_u16(), 200);
    assert!(partitions_followed(&gw).await >= 1.0);
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_polls_and_history_reads_walking_new_topics_are_refused_past_the_bound() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let mut config = node("walk");
    config.limits.max_subscriptions = 16;
    config.limits.cold_topics_per_minute = 64;
    let gw = spawn_ready(config).await;
    let base = format!("http://{}", gw.public_addr);
    // 32 anonymous long-polls (`timeout=0`) of 16 new topics each, on one keep-alive
    // connection: the first 64 topics are read, the rest refused.
    let started = std::time::Instant::now();
    // What the budget refilled meanwhile (64 a minute), however slow the machine.
    let refilled = || (started.elapsed().as_secs_f64() * 64.0 / 60.0).ceil() as usize;
    let mut answered = 0;
    for i in 0..32 {
        let resp = get(
            format!("{base}/v1/poll?{}&timeout=0", query(&format!("w{i}"), 16)),
            &[],
        )
        .await;
        match resp.status().as_u16() {
            200 => answered += 1,
            429 => refused(resp, "cold_topics", 429).await,
            other => panic!("poll {i}: {other}"),
        }
    }
    assert!(
        (4..=4 + refilled() / 16).contains(&answered),
        "{answered} polls of 16 new topics answered: 64 topics a minute"
    );
    let followed = partitions_followed(&gw).await;
    assert!(
        (1.0..=64.0).contains(&followed),
        "{followed} partitions followed: at most the bound's"
    );
    // A history walk by the same client: refused too (but for the topics the budget
    // refilled meanwhile), and nothing more followed than those.
    let mut read = 0;
    for i in 0..32 {
        let url = format!("{base}/v1/topics/h.{i}/history");
        let resp = get(url, &[]).await;
        if resp.status().as_u16() == 404 {
            read += 1; // charged, read, and not there
        } else {
            refused(resp, "cold_topics", 429).await;
        }
    }
    assert!(
        read <= refilled(),
        "{read} of 32 history reads went through"
    );
    assert!(partitions_followed(&gw).await <= followed + read as f64);
    // The admin API is not limited.
    let resp = get(
        format!("http://{}/v1/topics/h.0/history", gw.admin_addr),
        &[],
    )
    .await;
    assert_ne!(resp.status().as_u16(), 429);
    gw.stop().await.unwrap();
}
