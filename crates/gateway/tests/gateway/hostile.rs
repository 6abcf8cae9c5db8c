//! What hostile clients found, each driven the way the attack was made (raw sockets, crafted
//! frames, tokens and cursors) against a real gateway. Every test here failed before its fix.

use std::io::{Read as _, Write as _};
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;

use crate::common::*;

fn now() -> u64 {
    unix_now()
}

fn auth_config() -> herald_gateway::Config {
    token_config()
}

/// One blocking HTTP/1.1 exchange: the status line's code and the time it took.
fn blocking_get(addr: std::net::SocketAddr, path: &str) -> (u16, Duration) {
    let started = Instant::now();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let status = String::from_utf8_lossy(&answer)
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, started.elapsed())
}

/// Defect 1: SSE clients that keep sending after their request (1 MiB chunks), one more than
/// there are cores, pinned the runtime's workers: `/healthz` went unanswered for seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_clients_that_upload_do_not_stall_the_server() {
    let gw = spawn_gateway(test_config()).await;
    let public = gw.public_addr;
    let deadline = Instant::now() + Duration::from_secs(3);
    let uploaders: Vec<_> = (0..3)
        .map(|_| {
            std::thread::spawn(move || {
                let chunk = vec![b'x'; 1 << 20];
                let mut sent = 0usize;
                while Instant::now() < deadline {
                    let Ok(mut s) = std::net::TcpStream::connect(public) else {
                        continue;
                    };
                    s.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
                    if s.write_all(b"GET /v1/sse?topic=upload HTTP/1.1\r\nhost: x\r\n\r\n")
                        .is_err()
                    {
                        continue;
                    }
                    while Instant::now() < deadline && s.write_all(&chunk).is_ok() {
                        sent += chunk.len();
                    }
                }
                sent
            })
        })
        .collect();
    let admin = gw.admin_addr;
    let slowest = tokio::task::spawn_blocking(move || {
        let mut slowest = Duration::ZERO;
        while Instant::now() < deadline {
            let (status, took) = blocking_get(admin, "/healthz");
            assert_eq!(status, 200, "healthz answered");
            slowest = slowest.max(took);
            std::thread::sleep(Duration::from_millis(50));
        }
        slowest
    })
    .await
    .unwrap();
    let sent: usize = uploaders.into_iter().map(|u| u.join().unwrap()).sum();
    assert!(sent > 3 << 20, "the uploaders did send ({sent} bytes)");
    assert!(
        slowest < Duration::from_secs(1),
        "/healthz took {slowest:?} while SSE clients uploaded"
    );
    // Every upload connection is closed and counted, but the last of each uploader, which
    // the deadline may end first.
    let closed = metric(
        &gw,
        r#"herald_client_errors_total{transport="sse",reason="unexpected_input"}"#,
    )
    .await;
    let opened = metric(&gw, r#"herald_connections_opened_total{transport="sse"}"#).await;
    assert!(
        closed >= 3.0 && closed <= opened && closed >= opened - 3.0,
        "{closed} of {opened} upload connections closed for their input"
    );
    gw.stop().await.unwrap();
}

/// Defect 2: an `auth` frame with a token that allows less kept the old subscriptions.
#[tokio::test]
async fn an_auth_frame_rechecks_every_subscription_held() {
    let gw = spawn_gateway(auth_config()).await;
    let a = token(json!({"sub": "ann", "exp": now() + 600, "topics": ["admin.audit"]}));
    let b = token(json!({"sub": "ann", "exp": now() + 600, "topics": ["other"]}));
    let (mut ws, _) =
        tokio_tungstenite::connect_async(format!("ws://{}/v1/ws?token={a}", gw.public_addr))
            .await
            .unwrap();
    ws_subscribe(&mut ws, &["admin.audit", "public.news"]).await;
    ws_send(&mut ws, json!({"type": "auth", "token": b})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "authenticated");
    let dropped = ws_next(&mut ws).await;
    assert_eq!(dropped["type"], "error", "{dropped}");
    assert_eq!(dropped["code"], "forbidden");
    assert_eq!(dropped["topics"], json!(["admin.audit"]), "{dropped}");
    publish(&gw, "admin.audit", json!("secret")).await;
    publish(&gw, "public.news", json!("still allowed")).await;
    let next = ws_next(&mut ws).await;
    assert_eq!(
        (next["topic"].as_str(), &next["data"]),
        (Some("public.news"), &json!("still allowed")),
        "admin.audit is no longer delivered: {next}"
    );
    gw.stop().await.unwrap();
}

/// Defect 3: a cursor ahead of this node's head (the client saw messages elsewhere that
/// have not arrived here yet) was reported lost (`epoch`), then the messages came twice.
#[tokio::test]
async fn a_cursor_ahead_of_the_head_is_not_lost_and_not_repeated() {
    let gw = spawn_gateway(test_config()).await;
    let first = publish(&gw, "ahead", json!(1)).await;
    let epoch = first.split_once('-').unwrap().0.to_string();
    // SSE: resumes after 4, which this node has not published yet.
    let mut sse = SseClient::connect(&gw, "topic=ahead", Some(&format!("ahead={epoch}-4"))).await;
    // WebSocket: the same cursor is taken as given.
    let mut ws = ws_connect(&gw).await;
    ws_send(
        &mut ws,
        json!({"type": "subscribe", "topics": ["ahead"], "cursors": {"ahead": format!("{epoch}-4")}}),
    )
    .await;
    let reply = ws_next(&mut ws).await;
    assert_eq!(reply["cursors"]["ahead"], format!("{epoch}-4"), "{reply}");
    for n in 2..=5 {
        publish(&gw, "ahead", json!(n)).await;
    }
    let event = sse.next_event().await.unwrap();
    assert_eq!(
        (event.event.as_deref(), event.data.as_deref()),
        (None, Some("5")),
        "no herald.lost and nothing the client saw"
    );
    let message = ws_next(&mut ws).await;
    assert_eq!(
        (&message["type"], &message["data"]),
        (&json!("message"), &json!(5))
    );
    // Long-poll: nothing after the cursor yet, no loss.
    let poll: serde_json::Value = get(
        format!(
            "http://{}/v1/poll?topic=ahead&cursor=ahead={epoch}-9&timeout=0",
            gw.public_addr
        ),
        &[],
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(poll["lost"], json!([]), "{poll}");
    assert_eq!(poll["cursor"], format!("ahead={epoch}-9"));
    gw.stop().await.unwrap();
}

/// Defect 4: anonymous subscribers filled the registry and publishers got 503.
#[tokio::test]
async fn subscribers_cannot_lock_publishers_or_other_clients_out() {
    let mut config = test_config();
    config.topics.max_topics = 1000;
    config.limits.max_new_topics_per_client = 64;
    let gw = spawn_gateway(config).await;
    let mut held = Vec::new();
    let mut refused = 0;
    for c in 0..16 {
        let mut ws = ws_connect(&gw).await;
        let topics: Vec<String> = (0..64).map(|t| format!("spray-{c}-{t}")).collect();
        ws_send(&mut ws, json!({"type": "subscribe", "topics": topics})).await;
        let reply = ws_next(&mut ws).await;
        if reply["type"] == "error" {
            assert_eq!(reply["code"], "topic_quota", "{reply}");
            refused += 1;
        }
        held.push(ws);
    }
    assert_eq!(refused, 15, "one client address creates at most 64 topics");
    // A publisher creates a new topic as usual.
    publish(&gw, "fresh-publish", json!(1)).await;
    // Another client (another address) subscribes to a new topic as usual.
    let other = http_builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let resp = other
        .get(format!(
            "http://{}/v1/poll?topic=fresh-poll&timeout=0",
            gw.public_addr
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let topics = get_json(format!("http://{}/v1/topics", gw.admin_addr)).await;
    assert!(
        topics.to_string().matches("spray-").count() <= 64,
        "the sprayer pins no more than its quota"
    );
    // Closing gives the quota back.
    drop(held);
    let ws = tokio::sync::Mutex::new(ws_connect(&gw).await);
    eventually(WAIT, || async {
        let mut ws = ws.lock().await;
        let subscribe = json!({"type": "subscribe", "topics": ["after-close"]});
        ws_send(&mut ws, subscribe).await;
        ws_next(&mut ws).await["type"] == "subscribed"
    })
    .await;
    gw.stop().await.unwrap();
}

/// Defect 5: a client's Close got no Close back (browsers saw 1006, wasClean=false).
#[tokio::test]
async fn a_client_close_is_answered_with_a_close() {
    let gw = spawn_gateway(test_config()).await;
    let mut ws = ws_connect(&gw).await;
    ws.send(WsMessage::Close(Some(CloseFrame {
        code: 1000.into(),
        reason: "bye".into(),
    })))
    .await
    .unwrap();
    let reply = tokio::time::timeout(WAIT, ws.next()).await.unwrap();
    match reply {
        Some(Ok(WsMessage::Close(Some(frame)))) => assert_eq!(u16::from(frame.code), 1000),
        other => panic!("expected a close frame, got {other:?}"),
    }
    // An invalid code (999) is answered with 1002.
    let mut raw = raw_ws(&gw).await;
    send_frame(&mut raw, true, 0x8, &999u16.to_be_bytes()).await;
    let (opcode, payload) = read_frame(&mut raw).await;
    assert_eq!(opcode, 0x8);
    assert_eq!(u16::from_be_bytes([payload[0], payload[1]]), 1002);
    gw.stop().await.unwrap();
}

/// The close code of the first close frame the server sends, reading past anything else.
async fn close_code(read: &mut tokio::net::tcp::OwnedReadHalf) -> u16 {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    tokio::time::timeout(WAIT, async {
        loop {
            // Parse whole frames from the front of `buf`.
            while buf.len() >= 2 {
                let len = match buf[1] & 0x7f {
                    126 if buf.len() >= 4 => (u16::from_be_bytes([buf[2], buf[3]]) as usize, 4),
                    126 => break,
                    n => (n as usize, 2),
                };
                if buf.len() < len.1 + len.0 {
                    break;
                }
                if buf[0] & 0x0f == 0x8 {
                    return u16::from_be_bytes([buf[len.1], buf[len.1 + 1]]);
                }
                buf.drain(..len.1 + len.0);
            }
            let n = read
                .read(&mut chunk)
                .await
                .expect("no reset before the close frame");
            assert!(n > 0, "connection ended without a close frame");
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .expect("a close frame")
}

/// Defect 6: a client still sending an oversized frame saw 1006 (a reset), not 1009.
#[tokio::test]
async fn an_oversized_frame_gets_1009_while_the_client_is_still_sending() {
    let gw = spawn_gateway(test_config()).await;
    for size in [1u64 << 20, 4 << 20] {
        let (mut read, mut write) = raw_ws(&gw).await.into_split();
        let writer = tokio::spawn(async move {
            let _ = write.write_all(&frame_header(true, 0x1, size)).await;
            let chunk = vec![b'a'; 64 * 1024];
            for _ in 0..size / chunk.len() as u64 {
                if write.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            write
        });
        assert_eq!(close_code(&mut read).await, 1009, "{size} byte frame");
        let _ = writer.await;
    }
    gw.stop().await.unwrap();
}

/// Defect 7: endless empty continuation frames were accepted (~15 M/s) and never limited.
#[tokio::test]
async fn endless_continuation_frames_are_closed_with_1008() {
    let gw = spawn_gateway(test_config()).await;
    let (mut read, mut write) = raw_ws(&gw).await.into_split();
    let writer = tokio::spawn(async move {
        let mut start = frame_header(false, 0x1, 1);
        start.push(b'{');
        let _ = write.write_all(&start).await;
        let batch: Vec<u8> = (0..1000)
            .flat_map(|_| frame_header(false, 0x0, 0))
            .collect();
        for _ in 0..10_000 {
            if write.write_all(&batch).await.is_err() {
                break;
            }
        }
    });
    assert_eq!(close_code(&mut read).await, 1008);
    writer.abort();
    assert_eq!(
        metric(
            &gw,
            r#"herald_client_errors_total{transport="ws",reason="fragments"}"#
        )
        .await,
        1.0
    );
    gw.stop().await.unwrap();
}

/// Defect 8: a validly signed token with `exp` ≥ 2^63 panicked the connection task.
#[tokio::test]
async fn a_token_expiring_past_the_clock_is_refused_without_a_panic() {
    let gw = spawn_gateway(auth_config()).await;
    for exp in [1u64 << 63, u64::MAX] {
        let t = token(json!({"sub": "far", "exp": exp, "topics": ["t"]}));
        let resp = http()
            .get(format!("http://{}/v1/sse?topic=t", gw.public_addr))
            .bearer_auth(&t)
            .timeout(WAIT)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "exp {exp}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["code"], "invalid_token");
        // Over a live WebSocket: an error frame, and the connection stays.
        let mut ws = ws_connect(&gw).await;
        ws_send(&mut ws, json!({"type": "auth", "token": t})).await;
        assert_eq!(ws_next(&mut ws).await["code"], "invalid_token");
        ws_send(&mut ws, json!({"type": "ping"})).await;
        assert_eq!(ws_next(&mut ws).await["type"], "pong");
    }
    let metrics = metrics_text(&gw).await;
    for task in ["connection", "sse", "ws"] {
        let line = format!(r#"herald_task_panics_total{{task="{task}"}}"#);
        assert!(!metrics.contains(&line), "{line}");
    }
    gw.stop().await.unwrap();
}

/// Defect 8, second half: a panic in a connection task is logged and counted, not silent.
#[tokio::test]
async fn a_panicking_connection_task_is_counted() {
    let gw = spawn_gateway(test_config()).await;
    let tracker = tokio_util::task::TaskTracker::new();
    // On the gateway's own runtime, whose threads record into its metrics.
    let spawner = tracker.clone();
    gw.runtime()
        .spawn(async move {
            herald_gateway::spawn_connection(&spawner, "test", async {
                panic!("a bug in a connection task");
            });
        })
        .await
        .unwrap();
    tracker.close();
    tracker.wait().await;
    assert!(
        metrics_text(&gw)
            .await
            .contains(r#"herald_task_panics_total{task="test"} 1"#)
    );
    gw.stop().await.unwrap();
}

/// Defect 9: `nbf` was ignored.
#[tokio::test]
async fn a_token_not_valid_yet_is_refused() {
    let gw = spawn_gateway(auth_config()).await;
    let status = |t: String| {
        let url = format!("http://{}/v1/poll?topic=t&timeout=0", gw.public_addr);
        async move {
            http()
                .get(url)
                .bearer_auth(t)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let later = token(json!({"exp": now() + 7200, "nbf": now() + 3600, "topics": ["t"]}));
    assert_eq!(status(later).await, 401);
    let valid = token(json!({"exp": now() + 7200, "nbf": now() - 10, "topics": ["t"]}));
    assert_eq!(status(valid).await, 200);
    gw.stop().await.unwrap();
}

/// Defect 10: a subscribe refused part-way left its first topics subscribed.
#[tokio::test]
async fn a_subscribe_refused_part_way_subscribes_nothing() {
    let mut config = test_config();
    config.topics.max_topics = 4;
    config.topics.unpublished_share = 0.25; // one new topic from subscriptions
    let gw = spawn_gateway(config).await;
    let mut ws = ws_connect(&gw).await;
    ws_send(
        &mut ws,
        json!({"type": "subscribe", "topics": ["p1", "p2"]}),
    )
    .await;
    let reply = ws_next(&mut ws).await;
    assert_eq!(reply["code"], "topic_limit", "{reply}");
    assert_eq!(
        topic_subscribers(&gw, "p1").await,
        0,
        "p1 is not subscribed"
    );
    publish(&gw, "p1", json!("not for this client")).await;
    ws_send(&mut ws, json!({"type": "ping", "data": "after"})).await;
    let next = ws_next(&mut ws).await;
    assert_eq!(next, json!({"type": "pong", "data": "after"}));
    gw.stop().await.unwrap();
}

/// Defect 12: trickling bodies, huge declared bodies and slow heads, on both listeners; the
/// admin listener's own connection limits.
#[tokio::test]
async fn bodies_and_heads_are_bounded_on_both_listeners() {
    let mut config = test_config();
    config.dev = true; // publishing on the public listener too
    config.limits.body_read_timeout = Duration::from_millis(500);
    config.limits.header_read_timeout = Duration::from_millis(500);
    let gw = spawn_gateway(config).await;
    for addr in [gw.admin_addr, gw.public_addr] {
        // A body that trickles: 408 once the body timeout passes.
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /v1/publish HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"topic\"")
            .await
            .unwrap();
        let started = Instant::now();
        let answer = read_answer(&mut s).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{addr}: {answer}");
        assert!(answer.contains("body_timeout"), "{answer}");
        assert!(started.elapsed() < Duration::from_secs(5));
        // A body declared over the limit: 413 before it is sent.
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /v1/publish HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 99999999\r\n\r\n")
            .await
            .unwrap();
        let answer = read_answer(&mut s).await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{addr}: {answer}");
        // A head that never ends: the documented 408.
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        let answer = read_answer(&mut s).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{addr}: {answer}");
        assert!(answer.contains(r#""code":"timeout""#), "{answer}");
    }
    gw.stop().await.unwrap();

    // The admin listener's limits are its own, and configurable.
    let mut config = test_config();
    config.limits.admin_max_connections_per_address = 2;
    let gw = spawn_gateway(config).await;
    let _idle: Vec<_> = futures_util::future::join_all(
        (0..2).map(|_| tokio::net::TcpStream::connect(gw.admin_addr)),
    )
    .await;
    let mut third = tokio::net::TcpStream::connect(gw.admin_addr).await.unwrap();
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = read_answer(&mut third).await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    drop(_idle);
    gw.stop().await.unwrap();
}

async fn read_answer(s: &mut tokio::net::TcpStream) -> String {
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    let _ = tokio::time::timeout(WAIT, async {
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    answer.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&answer);
                    // A whole response with a body: enough.
                    if let Some((head, body)) = text.split_once("\r\n\r\n")
                        && let Some(len) = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .and_then(|l| l.trim().parse::<usize>().ok())
                        && body.len() >= len
                    {
                        break;
                    }
                }
            }
        }
    })
    .await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// The smaller findings: `HEAD /v1/sse` created its topic; an HTTP/1.0 upgrade got 101;
/// pong data was echoed at any depth.
#[tokio::test]
async fn smaller_findings() {
    let gw = spawn_gateway(test_config()).await;
    let resp = http()
        .head(format!("http://{}/v1/sse?topic=head-only", gw.public_addr))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let topic = get(format!("http://{}/v1/topics/head-only", gw.admin_addr), &[]).await;
    assert_eq!(topic.status(), 404, "HEAD creates no topic");

    let mut s = tokio::net::TcpStream::connect(gw.public_addr)
        .await
        .unwrap();
    s.write_all(b"GET /v1/ws HTTP/1.0\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
        .await
        .unwrap();
    let answer = read_answer(&mut s).await;
    assert!(
        answer.starts_with("HTTP/1.0 426") || answer.starts_with("HTTP/1.1 426"),
        "{answer}"
    );

    let mut ws = ws_connect(&gw).await;
    let deep = format!("{}1{}", "[".repeat(65), "]".repeat(65));
    ws.send(WsMessage::Text(
        format!(r#"{{"type":"ping","data":{deep}}}"#).into(),
    ))
    .await
    .unwrap();
    assert_eq!(ws_next(&mut ws).await["code"], "bad_frame");
    gw.stop().await.unwrap();
}

/// The idle rule: a client that sends nothing (raw, so it does not answer the server's pings)
/// is closed with 1001; any frame counts as activity, a bare control frame included.
#[tokio::test]
async fn an_idle_websocket_is_closed_with_1001_and_any_frame_is_activity() {
    let mut config = test_config();
    config.ws.ping_interval = Duration::from_millis(100);
    config.ws.idle_timeout = Duration::from_millis(500);
    let gw = spawn_gateway(config).await;
    let (mut silent, _keep) = raw_ws(&gw).await.into_split();
    let mut alive = raw_ws(&gw).await;
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1500) {
        send_frame(&mut alive, true, 0xA, b"").await; // an unsolicited pong
        // Read what the server sent meanwhile (its pings), without blocking.
        let mut scratch = [0u8; 1024];
        let _ = tokio::time::timeout(Duration::from_millis(100), alive.read(&mut scratch)).await;
    }
    assert_eq!(close_code(&mut silent).await, 1001);
    send_frame(&mut alive, true, 0x1, br#"{"type":"ping","data":"still"}"#).await;
    loop {
        let (opcode, payload) = read_frame(&mut alive).await;
        assert_ne!(opcode, 0x8, "the active client was closed");
        if opcode == 0x1 {
            assert_eq!(payload, br#"{"type":"pong","data":"still"}"#);
            break;
        }
    }
    gw.stop().await.unwrap();
}
