//! The second hostile-client pass, driven the way the attacks were made: a web page in an
//! operator's browser calling the admin listener (cross-site and by DNS rebinding), a page of
//! another site opening a WebSocket with the user's cookies, a client let in while a hook was
//! down, a few addresses taking every pattern, and a pattern slipping past a subscribe hook.

use std::net::SocketAddr;

use herald_gateway::config::OnUnavailable;
use herald_gateway::config::hooks::SubscribePatterns;
use herald_gateway::{Config, Gateway};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::common::*;
use crate::hooks::{Backend, PATHS, Path, Reply, allow, dead_url, deny, hooked};

/// A raw HTTP/1.1 request to `addr`; the answer's status and body (JSON when it is one).
async fn raw_request(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, Value) {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // Read the head, then the body its content-length announces.
    loop {
        let n = tokio::time::timeout(WAIT, tcp.read(&mut buf))
            .await
            .expect("the gateway answers")
            .unwrap();
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let len = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if answer.len() >= end + 4 + len || n == 0 {
                let status = text[9..12].parse().unwrap();
                let body = serde_json::from_slice(&answer[end + 4..]).unwrap_or(Value::Null);
                return (status, body);
            }
        }
        assert!(n > 0, "closed before the answer: {text}");
    }
}

/// A POST to the admin listener with these extra header lines and body.
async fn admin_post(
    gw: &Gateway,
    path: &str,
    host: &str,
    headers: &str,
    body: &str,
) -> (u16, Value) {
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {host}\r\n{headers}content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    raw_request(gw.admin_addr, &head, body.as_bytes()).await
}

async fn admin_get(gw: &Gateway, path: &str, host: &str, headers: &str) -> (u16, Value) {
    let head = format!("GET {path} HTTP/1.1\r\nhost: {host}\r\n{headers}connection: close\r\n\r\n");
    raw_request(gw.admin_addr, &head, b"").await
}

fn local(gw: &Gateway) -> String {
    format!("127.0.0.1:{}", gw.admin_addr.port())
}

#[tokio::test]
async fn a_web_page_cannot_use_the_admin_listener_cross_site_or_by_rebinding() {
    let gw = spawn_gateway(test_config()).await;
    let host = local(&gw);
    let mut victim = ws_connect(&gw).await;
    ws_subscribe(&mut victim, &["alerts"]).await;
    let forged = r#"{"topic":"alerts","data":"forged"}"#;

    // A page on another site: a no-cors fetch or a form, text/plain, with its Origin.
    let (status, body) = admin_post(
        &gw,
        "/v1/publish",
        &host,
        "origin: https://evil.example\r\ncontent-type: text/plain\r\n",
        forged,
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("origin_not_allowed")),
        "{body}"
    );
    // `Origin: null` (a sandboxed frame, a file) is no better.
    let (status, body) = admin_post(
        &gw,
        "/v1/publish",
        &host,
        "origin: null\r\ncontent-type: application/json\r\n",
        forged,
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("origin_not_allowed")),
        "{body}"
    );
    // Bodies a form or a no-cors fetch can send, with or without an Origin: never read.
    for kind in [
        "content-type: text/plain\r\n",
        "content-type: application/x-www-form-urlencoded\r\n",
        "content-type: multipart/form-data; boundary=x\r\n",
        "",
    ] {
        for path in ["/v1/publish", "/v1/users/ann/send", "/v1/publish/batch"] {
            let (status, body) = admin_post(&gw, path, &host, kind, forged).await;
            assert_eq!(
                (status, body["code"].as_str()),
                (415, Some("unsupported_media_type")),
                "{path} {kind:?}: {body}"
            );
        }
    }
    // Cutting a user off takes no body: the Origin refuses it.
    let (status, body) = admin_post(
        &gw,
        "/v1/users/ann/disconnect",
        &host,
        "origin: https://evil.example\r\n",
        "",
    )
    .await;
    assert_eq!(status, 403, "{body}");

    // DNS rebinding: the page's own origin, but a host name that is not this listener's.
    let rebound = format!("rebind.evil.example:{}", gw.admin_addr.port());
    let origin = format!("origin: http://{rebound}\r\n");
    for path in [
        "/v1/topics",
        "/console",
        "/v1/topics/alerts/history",
        "/metrics",
    ] {
        let (status, body) = admin_get(&gw, path, &rebound, "").await;
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("host_not_allowed")),
            "{path}: {body}"
        );
    }
    let (status, body) = admin_post(
        &gw,
        "/v1/publish",
        &rebound,
        &format!("{origin}content-type: application/json\r\n"),
        forged,
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("host_not_allowed")),
        "{body}"
    );

    // The console's own requests (same origin, JSON) and API clients (no Origin) work, by
    // address or by localhost.
    let own = format!("origin: http://{host}\r\ncontent-type: application/json\r\n");
    let (status, body) = admin_post(
        &gw,
        "/v1/publish",
        &host,
        &own,
        r#"{"topic":"alerts","data":"real"}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let localhost = format!("localhost:{}", gw.admin_addr.port());
    assert_eq!(admin_get(&gw, "/v1/topics", &localhost, "").await.0, 200);
    assert_eq!(
        admin_get(
            &gw,
            "/console",
            &format!("[::1]:{}", gw.admin_addr.port()),
            ""
        )
        .await
        .0,
        200
    );
    publish(&gw, "alerts", json!("api")).await;

    // The victim saw the real messages, and no forged one.
    assert_eq!(ws_next(&mut victim).await["data"], "real");
    assert_eq!(ws_next(&mut victim).await["data"], "api");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn the_admin_listener_answers_listed_hosts_and_origins_and_any_host_with_a_key() {
    let mut config = test_config();
    config.admin.allowed_hosts = vec!["herald-admin.internal".into()];
    config.admin.allowed_origins = vec!["https://ops.example.com".into()];
    let gw = spawn_gateway(config).await;
    let listed = format!("herald-admin.internal:{}", gw.admin_addr.port());
    assert_eq!(admin_get(&gw, "/v1/topics", &listed, "").await.0, 200);
    assert_eq!(
        admin_get(&gw, "/v1/topics", "other.internal", "").await.0,
        403
    );
    let json = "content-type: application/json\r\n";
    let (status, body) = admin_post(
        &gw,
        "/v1/publish",
        &local(&gw),
        &format!("origin: https://ops.example.com\r\n{json}"),
        r#"{"topic":"t","data":1}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    gw.stop().await.unwrap();

    // With keys, the key is the protection: any host name is answered (a Service's DNS name).
    let mut config = test_config();
    config.admin.api_keys = vec!["an-admin-key-0123456789".into()];
    let gw = spawn_gateway(config).await;
    let (status, body) = admin_get(
        &gw,
        "/v1/topics",
        "herald.ns.svc:9090",
        "x-api-key: an-admin-key-0123456789\r\n",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // A foreign page is refused all the same, key or not.
    let (status, _) = admin_post(
        &gw,
        "/v1/publish",
        "herald.ns.svc:9090",
        &format!("x-api-key: an-admin-key-0123456789\r\norigin: https://evil.example\r\n{json}"),
        r#"{"topic":"t","data":1}"#,
    )
    .await;
    assert_eq!(status, 403);
    gw.stop().await.unwrap();
}

/// A WebSocket upgrade by hand with `Origin: origin` and a cookie; the status line's code.
async fn upgrade_from(gw: &Gateway, host: &str, origin: &str) -> u16 {
    let head = format!(
        "GET /v1/ws HTTP/1.1\r\nhost: {host}\r\norigin: {origin}\r\ncookie: session=ann\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    let mut tcp = tokio::net::TcpStream::connect(gw.public_addr)
        .await
        .unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut buf = [0u8; 512];
    let n = tokio::time::timeout(WAIT, tcp.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    String::from_utf8_lossy(&buf[..n])[9..12].parse().unwrap()
}

#[tokio::test]
async fn another_site_s_page_gets_no_connection_in_the_user_s_name_when_hooks_read_cookies() {
    // The backend authenticates by the session cookie it is forwarded (the default
    // forward_headers), as a browser application's would.
    let backend = Backend::start(|_, body| {
        if body["hook"] == "connect" {
            Reply::Json(json!({"result": "allow", "user": "ann"}))
        } else {
            allow()
        }
    })
    .await;
    let gw = spawn_gateway(hooked(test_config(), &backend, &["connect"])).await;
    let host = format!("localhost:{}", gw.public_addr.port());
    assert_eq!(upgrade_from(&gw, &host, "https://evil.example").await, 403);
    assert_eq!(upgrade_from(&gw, &host, "null").await, 403);
    // The same site's page connects, and the hook is told the page's origin.
    assert_eq!(
        upgrade_from(&gw, &host, &format!("http://{host}")).await,
        101
    );
    let asked = backend.calls("connect");
    assert_eq!(asked.len(), 1, "refused before the hook was asked");
    assert_eq!(asked[0].0["origin"], format!("http://{host}"));

    // SSE and long-poll on every path: the same rule (these requests name `localhost`).
    for path in PATHS {
        let base = if matches!(path, Path::TlsDirect | Path::TlsH2) {
            crate::tls::tls_config()
        } else {
            test_config()
        };
        let gw = spawn_gateway(hooked(base, &backend, &["connect"])).await;
        let (status, body) = crate::hooks::subscribe_with(
            &gw,
            path,
            "topic=news",
            &[("origin", "https://evil.example")],
        )
        .await;
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("origin_not_allowed")),
            "{path:?}: {body}"
        );
        let own = match path {
            Path::TlsDirect | Path::TlsH2 => "https://localhost".to_string(),
            _ => "http://localhost".to_string(),
        };
        let (status, body) =
            crate::hooks::subscribe_with(&gw, path, "topic=news", &[("origin", own.as_str())])
                .await;
        assert_eq!(status, 200, "{path:?}: {body}");
        gw.stop().await.unwrap();
    }

    // Pages listed in auth.allowed_origins are let in; without hooks, any origin is (as before).
    let mut config = hooked(test_config(), &backend, &["connect"]);
    config.auth.allowed_origins = vec!["https://evil.example".into()];
    let listed = spawn_gateway(config).await;
    let host = format!("localhost:{}", listed.public_addr.port());
    assert_eq!(
        upgrade_from(&listed, &host, "https://evil.example").await,
        101
    );
    let open = spawn_gateway(test_config()).await;
    let host = format!("localhost:{}", open.public_addr.port());
    assert_eq!(
        upgrade_from(&open, &host, "https://evil.example").await,
        101
    );
    for gw in [gw, listed, open] {
        gw.stop().await.unwrap();
    }
}

#[tokio::test]
async fn an_unavailable_hook_under_allow_opens_no_more_than_tokens_and_public_prefixes() {
    let mut config = token_config();
    config.auth.public_prefixes = vec!["pub.".into()];
    config.hooks.subscribe_url = dead_url().await;
    config.hooks.on_unavailable = OnUnavailable::Allow;
    let gw = spawn_gateway(config).await;
    // Anonymous: the hook would have decided `secret.x`; down, it is not opened.
    let (status, body) = sse_status(&gw, "topic=secret.x").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    let poll = get(
        format!("http://{}/v1/poll?topic=secret.x&timeout=0", gw.public_addr),
        &[],
    )
    .await;
    assert_eq!(poll.status(), 403);
    let mut ws = ws_connect(&gw).await;
    ws_send(
        &mut ws,
        json!({"type": "subscribe", "topics": ["secret.x"]}),
    )
    .await;
    assert_forbidden(&ws_next(&mut ws).await, "secret.x");
    // What the public prefixes and a token's claims allow still goes through.
    assert_eq!(sse_status(&gw, "topic=pub.news").await.0, 200);
    let t = token(json!({"sub": "ann", "exp": unix_now() + 3600, "topics": ["secret.*"]}));
    assert_eq!(
        sse_status(&gw, &format!("topic=secret.x&token={t}"))
            .await
            .0,
        200
    );
    gw.stop().await.unwrap();

    // Without token keys (everything open to the token rules), an unavailable connect hook
    // leaves the client with the public prefixes only, on SSE and on a WebSocket.
    let mut config = test_config();
    config.auth.public_prefixes = vec!["pub.".into()];
    config.hooks.connect_url = dead_url().await;
    config.hooks.on_unavailable = OnUnavailable::Allow;
    let gw = spawn_gateway(config).await;
    assert_eq!(sse_status(&gw, "topic=news").await.0, 403);
    assert_eq!(sse_status(&gw, "topic=pub.news").await.0, 200);
    let mut ws = ws_connect(&gw).await;
    ws_send(&mut ws, json!({"type": "subscribe", "topics": ["news"]})).await;
    assert_forbidden(&ws_next(&mut ws).await, "news");
    ws_subscribe(&mut ws, &["pub.news"]).await;
    gw.stop().await.unwrap();
}

async fn sse_status(gw: &Gateway, query: &str) -> (u16, Value) {
    let resp = get(format!("http://{}/v1/sse?{query}", gw.public_addr), &[]).await;
    let status = resp.status().as_u16();
    if status == 200 {
        return (200, Value::Null);
    }
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_few_addresses_cannot_take_every_pattern_from_the_others() {
    let mut config = test_config();
    config.topics.max_patterns = 40;
    config.limits.max_new_patterns_per_client = 8;
    let gw = spawn_gateway(config).await;
    // One address holds its share over SSE streams and WebSocket subscriptions...
    let mut held = Vec::new();
    for i in 0..4 {
        held.push(SseClient::connect(&gw, &format!("topic=lock{i}.*"), None).await);
    }
    let mut ws = ws_connect(&gw).await;
    ws_subscribe(&mut ws, &["lock4.*", "lock5.*", "lock6.*", "lock7.*"]).await;
    // ...and no more, on either transport.
    let (status, body) = sse_status(&gw, "topic=lock8.*").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (429, Some("pattern_quota")),
        "{body}"
    );
    ws_send(&mut ws, json!({"type": "subscribe", "topics": ["lock9.*"]})).await;
    let refused = ws_next(&mut ws).await;
    assert_eq!(refused["code"], "pattern_quota", "{refused}");
    // Patterns held already cost nothing: another subscriber of `lock0.*` is served.
    assert_eq!(sse_status(&gw, "topic=lock0.*").await.0, 200);
    // Another client (address) still gets a new pattern.
    let other = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let resp = other
        .get(format!("http://{}/v1/sse?topic=mine.*", gw.public_addr))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // Dropping patterns gives the room back.
    drop(held);
    eventually(WAIT, || async {
        sse_status(&gw, "topic=lock8.*").await.0 == 200
    })
    .await;
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_pattern_does_not_slip_past_a_subscribe_hook_that_decides_topic_by_topic() {
    let backend = Backend::start(|_, body| {
        let topics = body["topics"].as_array().unwrap();
        if topics.iter().any(|t| t == "rooms.secret") {
            deny("not your room")
        } else {
            allow()
        }
    })
    .await;
    let mut config: Config = hooked(test_config(), &backend, &["subscribe"]);
    let gw = spawn_gateway(config.clone()).await;
    for path in PATHS
        .into_iter()
        .filter(|p| !matches!(p, Path::TlsDirect | Path::TlsH2))
    {
        let (status, body) = crate::hooks::subscribe_with(&gw, path, "topic=rooms.*", &[]).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("pattern_not_allowed")),
            "{path:?}: {body}"
        );
    }
    let mut ws = ws_connect(&gw).await;
    ws_send(&mut ws, json!({"type": "subscribe", "topics": ["rooms.*"]})).await;
    let refused = ws_next(&mut ws).await;
    assert_eq!(refused["code"], "pattern_not_allowed", "{refused}");
    // Topics are still asked about one by one.
    ws_subscribe(&mut ws, &["rooms.lobby"]).await;
    ws_send(
        &mut ws,
        json!({"type": "subscribe", "topics": ["rooms.secret"]}),
    )
    .await;
    assert_forbidden(&ws_next(&mut ws).await, "not your room");
    assert!(
        backend
            .calls("subscribe")
            .iter()
            .all(|(b, _)| b["topics"] != json!(["rooms.*"])),
        "a refused pattern is not asked about"
    );
    gw.stop().await.unwrap();

    // Opted in, the hook is asked with the pattern named as one, and its answer stands.
    config.hooks.subscribe_patterns = SubscribePatterns::Ask;
    let gw = spawn_gateway(config).await;
    let mut ws = ws_connect(&gw).await;
    ws_subscribe(&mut ws, &["rooms.*"]).await;
    let asked = backend.calls("subscribe");
    let (last, _) = asked.last().unwrap();
    assert_eq!(last["patterns"], json!(["rooms.*"]));
    gw.stop().await.unwrap();
}
