//! Credentials on the admin listener: a listener others can reach is never left open, probes
//! and (by default) metrics stay open, everything else wants a key.

use std::net::SocketAddr;

use herald_gateway::{Config, Gateway};
use serde_json::{Value, json};

use crate::common::*;

const KEY: &str = "admin-test-key-0123456789";

/// An admin listener on every interface (as in a container), with `KEY`.
fn exposed_config() -> Config {
    let mut config = test_config();
    config.admin_listen = "0.0.0.0:0".parse().unwrap();
    config.admin.api_keys = vec![KEY.into()];
    config
}

/// The admin listener as a local client reaches it.
fn admin(gw: &Gateway) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], gw.admin_addr.port()))
}

async fn publish_with(gw: &Gateway, header: Option<(&str, String)>) -> reqwest::Response {
    let mut req = http()
        .post(format!("http://{}/v1/publish", admin(gw)))
        .json(&json!({ "topic": "admin-auth", "data": { "n": 1 } }));
    if let Some((name, value)) = header {
        req = req.header(name, value);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn an_exposed_admin_listener_without_keys_does_not_start() {
    let mut config = exposed_config();
    config.admin.api_keys.clear();
    let err = Gateway::start(config.clone()).await.unwrap_err();
    let reason = format!("{err:#}");
    assert!(
        reason.contains("not on a loopback address") && reason.contains("HERALD_ADMIN_API_KEYS"),
        "{reason}"
    );

    // Told it is insecure, it starts and serves the admin API without credentials.
    config.admin.insecure = true;
    let gw = spawn_gateway(config).await;
    assert_eq!(publish_with(&gw, None).await.status(), 200);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn admin_routes_need_a_key_but_probes_and_metrics_do_not() {
    let gw = spawn_gateway(exposed_config()).await;
    let base = format!("http://{}", admin(&gw));

    let refused = publish_with(&gw, None).await;
    assert_eq!(refused.status(), 401);
    assert!(
        refused.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "unauthorized", "{body}");
    assert!(
        body["reason"].as_str().unwrap().contains("x-api-key"),
        "{body}"
    );

    let wrong = publish_with(&gw, Some(("x-api-key", format!("{KEY}x")))).await;
    assert_eq!(wrong.status(), 401);
    let body: Value = wrong.json().await.unwrap();
    assert!(
        body["reason"].as_str().unwrap().contains("not valid"),
        "{body}"
    );
    let wrong_scheme = publish_with(&gw, Some(("authorization", format!("Basic {KEY}")))).await;
    assert_eq!(wrong_scheme.status(), 401);

    // Read-only routes and unknown ones are closed too (no route discovery without a key).
    for path in [
        "/v1/topics",
        "/v1/topics/admin-auth",
        "/v1/presence/admin-auth",
        "/nope",
    ] {
        let status = get(format!("{base}{path}"), &[]).await.status();
        assert_eq!(status, 401, "{path}");
    }

    // Acting on connections needs the key too: nobody else may log users out or send to them.
    for path in [
        "/v1/users/ann/disconnect",
        "/v1/connections/1/disconnect",
        "/v1/users/ann/subscribe",
        "/v1/users/ann/unsubscribe",
        "/v1/users/ann/send",
    ] {
        let body = json!({"topics": ["t"], "data": 1});
        let status = post_json(format!("{base}{path}"), &[], &body)
            .await
            .status();
        assert_eq!(status, 401, "{path}");
    }

    // Probes and the metrics scrape need nothing.
    for path in ["/healthz", "/readyz", "/metrics"] {
        let status = get(format!("{base}{path}"), &[]).await.status();
        assert_eq!(status, 200, "{path}");
    }

    // With the key, as x-api-key or a bearer token, a publish reaches a subscriber.
    let mut sse = SseClient::connect(&gw, "topic=admin-auth", None).await;
    sse.next_block().await.unwrap();
    let ok = publish_with(&gw, Some(("x-api-key", KEY.into()))).await;
    assert_eq!(ok.status(), 200, "{}", ok.text().await.unwrap());
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some(r#"{"n":1}"#)
    );
    let ok = publish_with(&gw, Some(("authorization", format!("Bearer {KEY}")))).await;
    assert_eq!(ok.status(), 200);
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some(r#"{"n":1}"#)
    );
    let topics: Value = get(
        format!("{base}/v1/topics/admin-auth"),
        &[("x-api-key", KEY)],
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(topics["subscribers"], 1, "{topics}");

    let metrics = get(format!("{base}/metrics"), &[])
        .await
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"herald_client_errors_total{transport="admin",reason="unauthorized"}"#),
        "{metrics}"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn metrics_can_be_put_behind_the_key_too() {
    let mut config = exposed_config();
    config.admin.public_metrics = false;
    let gw = spawn_gateway(config).await;
    let url = format!("http://{}/metrics", admin(&gw));
    assert_eq!(get(&url, &[]).await.status(), 401);
    let ok = http().get(&url).bearer_auth(KEY).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    // The probes stay open whatever the metrics do.
    let ready = get(format!("http://{}/readyz", admin(&gw)), &[]).await;
    assert_eq!(ready.status(), 200);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn keys_on_a_loopback_listener_are_enforced_as_well() {
    let mut config = test_config();
    config.admin.api_keys = vec![KEY.into()];
    let gw = spawn_gateway(config).await;
    assert_eq!(publish_with(&gw, None).await.status(), 401);
    assert_eq!(
        publish_with(&gw, Some(("x-api-key", KEY.into())))
            .await
            .status(),
        200
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn metrics_carry_process_figures_build_info_and_node_state() {
    let gw = spawn_gateway(test_config()).await;
    // Spend some CPU time (the kernel counts it in 10 ms ticks) so the counter moves.
    let busy = std::time::Instant::now();
    let mut spin = 0u64;
    while busy.elapsed() < std::time::Duration::from_millis(100) {
        spin = std::hint::black_box(spin.wrapping_add(1));
    }
    let text = metrics_text(&gw).await;
    for name in [
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with(name) && !l.starts_with('#'))
            .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{text}"));
        let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(value > 0.0, "{line}");
    }
    for line in [
        "herald_ready 1",
        "herald_draining 0",
        "herald_connections_max 100000",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        text.contains(&format!("herald_build_info{{version=\"{version}\"}} 1")),
        "{text}"
    );
    gw.stop().await.unwrap();
}
