//! History on demand, `GET /v1/topics/{topic}/history`, on both listeners.

use serde_json::{Value, json};

use crate::common::*;

const SECRET: &str = "0123456789abcdef0123456789abcdef-history";

async fn history(addr: std::net::SocketAddr, topic: &str, query: &str) -> (u16, Value) {
    let resp = get(
        format!("http://{addr}/v1/topics/{topic}/history?{query}"),
        &[],
    )
    .await;
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

fn data(page: &Value) -> Vec<Value> {
    page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["data"].clone())
        .collect()
}

#[tokio::test]
async fn the_admin_listener_pages_through_a_topic_s_history() {
    let gw = spawn_gateway(test_config()).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(publish(&gw, "hist", json!(i)).await);
    }
    let admin = gw.admin_addr;

    let (status, newest) = history(admin, "hist", "limit=3").await;
    assert_eq!(status, 200, "{newest}");
    assert_eq!(data(&newest), [json!(2), json!(3), json!(4)]);
    assert_eq!(newest["messages"][2]["id"], json!(ids[4]));
    assert_eq!(newest["messages"][2]["type"], "message");
    assert_eq!(
        (newest["more"].clone(), newest["lost"].clone()),
        (json!(false), Value::Null)
    );
    assert_eq!(newest["next"], json!(ids[4]));

    // Paging after a message id: two at a time until `more` is false.
    let mut since = ids[0].clone();
    let mut got = Vec::new();
    loop {
        let (_, page) = history(admin, "hist", &format!("since={since}&limit=2")).await;
        got.extend(data(&page));
        since = page["next"].as_str().unwrap().to_string();
        if page["more"] == json!(false) {
            break;
        }
    }
    assert_eq!(got, [json!(1), json!(2), json!(3), json!(4)]);
    assert_eq!(since, ids[4]);

    // An id from another life of the topic: told so, and given what is held from its start.
    let (_, other) = history(admin, "hist", "since=1-1&limit=2").await;
    assert_eq!(other["lost"], "epoch");
    assert_eq!(data(&other), [json!(0), json!(1)]);
    assert_eq!(other["more"], true);

    for (query, code) in [
        ("since=nope", "bad_cursor"),
        ("limit=0", "bad_limit"),
        ("limit=1001", "bad_limit"),
    ] {
        let (status, body) = history(admin, "hist", query).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some(code)),
            "{query}: {body}"
        );
    }
    let (status, body) = history(admin, "nothing-here", "").await;
    assert_eq!((status, body["code"].as_str()), (404, Some("no_topic")));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn the_public_listener_serves_history_to_those_who_may_subscribe() {
    let mut config = test_config();
    config.auth.hs256_secret = Some(SECRET.into());
    config.auth.public_prefixes = vec!["public.".into()];
    let gw = spawn_gateway(config).await;
    publish(&gw, "room.1", json!("hello")).await;
    publish(&gw, "public.news", json!("open")).await;
    let allowed = hs256_token(
        SECRET,
        &json!({"exp": unix_now() + 60, "topics": ["room.*"]}),
    );
    let public = gw.public_addr;

    let (status, page) = history(public, "room.1", &format!("token={allowed}")).await;
    assert_eq!((status, data(&page)), (200, vec![json!("hello")]), "{page}");
    let bearer = http()
        .get(format!("http://{public}/v1/topics/room.1/history"))
        .bearer_auth(&allowed)
        .send()
        .await
        .unwrap();
    assert_eq!(bearer.status(), 200);
    let (status, page) = history(public, "public.news", "").await;
    assert_eq!((status, data(&page)), (200, vec![json!("open")]));

    let (status, body) = history(public, "room.1", "").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("forbidden")),
        "no token: {body}"
    );
    let (status, body) = history(public, "room.1", "token=not-a-token").await;
    assert_eq!(status, 401, "{body}");
    let other = hs256_token(
        SECRET,
        &json!({"exp": unix_now() + 60, "topics": ["elsewhere"]}),
    );
    let (status, body) = history(public, "room.1", &format!("token={other}")).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("forbidden")),
        "{body}"
    );
    gw.stop().await.unwrap();
}

/// "Start from the last N messages" on subscribe, the same on every transport: SSE and poll
/// take `?last=N`, a WebSocket `subscribe` takes `"last": N`; a cursor wins over it; fewer
/// are given when history holds fewer.
#[tokio::test]
async fn every_transport_can_start_with_the_last_n_messages() {
    let gw = spawn_gateway(test_config()).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(publish(&gw, "lastn", json!(i)).await);
    }

    let mut sse = SseClient::connect(&gw, "topic=lastn&last=2", None).await;
    for (i, id) in ids.iter().enumerate().skip(3) {
        let event = sse.next_event().await.unwrap();
        assert_eq!(
            (event.data.as_deref(), event.id.as_deref()),
            (
                Some(i.to_string().as_str()),
                Some(format!("lastn={id}").as_str())
            )
        );
    }

    let poll = get_json(format!(
        "http://{}/v1/poll?topic=lastn&last=3&timeout=0",
        gw.public_addr
    ))
    .await;
    assert_eq!(data(&poll), [json!(2), json!(3), json!(4)], "{poll}");

    let mut ws = ws_connect(&gw).await;
    ws_send(
        &mut ws,
        json!({"type": "subscribe", "topics": ["lastn", "empty-lastn"], "last": 10}),
    )
    .await;
    let reply = ws_next(&mut ws).await;
    assert_eq!(reply["type"], "subscribed", "{reply}");
    for i in 0..5 {
        assert_eq!(
            ws_next(&mut ws).await["data"],
            json!(i),
            "all 5 held, no more"
        );
    }

    // A cursor wins over `last`; live messages follow without a gap.
    let query = format!("topic=lastn&last=4&lastEventId=lastn%3D{}", ids[3]);
    let mut resumed = SseClient::connect(&gw, &query, None).await;
    assert_eq!(
        resumed.next_event().await.unwrap().data.as_deref(),
        Some("4")
    );
    publish(&gw, "lastn", json!(5)).await;
    assert_eq!(
        resumed.next_event().await.unwrap().data.as_deref(),
        Some("5")
    );
    assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("5"));
    assert_eq!(ws_next(&mut ws).await["data"], json!(5));

    let resp = get(
        format!("http://{}/v1/sse?topic=lastn&last=-1", gw.public_addr),
        &[],
    )
    .await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "bad_last");
    ws_send(
        &mut ws,
        json!({"type": "subscribe", "topics": ["other"], "last": "two"}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await["code"], "bad_frame");
    gw.stop().await.unwrap();
}

/// A `limit` that is not a whole number in range (`abc`, `-1`, `1e3`, `2^64`) is the
/// documented JSON error `bad_limit`, not the framework's `text/plain` rejection: history on
/// both listeners, the topic listing, presence members; a query string that does not read
/// at all (a field twice) is JSON `bad_query`.
#[tokio::test]
async fn bad_query_strings_get_the_documented_json_errors_on_both_listeners() {
    let mut config = test_config();
    config.topics.presence = true;
    let gw = spawn_gateway(config).await;
    publish(&gw, "limits", json!(1)).await;
    let (public, admin) = (gw.public_addr, gw.admin_addr);
    let page_url = |addr: std::net::SocketAddr| format!("http://{addr}/v1/topics/limits/history");
    let bases = [
        (page_url(public), ""),
        (page_url(admin), ""),
        (format!("http://{admin}/v1/topics"), ""),
        (
            format!("http://{admin}/v1/presence/limits"),
            "members=true&",
        ),
    ];
    for (base, prefix) in &bases {
        for limit in ["abc", "-1", "1e3", "18446744073709551616", "", "2.5"] {
            let url = format!("{base}?{prefix}limit={limit}");
            let resp = get(url.as_str(), &[]).await;
            let status = resp.status().as_u16();
            let kind = resp.headers()["content-type"].to_str().unwrap().to_string();
            let body: Value = resp.json().await.unwrap();
            assert_eq!(
                (status, kind.as_str(), body["code"].as_str()),
                (400, "application/json", Some("bad_limit")),
                "{url}: {body}"
            );
            assert!(body["reason"].as_str().unwrap().contains("whole number"));
        }
        let url = format!("{base}?{prefix}limit=1&limit=2");
        let resp = get(url.as_str(), &[]).await;
        assert_eq!(resp.status(), 400, "{url}");
        assert_eq!(resp.headers()["content-type"], "application/json");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "bad_query", "{url}: {body}");
    }
    // Good limits are served as before.
    let (status, page) = history(public, "limits", "limit=1000").await;
    assert_eq!((status, data(&page)), (200, vec![json!(1)]));
    let topics = get_json(format!("http://{admin}/v1/topics?limit=20000")).await;
    assert_eq!(topics["count"], 1, "{topics}");
    gw.stop().await.unwrap();
}
