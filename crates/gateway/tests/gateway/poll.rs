use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;

async fn poll(gw: &herald_gateway::Gateway, query: &str) -> (u16, Value) {
    let resp = get(format!("http://{}/v1/poll?{query}", gw.public_addr), &[]).await;
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[tokio::test]
async fn poll_returns_at_once_when_messages_exist_and_continues_from_its_cursor() {
    let gw = spawn_gateway(test_config()).await;
    // No cursor: waits for the next message; a short timeout returns an empty batch and a cursor.
    let (status, first) = poll(&gw, "topic=p&timeout=0.2").await;
    assert_eq!(status, 200);
    assert_eq!(first["messages"], json!([]));
    let cursor = first["cursor"].as_str().unwrap().to_string();
    assert!(cursor.starts_with("p="));

    publish(&gw, "p", json!(1)).await;
    publish(&gw, "p", json!(2)).await;
    let started = Instant::now();
    let (_, batch) = poll(&gw, &format!("topic=p&cursor={}", enc(&cursor))).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    let data: Vec<&Value> = batch["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["data"])
        .collect();
    assert_eq!(data, [&json!(1), &json!(2)]);
    assert_eq!(batch["messages"][0]["topic"], "p");
    let next = batch["cursor"].as_str().unwrap().to_string();

    // Held until a message arrives: published once the poll is open and waiting (the
    // gateway's own gauge says so), so the held branch is what runs.
    let query = format!("topic=p&cursor={}", enc(&next));
    let (held, ()) = tokio::join!(poll(&gw, &query), async {
        eventually(WAIT, || async {
            metric(&gw, r#"herald_connections{transport="poll"}"#).await == 1.0
        })
        .await;
        publish(&gw, "p", json!(3)).await;
    });
    assert_eq!(held.1["messages"][0]["data"], 3);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn poll_reports_lost_messages() {
    let mut config = test_config();
    config.topics.history_len = 1;
    let gw = spawn_gateway(config).await;
    let first = publish(&gw, "p", json!(1)).await;
    publish(&gw, "p", json!(2)).await;
    publish(&gw, "p", json!(3)).await;
    let (_, batch) = poll(
        &gw,
        &format!("topic=p&timeout=0&cursor={}", enc(&format!("p={first}"))),
    )
    .await;
    assert_eq!(batch["lost"], json!([{"topic": "p", "reason": "expired"}]));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn bad_polls_are_400() {
    let gw = spawn_gateway(test_config()).await;
    for query in [
        "",
        "topic=a&cursor=zz",
        "topic=a&timeout=soon",
        "topic=a&timeout=-1",
        "topic=%FF",
    ] {
        let (status, body) = poll(&gw, query).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body["code"].is_string());
    }
    // A timeout too large for any clock is the longest allowed, not a crash.
    let mut config = test_config();
    config.poll.timeout = Duration::from_millis(200);
    let short = spawn_gateway(config).await;
    let (status, body) = poll(&short, "topic=a&timeout=1e300").await;
    assert_eq!(status, 200, "{body}");
    short.stop().await.unwrap();
    gw.stop().await.unwrap();
}
