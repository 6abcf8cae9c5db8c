//! What the client library relies on: the JSON form of SSE and long-poll (`format=json`) and
//! CORS for pages on other origins.

use serde_json::{Value, json};

use crate::common::*;

#[tokio::test]
async fn sse_json_form_names_topic_id_and_event_and_resumes() {
    let gw = spawn_gateway(test_config()).await;
    let mut sse = SseClient::connect(&gw, "topic=a&topic=b&format=json", None).await;
    let opening = sse.next_block().await.unwrap();
    assert!(
        opening.id.unwrap().contains("a="),
        "opening id names the topics"
    );
    let id_a = publish_event(&gw, "a", json!("two\nlines"), Some("created")).await;
    let id_b = publish(&gw, "b", json!({"n": 1})).await;
    let e = sse.next_event().await.unwrap();
    // No `event:` line: an EventSource gives it to onmessage; the name is in the JSON.
    assert_eq!(e.event, None);
    let m: Value = serde_json::from_str(e.data.as_deref().unwrap()).unwrap();
    assert_eq!(
        m,
        json!({"type": "message", "topic": "a", "id": id_a, "event": "created", "data": "two\nlines"})
    );
    let resume = e.id.clone().unwrap();
    assert!(resume.contains(&format!("a={id_a}")), "{resume}");
    let e = sse.next_event().await.unwrap();
    let m: Value = serde_json::from_str(e.data.as_deref().unwrap()).unwrap();
    assert_eq!(
        m,
        json!({"type": "message", "topic": "b", "id": id_b, "data": {"n": 1}})
    );
    drop(sse);

    // Resuming from the first message's id replays exactly the second, in the same form.
    let mut again = SseClient::connect(&gw, "topic=a&topic=b&format=json", Some(&resume)).await;
    let e = again.next_event().await.unwrap();
    let m: Value = serde_json::from_str(e.data.as_deref().unwrap()).unwrap();
    assert_eq!(m["id"], json!(id_b));
    assert_eq!(m["topic"], "b");

    // A single-topic stream writes the shared frame with its own id line.
    let mut single = SseClient::connect(&gw, "topic=a&format=json", None).await;
    single.next_block().await.unwrap();
    let id = publish(&gw, "a", json!(null)).await;
    let e = single.next_event().await.unwrap();
    assert_eq!(e.id.as_deref(), Some(format!("a={id}").as_str()));
    assert_eq!(
        e.data.as_deref(),
        Some(format!(r#"{{"type":"message","topic":"a","id":"{id}","data":null}}"#).as_str())
    );

    // The default form is unchanged.
    let mut text = SseClient::connect(&gw, "topic=a", None).await;
    text.next_block().await.unwrap();
    publish_event(&gw, "a", json!("plain"), Some("ev")).await;
    let e = text.next_event().await.unwrap();
    assert_eq!(
        (e.event.as_deref(), e.data.as_deref()),
        (Some("ev"), Some("plain"))
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_bad_format_is_refused_with_a_reason() {
    let gw = spawn_gateway(test_config()).await;
    for path in ["/v1/sse", "/v1/poll"] {
        let resp = get(
            format!("http://{}{path}?topic=a&format=xml", gw.public_addr),
            &[],
        )
        .await;
        assert_eq!(resp.status(), 400, "{path}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "bad_format", "{path}");
        assert!(body["reason"].as_str().unwrap().contains("xml"));
    }
    // Poll answers in the JSON form with or without the parameter.
    let id = publish(&gw, "a", json!(1)).await;
    let body = get_json(format!(
        "http://{}/v1/poll?topic=a&format=json&timeout=0&cursor=a%3D{}-0",
        gw.public_addr,
        id.split('-').next().unwrap()
    ))
    .await;
    assert_eq!(
        body["messages"],
        json!([{"type": "message", "topic": "a", "id": id, "data": 1}])
    );
    gw.stop().await.unwrap();
}

async fn preflight(gw: &herald_gateway::Gateway, path: &str, origin: &str) -> reqwest::Response {
    http()
        .request(
            reqwest::Method::OPTIONS,
            format!("http://{}{path}", gw.public_addr),
        )
        .header("origin", origin)
        .header(
            "access-control-request-method",
            if path.contains("publish") {
                "POST"
            } else {
                "GET"
            },
        )
        .header("access-control-request-headers", "authorization, x-api-key")
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn cors_preflight_for_sse_poll_and_public_publish() {
    let mut config = test_config();
    config.auth.api_keys = vec!["k1".into()];
    config.auth.allowed_origins = vec!["https://app.example".into()];
    let gw = spawn_gateway(config).await;
    for path in ["/v1/sse", "/v1/poll", "/v1/publish", "/v1/publish/batch"] {
        let resp = preflight(&gw, path, "https://app.example").await;
        assert_eq!(resp.status(), 204, "{path}");
        let h = resp.headers();
        assert_eq!(h["access-control-allow-origin"], "https://app.example");
        let allowed = h["access-control-allow-headers"].to_str().unwrap();
        assert!(allowed.contains("authorization") && allowed.contains("x-api-key"));
        assert!(allowed.contains("traceparent") && allowed.contains("tracestate"));
        assert!(allowed.contains("idempotency-key"), "{allowed}");
        assert!(
            h.get("access-control-allow-credentials").is_none(),
            "not configured"
        );
        let resp = preflight(&gw, path, "https://evil.example").await;
        assert_eq!(resp.status(), 403, "{path}");
        assert!(resp.headers().get("access-control-allow-origin").is_none());
    }
    let resp = preflight(&gw, "/v1/topics", "https://app.example").await;
    assert_eq!(resp.status(), 404);

    // The publish itself, with the key, carries the CORS headers; so does a refusal.
    let resp = post_json(
        format!("http://{}/v1/publish", gw.public_addr),
        &[("origin", "https://app.example"), ("x-api-key", "k1")],
        &json!({"topic": "t", "data": 1}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let resp = post_json(
        format!("http://{}/v1/publish", gw.public_addr),
        &[("origin", "https://app.example"), ("x-api-key", "wrong")],
        &json!({"topic": "t", "data": 1}),
    )
    .await;
    assert_eq!(resp.status(), 401);
    assert_eq!(
        resp.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    // A refused SSE request (served on the raw socket) is readable by the page too.
    let resp = get(
        format!("http://{}/v1/sse?topic=bad/topic", gw.public_addr),
        &[("origin", "https://app.example")],
    )
    .await;
    assert_eq!(resp.status(), 400);
    assert_eq!(
        resp.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn cors_credentials_when_configured() {
    let mut config = test_config();
    config.auth.allowed_origins = vec!["https://app.example".into()];
    config.auth.cors_credentials = true;
    config.validate().unwrap();
    let gw = spawn_gateway(config.clone()).await;
    let resp = preflight(&gw, "/v1/sse", "https://app.example").await;
    assert_eq!(resp.status(), 204);
    assert_eq!(resp.headers()["access-control-allow-credentials"], "true");
    // Publish is not served on the public listener here: no preflight for it.
    assert_eq!(
        preflight(&gw, "/v1/publish", "https://app.example")
            .await
            .status(),
        404
    );
    // The raw SSE stream and the poll answer allow credentials as well.
    let resp = get(
        format!("http://{}/v1/sse?topic=c", gw.public_addr),
        &[("origin", "https://app.example")],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["access-control-allow-credentials"], "true");
    assert_eq!(
        resp.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    drop(resp);
    let resp = get(
        format!("http://{}/v1/poll?topic=c&timeout=0", gw.public_addr),
        &[("origin", "https://app.example")],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["access-control-allow-credentials"], "true");
    gw.stop().await.unwrap();

    // Credentials with any origin would let every site read with the user's cookies.
    config.auth.allowed_origins = vec![];
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("cors_credentials"), "{err}");
    config.auth.allowed_origins = vec!["*".into()];
    assert!(config.validate().is_err());
}

/// A cross-origin page reading an SSE stream with `fetch` needs the CORS headers on the `200`
/// itself, `access-control-expose-headers` included, on the socket path as through hyper.
#[tokio::test]
async fn a_cross_origin_sse_stream_carries_the_cors_headers_on_every_path() {
    use http_body_util::Empty;
    use hyper_util::rt::TokioIo;
    let mut config = test_config();
    config.auth.allowed_origins = vec!["https://app.example".into()];
    let gw = spawn_gateway(config).await;
    let check = |path: &str, h: &reqwest::header::HeaderMap| {
        assert_eq!(
            h["access-control-allow-origin"], "https://app.example",
            "{path}"
        );
        assert_eq!(h["access-control-expose-headers"], "retry-after", "{path}");
        assert_eq!(h["vary"], "origin", "{path}");
    };
    // The raw socket (an origin-form HTTP/1.1 request).
    let resp = get(
        format!("http://{}/v1/sse?topic=c", gw.public_addr),
        &[("origin", "https://app.example")],
    )
    .await;
    assert_eq!(resp.status(), 200);
    check("direct", resp.headers());
    drop(resp);
    // Through hyper and the router (an absolute-form request, which the accept loop leaves
    // to hyper).
    let tcp = tokio::net::TcpStream::connect(gw.public_addr)
        .await
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let request = hyper::Request::get(format!("http://{}/v1/sse?topic=c", gw.public_addr))
        .header("host", "localhost")
        .header("origin", "https://app.example")
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = sender.send_request(request).await.unwrap();
    assert_eq!(resp.status(), 200);
    check("hyper", resp.headers());
    drop((resp, sender));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn the_admin_console_is_served_from_the_binary_and_tails_a_topic() {
    let gw = spawn_gateway(test_config()).await;
    let admin = format!("http://{}", gw.admin_addr);
    for (path, kind) in [
        ("/console", "text/html"),
        ("/console/console.js", "text/javascript"),
        ("/console/console.css", "text/css"),
    ] {
        let resp = get(format!("{admin}{path}"), &[]).await;
        assert_eq!(resp.status(), 200, "{path}");
        let h = resp.headers();
        assert!(
            h["content-type"].to_str().unwrap().starts_with(kind),
            "{path}"
        );
        assert!(
            h["content-security-policy"]
                .to_str()
                .unwrap()
                .starts_with("default-src 'self'"),
            "{path}: nothing from a CDN"
        );
        let body = resp.text().await.unwrap();
        assert!(
            !body.contains("http://") && !body.contains("https://"),
            "{path} loads nothing from elsewhere"
        );
    }
    // Not on the public listener.
    let resp = get(format!("http://{}/console", gw.public_addr), &[]).await;
    assert_eq!(resp.status(), 404);

    // The tail: the topic's messages in the JSON form, counted as a subscriber.
    let resp = get(format!("{admin}/v1/tail/bad%20topic"), &[]).await;
    assert_eq!(resp.status(), 400);
    let resp = get(format!("{admin}/v1/tail/tailed"), &[]).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut tail = SseClient::from_response(resp);
    tail.next_block().await.unwrap();
    eventually(WAIT, || async {
        topic_subscribers(&gw, "tailed").await == 1
    })
    .await;
    let id = publish_event(&gw, "tailed", json!({"x": 1}), Some("e")).await;
    let e = tail.next_event().await.unwrap();
    let m: Value = serde_json::from_str(e.data.as_deref().unwrap()).unwrap();
    assert_eq!(
        m,
        json!({"type": "message", "topic": "tailed", "id": id, "event": "e", "data": {"x": 1}})
    );
    // Topic stats count the messages (the console's rates come from it).
    let stats = get_json(format!("{admin}/v1/topics/tailed")).await;
    assert_eq!(stats["messages"], 1);
    gw.stop().await.unwrap();
}
