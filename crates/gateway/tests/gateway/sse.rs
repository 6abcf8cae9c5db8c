use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn publish_reaches_an_sse_subscriber() {
    let gw = spawn_gateway(test_config()).await;
    let mut sse = SseClient::connect(&gw, "topic=news", None).await;
    assert_eq!(sse.headers["content-type"], "text/event-stream");
    let opening = sse.next_block().await.unwrap();
    assert_eq!(opening.retry, Some(3000));
    let start = opening.id.unwrap();
    assert!(
        start.starts_with("news=") && start.ends_with("-0"),
        "{start}"
    );

    let id = publish_event(
        &gw,
        "news",
        json!({"headline": "hi", "n": 1}),
        Some("story"),
    )
    .await;
    let event = sse.next_event().await.unwrap();
    assert_eq!(event.id.as_deref(), Some(format!("news={id}").as_str()));
    assert_eq!(event.event.as_deref(), Some("story"));
    assert_eq!(event.data.as_deref(), Some(r#"{"headline":"hi","n":1}"#));

    // A JSON string is sent as its text, one data line per line.
    publish(&gw, "news", json!("line one\nline two")).await;
    let event = sse.next_event().await.unwrap();
    assert_eq!(event.event, None);
    assert_eq!(event.data.as_deref(), Some("line one\nline two"));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn several_topics_on_one_stream_carry_every_position() {
    let gw = spawn_gateway(test_config()).await;
    let mut sse = SseClient::connect(&gw, "topic=a&topic=b", None).await;
    sse.next_block().await.unwrap();
    let a1 = publish(&gw, "a", json!(1)).await;
    let b1 = publish(&gw, "b", json!(2)).await;
    // Order holds per topic; across topics the stream takes what is ready.
    let e1 = sse.next_event().await.unwrap();
    let e2 = sse.next_event().await.unwrap();
    let mut data = [e1.data.unwrap(), e2.data.clone().unwrap()];
    data.sort();
    assert_eq!(data, ["1", "2"]);
    let id = e2.id.unwrap();
    assert!(
        id.contains(&format!("a={a1}")) && id.contains(&format!("b={b1}")),
        "{id}"
    );
    publish(&gw, "c", json!("not subscribed")).await;
    publish(&gw, "a", json!(3)).await;
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("3"));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn last_event_id_replays_exactly_the_missed_messages() {
    let gw = spawn_gateway(test_config()).await;
    let mut sse = SseClient::connect(&gw, "topic=a&topic=b", None).await;
    sse.next_block().await.unwrap();
    publish(&gw, "a", json!("a1")).await;
    publish(&gw, "b", json!("b1")).await;
    sse.next_event().await.unwrap();
    sse.next_event().await.unwrap();
    let last = sse.last_event_id.clone().unwrap();
    drop(sse);

    for m in ["a2", "a3"] {
        publish(&gw, "a", json!(m)).await;
    }
    publish(&gw, "b", json!("b2")).await;

    // The header, as EventSource sends it on reconnect.
    let mut sse = SseClient::connect(&gw, "topic=a&topic=b", Some(&last)).await;
    let mut got = Vec::new();
    while got.len() < 3 {
        got.push(sse.next_event().await.unwrap().data.unwrap());
    }
    got.sort();
    assert_eq!(got, ["a2", "a3", "b2"]);
    // Then live, with nothing replayed twice.
    publish(&gw, "a", json!("a4")).await;
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("a4"));
    drop(sse);

    // The query parameter, for clients that cannot set headers.
    let query = format!("topic=a&lastEventId={}", urlencode(&last));
    let mut sse = SseClient::connect(&gw, &query, None).await;
    let replay: Vec<String> = vec![
        sse.next_event().await.unwrap().data.unwrap(),
        sse.next_event().await.unwrap().data.unwrap(),
        sse.next_event().await.unwrap().data.unwrap(),
    ];
    assert_eq!(replay, ["a2", "a3", "a4"]);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_client_that_received_nothing_still_resumes_from_the_opening_id() {
    let gw = spawn_gateway(test_config()).await;
    let mut sse = SseClient::connect(&gw, "topic=quiet", None).await;
    sse.next_block().await.unwrap();
    let opening = sse.last_event_id.clone().unwrap();
    drop(sse);
    publish(&gw, "quiet", json!("while away")).await;
    let mut sse = SseClient::connect(&gw, "topic=quiet", Some(&opening)).await;
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some("while away")
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn an_expired_cursor_gets_the_loss_signal_then_live() {
    let mut config = test_config();
    config.topics.history_len = 2;
    let gw = spawn_gateway(config).await;
    let first = publish(&gw, "t", json!(1)).await;
    for i in 2..=5 {
        publish(&gw, "t", json!(i)).await;
    }
    let mut sse = SseClient::connect(&gw, "topic=t", Some(&format!("t={first}"))).await;
    let lost = sse.next_event().await.unwrap();
    assert_eq!(lost.event.as_deref(), Some("herald.lost"));
    let body: serde_json::Value = serde_json::from_str(lost.data.as_deref().unwrap()).unwrap();
    assert_eq!(body, json!({"topic": "t", "reason": "expired"}));
    publish(&gw, "t", json!(6)).await;
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("6"));

    // A cursor from another epoch (e.g. before a restart) is reported too.
    let mut sse = SseClient::connect(&gw, "topic=t", Some("t=1234-3")).await;
    let lost = sse.next_event().await.unwrap();
    assert_eq!(lost.event.as_deref(), Some("herald.lost"));
    assert!(lost.data.unwrap().contains(r#""reason":"epoch""#));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn heartbeats_keep_idle_streams_alive() {
    let mut config = test_config();
    config.sse.heartbeat = std::time::Duration::from_millis(100);
    let gw = spawn_gateway(config).await;
    let mut sse = SseClient::connect(&gw, "topic=idle", None).await;
    let raw = sse.rest(std::time::Duration::from_millis(450)).await;
    assert!(raw.matches(": ping\n\n").count() >= 2, "{raw:?}");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn messages_postpone_the_heartbeat() {
    let mut config = test_config();
    config.sse.heartbeat = std::time::Duration::from_millis(400);
    let gw = spawn_gateway(config).await;
    let mut sse = SseClient::connect(&gw, "topic=busy", None).await;
    sse.next_block().await.unwrap();
    // Messages every 100 ms for a second: the stream is never idle for a heartbeat.
    for n in 0..10 {
        publish(&gw, "busy", serde_json::json!({ "n": n })).await;
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Then idle: pings come.
    let raw = sse.rest(std::time::Duration::from_millis(1000)).await;
    let first_ping = raw.find(": ping").expect("a ping once idle");
    assert_eq!(
        raw[..first_ping].matches("data: ").count(),
        10,
        "no ping while messages flowed: {raw:?}"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn bad_sse_requests_get_clear_errors() {
    let gw = spawn_gateway(test_config()).await;
    for (query, last_id, code) in [
        ("", None, "no_topic"),
        ("topic=a/b", None, "bad_topic"),
        ("topic=%0Aevil", None, "bad_topic"),
        ("topic=a", Some("garbage"), "bad_cursor"),
        ("topic=a", Some("a=zz-1"), "bad_cursor"),
    ] {
        let resp = SseClient::request(&gw, query, last_id).await;
        assert_eq!(resp.status(), 400, "{query} {last_id:?}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["code"], code, "{query} {last_id:?}: {body}");
        assert!(body["reason"].as_str().is_some_and(|r| !r.is_empty()));
    }
    let many: Vec<String> = (0..65).map(|i| format!("topic=t{i}")).collect();
    let resp = SseClient::request(&gw, &many.join("&"), None).await;
    assert_eq!(resp.status(), 400);
    let huge = format!("a={}", "9".repeat(5000));
    let resp = SseClient::request(&gw, "topic=a", Some(&huge)).await;
    assert_eq!(resp.status(), 400);
    gw.stop().await.unwrap();
}

fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[tokio::test]
async fn streams_end_after_their_lifetime_and_resume_exactly() {
    let mut config = test_config();
    config.sse.max_lifetime = std::time::Duration::from_millis(300);
    config.sse.retry = std::time::Duration::from_millis(100);
    let gw = spawn_gateway(config).await;
    let mut sse = SseClient::connect(&gw, "topic=life", None).await;
    sse.next_block().await.unwrap();
    publish(&gw, "life", json!(1)).await;
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("1"));
    let last = sse.next_block().await.unwrap();
    assert_eq!(last.retry, Some(100));
    assert!(
        sse.next_block().await.is_none(),
        "the stream ends after its lifetime"
    );
    publish(&gw, "life", json!(2)).await;
    let resume = sse.last_event_id.clone().unwrap();
    let mut sse = SseClient::connect(&gw, "topic=life", Some(&resume)).await;
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("2"));
    gw.stop().await.unwrap();
}

async fn sse_gauge(gw: &herald_gateway::Gateway) -> f64 {
    let text = metrics_text(gw).await;
    text.lines()
        .find_map(|l| l.strip_prefix("herald_connections{transport=\"sse\"} "))
        .map_or(0.0, |v| v.parse().unwrap())
}

#[tokio::test]
async fn a_client_that_goes_away_is_noticed_at_once() {
    // The default heartbeat is 15 s; the gateway must not wait for it to free the stream.
    let gw = spawn_gateway(test_config()).await;
    let before = sse_gauge(&gw).await;
    let mut sse = SseClient::connect(&gw, "topic=gone", None).await;
    sse.next_block().await.unwrap();
    eventually(WAIT, || async { sse_gauge(&gw).await >= before + 1.0 }).await;
    let subscribers = || topic_subscribers(&gw, "gone");
    assert_eq!(subscribers().await, 1);
    drop(sse);
    eventually(std::time::Duration::from_secs(3), || async {
        subscribers().await == 0
    })
    .await;
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn raw_sse_response_is_close_delimited_and_request_heads_are_bounded() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut config = test_config();
    config.limits.header_read_timeout = std::time::Duration::from_millis(300);
    config.limits.max_header_bytes = 2048;
    let gw = spawn_gateway(config).await;

    let mut raw = tokio::net::TcpStream::connect(gw.public_addr)
        .await
        .unwrap();
    raw.write_all(b"GET /v1/sse?topic=raw HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let mut got = String::new();
    while !got.contains("\n\n") || !got.contains("\r\n\r\n") {
        let n = raw.read(&mut buf).await.unwrap();
        assert!(n > 0);
        got.push_str(std::str::from_utf8(&buf[..n]).unwrap());
    }
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
    assert!(got.contains("content-type: text/event-stream\r\n"));
    assert!(got.contains("connection: close\r\n"));
    assert!(
        !got.contains("transfer-encoding"),
        "no chunk framing: {got}"
    );

    // An oversized head gets 431, a head that never completes gets 408.
    let mut raw = tokio::net::TcpStream::connect(gw.public_addr)
        .await
        .unwrap();
    let big = format!(
        "GET /v1/sse?topic=a HTTP/1.1\r\nx-big: {}\r\n\r\n",
        "a".repeat(4000)
    );
    raw.write_all(big.as_bytes()).await.unwrap();
    let mut answer = String::new();
    raw.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");

    let mut raw = tokio::net::TcpStream::connect(gw.public_addr)
        .await
        .unwrap();
    raw.write_all(b"GET /v1/sse?topic=a HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    raw.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    for reason in ["head_too_large", "head_timeout"] {
        let series = format!(r#"herald_client_errors_total{{transport="http",reason="{reason}"}}"#);
        assert_eq!(metric(&gw, &series).await, 1.0, "{reason} is counted once");
    }

    // Garbage is answered by hyper with 400.
    let mut raw = tokio::net::TcpStream::connect(gw.public_addr)
        .await
        .unwrap();
    raw.write_all(b"\x00\x01 not http\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    let _ = raw.read_to_end(&mut answer).await;
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 400"),
        "{answer:?}"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn the_router_serves_sse_through_hyper_too() {
    use axum::body::Body;
    use futures_util::StreamExt as _;
    use tower::ServiceExt as _;
    let config = test_config();
    let state = herald_gateway::AppState::new(
        config,
        tokio_util::sync::CancellationToken::new(),
        tokio_util::task::TaskTracker::new(),
        herald_gateway::install_metrics(),
    )
    .unwrap();
    let response = herald_gateway::public_router(state.clone())
        .oneshot(
            axum::http::Request::get("/v1/sse?topic=routed")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body().into_data_stream();
    let opening = body.next().await.unwrap().unwrap();
    assert!(
        std::str::from_utf8(&opening)
            .unwrap()
            .starts_with("retry: 3000\nid: routed=")
    );
    let topic = state.registry().get("routed").unwrap();
    topic.publish(None, herald_core::Payload::from_value(&json!("hi")));
    let frame = body.next().await.unwrap().unwrap();
    assert!(
        std::str::from_utf8(&frame)
            .unwrap()
            .ends_with("data: hi\n\n")
    );
}

/// A client picks its heartbeat within `sse.min_heartbeat`..`sse.max_heartbeat` (a mobile
/// client saves wake-ups with a long one); outside them it gets a clear 400.
#[tokio::test]
async fn a_client_picks_its_heartbeat_within_the_bounds() {
    let mut config = test_config();
    config.sse.heartbeat = std::time::Duration::from_secs(30);
    config.sse.min_heartbeat = std::time::Duration::from_millis(100);
    let gw = spawn_gateway(config).await;
    let mut fast = SseClient::connect(&gw, "topic=hb&heartbeat=0.1", None).await;
    let mut default = SseClient::connect(&gw, "topic=hb", None).await;
    let raw = fast.rest(std::time::Duration::from_millis(450)).await;
    assert!(raw.matches(": ping\n\n").count() >= 2, "{raw:?}");
    let raw = default.rest(std::time::Duration::from_millis(100)).await;
    assert!(!raw.contains(": ping"), "the default is 30 s: {raw:?}");
    for query in [
        "heartbeat=0.05",
        "heartbeat=301",
        "heartbeat=soon",
        "heartbeat=-1",
    ] {
        let resp = SseClient::request(&gw, &format!("topic=hb&{query}"), None).await;
        assert_eq!(resp.status(), 400, "{query}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "bad_heartbeat", "{query}: {body}");
    }
    gw.stop().await.unwrap();
}
