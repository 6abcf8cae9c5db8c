//! Join and leave events (`namespaces.<name>.join_leave`): the subscribers of a topic hear
//! when a member joins or leaves, on every transport and across a cluster bridged by a real
//! Redis, within the namespace's rate.

use std::time::Duration;

use herald_gateway::Config;
use herald_gateway::config::NamespaceConfig;
use serde_json::{Value, json};

use crate::common::*;

/// A namespace open to anonymous subscribers, with its members kept.
fn kept(join_leave: bool, rate: Option<u32>) -> NamespaceConfig {
    NamespaceConfig {
        presence: Some(true),
        join_leave: join_leave.then_some(true),
        join_leave_rate: rate,
        anonymous: Some(true),
        ..Default::default()
    }
}

/// `config` checking tokens ([`SECRET`]), with `room` announcing joins and leaves, `quiet`
/// keeping members without announcing, and `busy` announcing at most one a second.
fn rooms(mut config: Config) -> Config {
    config.auth.hs256_secret = Some(SECRET.into());
    config.namespaces.insert("room".into(), kept(true, None));
    config.namespaces.insert("quiet".into(), kept(false, None));
    config.namespaces.insert("busy".into(), kept(true, Some(1)));
    config
}

/// A token for `sub` allowed every topic.
fn user_token(sub: &str) -> String {
    token(json!({"sub": sub, "exp": unix_now() + 600, "topics": ["*"]}))
}

/// A WebSocket client of `gw` with `sub`'s token.
async fn ws_as(gw: &herald_gateway::Gateway, sub: &str) -> WsStream {
    let url = format!("ws://{}/v1/ws?token={}", gw.public_addr, user_token(sub));
    tokio_tungstenite::connect_async(url).await.unwrap().0
}

/// Publishes a marker to `topic` and reads `ws` up to it: the frames before it.
async fn frames_before_marker(
    gw: &herald_gateway::Gateway,
    ws: &mut WsStream,
    topic: &str,
) -> Vec<Value> {
    publish(gw, topic, json!("marker")).await;
    let mut before = Vec::new();
    loop {
        let frame = ws_next(ws).await;
        if frame["type"] == "message" && frame["data"] == "marker" {
            return before;
        }
        before.push(frame);
    }
}

/// The sum of the series of `name` whose labels contain every one of `labels`.
async fn counted(gw: &herald_gateway::Gateway, name: &str, labels: &[&str]) -> f64 {
    metrics_text(gw)
        .await
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ws_subscriber_sees_an_sse_member_join_and_leave_and_a_quiet_namespace_says_nothing() {
    let mut config = rooms(test_config());
    config.cluster.node_id = "solo".into();
    let gw = spawn_gateway(config).await;
    let mut ws = ws_connect(&gw).await;
    ws_subscribe(&mut ws, &["room:1", "quiet:1"]).await;

    let query = format!("topic=room:1&topic=quiet:1&token={}", user_token("ann"));
    let mut sse = SseClient::connect(&gw, &query, None).await;
    sse.next_block().await.unwrap();
    let join = ws_next(&mut ws).await;
    assert_eq!(join["type"], "join", "{join}");
    assert_eq!(join["topic"], "room:1");
    assert_eq!(join["user"], "ann");
    assert_eq!(join["transport"], "sse");
    assert_eq!(join["node"], "solo");
    let conn = join["conn"].as_str().unwrap().to_string();
    conn.parse::<u64>().unwrap();
    // Nothing for `quiet:1`: the next frame is a message published after the join.
    assert_eq!(
        frames_before_marker(&gw, &mut ws, "quiet:1").await,
        Vec::<Value>::new()
    );

    drop(sse);
    let leave = ws_next(&mut ws).await;
    assert_eq!(
        (
            &leave["type"],
            &leave["topic"],
            &leave["user"],
            leave["conn"].as_str()
        ),
        (
            &json!("leave"),
            &json!("room:1"),
            &json!("ann"),
            Some(conn.as_str())
        ),
        "{leave}"
    );
    assert_eq!(
        frames_before_marker(&gw, &mut ws, "quiet:1").await,
        Vec::<Value>::new()
    );
    // The WebSocket client's own join (announced to no one else), ann's join and leave.
    assert_eq!(
        counted(
            &gw,
            "herald_presence_events_total",
            &[r#"namespace="room""#]
        )
        .await,
        3.0
    );
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_subscriber_sees_a_ws_member_join_and_leave_and_no_one_hears_their_own_join() {
    let gw = spawn_gateway(rooms(test_config())).await;
    let mut sse = SseClient::connect(&gw, "topic=room:2", None).await;
    let opening = sse.next_block().await.unwrap();

    let mut bob = ws_as(&gw, "bob").await;
    ws_subscribe(&mut bob, &["room:2"]).await;
    // The SSE client's first event is bob's join, not its own.
    let join = sse.next_event().await.unwrap();
    assert_eq!(join.event.as_deref(), Some("herald.join"), "{join:?}");
    assert_eq!(join.id, None, "not a message: no cursor");
    let data: Value = serde_json::from_str(join.data.as_deref().unwrap()).unwrap();
    assert_eq!(
        (&data["topic"], &data["user"]),
        (&json!("room:2"), &json!("bob"))
    );
    assert_eq!(data["transport"], "ws");
    assert!(data.get("type").is_none(), "the event name says it: {data}");
    // Bob hears nothing of his own join: the next frame is a message.
    assert_eq!(
        frames_before_marker(&gw, &mut bob, "room:2").await,
        Vec::<Value>::new()
    );

    ws_send(
        &mut bob,
        json!({"type": "unsubscribe", "topics": ["room:2"]}),
    )
    .await;
    let leave = loop {
        // The marker message may come before it.
        let event = sse.next_event().await.unwrap();
        if event.event.is_some() {
            break event;
        }
        assert_ne!(
            event.id, opening.id,
            "a message moves the stream's position"
        );
    };
    assert_eq!(leave.event.as_deref(), Some("herald.leave"), "{leave:?}");
    assert_eq!(leave.id, None);
    assert!(leave.data.unwrap().contains(r#""user":"bob""#));
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_and_leaves_past_the_rate_are_dropped_and_counted() {
    let gw = spawn_gateway(rooms(test_config())).await;
    let mut watcher = ws_connect(&gw).await;
    ws_subscribe(&mut watcher, &["busy:1"]).await;
    let mut flapper = ws_as(&gw, "flap").await;
    for _ in 0..10 {
        ws_subscribe(&mut flapper, &["busy:1"]).await;
        ws_send(
            &mut flapper,
            json!({"type": "unsubscribe", "topics": ["busy:1"]}),
        )
        .await;
        assert_eq!(ws_next(&mut flapper).await["type"], "unsubscribed");
    }
    let heard = frames_before_marker(&gw, &mut watcher, "busy:1").await;
    let sent = counted(
        &gw,
        "herald_presence_events_total",
        &[r#"namespace="busy""#],
    )
    .await;
    let dropped = counted(
        &gw,
        "herald_presence_events_dropped_total",
        &[r#"namespace="busy""#, r#"reason="rate""#],
    )
    .await;
    // The watcher's own join (announced to no one) and the flapper's 20.
    assert_eq!(
        sent + dropped,
        21.0,
        "each join and leave is sent or dropped"
    );
    assert_eq!(
        heard.len() as f64,
        sent - 1.0,
        "the watcher heard what was sent: {heard:?}"
    );
    // One a second, one in the bucket: far fewer than 20 fit in the time this took.
    assert!(dropped >= 10.0, "dropped {dropped}, sent {sent}");
    assert!(
        heard
            .iter()
            .all(|f| f["type"] == "join" || f["type"] == "leave")
    );
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_poll_answers_with_the_join_it_heard() {
    let gw = spawn_gateway(rooms(test_config())).await;
    let url = format!("http://{}/v1/poll?topic=room:4&timeout=30", gw.public_addr);
    let poll = tokio::spawn(async move { get_json(url).await });
    // The poll waits once it is a member of its topic.
    eventually(WAIT, || async {
        let page = get_json(format!(
            "http://{}/v1/presence/room:4?members=true",
            gw.admin_addr
        ))
        .await;
        page["members"].as_array().is_some_and(|m| m.len() == 1)
    })
    .await;
    let started = std::time::Instant::now();
    let mut cy = ws_as(&gw, "cy").await;
    ws_subscribe(&mut cy, &["room:4"]).await;
    let answer = tokio::time::timeout(WAIT, poll).await.unwrap().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered at the join, not the timeout"
    );
    assert_eq!(answer["messages"], json!([]));
    let presence = answer["presence"].as_array().expect("a presence array");
    assert_eq!(presence.len(), 1, "{answer}");
    assert_eq!(
        (
            &presence[0]["type"],
            &presence[0]["topic"],
            &presence[0]["user"]
        ),
        (&json!("join"), &json!("room:4"), &json!("cy"))
    );
    assert!(answer["cursor"].is_string());
    // The poll's own coming and going was not announced to cy.
    assert_eq!(
        frames_before_marker(&gw, &mut cy, "room:4").await,
        Vec::<Value>::new()
    );
    gw.stop().await.unwrap();
}

#[test]
fn join_leave_needs_the_namespace_s_members_and_a_sane_rate() {
    let mut config = test_config();
    config.namespaces.insert(
        "chat".into(),
        NamespaceConfig {
            join_leave: Some(true),
            ..Default::default()
        },
    );
    let error = format!("{:#}", config.validate().unwrap_err());
    assert!(error.contains("namespaces.chat.join_leave"), "{error}");
    // `topics.presence` keeps them for every namespace that does not say.
    config.topics.presence = true;
    config.validate().unwrap();
    config.namespaces.get_mut("chat").unwrap().join_leave_rate = Some(0);
    let error = format!("{:#}", config.validate().unwrap_err());
    assert!(error.contains("namespaces.chat.join_leave_rate"), "{error}");
    let toml = r#"
        [namespaces.room]
        presence = true
        join_leave = true
        join_leave_rate = 5
    "#;
    let config: Config = toml::from_str(toml).unwrap();
    config.validate().unwrap();
    assert_eq!(config.namespaces["room"].join_leave_rate, Some(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_on_one_node_reaches_the_subscribers_on_the_others() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let p = format!("test-joinleave-{:x}", rand::random::<u32>());
    let a = spawn_ready(rooms(cluster_config(&p, "node-a"))).await;
    let b = spawn_ready(rooms(cluster_config(&p, "node-b"))).await;
    let c = spawn_ready(rooms(cluster_config(&p, "node-c"))).await;
    let mut on_c = ws_connect(&c).await;
    ws_subscribe(&mut on_c, &["room:9"]).await;
    let mut on_a = SseClient::connect(&a, "topic=room:9", None).await;
    on_a.next_block().await.unwrap();
    let mut dee = ws_as(&b, "dee").await;
    ws_subscribe(&mut dee, &["room:9"]).await;
    // c may hear the join of a's subscriber first.
    let join = loop {
        let frame = ws_next(&mut on_c).await;
        if frame["type"] == "join" && frame["user"] == "dee" {
            break frame;
        }
    };
    assert_eq!(join["node"], "node-b");
    assert_eq!(join["topic"], "room:9");
    // a may hear the join of c's subscriber first: relayed, it can arrive after a's own.
    let heard_on_a = loop {
        let event = on_a.next_event().await.unwrap();
        assert_eq!(event.event.as_deref(), Some("herald.join"), "{event:?}");
        let data: Value = serde_json::from_str(event.data.as_deref().unwrap()).unwrap();
        if data["user"] == "dee" {
            break data;
        }
        assert_eq!(data["node"], "node-c", "{data}");
    };
    assert_eq!(heard_on_a["node"], "node-b");

    drop(dee);
    let leave = loop {
        let frame = ws_next(&mut on_c).await;
        if frame["type"] == "leave" {
            break frame;
        }
    };
    assert_eq!(
        (&leave["user"], &leave["node"]),
        (&json!("dee"), &json!("node-b"))
    );
    for gw in [a, b, c] {
        gw.stop().await.unwrap();
    }
}
