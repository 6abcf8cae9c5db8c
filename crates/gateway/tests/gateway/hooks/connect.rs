//! The connect and refresh hooks: who connects, as which user, and whether an expiring
//! connection goes on.

use super::backend::*;

#[tokio::test]
async fn the_connect_hook_allows_and_denies_with_its_reason_on_every_path() {
    let calls = Arc::new(Mutex::new(0usize));
    let counted = calls.clone();
    let backend = Backend::start(move |_, _| {
        *counted.lock().unwrap() += 1;
        deny("sign in first")
    })
    .await;
    for path in PATHS {
        let tls = matches!(path, Path::TlsDirect | Path::TlsH2);
        let base = if tls {
            crate::tls::tls_config()
        } else {
            test_config()
        };
        let gw = spawn_gateway(hooked(base, &backend, &["connect"])).await;
        let (status, body) = subscribe_on(&gw, path, "topic=news", "session=nope").await;
        assert_eq!(status, 403, "{path:?}: {body}");
        assert_eq!(body["code"], "forbidden", "{path:?}");
        assert_eq!(body["reason"], "sign in first", "{path:?}");
        gw.stop().await.unwrap();
    }
    assert_eq!(*calls.lock().unwrap(), PATHS.len());
    let (request, headers) = backend.calls("connect").pop().unwrap();
    assert_eq!(headers["cookie"], "session=nope", "the cookie is forwarded");
    assert_eq!(request["hook"], "connect");
    assert_eq!(request["transport"], "poll");
    assert_eq!(request["topics"], json!(["news"]));
    assert_eq!(request["remote_addr"], "127.0.0.1");

    let allowing = Backend::start(|_, _| allow()).await;
    for path in PATHS {
        let tls = matches!(path, Path::TlsDirect | Path::TlsH2);
        let base = if tls {
            crate::tls::tls_config()
        } else {
            test_config()
        };
        let gw = spawn_gateway(hooked(base, &allowing, &["connect"])).await;
        let (status, body) = subscribe_on(&gw, path, "topic=news", "session=ok").await;
        assert_eq!(status, 200, "{path:?}: {body}");
        gw.stop().await.unwrap();
    }
    let calls = allowing.calls("connect");
    assert!(
        calls.iter().all(|(c, _)| c["client"]
            .as_str()
            .is_some_and(|id| id.parse::<u64>().is_ok())),
        "every SSE stream and poll names its connection id: {calls:?}"
    );
}

#[tokio::test]
async fn allow_with_data_names_the_user_and_subscribes_the_hooks_topics() {
    let backend = Backend::start(|_, _| {
        Reply::Json(json!({
            "result": "allow", "user": "u42", "topics": ["user:u42", "news"],
            "info": {"name": "Ann"},
        }))
    })
    .await;
    let gw = spawn_gateway(hooked(test_config(), &backend, &["connect", "publish"])).await;
    // SSE: no topic asked, the hook's two are subscribed; `user:u42` is this user's.
    let mut sse = SseClient::connect(&gw, "format=text", None).await;
    sse.next_block().await.unwrap();
    publish(&gw, "user:u42", json!({"for": "u42"})).await;
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some(r#"{"for":"u42"}"#)
    );
    publish(&gw, "news", json!(2)).await;
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("2"));

    // WebSocket: told with a server-side `subscribed`; later hook requests carry the user
    // and the info.
    let mut ws = ws_connect(&gw).await;
    let subscribed = ws_next(&mut ws).await;
    assert_eq!(subscribed["type"], "subscribed", "{subscribed}");
    assert_eq!(subscribed["by"], "server");
    assert_eq!(subscribed["topics"], json!(["user:u42", "news"]));
    ws_send(
        &mut ws,
        json!({"type": "publish", "topic": "news", "data": 3}),
    )
    .await;
    let mut got = Vec::new();
    for _ in 0..2 {
        got.push(ws_next(&mut ws).await["type"].as_str().unwrap().to_string());
    }
    got.sort();
    assert_eq!(got, ["message", "published"]);
    let (publish, _) = backend.calls("publish").pop().unwrap();
    assert_eq!(publish["user"], "u42");
    assert_eq!(publish["info"], json!({"name": "Ann"}));
    assert_eq!(publish["transport"], "ws");
    assert_eq!(publish["topic"], "news");
    assert_eq!(publish["data"], 3);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_websocket_refused_by_the_connect_hook_gets_a_403_before_the_upgrade() {
    let backend = Backend::start(|_, _| deny("banned")).await;
    let gw = spawn_gateway(hooked(test_config(), &backend, &["connect"])).await;
    let err = tokio_tungstenite::connect_async(format!("ws://{}/v1/ws", gw.public_addr))
        .await
        .expect_err("refused");
    match err {
        tokio_tungstenite::tungstenite::Error::Http(response) => {
            assert_eq!(response.status(), 403);
            let body: Value = serde_json::from_slice(response.body().as_deref().unwrap()).unwrap();
            assert_eq!(body, json!({"code": "forbidden", "reason": "banned"}));
        }
        other => panic!("expected an HTTP refusal, got {other}"),
    }
    assert_eq!(backend.calls("connect")[0].0["transport"], "ws");
    gw.stop().await.unwrap();
}

/// A WebSocket that sends a token after the upgrade is put to the connect hook again: the
/// token must not get a user past it that the hook refuses on every other path.
#[tokio::test]
async fn a_token_sent_over_a_websocket_is_put_to_the_connect_hook() {
    let backend = Backend::start(|_, body| {
        if body["user"] == "mallory" {
            deny("banned")
        } else {
            allow()
        }
    })
    .await;
    let gw = spawn_gateway(hooked(token_config(), &backend, &["connect"])).await;
    let mallory = token(json!({"sub": "mallory", "exp": unix_now() + 600, "topics": ["*"]}));
    assert_eq!(
        sse_get(&gw, &format!("topic=news&token={mallory}"), &[])
            .await
            .0,
        403
    );
    let mut ws = ws_connect(&gw).await; // anonymous: allowed
    ws_send(&mut ws, json!({"type": "auth", "token": mallory})).await;
    let refused = ws_next(&mut ws).await;
    assert_forbidden(&refused, "banned");
    let ann = token(json!({"sub": "ann", "exp": unix_now() + 600}));
    ws_send(&mut ws, json!({"type": "auth", "token": ann})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "authenticated");
    assert_eq!(
        backend.calls("connect").len(),
        4,
        "asked at the upgrade and for each token"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn the_refresh_hook_extends_expiring_connections_then_ends_them_with_its_reason() {
    // Connections get one second; the first refresh of each extends by one more, the second
    // refuses.
    let refreshed = Arc::new(Mutex::new(std::collections::HashMap::<String, u32>::new()));
    let seen = refreshed.clone();
    let backend = Backend::start(move |hook, body| match hook {
        "connect" => Reply::Json(json!({"result": "allow", "user": "r", "expires_in": 1})),
        _ => {
            let mut seen = seen.lock().unwrap();
            let n = seen.entry(body["client"].to_string()).or_default();
            *n += 1;
            if *n == 1 {
                Reply::Json(json!({"result": "allow", "expires_in": 1}))
            } else {
                deny("session ended")
            }
        }
    })
    .await;
    let gw = spawn_gateway(hooked(test_config(), &backend, &["connect", "refresh"])).await;
    let started = Instant::now();
    let mut ws = ws_connect(&gw).await;
    let mut sse = SseClient::connect(&gw, "topic=news", None).await;
    assert_eq!(
        ws_close_code(&mut ws).await,
        (1008, "session ended".to_string())
    );
    let end = sse.rest(WAIT).await;
    assert!(
        end.contains("event: herald.disconnect\ndata: {\"reason\":\"session ended\"}"),
        "{end}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "extended once"
    );
    let calls = backend.calls("refresh");
    assert_eq!(calls.len(), 4, "two per connection");
    assert_eq!(calls[0].0["user"], "r");
    gw.stop().await.unwrap();
}
