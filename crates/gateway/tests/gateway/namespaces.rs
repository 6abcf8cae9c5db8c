//! `[namespaces.<name>]`: options for the topics named `<name>:...`, driven by real clients:
//! history length, the coalescing lag policy over WebSocket and SSE, presence members,
//! anonymous subscribers, client publishing, and which hooks apply.

use std::time::Duration;

use herald_gateway::Config;
use herald_gateway::config::NamespaceConfig;
use serde_json::{Value, json};

use crate::common::*;

fn with(mut config: Config, name: &str, ns: NamespaceConfig) -> Config {
    config.namespaces.insert(name.into(), ns);
    config
}

fn token_for(claims: Value) -> String {
    let mut claims = claims;
    claims["exp"] = json!(unix_now() + 3600);
    token(claims)
}

#[tokio::test]
async fn a_namespace_keeps_its_own_history_length() {
    let short = NamespaceConfig {
        history_len: Some(2),
        ..Default::default()
    };
    let gw = spawn_gateway(with(test_config(), "chat", short)).await;
    for i in 0..5 {
        publish(&gw, "chat:room", json!(i)).await;
        publish(&gw, "other", json!(i)).await;
    }
    let newest = |topic: &'static str| {
        let url = format!(
            "http://{}/v1/poll?topic={topic}&last=10&timeout=0",
            gw.public_addr
        );
        async move {
            let page = get_json(url).await;
            page["messages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["data"].clone())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(newest("chat:room").await, [json!(3), json!(4)]);
    assert_eq!(newest("other").await.len(), 5, "the default history");
    gw.stop().await.unwrap();
}

fn ticker_config() -> Config {
    let mut config = test_config();
    config.topics.channel_capacity = 8;
    config.limits.write_timeout = Duration::from_secs(30);
    let ticker = NamespaceConfig {
        history_len: Some(8),
        lag_policy: Some(herald_core::LagPolicy::Coalesce),
        ..Default::default()
    };
    // The default policy would disconnect: the namespace's wins for its topics.
    config.lag_policy = herald_core::LagPolicy::Disconnect;
    with(config, "ticker", ticker)
}

/// Publishes `count` messages of about 50 KB to `topic`, numbered from `from`: more than a
/// loopback socket holds, so a client that does not read falls behind.
async fn flood(gw: &herald_gateway::Gateway, topic: &str, from: u64, count: u64) {
    let pad = "y".repeat(50_000);
    for n in from..from + count {
        publish(gw, topic, json!({"n": n, "pad": pad})).await;
    }
}

/// The numbers a slow subscriber got: increasing, some skipped, ending with the newest.
fn assert_coalesced(got: &[u64], newest: u64) {
    assert!(got.windows(2).all(|w| w[0] < w[1]), "in order: {got:?}");
    assert_eq!(got.last(), Some(&newest), "{got:?}");
    assert!(got.len() < newest as usize, "some were skipped: {got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_websocket_subscriber_of_a_coalescing_namespace_skips_to_the_newest() {
    let gw = spawn_gateway(ticker_config()).await;
    let mut ws = ws_connect(&gw).await;
    ws_subscribe(&mut ws, &["ticker:btc"]).await;
    publish(&gw, "ticker:btc", json!({"n": 0})).await;
    assert_eq!(ws_next(&mut ws).await["data"]["n"], 0);
    // Not read while 15 MB go out: the subscriber falls far behind its channel and history.
    flood(&gw, "ticker:btc", 1, 300).await;
    let mut got = Vec::new();
    while got.last() != Some(&300) {
        let frame = ws_next(&mut ws).await;
        assert_eq!(frame["type"], "message", "{frame}");
        got.push(frame["data"]["n"].as_u64().unwrap());
    }
    assert_coalesced(&got, 300);
    // Still connected, and live.
    publish(&gw, "ticker:btc", json!({"n": 301})).await;
    assert_eq!(ws_next(&mut ws).await["data"]["n"], 301);
    let coalesced = r#"herald_slow_consumer_events_total{outcome="coalesced",namespace="ticker"}"#;
    assert!(metric(&gw, coalesced).await >= 1.0);
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_sse_subscriber_of_a_coalescing_namespace_skips_to_the_newest() {
    let gw = spawn_gateway(ticker_config()).await;
    let mut sse = SseClient::connect(&gw, "topic=ticker:eth", None).await;
    sse.next_block().await.unwrap();
    publish(&gw, "ticker:eth", json!({"n": 0})).await;
    sse.next_event().await.unwrap();
    flood(&gw, "ticker:eth", 1, 300).await;
    let mut got = Vec::new();
    while got.last() != Some(&300) {
        let event = sse.next_event().await.expect("not disconnected");
        let data: Value = serde_json::from_str(&event.data.unwrap()).unwrap();
        got.push(data["n"].as_u64().unwrap());
    }
    assert_coalesced(&got, 300);
    publish(&gw, "ticker:eth", json!({"n": 301})).await;
    let event = sse.next_event().await.unwrap();
    assert!(event.data.unwrap().starts_with(r#"{"n":301"#));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn members_are_kept_only_where_a_namespace_asks_for_presence() {
    let room = NamespaceConfig {
        presence: Some(true),
        ..Default::default()
    };
    let gw = spawn_gateway(with(test_config(), "room", room)).await;
    let mut ws = ws_connect(&gw).await;
    ws_subscribe(&mut ws, &["room:1", "lobby"]).await;
    let url = |topic: &str| format!("http://{}/v1/presence/{topic}?members=true", gw.admin_addr);
    let listed = get_json(url("room:1")).await;
    assert_eq!(listed["members"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["members"][0]["transport"], "ws");
    let resp = get(url("lobby"), &[]).await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "presence_off");
    // Counts are kept for every topic.
    let counts = get_json(format!("http://{}/v1/presence/lobby", gw.admin_addr)).await;
    assert_eq!(counts["subscribers"], 1, "{counts}");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_namespace_opens_or_closes_itself_to_anonymous_subscribers() {
    let mut config = token_config();
    config.auth.public_prefixes = vec!["public.".into(), "shut:".into()];
    let open = NamespaceConfig {
        anonymous: Some(true),
        ..Default::default()
    };
    let shut = NamespaceConfig {
        anonymous: Some(false),
        ..Default::default()
    };
    let gw = spawn_gateway(with(with(config, "open", open), "shut", shut)).await;
    let status = |query: String| {
        let url = format!("http://{}/v1/sse?{query}", gw.public_addr);
        async move { get(url, &[]).await.status().as_u16() }
    };
    assert_eq!(status("topic=open:news".into()).await, 200);
    // Closed even though a public prefix matches; a token still opens it.
    assert_eq!(status("topic=shut:news".into()).await, 403);
    let t = token_for(json!({"sub": "ann", "topics": ["shut:*"]}));
    assert_eq!(status(format!("topic=shut:news&token={t}")).await, 200);
    // Open to a client with a token that does not name it, too.
    let other = token_for(json!({"sub": "bo", "topics": ["elsewhere"]}));
    assert_eq!(status(format!("topic=open:news&token={other}")).await, 200);
    // Elsewhere the [auth] rules hold.
    assert!(matches!(status("topic=closed".into()).await, 401 | 403));
    let mut ws = ws_connect(&gw).await;
    ws_send(&mut ws, json!({"type": "subscribe", "topics": ["shut:x"]})).await;
    assert_eq!(ws_next(&mut ws).await["code"], "forbidden");
    ws_subscribe(&mut ws, &["open:x"]).await;
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_namespace_decides_whether_clients_may_publish() {
    let chat = NamespaceConfig {
        publish: Some(true),
        ..Default::default()
    };
    let feed = NamespaceConfig {
        publish: Some(false),
        ..Default::default()
    };
    let gw = spawn_gateway(with(with(token_config(), "chat", chat), "feed", feed)).await;
    // May read chat and feed, and (by its claim) publish to feed: the namespaces decide.
    let t = token_for(json!({"sub": "ann", "topics": ["chat:*", "feed:*"], "publish": ["feed:*"]}));
    let mut ws = ws_connect(&gw).await;
    ws_send(&mut ws, json!({"type": "auth", "token": t})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "authenticated");
    ws_send(
        &mut ws,
        json!({"type": "publish", "topic": "chat:room", "data": "hi"}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await["type"], "published");
    ws_send(
        &mut ws,
        json!({"type": "publish", "topic": "feed:news", "data": "no"}),
    )
    .await;
    let refused = ws_next(&mut ws).await;
    assert_forbidden(&refused, "namespace");
    // Outside the namespaces the token's `publish` claim decides.
    ws_send(
        &mut ws,
        json!({"type": "publish", "topic": "chat-other", "data": "x"}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await["code"], "forbidden");
    // The application still publishes to a closed namespace.
    publish(&gw, "feed:news", json!("from the backend")).await;
    // Over HTTP on the public listener, with the token.
    let url = format!("http://{}/v1/publish", gw.public_addr);
    let auth = format!("Bearer {t}");
    let resp = post_json(
        url.as_str(),
        &[("authorization", auth.as_str())],
        &json!({"topic": "feed:news", "data": 1}),
    )
    .await;
    assert_eq!(resp.status(), 403);
    let resp = post_json(
        url.as_str(),
        &[("authorization", auth.as_str())],
        &json!({"topic": "chat:room", "data": 1}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    gw.stop().await.unwrap();
}

/// `publish = true` with `anonymous = true`: a client without a token publishes there over
/// HTTP as over a WebSocket, and nowhere else.
#[tokio::test]
async fn an_open_namespace_takes_anonymous_publishes_on_every_path() {
    let open = NamespaceConfig {
        publish: Some(true),
        anonymous: Some(true),
        ..Default::default()
    };
    let gw = spawn_gateway(with(token_config(), "lobby", open)).await;
    let mut ws = ws_connect(&gw).await;
    ws_send(
        &mut ws,
        json!({"type": "publish", "topic": "lobby:1", "data": 1}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await["type"], "published");
    let url = format!("http://{}/v1/publish", gw.public_addr);
    let resp = post_json(url.as_str(), &[], &json!({"topic": "lobby:1", "data": 2})).await;
    assert_eq!(resp.status(), 200);
    let resp = post_json(url.as_str(), &[], &json!({"topic": "news", "data": 3})).await;
    assert_eq!(resp.status(), 403);
    gw.stop().await.unwrap();
}

/// A subscribe hook that refuses everything, on 127.0.0.1:0; returns its URL.
async fn refusing_backend() -> String {
    let app = axum::Router::new().route(
        "/hooks/subscribe",
        axum::routing::post(|| async {
            axum::Json(json!({"result": "deny", "reason": "not today"}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks/subscribe", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test]
async fn a_namespace_chooses_the_hooks_that_apply_to_its_topics() {
    let mut config = test_config();
    config.hooks.subscribe_url = Some(refusing_backend().await);
    let unhooked = NamespaceConfig {
        hooks: Some(vec![]),
        ..Default::default()
    };
    let gw = spawn_gateway(with(config, "free", unhooked)).await;
    // The hook decides for other topics...
    let resp = get(format!("http://{}/v1/sse?topic=news", gw.public_addr), &[]).await;
    assert_eq!(resp.status(), 403);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "forbidden");
    assert!(
        body["message"].to_string().contains("not today") || body.to_string().contains("not today"),
        "{body}"
    );
    // ...not for this namespace's, where the token rules (none here) decide.
    let mut sse = SseClient::connect(&gw, "topic=free:news", None).await;
    sse.next_block().await.unwrap();
    let mut ws = ws_connect(&gw).await;
    ws_subscribe(&mut ws, &["free:a"]).await;
    ws_send(
        &mut ws,
        json!({"type": "subscribe", "topics": ["free:b", "news"]}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await["code"], "forbidden");
    gw.stop().await.unwrap();
}

/// A namespace closed to anonymous clients stays closed to them whatever the subscribe hook
/// says; personal topics keep their own rule too.
#[tokio::test]
async fn a_hook_does_not_open_a_namespace_closed_to_anonymous_clients() {
    let app = axum::Router::new().route(
        "/hooks/subscribe",
        axum::routing::post(|| async { axum::Json(json!({"result": "allow"})) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks/subscribe", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let mut config = token_config();
    config.hooks.subscribe_url = Some(url);
    let shut = NamespaceConfig {
        anonymous: Some(false),
        ..Default::default()
    };
    let gw = spawn_gateway(with(config, "shut", shut)).await;
    let status = |query: String| {
        let url = format!("http://{}/v1/sse?{query}", gw.public_addr);
        async move { get(url, &[]).await.status().as_u16() }
    };
    assert_eq!(status("topic=shut:x".into()).await, 403);
    assert_eq!(status("topic=open-by-hook".into()).await, 200);
    let t = token_for(json!({"sub": "ann"}));
    assert_eq!(
        status(format!("topic=shut:x&token={t}")).await,
        200,
        "the hook allows a token holder"
    );
    gw.stop().await.unwrap();
}

#[test]
fn bad_namespaces_are_refused_with_the_key_named() {
    let cases = [
        (
            "bad name",
            NamespaceConfig::default(),
            "1 to 64 topic characters",
        ),
        ("a:b", NamespaceConfig::default(), "without `:`"),
        ("user", NamespaceConfig::default(), "personal topics"),
        (
            "ok",
            NamespaceConfig {
                history_ttl: Some(Duration::ZERO),
                ..Default::default()
            },
            "namespaces.ok.history_ttl",
        ),
        (
            "ok",
            NamespaceConfig {
                hooks: Some(vec![herald_gateway::config::hooks::Hook::Connect]),
                ..Default::default()
            },
            "namespaces.ok.hooks",
        ),
    ];
    for (name, ns, expected) in cases {
        let config = with(test_config(), name, ns);
        let error = format!("{:#}", config.validate().unwrap_err());
        assert!(error.contains(expected), "{name}: {error}");
    }
    let toml = r#"
        [namespaces.ticker]
        lag_policy = "coalesce"
        history_len = 1
        history_ttl = "10s"
        hooks = ["subscribe"]
    "#;
    let config: Config = toml::from_str(toml).unwrap();
    config.validate().unwrap();
    assert_eq!(
        config.namespaces["ticker"].lag_policy,
        Some(herald_core::LagPolicy::Coalesce)
    );
}

/// A pattern lies in the namespace of its prefix (`open:*` in `open`), and its namespace's
/// rules decide for it; a pattern without `:` is in no namespace and matches no topic of one.
#[tokio::test]
async fn a_pattern_follows_the_rules_of_its_namespace() {
    let open = NamespaceConfig {
        anonymous: Some(true),
        ..Default::default()
    };
    let shut = NamespaceConfig {
        anonymous: Some(false),
        ..Default::default()
    };
    let mut config = token_config();
    config.auth.public_prefixes = vec!["shut:".into()];
    let gw = spawn_gateway(with(with(config, "open", open), "shut", shut)).await;
    let status = |query: String| {
        let url = format!("http://{}/v1/sse?{query}", gw.public_addr);
        async move { get(url, &[]).await.status().as_u16() }
    };
    assert_eq!(status("topic=open:*".into()).await, 200);
    assert_eq!(status("topic=open:room.*".into()).await, 200);
    assert_eq!(status("topic=shut:*".into()).await, 403);
    let t = token_for(json!({"sub": "ann", "topics": ["shut:*"]}));
    assert_eq!(status(format!("topic=shut:*&token={t}")).await, 200);
    assert!(matches!(status("topic=open.*".into()).await, 401 | 403));

    let mut ws = ws_connect(&gw).await;
    ws_subscribe(&mut ws, &["open:*"]).await;
    publish(&gw, "open.x", json!("default namespace")).await;
    publish(&gw, "open:x", json!("in open")).await;
    let frame = ws_next(&mut ws).await;
    assert_eq!(
        (&frame["topic"], &frame["data"]),
        (&json!("open:x"), &json!("in open"))
    );
    gw.stop().await.unwrap();
}
