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
    let dropped = switch_tokens(&mut ws, alice, &["user:alice", "room"], bob).await;
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

/// A new token (`auth` command) is judged by the one subscribe decision, the hook not asked
/// again: what the subscribe hook allowed stays, a namespace closed to anonymous clients
/// included (a token names the client), and what the token rules decide goes when the new
/// token does not allow it.
#[tokio::test]
async fn a_new_token_keeps_what_the_hook_allowed_and_loses_what_the_token_gave() {
    let backend = Backend::start(|_, _| allow()).await;
    let mut config = hooked(token_config(), &backend, &["subscribe"]);
    let closed = |hooks| herald_gateway::config::NamespaceConfig {
        anonymous: Some(false),
        hooks,
        ..Default::default()
    };
    // `club`: closed to anonymous clients, the hook decides; `shut`: closed, the token rules
    // decide.
    config.namespaces.insert("club".into(), closed(None));
    config
        .namespaces
        .insert("shut".into(), closed(Some(vec![])));
    let gw = spawn_gateway(config).await;
    let mut ws = ws_connect(&gw).await;
    ws_send(
        &mut ws,
        json!({"type": "subscribe", "topics": ["club:news"]}),
    )
    .await;
    assert_eq!(
        ws_next(&mut ws).await["code"],
        "forbidden",
        "closed to anonymous"
    );
    let alice = token(json!({"sub": "alice", "topics": ["shut:*"], "exp": unix_now() + 600}));
    let bob = token(json!({"sub": "bob", "exp": unix_now() + 600}));
    let dropped = switch_tokens(&mut ws, alice, &["club:news", "shut:news"], bob).await;
    assert_eq!(dropped["topics"], json!(["shut:news"]), "{dropped}");
    assert_eq!(
        backend.calls("subscribe").len(),
        1,
        "the hook is not asked again"
    );
    publish(&gw, "shut:news", json!("for alice only")).await;
    publish(&gw, "club:news", json!("for the club")).await;
    assert_eq!(ws_next(&mut ws).await["data"], "for the club");
    gw.stop().await.unwrap();
}

/// Authenticates `ws` with `first`, subscribes it to `topics`, then authenticates it with
/// `then`: the frame that follows the second `authenticated`.
async fn switch_tokens(ws: &mut WsStream, first: String, topics: &[&str], then: String) -> Value {
    ws_send(ws, json!({"type": "auth", "token": first})).await;
    assert_eq!(ws_next(ws).await["type"], "authenticated");
    ws_subscribe(ws, topics).await;
    ws_send(ws, json!({"type": "auth", "token": then})).await;
    assert_eq!(ws_next(ws).await["type"], "authenticated");
    ws_next(ws).await
}
