//! Acting on live connections through the admin API on one node: a user's connections or one
//! connection disconnected with a reason the client sees, a user's connections subscribed to
//! topics and unsubscribed by the server, and bad requests refused. The
//! same over a cluster is in `cluster.rs`; every SSE serving path is in `lifecycle.rs`.

use serde_json::{Value, json};

use crate::common::*;

/// A WebSocket connection of the token's `sub` (given at the handshake), subscribed to `topic`.
async fn ws_of(gw: &herald_gateway::Gateway, sub: &str, topic: &str) -> WsStream {
    let token = token(json!({"sub": sub, "exp": unix_now() + 3600, "topics": [topic]}));
    let url = format!("ws://{}/v1/ws?token={token}", gw.public_addr);
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    ws_subscribe(&mut ws, &[topic]).await;
    ws
}

/// A WebSocket connection that names its user in an `auth` frame after it opened.
async fn ws_authenticating(gw: &herald_gateway::Gateway, sub: &str, topic: &str) -> WsStream {
    let mut ws = ws_connect(gw).await;
    let token = token(json!({"sub": sub, "exp": unix_now() + 3600, "topics": [topic]}));
    ws_send(&mut ws, json!({"type": "auth", "token": token})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "authenticated");
    ws_subscribe(&mut ws, &[topic]).await;
    ws
}

/// Ann on a WebSocket and an SSE stream, Bob on a WebSocket, all subscribed to `room`.
async fn ann_and_bob(gw: &herald_gateway::Gateway) -> (WsStream, SseClient, WsStream) {
    let ws = ws_of(gw, "ann", "room").await;
    let sse_token = token(json!({"sub": "ann", "exp": unix_now() + 3600, "topics": ["room"]}));
    let mut sse = SseClient::connect(gw, &format!("topic=room&token={sse_token}"), None).await;
    sse.next_block().await.unwrap();
    (ws, sse, ws_of(gw, "bob", "room").await)
}

async fn user_ids(gw: &herald_gateway::Gateway, user: &str) -> Vec<String> {
    let v = get_json(format!(
        "http://{}/v1/users/{user}/connections",
        gw.admin_addr
    ))
    .await;
    v["nodes"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|ids| ids.as_array().unwrap().iter())
        .map(|id| id.as_str().unwrap().to_string())
        .collect()
}

async fn command(gw: &herald_gateway::Gateway, path: &str, body: Value) -> (u16, Value) {
    let resp = post_json(format!("http://{}{path}", gw.admin_addr), &[], &body).await;
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_user_is_disconnected_everywhere_and_one_connection_by_its_id() {
    let gw = spawn_gateway(token_config()).await;
    let mut ann_ws = ws_authenticating(&gw, "ann", "room").await;
    let ann_sse_token = token(json!({"sub": "ann", "exp": unix_now() + 3600, "topics": ["room"]}));
    let mut ann_sse =
        SseClient::connect(&gw, &format!("topic=room&token={ann_sse_token}"), None).await;
    ann_sse.next_block().await.unwrap();
    let mut bob = ws_of(&gw, "bob", "room").await;
    let mut bob_too = ws_of(&gw, "bob", "room").await;
    assert_eq!(user_ids(&gw, "ann").await.len(), 2);

    let (status, body) = command(
        &gw,
        "/v1/users/ann/disconnect",
        json!({"reason": "logged out", "reconnect": false}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["disconnected_here"], 2);
    assert_eq!(body["relayed"], false);
    assert_eq!(
        ws_close_code(&mut ann_ws).await,
        (4001, "logged out".into())
    );
    let event = ann_sse.next_event().await.unwrap();
    assert_eq!(event.event.as_deref(), Some("herald.disconnect"));
    assert_eq!(
        serde_json::from_str::<Value>(event.data.as_deref().unwrap()).unwrap(),
        json!({"reason": "logged out", "reconnect": false})
    );
    assert!(ann_sse.next_event().await.is_none(), "the stream ends");
    assert!(user_ids(&gw, "ann").await.is_empty());

    // Bob is untouched; then one of his connections goes, by id, with the default reason.
    publish(&gw, "room", json!("still here")).await;
    assert_eq!(ws_next(&mut bob).await["data"], "still here");
    assert_eq!(ws_next(&mut bob_too).await["data"], "still here");
    let ids = user_ids(&gw, "bob").await;
    assert_eq!(ids.len(), 2);
    let (status, body) = command(
        &gw,
        &format!("/v1/connections/{}/disconnect", ids[0]),
        json!({}),
    )
    .await;
    assert_eq!((status, body["disconnected_here"].as_u64()), (200, Some(1)));
    // A node lists a user's connections in the order they opened: the first is `bob`.
    assert_eq!(ws_close_code(&mut bob).await, (4000, "disconnected".into()));
    publish(&gw, "room", json!("after")).await;
    assert_eq!(ws_next(&mut bob_too).await["data"], "after");
    let left = user_ids(&gw, "bob").await;
    assert_eq!(left.len(), 1);
    assert_ne!(left[0], ids[0]);
    // Counted when each connection's task ends (after its close handshake).
    let closed = r#"herald_connections_closed_total{transport="ws",reason="disconnected"}"#;
    eventually(WAIT, || async { metric(&gw, closed).await == 2.0 }).await;
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn bad_disconnect_requests_get_clear_errors() {
    let gw = spawn_gateway(token_config()).await;
    let long = "x".repeat(121);
    let cases = [
        (
            "/v1/users/ann/disconnect",
            json!({"reason": long}),
            400,
            "bad_reason",
        ),
        (
            "/v1/users/ann/disconnect",
            json!({"reason": 5}),
            400,
            "bad_json",
        ),
        (
            "/v1/users/ann/disconnect",
            json!({"why": "x"}),
            400,
            "bad_json",
        ),
        (
            "/v1/connections/abc/disconnect",
            json!({}),
            400,
            "bad_connection",
        ),
        (
            "/v1/connections/-1/disconnect",
            json!({}),
            400,
            "bad_connection",
        ),
    ];
    for (path, body, status, code) in cases {
        let (got, reply) = command(&gw, path, body.clone()).await;
        assert_eq!(
            (got, reply["code"].as_str()),
            (status, Some(code)),
            "{path} {body}"
        );
    }
    // Nobody to disconnect is not an error: the answer says how many were.
    let (status, reply) = command(&gw, "/v1/connections/12345/disconnect", json!({})).await;
    assert_eq!(
        (status, reply["disconnected_here"].as_u64()),
        (200, Some(0))
    );
    // An empty body is the defaults.
    let resp = get(
        format!("http://{}/v1/users/nobody/connections", gw.admin_addr),
        &[],
    )
    .await;
    assert_eq!(resp.status(), 200);
    let resp = http()
        .post(format!(
            "http://{}/v1/users/nobody/disconnect",
            gw.admin_addr
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_reach_connections_on_every_node_of_a_cluster() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let p = format!("test-control-{:x}", rand::random::<u32>());
    let node = |id: &str| {
        let mut c = cluster_config(&p, id);
        c.auth.hs256_secret = Some(SECRET.into());
        c.cluster.presence_interval = std::time::Duration::from_millis(200);
        c
    };
    let a = spawn_ready(node("a")).await;
    let b = spawn_ready(node("b")).await;
    let c = spawn_ready(node("c")).await;
    let mut on_b = ws_of(&b, "zed", "hall").await;
    let mut on_c = ws_of(&c, "zed", "hall").await;
    let mut other = ws_of(&c, "yan", "hall").await;
    let mut yan_too = ws_of(&b, "yan", "hall").await;

    // Sent to a node that holds none of zed's connections: both others end theirs.
    let (status, body) = command(
        &a,
        "/v1/users/zed/disconnect",
        json!({"reason": "banned", "reconnect": false}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (
            body["disconnected_here"].as_u64(),
            body["relayed"].as_bool()
        ),
        (Some(0), Some(true))
    );
    assert_eq!(ws_close_code(&mut on_b).await, (4001, "banned".into()));
    assert_eq!(ws_close_code(&mut on_c).await, (4001, "banned".into()));

    // One connection by its id, found through the cluster's registry, ended from node a.
    // The registry fills within a presence interval.
    let on_node_c = eventually_some(WAIT, "yan's connection on c listed", || async {
        let ids = get_json(format!("http://{}/v1/users/yan/connections", a.admin_addr)).await;
        ids["nodes"]["c"]
            .as_array()
            .and_then(|l| l.first())
            .cloned()
    })
    .await;
    let (status, _) = command(
        &a,
        &format!("/v1/connections/{}/disconnect", on_node_c.as_str().unwrap()),
        json!({"reason": "moved"}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(ws_close_code(&mut other).await, (4000, "moved".into()));
    publish(&a, "hall", json!("still")).await;
    assert_eq!(ws_next(&mut yan_too).await["data"], "still");

    // A server-side subscription sent to node a reaches yan's connection on node b.
    let (status, body) = command(
        &a,
        "/v1/users/yan/subscribe",
        json!({"topics": ["yan-inbox"]}),
    )
    .await;
    assert_eq!(
        (status, body["subscribed_here"].as_u64()),
        (200, Some(0)),
        "{body}"
    );
    let subscribed = ws_next(&mut yan_too).await;
    assert_eq!(
        (subscribed["type"].as_str(), subscribed["by"].as_str()),
        (Some("subscribed"), Some("server"))
    );
    publish(&a, "yan-inbox", json!("for yan")).await;
    let got = ws_next(&mut yan_too).await;
    assert_eq!(
        (got["topic"].as_str(), got["data"].as_str()),
        (Some("yan-inbox"), Some("for yan"))
    );
    // And unsubscribed again through node c.
    let (status, body) = command(
        &c,
        "/v1/users/yan/unsubscribe",
        json!({"topics": ["yan-inbox"]}),
    )
    .await;
    assert_eq!(
        (status, body["relayed"].as_bool()),
        (200, Some(true)),
        "{body}"
    );
    let unsubscribed = ws_next(&mut yan_too).await;
    assert_eq!(
        (unsubscribed["type"].as_str(), unsubscribed["by"].as_str()),
        (Some("unsubscribed"), Some("server")),
        "{unsubscribed}"
    );
    publish(&a, "yan-inbox", json!("not for yan any more")).await;
    publish(&a, "hall", json!("hall after")).await;
    assert_eq!(
        ws_next(&mut yan_too).await["data"],
        "hall after",
        "nothing of yan-inbox after the unsubscribe"
    );

    // A message sent to yan through node a reaches yan's connection on node b, once.
    let (status, body) = command(
        &a,
        "/v1/users/yan/send",
        json!({"data": {"n": 1}, "event": "note"}),
    )
    .await;
    assert_eq!(
        (status, body["topic"].as_str()),
        (200, Some("user:yan")),
        "{body}"
    );
    let mut got = ws_next(&mut yan_too).await;
    if got["type"] == "subscribed" {
        got = ws_next(&mut yan_too).await;
    }
    assert_eq!(
        (got["topic"].as_str(), got["id"].as_str()),
        (Some("user:yan"), body["id"].as_str()),
        "{got}"
    );
    assert_eq!(
        (got["event"].as_str(), got["data"].clone()),
        (Some("note"), json!({"n": 1}))
    );
    publish(&a, "hall", json!("after the note")).await;
    assert_eq!(
        ws_next(&mut yan_too).await["data"],
        "after the note",
        "the note came once"
    );

    // A message to yan's connection on node b, by its id, sent through node c.
    let ids = get_json(format!("http://{}/v1/users/yan/connections", c.admin_addr)).await;
    let on_node_b = ids["nodes"]["b"][0].as_str().unwrap().to_string();
    let (status, body) = command(
        &c,
        &format!("/v1/connections/{on_node_b}/send"),
        json!({"data": "direct"}),
    )
    .await;
    assert_eq!(
        (status, body["reached_here"].as_u64()),
        (200, Some(0)),
        "{body}"
    );
    assert_eq!(ws_next(&mut yan_too).await["type"], "subscribed");
    let got = ws_next(&mut yan_too).await;
    assert_eq!(
        (got["topic"].as_str(), got["data"].as_str()),
        (Some(format!("conn:{on_node_b}").as_str()), Some("direct"))
    );
    for node in [a, b, c] {
        node.stop().await.unwrap();
    }
}

#[tokio::test]
async fn the_server_subscribes_and_unsubscribes_a_users_connections() {
    let gw = spawn_gateway(token_config()).await;
    let (mut ws, mut sse, mut bob) = ann_and_bob(&gw).await;

    // Topics the token does not name: the application decides, not the token.
    let (status, body) = command(
        &gw,
        "/v1/users/ann/subscribe",
        json!({"topics": ["news", "alerts"]}),
    )
    .await;
    assert_eq!(
        (status, body["subscribed_here"].as_u64()),
        (200, Some(2)),
        "{body}"
    );
    let frame = ws_next(&mut ws).await;
    assert_eq!(frame["type"], "subscribed");
    assert_eq!(frame["by"], "server");
    assert_eq!(frame["topics"], json!(["news", "alerts"]));
    assert!(frame["cursors"]["news"].is_string());
    let event = sse.next_event().await.unwrap();
    assert_eq!(event.event.as_deref(), Some("herald.subscribed"));
    assert_eq!(
        event.data.as_deref(),
        Some(r#"{"topics":["news","alerts"]}"#)
    );
    let id = sse.last_event_id.clone().unwrap();
    assert!(
        id.contains("news=") && id.contains("room="),
        "a resume includes them: {id}"
    );

    publish(&gw, "news", json!("n1")).await;
    assert_eq!(ws_next(&mut ws).await["data"], "n1");
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("n1"));

    let (status, body) = command(
        &gw,
        "/v1/users/ann/unsubscribe",
        json!({"topics": ["news", "never"]}),
    )
    .await;
    assert_eq!(
        (status, body["unsubscribed_here"].as_u64()),
        (200, Some(2)),
        "{body}"
    );
    let frame = ws_next(&mut ws).await;
    assert_eq!(
        (frame["type"].as_str(), frame["topics"].clone()),
        (Some("unsubscribed"), json!(["news"]))
    );
    let event = sse.next_event().await.unwrap();
    assert_eq!(event.event.as_deref(), Some("herald.unsubscribed"));
    // No more news; the rest goes on.
    publish(&gw, "news", json!("n2")).await;
    publish(&gw, "room", json!("r1")).await;
    assert_eq!(ws_next(&mut ws).await["data"], "r1");
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("r1"));
    // Bob was never subscribed to news.
    assert_eq!(ws_next(&mut bob).await["data"], "r1");

    // Bad requests.
    let too_many: Vec<String> = (0..65).map(|i| format!("t{i}")).collect();
    let cases = [
        (json!({"topics": []}), "bad_topics"),
        (json!({"topics": too_many}), "bad_topics"),
        (json!({"topics": ["bad topic"]}), "bad_topic"),
        (json!({"topic": "x"}), "bad_json"),
    ];
    for (body, code) in cases {
        let (status, reply) = command(&gw, "/v1/users/ann/subscribe", body.clone()).await;
        assert_eq!(
            (status, reply["code"].as_str()),
            (400, Some(code)),
            "{body}"
        );
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_message_sent_to_a_user_reaches_each_of_its_connections_once() {
    let gw = spawn_gateway(token_config()).await;
    let (mut ws, mut sse, mut bob) = ann_and_bob(&gw).await;

    for n in 1..=2 {
        let (status, body) = command(&gw, "/v1/users/ann/send", json!({"data": {"n": n}})).await;
        assert_eq!(
            (status, body["reached_here"].as_u64()),
            (200, Some(2)),
            "{body}"
        );
        assert_eq!(body["topic"], "user:ann");
        if n == 1 {
            // The first makes the personal topic part of each connection.
            let frame = ws_next(&mut ws).await;
            assert_eq!(
                (frame["type"].as_str(), frame["by"].as_str()),
                (Some("subscribed"), Some("server"))
            );
            assert_eq!(
                sse.next_event().await.unwrap().event.as_deref(),
                Some("herald.subscribed")
            );
        }
        let got = ws_next(&mut ws).await;
        assert_eq!(
            (got["topic"].as_str(), got["id"].as_str()),
            (Some("user:ann"), body["id"].as_str())
        );
        assert_eq!(got["data"], json!({"n": n}));
        let event = sse.next_event().await.unwrap();
        assert_eq!(
            event.data.as_deref(),
            Some(format!(r#"{{"n":{n}}}"#).as_str())
        );
    }
    publish(&gw, "room", json!("r")).await;
    assert_eq!(
        ws_next(&mut ws).await["data"],
        "r",
        "each message came once"
    );
    assert_eq!(
        ws_next(&mut bob).await["data"],
        "r",
        "bob got none of ann's"
    );

    let (status, reply) = command(&gw, "/v1/users/ann%20smith/send", json!({"data": 1})).await;
    assert_eq!((status, reply["code"].as_str()), (400, Some("bad_user")));
    let (status, reply) = command(&gw, "/v1/users/ann/send", json!({"event": "x"})).await;
    assert_eq!((status, reply["code"].as_str()), (400, Some("bad_json")));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_message_sent_to_one_connection_reaches_that_connection_only() {
    let gw = spawn_gateway(token_config()).await;
    let mut first = ws_of(&gw, "cy", "room").await;
    let mut second = ws_of(&gw, "cy", "room").await;
    // A node lists a user's connections in the order they opened: the first is `first`.
    let ids = user_ids(&gw, "cy").await;
    assert_eq!(ids.len(), 2);

    let path = format!("/v1/connections/{}/send", ids[0]);
    let (status, body) = command(&gw, &path, json!({"data": "just you", "event": "dm"})).await;
    assert_eq!(
        (status, body["reached_here"].as_u64()),
        (200, Some(1)),
        "{body}"
    );
    let topic = format!("conn:{}", ids[0]);
    assert_eq!(body["topic"].as_str(), Some(topic.as_str()));
    let frame = ws_next(&mut first).await;
    assert_eq!(
        (frame["type"].as_str(), frame["by"].as_str()),
        (Some("subscribed"), Some("server"))
    );
    let got = ws_next(&mut first).await;
    assert_eq!(
        (
            got["topic"].as_str(),
            got["id"].as_str(),
            got["event"].as_str()
        ),
        (Some(topic.as_str()), body["id"].as_str(), Some("dm"))
    );
    assert_eq!(got["data"], "just you");
    publish(&gw, "room", json!("to all")).await;
    assert_eq!(ws_next(&mut first).await["data"], "to all", "it came once");
    assert_eq!(
        ws_next(&mut second).await["data"],
        "to all",
        "the other connection got none of it"
    );

    // A connection that is not there: published, reached nobody.
    let (status, body) = command(&gw, "/v1/connections/12345/send", json!({"data": 1})).await;
    assert_eq!((status, body["reached_here"].as_u64()), (200, Some(0)));
    let (status, body) = command(&gw, "/v1/connections/x1/send", json!({"data": 1})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("bad_connection"))
    );
    let (status, body) = command(&gw, &path, json!({"event": "x"})).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("bad_json")));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_waiting_poll_is_answered_with_the_disconnect() {
    let gw = spawn_gateway(token_config()).await;
    let t = token(json!({"sub": "dee", "exp": unix_now() + 3600, "topics": ["room"]}));
    let url = format!(
        "http://{}/v1/poll?topic=room&timeout=25&token={t}",
        gw.public_addr
    );
    let waiting = tokio::spawn(async move {
        let resp = http().get(url).send().await.unwrap();
        (resp.status().as_u16(), resp.json::<Value>().await.unwrap())
    });
    eventually(WAIT, || async { user_ids(&gw, "dee").await.len() == 1 }).await;
    // Server-side subscriptions are not for a poll: it goes on waiting.
    let (status, body) = command(&gw, "/v1/users/dee/subscribe", json!({"topics": ["x"]})).await;
    assert_eq!((status, body["subscribed_here"].as_u64()), (200, Some(1)));
    let (status, body) = command(
        &gw,
        "/v1/users/dee/disconnect",
        json!({"reason": "logged out", "reconnect": false}),
    )
    .await;
    assert_eq!((status, body["disconnected_here"].as_u64()), (200, Some(1)));
    let (status, answer) = tokio::time::timeout(WAIT, waiting).await.unwrap().unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["disconnect"],
        json!({"reason": "logged out", "reconnect": false})
    );
    assert_eq!(answer["messages"], json!([]));
    assert!(
        answer["cursor"].as_str().unwrap().starts_with("room="),
        "{answer}"
    );
    assert!(user_ids(&gw, "dee").await.is_empty(), "the poll left");
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_published_right_after_a_server_side_subscribe_reaches_every_connection() {
    // The answer comes before the connections have acted on the command: each resumes from
    // where the topic was when the application called, on WebSocket and SSE alike.
    let gw = spawn_gateway(token_config()).await;
    for i in 0..30 {
        let user = format!("u{i}");
        let mut ws = ws_of(&gw, &user, "own").await;
        let sse_token = token(json!({"sub": user, "exp": unix_now() + 3600, "topics": ["own"]}));
        let mut sse = SseClient::connect(&gw, &format!("topic=own&token={sse_token}"), None).await;
        sse.next_block().await.unwrap();
        let topic = format!("srv{i}");
        let (status, body) = command(
            &gw,
            &format!("/v1/users/{user}/subscribe"),
            json!({"topics": [topic]}),
        )
        .await;
        assert_eq!(
            (status, body["subscribed_here"].as_u64()),
            (200, Some(2)),
            "{body}"
        );
        let id = publish(&gw, &topic, json!({"try": i})).await;
        assert_eq!(ws_next(&mut ws).await["by"], "server");
        let message = ws_next(&mut ws).await;
        assert_eq!(
            (message["topic"].as_str(), message["id"].as_str()),
            (Some(&*topic), Some(&*id)),
            "try {i}"
        );
        assert_eq!(
            sse.next_event().await.unwrap().event.as_deref(),
            Some("herald.subscribed")
        );
        let event = sse.next_event().await.unwrap();
        assert!(
            event.id.unwrap().contains(&format!("{topic}={id}")),
            "try {i}"
        );
        // A topic this node holds: after its head, not before it.
        publish(&gw, "held", json!(i)).await;
        let (_, body) = command(
            &gw,
            &format!("/v1/users/{user}/subscribe"),
            json!({"topics": ["held"]}),
        )
        .await;
        assert_eq!(body["subscribed_here"], 2);
        let id = publish(&gw, "held", json!({"after": i})).await;
        assert_eq!(ws_next(&mut ws).await["type"], "subscribed");
        let message = ws_next(&mut ws).await;
        assert_eq!(
            message["id"].as_str(),
            Some(&*id),
            "only the message after the call: try {i}"
        );
    }
    gw.stop().await.unwrap();
}
