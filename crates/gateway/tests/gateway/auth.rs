//! Tokens, API keys and Origin checks, driven as clients use them.

use std::time::Duration;

use futures_util::StreamExt as _;
use jsonwebtoken::{EncodingKey, Header};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::common::*;

fn now() -> u64 {
    unix_now()
}

fn auth_config() -> herald_gateway::Config {
    let mut config = token_config();
    config.auth.api_keys = vec!["key-1".into()];
    config.auth.allowed_origins = vec!["https://good.example".into()];
    config
}

async fn sse_status(
    gw: &herald_gateway::Gateway,
    query: &str,
    bearer: Option<&str>,
) -> (u16, serde_json::Value) {
    let mut req = http().get(format!("http://{}/v1/sse?{query}", gw.public_addr));
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    if status == 200 {
        return (status, json!(null));
    }
    (status, resp.json().await.unwrap())
}

#[tokio::test]
async fn subscribing_follows_the_token_rules() {
    let gw = spawn_gateway(auth_config()).await;
    let ok = token(json!({"sub": "alice", "exp": now() + 600, "topics": ["private", "orders.*"]}));
    assert_eq!(sse_status(&gw, "topic=public.news", None).await.0, 200);
    let (status, body) = sse_status(&gw, "topic=private", None).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("forbidden")));
    assert_eq!(
        sse_status(&gw, "topic=private&topic=orders.eu", Some(&ok))
            .await
            .0,
        200
    );
    assert_eq!(
        sse_status(&gw, &format!("topic=private&token={ok}"), None)
            .await
            .0,
        200
    );
    assert_eq!(sse_status(&gw, "topic=other", Some(&ok)).await.0, 403);
    // user:<sub> is readable by that user only.
    assert_eq!(sse_status(&gw, "topic=user:alice", Some(&ok)).await.0, 200);
    assert_eq!(sse_status(&gw, "topic=user:bob", Some(&ok)).await.0, 403);
    assert_eq!(sse_status(&gw, "topic=user:alice", None).await.0, 403);

    // Bad tokens are 401 with a reason.
    let expired = token(json!({"sub": "alice", "exp": now() - 60, "topics": ["private"]}));
    let forged = jsonwebtoken::encode(
        &Header::default(),
        &json!({"sub": "alice", "exp": now() + 600, "topics": ["private"]}),
        &EncodingKey::from_secret(b"another secret that is long enough......"),
    )
    .unwrap();
    let none_alg = {
        use base64::Engine as _;
        let b64 = |v: serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        format!(
            "{}.{}.",
            b64(json!({"alg": "none", "typ": "JWT"})),
            b64(json!({"sub": "alice", "exp": now() + 600, "topics": ["private"]}))
        )
    };
    for bad in [
        expired.as_str(),
        forged.as_str(),
        none_alg.as_str(),
        "garbage",
        "",
    ] {
        let (status, body) = sse_status(&gw, "topic=private", Some(bad)).await;
        assert_eq!(status, 401, "{bad}: {body}");
        assert_eq!(body["code"], "invalid_token");
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn websocket_auth_frame_subscribe_and_publish_rights() {
    let gw = spawn_gateway(auth_config()).await;
    let mut ws = ws_connect(&gw).await;
    ws_send(&mut ws, json!({"type": "subscribe", "topics": ["private"]})).await;
    assert_eq!(ws_next(&mut ws).await["code"], "forbidden");
    ws_send(
        &mut ws,
        json!({"type": "publish", "topic": "chat.room", "data": 1}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await["code"], "forbidden");
    ws_send(&mut ws, json!({"type": "auth", "token": "nope"})).await;
    assert_eq!(ws_next(&mut ws).await["code"], "invalid_token");

    let t = token(
        json!({"sub": "carol", "exp": now() + 600, "topics": ["private"], "publish": ["chat.*"]}),
    );
    ws_send(&mut ws, json!({"type": "auth", "token": t})).await;
    let reply = ws_next(&mut ws).await;
    assert_eq!(reply["type"], "authenticated");
    assert_eq!(reply["sub"], "carol");
    ws_subscribe(&mut ws, &["private"]).await;
    ws_send(
        &mut ws,
        json!({"type": "publish", "topic": "chat.room", "data": 1}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await["type"], "published");
    ws_send(
        &mut ws,
        json!({"type": "publish", "topic": "private", "data": 1}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await["code"], "forbidden");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn an_expiring_token_ends_live_connections_with_a_reason() {
    let gw = spawn_gateway(auth_config()).await;
    let short = token(json!({"sub": "dan", "exp": now() + 2, "topics": ["private"]}));
    let (mut ws, _) =
        tokio_tungstenite::connect_async(format!("ws://{}/v1/ws?token={short}", gw.public_addr))
            .await
            .unwrap();
    ws_subscribe(&mut ws, &["private"]).await;
    let (code, reason) = ws_close_code(&mut ws).await;
    assert_eq!((code, reason.as_str()), (1008, "token expired"));

    let short = token(json!({"sub": "dan", "exp": now() + 2, "topics": ["private"]}));
    let resp = http()
        .get(format!("http://{}/v1/sse?topic=private", gw.public_addr))
        .bearer_auth(short)
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout(Duration::from_secs(10), body.next()).await
    {
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(
        text.contains("event: herald.disconnect\ndata: {\"reason\":\"token expired\"}"),
        "{text}"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn origins_are_checked_and_cors_is_answered() {
    let gw = spawn_gateway(auth_config()).await;
    let upgrade = |origin: &str| {
        format!(
            "GET /v1/ws HTTP/1.1\r\nhost: x\r\norigin: {origin}\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
    };
    for (origin, expect) in [
        ("https://evil.example", "HTTP/1.1 403"),
        ("https://good.example", "HTTP/1.1 101"),
    ] {
        let mut raw = tokio::net::TcpStream::connect(gw.public_addr)
            .await
            .unwrap();
        raw.write_all(upgrade(origin).as_bytes()).await.unwrap();
        let mut buf = vec![0u8; 512];
        let n = tokio::time::timeout(WAIT, raw.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        let answer = String::from_utf8_lossy(&buf[..n]);
        assert!(answer.starts_with(expect), "{origin}: {answer}");
    }
    let resp = get(
        format!("http://{}/v1/sse?topic=public.x", gw.public_addr),
        &[("origin", "https://good.example")],
    )
    .await;
    assert_eq!(
        resp.headers()["access-control-allow-origin"],
        "https://good.example"
    );
    let resp = get(
        format!("http://{}/v1/poll?topic=public.x&timeout=0", gw.public_addr),
        &[("origin", "https://evil.example")],
    )
    .await;
    assert_eq!(resp.status(), 403);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn public_publishing_needs_an_api_key_or_a_publishing_token() {
    let gw = spawn_gateway(auth_config()).await;
    let post = |key: Option<&'static str>, bearer: Option<String>, topic: &'static str| {
        let mut req = http()
            .post(format!("http://{}/v1/publish", gw.public_addr))
            .json(&json!({"topic": topic, "data": 1}));
        if let Some(k) = key {
            req = req.header("x-api-key", k);
        }
        if let Some(t) = bearer {
            req = req.bearer_auth(t);
        }
        async move { req.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(post(Some("key-1"), None, "anything").await, 200);
    assert_eq!(post(Some("wrong"), None, "anything").await, 401);
    assert_eq!(post(None, None, "anything").await, 401);
    let t = token(json!({"sub": "svc", "exp": now() + 600, "publish": ["alerts.*"]}));
    assert_eq!(post(None, Some(t.clone()), "alerts.fire").await, 200);
    assert_eq!(post(None, Some(t), "other").await, 403);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn rs256_es256_and_jwks_keys_verify_tokens() {
    use jsonwebtoken::Algorithm;
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let claims = json!({"sub": "eve", "exp": now() + 600, "topics": ["private"]});
    let rsa = EncodingKey::from_rsa_pem(&std::fs::read(fixtures.join("rsa-private.pem")).unwrap())
        .unwrap();
    let ec =
        EncodingKey::from_ec_pem(&std::fs::read(fixtures.join("ec-private.pem")).unwrap()).unwrap();
    let rs_token = jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &rsa).unwrap();
    let es_token = jsonwebtoken::encode(&Header::new(Algorithm::ES256), &claims, &ec).unwrap();
    let mut kid_header = Header::new(Algorithm::RS256);
    kid_header.kid = Some("test-rsa".into());
    let kid_token = jsonwebtoken::encode(&kid_header, &claims, &rsa).unwrap();

    // PEM public keys.
    let mut config = test_config();
    config.auth.rs256_public_keys = vec![fixtures.join("rsa-public.pem")];
    config.auth.es256_public_keys = vec![fixtures.join("ec-public.pem")];
    let gw = spawn_gateway(config).await;
    assert_eq!(
        sse_status(&gw, "topic=private", Some(&rs_token)).await.0,
        200
    );
    assert_eq!(
        sse_status(&gw, "topic=private", Some(&es_token)).await.0,
        200
    );
    assert_eq!(sse_status(&gw, "topic=private", None).await.0, 403);
    // An HS256 token signed with the RSA public key as secret (key confusion) is refused.
    let confused = jsonwebtoken::encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(&std::fs::read(fixtures.join("rsa-public.pem")).unwrap()),
    )
    .unwrap();
    assert_eq!(
        sse_status(&gw, "topic=private", Some(&confused)).await.0,
        401
    );
    gw.stop().await.unwrap();

    // A JWKS file, keys found by kid.
    let mut config = test_config();
    config.auth.jwks_file = Some(fixtures.join("jwks.json"));
    let gw = spawn_gateway(config).await;
    assert_eq!(
        sse_status(&gw, "topic=private", Some(&kid_token)).await.0,
        200
    );
    assert_eq!(
        sse_status(&gw, "topic=private", Some(&es_token)).await.0,
        401
    );
    gw.stop().await.unwrap();
}
