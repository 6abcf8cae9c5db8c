//! A backend that is down, slow, wrong or overloaded, and one over https.

use super::backend::*;

#[tokio::test]
async fn a_backend_that_is_down_denies_or_falls_back_to_the_token_rules() {
    let mut config = token_config();
    config.hooks.connect_url = dead_url().await;
    config.hooks.subscribe_url = dead_url().await;
    let gw = spawn_gateway(config.clone()).await;
    let (status, body) = sse_get(&gw, "topic=public.news", &[]).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("hook_unavailable"))
    );
    let mut ws = None;
    if let Err(tokio_tungstenite::tungstenite::Error::Http(r)) =
        tokio_tungstenite::connect_async(format!("ws://{}/v1/ws", gw.public_addr)).await
    {
        ws = Some(r.status().as_u16());
    }
    assert_eq!(ws, Some(503));
    assert!(
        metric(
            &gw,
            r#"herald_hook_requests_total{hook="connect",result="unavailable"}"#
        )
        .await
            >= 2.0
    );
    gw.stop().await.unwrap();

    config.hooks.on_unavailable = OnUnavailable::Allow;
    let gw = spawn_gateway(config).await;
    // The token rules decide: a public topic is open, a private one needs a token.
    assert_eq!(sse_get(&gw, "topic=public.news", &[]).await.0, 200);
    let (status, body) = sse_get(&gw, "topic=private", &[]).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("forbidden")));
    let t = token(json!({"sub": "a", "exp": unix_now() + 600, "topics": ["private"]}));
    assert_eq!(
        sse_get(
            &gw,
            "topic=private",
            &[("authorization", &format!("Bearer {t}"))]
        )
        .await
        .0,
        200
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn an_https_hook_is_trusted_through_hooks_ca_file_and_refused_without_it() {
    let backend = Backend::start_tls("127.0.0.1", |_, _| deny("checked over TLS")).await;
    let mut config = hooked(test_config(), &backend, &["connect"]);
    assert!(
        config
            .hooks
            .connect_url
            .as_deref()
            .unwrap()
            .starts_with("https://127.0.0.1:")
    );
    config.hooks.ca_file = Some(crate::tls::fixture("ca.pem"));
    let gw = spawn_gateway(config.clone()).await;
    for path in [Path::Direct, Path::AbsoluteForm, Path::Poll] {
        let (status, body) = subscribe_on(&gw, path, "topic=news", "session=s1").await;
        assert_eq!(status, 403, "{path:?}: {body}");
        assert_eq!(body["reason"], "checked over TLS", "{path:?}");
    }
    let calls = backend.calls("connect");
    assert_eq!(calls.len(), 3, "every decision was asked over TLS");
    assert_eq!(calls[0].1["cookie"], "session=s1");
    gw.stop().await.unwrap();

    // The backend's certificate does not check out: the handshake fails, the hook is
    // unavailable, and the request never reaches the backend. Trusting the system's store
    // alone (which does not hold the test CA); trusting another certificate (a leaf, not the
    // backend's CA); and the right CA with a backend whose address the certificate does not
    // name (127.0.0.2).
    let elsewhere = Backend::start_tls("127.0.0.2", |_, _| allow()).await;
    let mut misnamed = hooked(test_config(), &elsewhere, &["connect"]);
    misnamed.hooks.ca_file = Some(crate::tls::fixture("ca.pem"));
    let mut system_only = config.clone();
    system_only.hooks.ca_file = None;
    let mut other_ca = config.clone();
    other_ca.hooks.ca_file = Some(crate::tls::fixture("server-b.pem"));
    for (case, config) in [
        ("system store", system_only),
        ("another certificate", other_ca),
        ("misnamed", misnamed),
    ] {
        if case == "system store"
            && let Err(e) = config.validate()
        {
            // A machine with no CA certificates at all refuses to start instead.
            let e = e.to_string();
            assert!(
                e.contains("install ca-certificates, or set hooks.ca_file"),
                "{e}"
            );
            continue;
        }
        let gw = spawn_gateway(config).await;
        let (status, body) = sse_get(&gw, "topic=news", &[]).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (503, Some("hook_unavailable")),
            "{case}: {body}"
        );
        assert_eq!(
            metric(
                &gw,
                r#"herald_hook_requests_total{hook="connect",result="unavailable"}"#
            )
            .await,
            1.0,
            "{case}"
        );
        gw.stop().await.unwrap();
    }
    assert_eq!(
        backend.calls("connect").len() + elsewhere.calls("connect").len(),
        3,
        "nothing sent past a failed handshake"
    );

    // A CA file that cannot be read stops the start, naming the key.
    config.hooks.ca_file = Some(crate::tls::fixture("missing.pem"));
    let e = config.validate().unwrap_err().to_string();
    assert!(
        e.starts_with("hooks.ca_file: cannot read certificates from"),
        "{e}"
    );
}

#[tokio::test]
async fn bad_answers_count_as_unavailable() {
    for reply in ["500", "not json", "big", "maybe"] {
        let backend = Backend::start(move |_, _| match reply {
            "500" => Reply::Status(500),
            "not json" => Reply::Raw("allow".into()),
            "big" => Reply::Json(json!({"result": "allow", "info": "x".repeat(70 * 1024)})),
            _ => Reply::Json(json!({"result": "maybe"})),
        })
        .await;
        let gw = spawn_gateway(hooked(test_config(), &backend, &["connect"])).await;
        let (status, body) = sse_get(&gw, "topic=news", &[]).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (503, Some("hook_unavailable")),
            "{reply}"
        );
        gw.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_slow_backend_times_out_into_the_unavailable_policy() {
    let backend =
        Backend::start(|_, _| Reply::Slow(Duration::from_secs(3), json!({"result": "allow"})))
            .await;
    let mut config = hooked(test_config(), &backend, &["connect"]);
    config.hooks.timeout = Duration::from_millis(200);
    let gw = spawn_gateway(config).await;
    let started = Instant::now();
    let (status, body) = sse_get(&gw, "topic=news", &[]).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("hook_unavailable"))
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        metric(
            &gw,
            r#"herald_hook_requests_total{hook="connect",result="timeout"}"#
        )
        .await,
        1.0
    );
    assert!(
        metrics_text(&gw)
            .await
            .contains("herald_hook_duration_seconds_bucket")
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn requests_past_max_in_flight_are_not_sent_and_count_as_unavailable() {
    let backend =
        Backend::start(|_, _| Reply::Slow(Duration::from_secs(1), json!({"result": "allow"})))
            .await;
    let mut config = hooked(test_config(), &backend, &["connect"]);
    config.hooks.max_in_flight = 1;
    config.hooks.timeout = Duration::from_secs(5);
    let gw = Arc::new(spawn_gateway(config).await);
    let first = {
        let gw = gw.clone();
        tokio::spawn(async move { sse_get(&gw, "topic=news", &[]).await.0 })
    };
    eventually(WAIT, || async { backend.calls("connect").len() == 1 }).await;
    assert_eq!(metric(&gw, "herald_hooks_in_flight").await, 1.0);
    let (status, body) = sse_get(&gw, "topic=news", &[]).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("hook_unavailable"))
    );
    assert_eq!(backend.calls("connect").len(), 1, "the second was not sent");
    assert_eq!(
        metric(
            &gw,
            r#"herald_hook_requests_total{hook="connect",result="overloaded"}"#
        )
        .await,
        1.0
    );
    assert_eq!(first.await.unwrap(), 200, "the first is answered");
    assert_eq!(
        metric(
            &gw,
            r#"herald_hook_requests_total{hook="connect",result="allow"}"#
        )
        .await,
        1.0
    );
}
