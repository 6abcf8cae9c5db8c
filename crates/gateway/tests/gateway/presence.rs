//! Presence members: `GET /v1/presence/{topic}?members=true` on a node alone and across a
//! cluster bridged by a real Redis.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::common::*;

/// The members page of `topic` at `gw`'s admin listener with `query` (e.g. `limit=10`):
/// status and body.
async fn members_page(gw: &herald_gateway::Gateway, topic: &str, query: &str) -> (u16, Value) {
    let url = format!(
        "http://{}/v1/presence/{topic}?members=true&{query}",
        gw.admin_addr
    );
    let resp = get(url, &[]).await;
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

/// Every member of `topic`, following `next` with pages of `limit`; with the pages' sizes.
async fn all_members(
    gw: &herald_gateway::Gateway,
    topic: &str,
    limit: usize,
) -> (Vec<Value>, Vec<usize>) {
    let (mut members, mut sizes) = (Vec::new(), Vec::new());
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            Some(c) => format!("limit={limit}&cursor={c}"),
            None => format!("limit={limit}"),
        };
        let (status, page) = members_page(gw, topic, &query).await;
        assert_eq!(status, 200, "{page}");
        let got = page["members"].as_array().unwrap();
        assert!(got.len() <= limit, "a page holds at most its limit");
        sizes.push(got.len());
        members.extend(got.iter().cloned());
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return (members, sizes),
        }
        assert!(sizes.len() < 1000, "the pages never end");
    }
}

/// The members of `topic`, by user (anonymous ones under "-").
fn by_user(members: &[Value]) -> Vec<(String, Value)> {
    let mut list: Vec<(String, Value)> = members
        .iter()
        .map(|m| (m["user"].as_str().unwrap_or("-").to_string(), m.clone()))
        .collect();
    list.sort_by(|a, b| a.0.cmp(&b.0));
    list
}

/// A token for `sub` allowed every topic, with `info` when given.
fn user_token(sub: &str, info: Option<Value>) -> String {
    let mut claims = json!({"sub": sub, "exp": unix_now() + 600, "topics": ["*"]});
    if let Some(info) = info {
        claims["info"] = info;
    }
    token(claims)
}

/// A long-poll held on `topic` at `gw` (with `token` when given), in the background.
fn held_poll(
    gw: &herald_gateway::Gateway,
    topic: &str,
    token: Option<&str>,
) -> tokio::task::JoinHandle<()> {
    let mut url = format!("http://{}/v1/poll?topic={topic}&timeout=60", gw.public_addr);
    if let Some(t) = token {
        url.push_str(&format!("&token={t}"));
    }
    tokio::spawn(async move {
        let _ = get(url, &[]).await;
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_of_a_lone_node_are_listed_on_every_transport_with_user_and_info() {
    let mut config = token_config();
    config.cluster.node_id = "solo".into();
    let gw = spawn_gateway(with_members(config)).await;
    let topic = "public.room";
    let ann = user_token("ann", Some(json!({"device": "web", "v": 2})));
    let bob = user_token("bob", Some(json!({"device": "phone"})));
    let cy = user_token("cy", None);
    let started = unix_now() * 1000;

    let mut sse_ann = SseClient::connect(&gw, &format!("topic={topic}&token={ann}"), None).await;
    sse_ann.next_block().await.unwrap();
    let mut sse_anon = SseClient::connect(&gw, &format!("topic={topic}"), None).await;
    sse_anon.next_block().await.unwrap();
    let (mut ws_bob, _) =
        tokio_tungstenite::connect_async(format!("ws://{}/v1/ws?token={bob}", gw.public_addr))
            .await
            .unwrap();
    ws_subscribe(&mut ws_bob, &[topic, "public.other"]).await;
    let mut ws_anon = ws_connect(&gw).await;
    ws_subscribe(&mut ws_anon, &[topic]).await;
    let poll = held_poll(&gw, topic, Some(&cy));

    eventually(WAIT, || async {
        let (status, page) = members_page(&gw, topic, "").await;
        assert_eq!(status, 200, "{page}");
        page["members"].as_array().unwrap().len() == 5
    })
    .await;
    let members = members_page(&gw, topic, "").await.1["members"]
        .as_array()
        .unwrap()
        .clone();
    let listed = by_user(&members);
    let users: Vec<&str> = listed.iter().map(|(u, _)| u.as_str()).collect();
    assert_eq!(users, ["-", "-", "ann", "bob", "cy"]);
    let (ann_m, bob_m, cy_m) = (&listed[2].1, &listed[3].1, &listed[4].1);
    assert_eq!(ann_m["transport"], "sse");
    assert_eq!(ann_m["info"], json!({"device": "web", "v": 2}));
    assert_eq!(bob_m["transport"], "ws");
    assert_eq!(bob_m["info"], json!({"device": "phone"}));
    assert_eq!(cy_m["transport"], "poll");
    assert!(cy_m.get("info").is_none(), "no info claim, no info: {cy_m}");
    let mut anon: Vec<&str> = listed[..2]
        .iter()
        .map(|(_, m)| m["transport"].as_str().unwrap())
        .collect();
    anon.sort();
    assert_eq!(anon, ["sse", "ws"]);
    for (_, m) in &listed[..2] {
        assert_eq!(m["user"], Value::Null);
    }
    let conns: HashSet<&str> = members
        .iter()
        .map(|m| m["conn"].as_str().unwrap())
        .collect();
    assert_eq!(conns.len(), 5, "each member its own connection id");
    for m in &members {
        assert_eq!(m["node"], "solo");
        let since = m["since"].as_u64().unwrap();
        assert!(since >= started && since <= unix_now() * 1000 + 1000, "{m}");
        m["conn"].as_str().unwrap().parse::<u64>().unwrap();
    }
    // Without members=true the answer is the count, as before.
    let counts = get_json(format!("http://{}/v1/presence/{topic}", gw.admin_addr)).await;
    assert_eq!(
        counts,
        json!({"topic": topic, "subscribers": 5, "nodes": {}})
    );
    let (_, other) = members_page(&gw, "public.other", "").await;
    assert_eq!(other["members"].as_array().unwrap().len(), 1);
    assert_eq!(other["members"][0]["conn"], bob_m["conn"]);
    assert_eq!(other["next"], Value::Null);

    // An unsubscribed member leaves its topic, and only that one.
    ws_send(
        &mut ws_bob,
        json!({"type": "unsubscribe", "topics": ["public.other"]}),
    )
    .await;
    assert_eq!(ws_next(&mut ws_bob).await["type"], "unsubscribed");
    let (_, other) = members_page(&gw, "public.other", "").await;
    assert_eq!(other["members"], json!([]));

    // A member's conn is the id the control API takes.
    let conn = bob_m["conn"].as_str().unwrap();
    let resp = post_json(
        format!("http://{}/v1/connections/{conn}/disconnect", gw.admin_addr),
        &[],
        &json!({"reason": "bye"}),
    )
    .await;
    let reply: Value = resp.json().await.unwrap();
    assert_eq!(reply["disconnected_here"], 1, "{reply}");
    ws_close_code(&mut ws_bob).await;
    drop(sse_ann);
    eventually(WAIT, || async {
        let (_, page) = members_page(&gw, topic, "").await;
        let left = by_user(page["members"].as_array().unwrap());
        left.iter().map(|(u, _)| u.as_str()).collect::<Vec<_>>() == ["-", "-", "cy"]
    })
    .await;
    poll.abort();
    drop((sse_anon, ws_anon));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_websocket_that_sends_a_token_is_listed_under_its_new_user_and_info() {
    let gw = spawn_gateway(with_members(token_config())).await;
    let mut ws = ws_connect(&gw).await;
    ws_subscribe(&mut ws, &["public.lobby"]).await;
    let (_, page) = members_page(&gw, "public.lobby", "").await;
    assert_eq!(page["members"][0]["user"], Value::Null);
    let since = page["members"][0]["since"].clone();
    let dee = user_token("dee", Some(json!({"plan": "pro"})));
    ws_send(&mut ws, json!({"type": "auth", "token": dee})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "authenticated");
    let (_, page) = members_page(&gw, "public.lobby", "").await;
    let member = &page["members"][0];
    assert_eq!(
        (&member["user"], &member["info"], &member["since"]),
        (&json!("dee"), &json!({"plan": "pro"}), &since),
        "the same subscription, now for dee: {page}"
    );
    drop(ws);
    gw.stop().await.unwrap();
}

/// A connect hook at the returned URL that allows as user `u42` with `info`: a small one,
/// or one over 1 KiB when the client asks for topic `big`.
async fn connect_hook() -> String {
    async fn answer(axum::Json(request): axum::Json<Value>) -> axum::Json<Value> {
        let big = request["topics"]
            .as_array()
            .unwrap()
            .contains(&json!("big"));
        let info = if big {
            json!({ "blob": "x".repeat(2000) })
        } else {
            json!({ "name": "Ann" })
        };
        axum::Json(json!({"result": "allow", "user": "u42", "info": info}))
    }
    let app = axum::Router::new().route("/connect", axum::routing::post(answer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/connect", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test]
async fn a_connect_hook_s_user_and_info_are_listed_and_a_large_info_is_left_out() {
    let mut config = test_config();
    config.hooks.connect_url = Some(connect_hook().await);
    let gw = spawn_gateway(with_members(config)).await;
    let mut small = SseClient::connect(&gw, "topic=small", None).await;
    small.next_block().await.unwrap();
    let mut big = SseClient::connect(&gw, "topic=big", None).await;
    big.next_block().await.unwrap();
    let (_, page) = members_page(&gw, "small", "").await;
    let member = &page["members"][0];
    assert_eq!(
        (&member["user"], &member["info"]),
        (&json!("u42"), &json!({"name": "Ann"})),
        "{page}"
    );
    let (_, page) = members_page(&gw, "big", "").await;
    let member = &page["members"][0];
    assert_eq!(member["user"], "u42");
    assert!(member.get("info").is_none(), "over 1 KiB: {member}");
    drop((small, big));
    gw.stop().await.unwrap();
}

/// An SSE subscriber of `topic` spoken by hand (cheaper than a client each), open once the
/// response head arrived.
async fn raw_sse(gw: &herald_gateway::Gateway, topic: &str) -> tokio::net::TcpStream {
    let mut tcp = tokio::net::TcpStream::connect(gw.public_addr)
        .await
        .unwrap();
    let request = format!("GET /v1/sse?topic={topic} HTTP/1.1\r\nhost: herald\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(WAIT, tcp.read(&mut buf))
            .await
            .expect("an SSE response head")
            .unwrap();
        assert!(n > 0, "the stream closed");
        head.extend_from_slice(&buf[..n]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&head)
    );
    tcp
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_are_paged_each_exactly_once() {
    let gw = spawn_gateway(with_members(test_config())).await;
    let mut held = Vec::new();
    for _ in 0..250 {
        held.push(raw_sse(&gw, "crowd").await);
    }
    let (members, sizes) = all_members(&gw, "crowd", 100).await;
    assert_eq!(sizes, [100, 100, 50]);
    let conns: HashSet<&str> = members
        .iter()
        .map(|m| m["conn"].as_str().unwrap())
        .collect();
    assert_eq!(conns.len(), 250, "every member exactly once");
    // The default page is 100; one page of 1000 holds them all.
    let (_, page) = members_page(&gw, "crowd", "").await;
    assert_eq!(page["members"].as_array().unwrap().len(), 100);
    assert!(page["next"].is_string());
    let (members, sizes) = all_members(&gw, "crowd", 1000).await;
    assert_eq!((members.len(), sizes), (250, vec![250]));
    // A topic without members: an empty page, the last.
    let (status, page) = members_page(&gw, "nobody", "").await;
    assert_eq!(
        (status, page),
        (200, json!({"topic": "nobody", "members": [], "next": null}))
    );
    drop(held);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn bad_member_queries_get_clear_errors() {
    let gw = spawn_gateway(with_members(test_config())).await;
    let base = format!("http://{}/v1/presence/t", gw.admin_addr);
    for (query, code) in [
        ("members=true&limit=0", "bad_limit"),
        ("members=true&limit=1001", "bad_limit"),
        ("members=true&limit=-1", "bad_limit"),
        ("members=true&limit=ten", "bad_limit"),
        ("members=true&cursor=nonsense", "bad_cursor"),
        ("members=true&cursor=n.0.0.6161", "bad_cursor"),
        ("members=yes", "bad_members"),
        ("limit=10", "bad_query"),
    ] {
        let resp = get(format!("{base}?{query}"), &[]).await;
        assert_eq!(resp.status(), 400, "{query}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["code"], code, "{query}: {body}");
        assert!(!body["reason"].as_str().unwrap().is_empty());
    }
    let resp = get(format!("{base}?members=true&limit=1000"), &[]).await;
    assert_eq!(resp.status(), 200);
    let resp = get(format!("{base}?members=false"), &[]).await;
    assert_eq!(resp.status(), 200);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_token_whose_info_is_too_big_or_not_an_object_is_refused() {
    let gw = spawn_gateway(with_members(token_config())).await;
    let big = user_token("ann", Some(json!({"blob": "x".repeat(2000)})));
    let text = user_token("ann", Some(json!("just text")));
    for (token, words) in [(big, "at most 1024"), (text, "JSON object")] {
        let resp = SseClient::request(&gw, &format!("topic=public.t&token={token}"), None).await;
        assert_eq!(resp.status(), 401);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "invalid_token");
        let reason = body["reason"].as_str().unwrap();
        assert!(reason.contains(words), "{reason}");
    }
    gw.stop().await.unwrap();
}

fn prefix(test: &str) -> String {
    format!("test-{test}-{:x}", rand::random::<u32>())
}

/// A node of the cluster `prefix` that checks tokens ([`SECRET`]), lets anyone read
/// `public.` topics, and flushes presence every 200 ms.
fn member_node(prefix: &str, id: &str) -> herald_gateway::Config {
    let mut c = cluster_config(prefix, id);
    c.cluster.presence_interval = Duration::from_millis(200);
    c.auth.hs256_secret = Some(SECRET.into());
    c.auth.public_prefixes = vec!["public.".into()];
    with_members(c)
}

/// `config` with every topic's members kept (`topics.presence`; off by default).
fn with_members(mut config: herald_gateway::Config) -> herald_gateway::Config {
    config.topics.presence = true;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_are_listed_across_the_cluster_with_their_node() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let p = prefix("members");
    let a = spawn_ready(member_node(&p, "node-a")).await;
    let b = spawn_ready(member_node(&p, "node-b")).await;
    let c = spawn_ready(member_node(&p, "node-c")).await;
    let topic = "public.hall";
    let ann = user_token("ann", Some(json!({"device": "web"})));
    let cy = user_token("cy", None);

    let mut sse_a = SseClient::connect(&a, &format!("topic={topic}&token={ann}"), None).await;
    sse_a.next_block().await.unwrap();
    let mut sse_a2 = SseClient::connect(&a, &format!("topic={topic}"), None).await;
    sse_a2.next_block().await.unwrap();
    let mut ws_b = ws_connect(&b).await;
    ws_subscribe(&mut ws_b, &[topic]).await;
    let poll_c = held_poll(&c, topic, Some(&cy));

    // Listed from any node, each member under its own node, as the nodes flush.
    eventually(WAIT, || async {
        all_members(&b, topic, 100).await.0.len() == 4
    })
    .await;
    let members = all_members(&b, topic, 100).await.0;
    let node_of = |user: &str, transport: &str| -> Vec<String> {
        members
            .iter()
            .filter(|m| m["user"].as_str().unwrap_or("-") == user && m["transport"] == transport)
            .map(|m| m["node"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(node_of("ann", "sse"), ["node-a"]);
    assert_eq!(node_of("-", "sse"), ["node-a"]);
    assert_eq!(node_of("-", "ws"), ["node-b"]);
    assert_eq!(node_of("cy", "poll"), ["node-c"]);
    let ann_m = members.iter().find(|m| m["user"] == "ann").unwrap();
    assert_eq!(ann_m["info"], json!({"device": "web"}));
    assert!(ann_m["since"].as_u64().unwrap() > 1_700_000_000_000);

    // Pages of one walk node by node: every member exactly once.
    let (paged, sizes) = all_members(&c, topic, 1).await;
    assert!(sizes.iter().all(|&n| n <= 1));
    let mut conns: Vec<&str> = paged.iter().map(|m| m["conn"].as_str().unwrap()).collect();
    conns.sort();
    let mut expected: Vec<&str> = members
        .iter()
        .map(|m| m["conn"].as_str().unwrap())
        .collect();
    expected.sort();
    assert_eq!(conns, expected);

    // The counts are as before.
    let counts = get_json(format!("http://{}/v1/presence/{topic}", a.admin_addr)).await;
    assert_eq!(counts["subscribers"], 4);

    // A member that disconnects is gone after its node's next flush.
    let ws_conn = node_of("-", "ws");
    assert_eq!(ws_conn.len(), 1);
    drop(ws_b);
    eventually(WAIT, || async {
        let left = all_members(&a, topic, 100).await.0;
        left.len() == 3 && left.iter().all(|m| m["node"] != "node-b")
    })
    .await;
    // A node that leaves takes its members with it.
    poll_c.abort();
    c.stop().await.unwrap();
    eventually(WAIT, || async {
        let left = all_members(&a, topic, 100).await.0;
        left.len() == 2 && left.iter().all(|m| m["node"] == "node-a")
    })
    .await;
    drop((sse_a, sse_a2));
    for node in [a, b] {
        node.stop().await.unwrap();
    }
}
