//! Prefix-pattern subscriptions (`orders.*`) on every transport, driven by real clients.

use bytes::Bytes;
use futures_util::StreamExt as _;
use http_body_util::Empty;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::common::*;

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

async fn poll(gw: &herald_gateway::Gateway, query: &str) -> (u16, Value) {
    let resp = get(format!("http://{}/v1/poll?{query}", gw.public_addr), &[]).await;
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

/// The next SSE event of the JSON form, parsed, with the stream's `id:` beside it.
async fn next_json(sse: &mut SseClient) -> (Value, String) {
    let event = sse.next_event().await.unwrap();
    let data: Value = serde_json::from_str(event.data.as_deref().unwrap()).unwrap();
    (data, event.id.unwrap_or_default())
}

#[tokio::test]
async fn sse_gets_every_matching_topic_even_one_created_later_with_its_own_topic_and_id() {
    let gw = spawn_gateway(test_config()).await;
    publish(&gw, "orders.eu", json!("before")).await;
    let mut sse = SseClient::connect(&gw, "topic=orders.*&format=json", None).await;
    let opening = sse.next_block().await.unwrap();
    assert_eq!(opening.id.as_deref(), Some(""), "nothing seen yet");

    let eu = publish(&gw, "orders.eu", json!(1)).await;
    publish(&gw, "news", json!("not matched")).await;
    publish(&gw, "ordersx.eu", json!("not matched")).await;
    publish(&gw, "orders.eu:x", json!("another namespace")).await;
    let us = publish(&gw, "orders.us", json!(2)).await; // a topic created now
    let (first, id) = next_json(&mut sse).await;
    assert_eq!(
        (&first["topic"], &first["id"], &first["data"]),
        (&json!("orders.eu"), &json!(eu), &json!(1))
    );
    assert_eq!(id, format!("orders.eu={eu}"));
    let (second, id) = next_json(&mut sse).await;
    assert_eq!(
        (&second["topic"], &second["id"], &second["data"]),
        (&json!("orders.us"), &json!(us), &json!(2))
    );
    assert_eq!(id, format!("orders.eu={eu},orders.us={us}"));

    // The text form carries each message's position in the stream's id as well.
    let mut text = SseClient::connect(&gw, "topic=orders.*", None).await;
    text.next_block().await.unwrap();
    let deep = publish(&gw, "orders.eu.paris", json!({"n": 3})).await;
    let event = text.next_event().await.unwrap();
    assert_eq!(event.data.as_deref(), Some(r#"{"n":3}"#));
    assert_eq!(event.id, Some(format!("orders.eu.paris={deep}")));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn websocket_subscribes_and_unsubscribes_a_pattern() {
    let gw = spawn_gateway(test_config()).await;
    let mut ws = ws_connect(&gw).await;
    let reply = ws_subscribe(&mut ws, &["orders.*", "news"]).await;
    assert_eq!(reply["topics"], json!(["news", "orders.*"]));
    assert!(reply["cursors"].get("orders.*").is_none(), "{reply}");

    let eu = publish(&gw, "orders.eu", json!(1)).await;
    publish(&gw, "other.x", json!("not matched")).await;
    let us = publish(&gw, "orders.us", json!(2)).await;
    for (topic, id, data) in [("orders.eu", &eu, 1), ("orders.us", &us, 2)] {
        let frame = ws_next(&mut ws).await;
        assert_eq!(frame["type"], "message");
        assert_eq!(
            (&frame["topic"], &frame["id"], &frame["data"]),
            (&json!(topic), &json!(id), &json!(data))
        );
    }

    ws_send(
        &mut ws,
        json!({"type": "unsubscribe", "topics": ["orders.*"]}),
    )
    .await;
    let reply = ws_next(&mut ws).await;
    assert_eq!(
        reply,
        json!({"type": "unsubscribed", "topics": ["orders.*"]})
    );
    publish(&gw, "orders.eu", json!("after")).await;
    publish(&gw, "news", json!("still subscribed")).await;
    assert_eq!(ws_next(&mut ws).await["data"], "still subscribed");

    // A bad pattern is an error frame with the reason; the connection stays.
    for (bad, why) in [
        ("*", "bare"),
        ("orders*", "must follow"),
        ("user:*", "personal"),
        ("conn:*", "personal"),
        ("a.*.b", "'*'"),
    ] {
        ws_send(&mut ws, json!({"type": "subscribe", "topics": [bad]})).await;
        let frame = ws_next(&mut ws).await;
        assert_eq!(
            (frame["type"].as_str(), frame["code"].as_str()),
            (Some("error"), Some("bad_topic")),
            "{bad}: {frame}"
        );
        assert!(frame["reason"].as_str().unwrap().contains(why), "{frame}");
    }
    ws_send(&mut ws, json!({"type": "ping"})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "pong");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn long_poll_gets_matching_topics_and_resumes_the_ones_in_its_cursor() {
    let gw = spawn_gateway(test_config()).await;
    publish(&gw, "orders.old", json!("history")).await;
    /// A poll held until a matching message arrives, while `publish` runs once it waits.
    async fn held_poll(
        gw: &herald_gateway::Gateway,
        query: String,
        publish: impl std::future::Future<Output = ()>,
    ) -> Value {
        let (answer, ()) = tokio::join!(poll(gw, &query), async {
            eventually(WAIT, || async {
                metric(gw, r#"herald_connections{transport="poll"}"#).await == 1.0
            })
            .await;
            publish.await;
        });
        assert_eq!(answer.0, 200);
        answer.1
    }
    // A topic that exists, then one created while the poll waits; never a non-matching one.
    let first = held_poll(&gw, "topic=orders.*&timeout=20".into(), async {
        publish(&gw, "other", json!("not matched")).await;
        publish(&gw, "orders.old", json!(1)).await;
    })
    .await;
    let messages = first["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1, "{first}");
    assert_eq!(
        (&messages[0]["topic"], &messages[0]["data"]),
        (&json!("orders.old"), &json!(1))
    );
    let old_id = messages[0]["id"].as_str().unwrap().to_string();
    let cursor = first["cursor"].as_str().unwrap().to_string();
    assert_eq!(cursor, format!("orders.old={old_id}"));
    let second = held_poll(
        &gw,
        format!("topic=orders.*&timeout=20&cursor={}", enc(&cursor)),
        async {
            publish(&gw, "ordersx", json!("not matched")).await;
            publish(&gw, "orders.new", json!(2)).await;
        },
    )
    .await;
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 1, "{second}");
    assert_eq!(
        (&messages[0]["topic"], &messages[0]["data"]),
        (&json!("orders.new"), &json!(2))
    );
    let new_id = messages[0]["id"].as_str().unwrap();
    let cursor = second["cursor"].as_str().unwrap().to_string();
    assert_eq!(cursor, format!("orders.old={old_id},orders.new={new_id}"));

    // Between polls: orders.new goes on (in the cursor: replayed), orders.late is new to
    // this client (not in the cursor: delivered from the next poll on only).
    publish(&gw, "orders.new", json!(3)).await;
    publish(&gw, "orders.late", json!("before the poll")).await;
    let (_, batch) = poll(&gw, &format!("topic=orders.*&cursor={}", enc(&cursor))).await;
    let data: Vec<&Value> = batch["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["data"])
        .collect();
    assert_eq!(data, [&json!(3)], "{batch}");

    // Bad patterns are a 400 with the reason.
    for bad in ["*", "orders*", "user:*", "a.*.b"] {
        let (status, body) = poll(&gw, &format!("topic={}&timeout=0", enc(bad))).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("bad_topic")),
            "{bad}"
        );
        assert!(body["reason"].as_str().is_some(), "{body}");
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn sse_refuses_bad_patterns_with_a_reason() {
    let gw = spawn_gateway(test_config()).await;
    for (bad, why) in [
        ("*", "bare `*`"),
        ("orders*", "must follow"),
        ("ord.ers*x", "'*'"),
        ("user:*", "personal"),
        ("user:alice.*", "personal"),
        ("conn:*", "personal"),
    ] {
        let resp = SseClient::request(&gw, &format!("topic={}", enc(bad)), None).await;
        assert_eq!(resp.status(), 400, "{bad}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "bad_topic");
        assert!(
            body["reason"].as_str().unwrap().contains(why),
            "{bad}: {body}"
        );
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_pattern_needs_a_claim_that_covers_every_topic_it_can_match() {
    let gw = spawn_gateway(token_config()).await;
    let status = |query: String, bearer: Option<String>| {
        let gw = &gw;
        async move {
            let mut req = http().get(format!("http://{}/v1/sse?{query}", gw.public_addr));
            if let Some(t) = bearer {
                req = req.bearer_auth(t);
            }
            req.send().await.unwrap().status().as_u16()
        }
    };
    let exp = unix_now() + 600;
    let orders = token(json!({"sub": "a", "exp": exp, "topics": ["orders.*"]}));
    let eu = token(json!({"sub": "a", "exp": exp, "topics": ["orders.eu.*", "orders.us"]}));
    assert_eq!(
        status("topic=orders.*".into(), Some(orders.clone())).await,
        200
    );
    assert_eq!(
        status("topic=orders.eu.*".into(), Some(orders.clone())).await,
        200
    );
    assert_eq!(
        status("topic=orders.eu.*".into(), Some(eu.clone())).await,
        200
    );
    assert_eq!(status("topic=orders.*".into(), Some(eu.clone())).await, 403);
    assert_eq!(status("topic=orders.*".into(), None).await, 403);
    // A public prefix covers the patterns inside it.
    assert_eq!(status("topic=public.*".into(), None).await, 200);
    assert_eq!(status("topic=public.a.*".into(), None).await, 200);

    // The WebSocket `subscribe` and a new token follow the same rule.
    let mut ws = ws_connect(&gw).await;
    ws_send(&mut ws, json!({"type": "auth", "token": orders})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "authenticated");
    ws_subscribe(&mut ws, &["orders.*"]).await;
    ws_send(&mut ws, json!({"type": "subscribe", "topics": ["news.*"]})).await;
    assert_forbidden(&ws_next(&mut ws).await, "news.*");
    // A token that no longer covers the pattern drops it.
    ws_send(&mut ws, json!({"type": "auth", "token": eu})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "authenticated");
    let frame = ws_next(&mut ws).await;
    assert_forbidden(&frame, "orders.*");
    assert_eq!(frame["topics"], json!(["orders.*"]));
    publish(&gw, "orders.us", json!("dropped")).await;
    ws_send(&mut ws, json!({"type": "ping"})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "pong");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_resumed_pattern_replays_the_topics_it_saw_and_gets_the_others_live() {
    let gw = spawn_gateway(test_config()).await;
    let mut sse = SseClient::connect(&gw, "topic=r.*&format=json", None).await;
    sse.next_block().await.unwrap();
    publish(&gw, "r.a", json!("a1")).await;
    publish(&gw, "r.b", json!("b1")).await;
    next_json(&mut sse).await;
    let (_, last) = next_json(&mut sse).await;
    drop(sse);
    publish(&gw, "r.a", json!("a2")).await;
    publish(&gw, "r.b", json!("b2")).await;
    publish(&gw, "r.c", json!("c-missed")).await; // not seen before: not replayed

    let mut sse = SseClient::connect(&gw, "topic=r.*&format=json", Some(&last)).await;
    sse.next_block().await.unwrap();
    let mut replayed = vec![
        next_json(&mut sse).await.0["data"].clone(),
        next_json(&mut sse).await.0["data"].clone(),
    ];
    replayed.sort_by_key(|v| v.to_string());
    assert_eq!(replayed, [json!("a2"), json!("b2")]);
    publish(&gw, "r.c", json!("c-live")).await;
    let (live, id) = next_json(&mut sse).await;
    assert_eq!(live["data"], "c-live");
    assert!(
        id.contains("r.a=") && id.contains("r.b=") && id.contains("r.c="),
        "{id}"
    );

    // WebSocket: the cursors of topics the pattern matches resume them.
    let a_id = publish(&gw, "r.a", json!("a3")).await;
    publish(&gw, "r.a", json!("a4")).await;
    let mut ws = ws_connect(&gw).await;
    ws_send(
        &mut ws,
        json!({"type": "subscribe", "topics": ["r.*"], "cursors": {"r.a": a_id}}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await["type"], "subscribed");
    assert_eq!(ws_next(&mut ws).await["data"], "a4");
    // A cursor for a topic neither named nor matched, or for the pattern itself, is refused.
    for cursors in [json!({"q.a": a_id}), json!({"r.*": a_id})] {
        ws_send(
            &mut ws,
            json!({"type": "subscribe", "topics": ["r.*"], "cursors": cursors}),
        )
        .await;
        let frame = ws_next(&mut ws).await;
        assert_eq!(frame["code"], "bad_cursor", "{frame}");
    }
    // More cursors than a connection can hold (topics named + the topics patterns track) is
    // refused before any history is read.
    let most = test_config().limits.max_subscriptions + herald_core::pattern::MAX_PATTERN_TOPICS;
    let many: serde_json::Map<String, serde_json::Value> = (0..=most)
        .map(|i| (format!("r.t{i}"), json!(a_id)))
        .collect();
    ws_send(
        &mut ws,
        json!({"type": "subscribe", "topics": ["r.*"], "cursors": many}),
    )
    .await;
    let frame = ws_next(&mut ws).await;
    assert_eq!(frame["code"], "bad_cursor", "{frame}");
    assert!(
        frame["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("at most {most} cursors")),
        "{frame}"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_pattern_counts_as_one_subscription() {
    let mut config = test_config();
    config.limits.max_subscriptions = 2;
    let gw = spawn_gateway(config).await;
    let ok = SseClient::request(&gw, "topic=a&topic=b.*", None).await;
    assert_eq!(ok.status(), 200);
    let refused = SseClient::request(&gw, "topic=a&topic=b.*&topic=c.*", None).await;
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "too_many_topics");

    let mut ws = ws_connect(&gw).await;
    ws_subscribe(&mut ws, &["a.*", "b.*"]).await;
    ws_subscribe(&mut ws, &["a.*"]).await; // held already: not one more
    ws_send(&mut ws, json!({"type": "subscribe", "topics": ["c"]})).await;
    assert_eq!(ws_next(&mut ws).await["code"], "too_many_topics");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_pattern_over_http2_and_tls_is_served_the_same() {
    let gw = spawn_gateway(crate::tls::tls_config()).await;
    let tls = crate::tls::tls_connect(&gw, &[b"h2"]).await;
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let resp = sender
        .send_request(
            hyper::Request::get("https://localhost/v1/sse?topic=h2.*&format=json")
                .body(Empty::<Bytes>::new())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: BodyStream = Box::pin(
        http_body_util::BodyExt::into_data_stream(resp.into_body()).map(|c| c.map_err(Into::into)),
    );
    let mut sse = SseClient::from_body(body);
    sse.next_block().await.unwrap();
    let id = publish(&gw, "h2.fresh", json!(1)).await;
    let (message, _) = next_json(&mut sse).await;
    assert_eq!(
        (&message["topic"], &message["id"]),
        (&json!("h2.fresh"), &json!(id))
    );
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_on_one_node_gets_a_topic_only_another_node_ever_had() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let p = format!("test-wildcard-{:x}", rand::random::<u32>());
    let a = spawn_ready(cluster_config(&p, "a")).await;
    let b = spawn_ready(cluster_config(&p, "b")).await;
    let mut sse = SseClient::connect(&b, "topic=far.*&format=json", None).await;
    sse.next_block().await.unwrap();
    let mut ws = ws_connect(&b).await;
    ws_subscribe(&mut ws, &["far.*"]).await;

    let id = publish(&a, "far.only-on-a", json!("from a")).await;
    let (message, stream_id) = next_json(&mut sse).await;
    assert_eq!(
        (&message["topic"], &message["id"], &message["data"]),
        (&json!("far.only-on-a"), &json!(id), &json!("from a"))
    );
    assert_eq!(stream_id, format!("far.only-on-a={id}"));
    let frame = ws_next(&mut ws).await;
    assert_eq!(
        (&frame["topic"], &frame["id"]),
        (&json!("far.only-on-a"), &json!(id))
    );

    // Resumed on node a from the id node b gave: the missed message, once.
    drop(sse);
    publish(&b, "far.only-on-a", json!("missed")).await;
    let mut resumed = SseClient::connect(&a, "topic=far.*&format=json", Some(&stream_id)).await;
    resumed.next_block().await.unwrap();
    assert_eq!(next_json(&mut resumed).await.0["data"], "missed");
    for node in [a, b] {
        node.stop().await.unwrap();
    }
}

#[tokio::test]
async fn the_node_bounds_its_distinct_patterns() {
    let mut config = test_config();
    config.topics.max_patterns = 1;
    let gw = spawn_gateway(config).await;
    let mut held = SseClient::connect(&gw, "topic=a.*", None).await;
    held.next_block().await.unwrap();
    assert_eq!(metric(&gw, "herald_patterns").await, 1.0);
    // The same pattern again shares its channel; another one is past the node's limit.
    let shared = SseClient::request(&gw, "topic=a.*", None).await;
    assert_eq!(shared.status(), 200);
    let refused = SseClient::request(&gw, "topic=b.*", None).await;
    assert_eq!(refused.status(), 503);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "topic_limit");
    assert!(
        body["reason"].as_str().unwrap().contains("patterns"),
        "{body}"
    );
    let mut ws = ws_connect(&gw).await;
    ws_send(
        &mut ws,
        json!({"type": "subscribe", "topics": ["b.*", "c"]}),
    )
    .await;
    let frame = ws_next(&mut ws).await;
    assert_eq!(frame["code"], "topic_limit", "{frame}");
    // All or nothing: `c` was not subscribed either.
    publish(&gw, "c", json!("not for ws")).await;
    ws_send(&mut ws, json!({"type": "ping"})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "pong");
    // Released with its last subscriber, the room is there again.
    drop((held, shared));
    eventually(WAIT, || async {
        SseClient::request(&gw, "topic=b.*", None).await.status() == 200
    })
    .await;
    eventually(WAIT, || async {
        metric(&gw, "herald_patterns").await == 0.0
    })
    .await;
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_message_matched_twice_on_one_connection_arrives_once() {
    let gw = spawn_gateway(test_config()).await;
    let mut ws = ws_connect(&gw).await;
    ws_subscribe(&mut ws, &["o.*", "o.eu.*", "o.eu.x"]).await;
    let mut sse =
        SseClient::connect(&gw, "topic=o.*&topic=o.eu.*&topic=o.eu.x&format=json", None).await;
    sse.next_block().await.unwrap();
    for (i, topic) in ["o.eu.x", "o.eu.y", "o.z"].iter().enumerate() {
        publish(&gw, topic, json!(i)).await;
    }
    publish(&gw, "o.end", json!("end")).await;
    let mut on_ws = Vec::new();
    let mut on_sse = Vec::new();
    loop {
        let frame = ws_next(&mut ws).await;
        if frame["data"] == "end" {
            break;
        }
        on_ws.push(frame["topic"].as_str().unwrap().to_string());
    }
    loop {
        let (message, _) = next_json(&mut sse).await;
        if message["data"] == "end" {
            break;
        }
        on_sse.push(message["topic"].as_str().unwrap().to_string());
    }
    on_ws.sort();
    on_sse.sort();
    assert_eq!(on_ws, ["o.eu.x", "o.eu.y", "o.z"]);
    assert_eq!(on_sse, on_ws);
    // The stream's id names the named topic once.
    let id = sse.last_event_id.clone().unwrap();
    assert_eq!(id.matches("o.eu.x=").count(), 1, "{id}");
    gw.stop().await.unwrap();
}

/// Publishes `count` messages of about 50 KB, numbered from 1, alternately to `a` and `b`:
/// more than a loopback socket holds, so a subscriber that does not read falls behind.
async fn flood(gw: &herald_gateway::Gateway, a: &str, b: &str, count: u64) {
    let pad = "y".repeat(50_000);
    for n in 1..=count {
        let topic = if n % 2 == 0 { b } else { a };
        publish(gw, topic, json!({"n": n, "pad": pad})).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_subscriber_that_falls_behind_is_told_naming_the_pattern() {
    let mut config = test_config();
    config.topics.channel_capacity = 8;
    config.limits.write_timeout = std::time::Duration::from_secs(30);
    let gw = spawn_gateway(config).await;
    let mut ws = ws_connect(&gw).await;
    ws_subscribe(&mut ws, &["flood.*"]).await;
    // Not read while 15 MB go out over two topics.
    flood(&gw, "flood.a", "flood.b", 300).await;
    let mut lost = Vec::new();
    let mut got = Vec::new();
    while got.last() != Some(&300) {
        let frame = ws_next(&mut ws).await;
        match frame["type"].as_str() {
            Some("lost") => lost.push(frame),
            Some("message") => got.push(frame["data"]["n"].as_u64().unwrap()),
            _ => panic!("{frame}"),
        }
    }
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in order: {got:?}");
    assert!(got.len() < 300, "some were lost: {}", got.len());
    assert_eq!(
        lost[0],
        json!({"type": "lost", "topic": "flood.*", "reason": "lagged"})
    );
    let counted = r#"herald_slow_consumer_events_total{outcome="lost",namespace="default"}"#;
    assert!(metric(&gw, counted).await >= 1.0);
    // Still connected, and live.
    publish(&gw, "flood.c", json!({"n": 301})).await;
    assert_eq!(ws_next(&mut ws).await["data"]["n"], 301);
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_pattern_subscriber_is_disconnected_under_the_disconnect_policy() {
    let mut config = test_config();
    config.topics.channel_capacity = 8;
    config.lag_policy = herald_core::LagPolicy::Disconnect;
    config.limits.write_timeout = std::time::Duration::from_secs(30);
    let gw = spawn_gateway(config).await;
    let mut sse = SseClient::connect(&gw, "topic=flood.*&format=json", None).await;
    sse.next_block().await.unwrap();
    flood(&gw, "flood.a", "flood.b", 300).await;
    let mut last = None;
    while let Some(event) = sse.next_event().await {
        if event.event.as_deref() == Some("herald.disconnect") {
            last = event.data;
            break;
        }
    }
    let data: Value = serde_json::from_str(&last.expect("told before the end")).unwrap();
    assert_eq!(data, json!({"reason": "slow consumer", "topic": "flood.*"}));
    gw.stop().await.unwrap();
}

/// A pattern new on the node pins a channel there, as a new topic pins a topic: it is charged
/// to the client against `limits.max_new_patterns_per_client`, so a few clients cannot take
/// the node's `topics.max_patterns` from the others. A pattern the node holds already is free.
#[tokio::test]
async fn a_new_pattern_is_charged_to_the_client_that_made_it() {
    let mut config = test_config();
    config.limits.max_new_patterns_per_client = 1;
    let gw = spawn_gateway(config).await;
    let mut ws = ws_connect(&gw).await;
    ws_subscribe(&mut ws, &["a.*"]).await;
    ws_send(&mut ws, json!({"type": "subscribe", "topics": ["b.*"]})).await;
    let refused = ws_next(&mut ws).await;
    assert_eq!(refused["code"], "pattern_quota", "{refused}");
    // SSE and long-poll: the same quota, the same answer.
    let sse = SseClient::request(&gw, "topic=b.*", None).await;
    assert_eq!(sse.status(), 429);
    let (status, _) = poll(&gw, "topic=b.*&timeout=0").await;
    assert_eq!(status, 429);
    // Held on the node already: no charge, on any transport.
    let held = SseClient::request(&gw, "topic=a.*", None).await;
    assert_eq!(held.status(), 200);
    let mut other = ws_connect(&gw).await;
    ws_subscribe(&mut other, &["a.*"]).await;
    // Unsubscribed, the charge is given back.
    ws_send(&mut ws, json!({"type": "unsubscribe", "topics": ["a.*"]})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "unsubscribed");
    ws_subscribe(&mut ws, &["b.*"]).await;
    gw.stop().await.unwrap();
}
