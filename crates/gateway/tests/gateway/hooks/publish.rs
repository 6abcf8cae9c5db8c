//! The publish hook: HTTP and WebSocket publishes, batches, MessagePack payloads.

use super::backend::*;

#[tokio::test]
async fn the_publish_hook_decides_for_http_and_websocket_clients() {
    let backend = Backend::start(|_, body| {
        if body["topic"] == "locked" {
            deny("read-only topic")
        } else {
            allow()
        }
    })
    .await;
    let gw = spawn_gateway(hooked(token_config(), &backend, &["publish"])).await;
    let url = format!("http://{}/v1/publish", gw.public_addr);
    // No token, no API key: the hook decides (and sees the forwarded Authorization).
    let ok = post_json(
        &url,
        &[("cookie", "s=1")],
        &json!({"topic": "chat", "data": 1}),
    )
    .await;
    assert_eq!(ok.status(), 200);
    let refused = post_json(&url, &[], &json!({"topic": "locked", "data": 1})).await;
    assert_eq!(refused.status(), 403);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        body,
        json!({"code": "forbidden", "reason": "read-only topic"})
    );
    let (first, headers) = backend.calls("publish")[0].clone();
    assert_eq!(first["transport"], "http");
    assert_eq!(first["data"], 1);
    assert_eq!(headers["cookie"], "s=1");

    // A token whose claim allows `locked` is still refused: the hook replaces the claim.
    let t = token(json!({"sub": "w", "exp": unix_now() + 600, "publish": ["*"]}));
    let (mut ws, _) =
        tokio_tungstenite::connect_async(format!("ws://{}/v1/ws?token={t}", gw.public_addr))
            .await
            .unwrap();
    ws_send(
        &mut ws,
        json!({"type": "publish", "topic": "locked", "data": 2}),
    )
    .await;
    assert_eq!(
        ws_next(&mut ws).await,
        json!({"type": "error", "code": "forbidden", "reason": "read-only topic"})
    );
    ws_send(
        &mut ws,
        json!({"type": "publish", "topic": "chat", "data": 2}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await["type"], "published");
    let (last, _) = backend.calls("publish").pop().unwrap();
    assert_eq!(last["user"], "w");
    assert_eq!(last["token"]["publish"], json!(["*"]));
    gw.stop().await.unwrap();
}

/// Publishes `messages` as one batch on the public listener; the results.
async fn publish_batch(gw: &Gateway, messages: &[Value]) -> Vec<Value> {
    let resp = post_json(
        format!("http://{}/v1/publish/batch", gw.public_addr),
        &[],
        &json!({ "messages": messages }),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let results: Value = resp.json().await.unwrap();
    results["results"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_batchs_messages_are_put_to_the_publish_hook_together_and_published_in_order() {
    // The backend answers only once 16 requests are waiting at once: asked one after another,
    // every message would time out.
    let crowd = Crowd::new(16);
    let held = crowd.clone();
    let backend = Backend::start(move |_, body| {
        if body["data"] == 30 {
            return deny("not thirty");
        }
        Reply::Together(held.clone(), json!({"result": "allow"}))
    })
    .await;
    let mut config = hooked(token_config(), &backend, &["publish"]);
    config.hooks.timeout = Duration::from_secs(5);
    let gw = spawn_gateway(config.clone()).await;
    let mut sse = SseClient::connect(&gw, "topic=public.batch", None).await;
    // Message 35 is not a message (no `data`): refused in its place, never put to the hook.
    let messages: Vec<Value> = (0..40)
        .map(|i| match i {
            35 => json!({"topic": "public.batch"}),
            i => json!({"topic": "public.batch", "data": i}),
        })
        .collect();
    let results = publish_batch(&gw, &messages).await;
    assert_eq!(results.len(), 40);
    assert_eq!(results[30]["code"], "forbidden", "{}", results[30]);
    assert_eq!(results[30]["reason"], "not thirty");
    assert_eq!(results[35]["code"], "bad_json", "{}", results[35]);
    assert_eq!(
        crowd.most_held.load(std::sync::atomic::Ordering::SeqCst),
        16,
        "16 messages of a batch are put to the hook at once, no more"
    );
    assert_eq!(backend.calls("publish").len(), 39);
    for i in (0..40).filter(|&i| i != 30 && i != 35) {
        let event = sse.next_event().await.unwrap();
        assert_eq!(
            event.data.as_deref(),
            Some(i.to_string().as_str()),
            "in order"
        );
        // An SSE event's id is `topic=cursor`; a result's `id` is the cursor.
        assert_eq!(
            event.id,
            Some(format!(
                "public.batch={}",
                results[i]["id"].as_str().unwrap()
            )),
            "message {i}'s result names it"
        );
    }
    gw.stop().await.unwrap();

    // With room for four hook requests in all, a batch asks about one message at a time
    // rather than finding its own requests refused as overloaded.
    let allowing =
        Backend::start(|_, _| Reply::Slow(Duration::from_millis(5), json!({"result": "allow"})))
            .await;
    let mut config = hooked(token_config(), &allowing, &["publish"]);
    config.hooks.max_in_flight = 4;
    let gw = spawn_gateway(config).await;
    let messages: Vec<Value> = (0..10)
        .map(|i| json!({"topic": "public.batch", "data": i}))
        .collect();
    let results = publish_batch(&gw, &messages).await;
    assert!(results.iter().all(|r| r["id"].is_string()), "{results:?}");
    assert_eq!(
        metric(
            &gw,
            r#"herald_hook_requests_total{hook="publish",result="allow"}"#
        )
        .await,
        10.0
    );
    gw.stop().await.unwrap();
}

/// The publish hook sees a MessagePack payload in its JSON form (binary as base64), and its
/// refusal reaches a `herald.msgpack` client as a MessagePack error frame with its reason.
#[tokio::test]
async fn the_publish_hook_sees_a_msgpack_payload_in_its_json_form() {
    use crate::msgpack::{field, kind, map, mp_next, mp_send};
    use rmpv::Value as Mp;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let backend = Backend::start(|_, body| {
        if body["topic"] == "locked" {
            deny("read-only topic")
        } else {
            allow()
        }
    })
    .await;
    let gw = spawn_gateway(hooked(token_config(), &backend, &["publish"])).await;
    let mut request = format!("ws://{}/v1/ws", gw.public_addr)
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "herald.msgpack".parse().unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let publish = |topic: &str| {
        map(vec![
            ("type", "publish".into()),
            ("topic", topic.into()),
            ("data", map(vec![("b", Mp::Binary(vec![1, 2, 3]))])),
        ])
    };
    mp_send(&mut ws, publish("chat")).await;
    assert_eq!(kind(&mp_next(&mut ws).await), "published");
    let (call, _) = backend.calls("publish").pop().unwrap();
    assert_eq!(call["data"], json!({"b": "AQID"}));
    mp_send(&mut ws, publish("locked")).await;
    let refused = mp_next(&mut ws).await;
    assert_eq!(field(&refused, "code").as_str(), Some("forbidden"));
    assert_eq!(field(&refused, "reason").as_str(), Some("read-only topic"));
    gw.stop().await.unwrap();
}
