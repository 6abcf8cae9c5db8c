//! The subscribe hook: who subscribes to what, instead of the token rules.

use super::backend::*;

#[tokio::test]
async fn the_subscribe_hook_decides_instead_of_the_token_rules() {
    let backend = Backend::start(|_, body| {
        if body["topics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "secret")
        {
            deny("not yours")
        } else {
            allow()
        }
    })
    .await;
    // Tokens are required for non-public topics, yet the hook lets an anonymous client in.
    let gw = spawn_gateway(hooked(token_config(), &backend, &["subscribe"])).await;
    let mut ws = ws_connect(&gw).await;
    ws_send(
        &mut ws,
        json!({"type": "subscribe", "topics": ["private", "secret"]}),
    )
    .await;
    let refused = ws_next(&mut ws).await;
    assert_eq!(
        refused,
        json!({"type": "error", "code": "forbidden", "reason": "not yours"})
    );
    ws_subscribe(&mut ws, &["private"]).await;
    publish(&gw, "private", json!(1)).await;
    assert_eq!(ws_next(&mut ws).await["data"], 1);
    let (sse, body) = sse_get(&gw, "topic=secret", &[]).await;
    assert_eq!((sse, body["reason"].as_str()), (403, Some("not yours")));
    assert_eq!(sse_get(&gw, "topic=private", &[]).await.0, 200);
    let history = get(
        format!("http://{}/v1/topics/secret/history", gw.public_addr),
        &[],
    )
    .await;
    assert_eq!(history.status(), 403, "history reads ask the same hook");
    let calls = backend.calls("subscribe");
    assert_eq!(calls[0].0["topics"], json!(["private", "secret"]));
    assert_eq!(calls[0].0["transport"], "ws");
    assert_eq!(calls[0].0["user"], Value::Null);
    assert_eq!(calls[0].0["token"], Value::Null, "no token, no claims");
    gw.stop().await.unwrap();
}

/// Personal topics keep Herald's own rule whatever the subscribe hook says: `user:<sub>` for
/// that user only, `conn:<id>` for no client, and a new token drops the old user's.
#[tokio::test]
async fn the_subscribe_hook_does_not_open_personal_topics() {
    let backend = Backend::start(|_, _| allow()).await;
    let gw = spawn_gateway(hooked(token_config(), &backend, &["subscribe"])).await;
    let mut ws = ws_connect(&gw).await;
    for topic in ["user:alice", "conn:123"] {
        ws_send(&mut ws, json!({"type": "subscribe", "topics": [topic]})).await;
        assert_eq!(ws_next(&mut ws).await["code"], "forbidden", "{topic}");
    }
    let alice = token(json!({"sub": "alice", "exp": unix_now() + 600}));
    let bob = token(json!({"sub": "bob", "exp": unix_now() + 600}));
    ws_send(&mut ws, json!({"type": "auth", "token": alice})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "authenticated");
    ws_subscribe(&mut ws, &["user:alice", "room"]).await;
    ws_send(&mut ws, json!({"type": "auth", "token": bob})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "authenticated");
    let dropped = ws_next(&mut ws).await;
    assert_eq!(dropped["topics"], json!(["user:alice"]), "{dropped}");
    publish(&gw, "user:alice", json!("for alice only")).await;
    publish(&gw, "room", json!("for the room")).await;
    assert_eq!(ws_next(&mut ws).await["data"], "for the room");
    gw.stop().await.unwrap();
}

/// With `hooks.subscribe_patterns = "ask"`, a prefix pattern is put to the subscribe hook as
/// it is: the application decides for every topic it can match at once.
#[tokio::test]
async fn the_subscribe_hook_is_asked_about_a_pattern_as_a_whole() {
    let backend = Backend::start(|_, body| {
        if body["topics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "orders.*")
        {
            allow()
        } else {
            deny("patterns of orders only")
        }
    })
    .await;
    let mut config = hooked(token_config(), &backend, &["subscribe"]);
    config.hooks.subscribe_patterns = herald_gateway::config::hooks::SubscribePatterns::Ask;
    let gw = spawn_gateway(config).await;
    let mut ws = ws_connect(&gw).await;
    ws_send(&mut ws, json!({"type": "subscribe", "topics": ["news.*"]})).await;
    assert_eq!(
        ws_next(&mut ws).await,
        json!({"type": "error", "code": "forbidden", "reason": "patterns of orders only"})
    );
    ws_subscribe(&mut ws, &["orders.*"]).await;
    publish(&gw, "orders.new", json!(1)).await;
    let frame = ws_next(&mut ws).await;
    assert_eq!(
        (&frame["topic"], &frame["data"]),
        (&json!("orders.new"), &json!(1))
    );
    assert_eq!(sse_get(&gw, "topic=orders.*", &[]).await.0, 200);
    let calls = backend.calls("subscribe");
    assert_eq!(calls[1].0["topics"], json!(["orders.*"]));
    // Personal topics stay out of reach whatever the hook says.
    ws_send(&mut ws, json!({"type": "subscribe", "topics": ["user:*"]})).await;
    assert_eq!(ws_next(&mut ws).await["code"], "bad_topic");
    gw.stop().await.unwrap();
}
