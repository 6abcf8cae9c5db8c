use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::common::*;

#[tokio::test]
async fn publish_reaches_a_websocket_subscriber() {
    let gw = spawn_gateway(test_config()).await;
    let mut ws = ws_connect(&gw).await;
    let reply = ws_subscribe(&mut ws, &["news", "sport"]).await;
    assert_eq!(reply["topics"], json!(["news", "sport"]));
    assert!(reply["cursors"]["news"].as_str().unwrap().ends_with("-0"));

    let id = publish_event(&gw, "news", json!({"k": [1, 2]}), Some("story")).await;
    let frame = ws_next(&mut ws).await;
    assert_eq!(
        frame,
        json!({"type": "message", "topic": "news", "id": id, "event": "story", "data": {"k": [1, 2]}})
    );
    publish(&gw, "sport", json!("goal")).await;
    let frame = ws_next(&mut ws).await;
    assert_eq!(frame["topic"], "sport");
    assert_eq!(frame["data"], "goal");
    assert!(frame.get("event").is_none());

    ws_send(&mut ws, json!({"type": "unsubscribe", "topics": ["news"]})).await;
    assert_eq!(
        ws_next(&mut ws).await,
        json!({"type": "unsubscribed", "topics": ["news"]})
    );
    publish(&gw, "news", json!("not for you")).await;
    publish(&gw, "sport", json!("second")).await;
    assert_eq!(ws_next(&mut ws).await["data"], "second");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn ping_echoes_its_payload() {
    let gw = spawn_gateway(test_config()).await;
    let mut ws = ws_connect(&gw).await;
    ws_send(&mut ws, json!({"type": "ping"})).await;
    assert_eq!(ws_next(&mut ws).await, json!({"type": "pong"}));
    ws_send(
        &mut ws,
        json!({"type": "ping", "data": {"ts": 123, "pad": "xxxx"}}),
    )
    .await;
    assert_eq!(
        ws_next(&mut ws).await,
        json!({"type": "pong", "data": {"ts": 123, "pad": "xxxx"}})
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn subscribe_with_cursors_resumes_exactly() {
    let gw = spawn_gateway(test_config()).await;
    let first = publish(&gw, "t", json!(1)).await;
    publish(&gw, "t", json!(2)).await;
    publish(&gw, "t", json!(3)).await;
    let mut ws = ws_connect(&gw).await;
    ws_send(
        &mut ws,
        json!({"type": "subscribe", "topics": ["t"], "cursors": {"t": first}}),
    )
    .await;
    let reply = ws_next(&mut ws).await;
    assert_eq!(reply["cursors"]["t"], first);
    assert_eq!(ws_next(&mut ws).await["data"], 2);
    assert_eq!(ws_next(&mut ws).await["data"], 3);
    publish(&gw, "t", json!(4)).await;
    assert_eq!(ws_next(&mut ws).await["data"], 4);

    let mut ws = ws_connect(&gw).await;
    ws_send(
        &mut ws,
        json!({"type": "subscribe", "topics": ["t"], "cursors": {"t": "abc-1"}}),
    )
    .await;
    assert_eq!(ws_next(&mut ws).await["type"], "subscribed");
    assert_eq!(
        ws_next(&mut ws).await,
        json!({"type": "lost", "topic": "t", "reason": "epoch"})
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn bad_frames_get_error_frames_and_the_connection_stays_open() {
    let gw = spawn_gateway(test_config()).await;
    let mut ws = ws_connect(&gw).await;
    let cases: Vec<(WsMessage, &str)> = vec![
        (WsMessage::Text("{not json".into()), "bad_json"),
        (WsMessage::Text(r#"{"type":"dance"}"#.into()), "bad_frame"),
        (WsMessage::Text(r#"{"topics":["a"]}"#.into()), "bad_frame"),
        (
            WsMessage::Text(r#"{"type":"subscribe","topics":["bad topic"]}"#.into()),
            "bad_topic",
        ),
        (
            WsMessage::Text(r#"{"type":"subscribe","topics":["a"],"cursors":{"a":"nope"}}"#.into()),
            "bad_cursor",
        ),
        (
            WsMessage::Text(r#"{"type":"publish","topic":"a","data":1}"#.into()),
            "forbidden",
        ),
        (WsMessage::Binary(vec![1, 2, 3].into()), "unsupported_frame"),
    ];
    for (frame, code) in cases {
        ws.send(frame).await.unwrap();
        let reply = ws_next(&mut ws).await;
        assert_eq!(reply["type"], "error", "{reply}");
        assert_eq!(reply["code"], code, "{reply}");
        assert!(!reply["reason"].as_str().unwrap().is_empty());
    }
    let many: Vec<String> = (0..65).map(|i| format!("t{i}")).collect();
    ws_send(&mut ws, json!({"type": "subscribe", "topics": many})).await;
    assert_eq!(ws_next(&mut ws).await["code"], "too_many_topics");
    // Still open and working.
    ws_subscribe(&mut ws, &["ok"]).await;
    publish(&gw, "ok", json!(true)).await;
    assert_eq!(ws_next(&mut ws).await["data"], true);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn an_oversized_frame_closes_with_1009_and_others_are_unaffected() {
    let mut config = test_config();
    config.ws.max_message_size = 4096;
    let gw = spawn_gateway(config).await;
    let mut other = ws_connect(&gw).await;
    ws_subscribe(&mut other, &["t"]).await;
    let mut ws = ws_connect(&gw).await;
    ws.send(WsMessage::Text("x".repeat(10_000).into()))
        .await
        .unwrap();
    let (code, reason) = ws_close_code(&mut ws).await;
    assert_eq!(code, 1009, "{reason}");
    assert!(!reason.is_empty());
    publish(&gw, "t", json!(1)).await;
    assert_eq!(ws_next(&mut other).await["data"], 1);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn dev_mode_allows_websocket_publish() {
    let mut config = test_config();
    config.dev = true;
    let gw = spawn_gateway(config).await;
    let mut sub = ws_connect(&gw).await;
    ws_subscribe(&mut sub, &["chat"]).await;
    let mut publisher = ws_connect(&gw).await;
    ws_send(
        &mut publisher,
        json!({"type": "publish", "topic": "chat", "data": {"msg": "hi"}, "event": "said"}),
    )
    .await;
    let ack = ws_next(&mut publisher).await;
    assert_eq!(ack["type"], "published");
    let frame = ws_next(&mut sub).await;
    assert_eq!(frame["data"], json!({"msg": "hi"}));
    assert_eq!(frame["event"], "said");
    assert_eq!(frame["id"], ack["id"]);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn bad_handshakes_get_clear_errors() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let gw = spawn_gateway(test_config()).await;
    let cases = [
        // Upgrade without a key.
        (
            "GET /v1/ws HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\n\r\n",
            "400",
        ),
        // An old protocol version: 426 with the version we speak.
        (
            "GET /v1/ws HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 8\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
            "426",
        ),
        // Upgrade to something else.
        (
            "GET /v1/ws HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: h2c\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
            "400",
        ),
        // No upgrade at all.
        ("GET /v1/ws HTTP/1.1\r\nhost: x\r\n\r\n", "426"),
    ];
    for (request, status) in cases {
        let mut raw = tokio::net::TcpStream::connect(gw.public_addr)
            .await
            .unwrap();
        raw.write_all(request.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(WAIT, raw.read_to_end(&mut answer)).await;
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{request:?} -> {answer}"
        );
        assert!(answer.contains("\"code\""), "{answer}");
        if status == "426" && request.contains("version: 8") {
            assert!(answer.contains("sec-websocket-version: 13"), "{answer}");
        }
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn fragmented_frames_are_reassembled_and_invalid_utf8_closes_with_1007() {
    let gw = spawn_gateway(test_config()).await;
    let mut raw = raw_ws(&gw).await;
    // A ping command split over a text frame and a continuation frame.
    send_frame(&mut raw, false, 0x1, br#"{"type":"pi"#).await;
    send_frame(&mut raw, true, 0x0, br#"ng","data":42}"#).await;
    let (opcode, payload) = read_frame(&mut raw).await;
    assert_eq!(opcode, 0x1);
    assert_eq!(payload, br#"{"type":"pong","data":42}"#);

    // Invalid UTF-8 in a text frame: close 1007 with a reason.
    send_frame(&mut raw, true, 0x1, &[0x7b, 0xff, 0xfe, 0x7d]).await;
    let (opcode, payload) = read_frame(&mut raw).await;
    assert_eq!(opcode, 0x8, "a close frame");
    assert_eq!(u16::from_be_bytes([payload[0], payload[1]]), 1007);
    assert!(!payload[2..].is_empty(), "with a reason");

    // Other clients are unaffected.
    let mut ws = ws_connect(&gw).await;
    ws_subscribe(&mut ws, &["after"]).await;
    publish(&gw, "after", json!(1)).await;
    assert_eq!(ws_next(&mut ws).await["data"], 1);
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_client_flooding_frames_is_closed_and_others_keep_receiving() {
    let mut config = test_config();
    config.ws.inbound_rate = 10.0;
    config.ws.inbound_burst = 20.0;
    let gw = spawn_gateway(config).await;
    let mut good = ws_connect(&gw).await;
    ws_subscribe(&mut good, &["flood"]).await;
    let mut flooder = ws_connect(&gw).await;
    for _ in 0..200 {
        if flooder
            .send(WsMessage::Ping(b"x".to_vec().into()))
            .await
            .is_err()
        {
            break;
        }
    }
    let (code, reason) = ws_close_code(&mut flooder).await;
    assert_eq!((code, reason.as_str()), (1008, "too many messages"));
    publish(&gw, "flood", json!({"ok": true})).await;
    let message = ws_next(&mut good).await;
    assert_eq!(message["data"], json!({"ok": true}));
    gw.stop().await.unwrap();
}

/// A client asks for a ping interval within `ws.min_ping_interval`..`ws.max_ping_interval`;
/// the server's pings follow it, and a longer interval lengthens the idle timeout with it.
#[tokio::test]
async fn a_client_picks_its_ping_interval_within_the_bounds() {
    let mut config = test_config();
    config.ws.ping_interval = std::time::Duration::from_secs(30);
    config.ws.min_ping_interval = std::time::Duration::from_millis(100);
    let gw = spawn_gateway(config).await;
    let mut ws = ws_connect(&gw).await;
    ws_send(&mut ws, json!({"type": "heartbeat", "interval": 0.1})).await;
    assert_eq!(
        ws_next(&mut ws).await,
        json!({"type": "heartbeat", "interval": 0.1})
    );
    // Pings come every 100 ms now (ws_next skips them: read the raw frames).
    let started = std::time::Instant::now();
    let mut pings = 0;
    while pings < 3 {
        match tokio::time::timeout(WAIT, ws.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WsMessage::Ping(_) => pings += 1,
            other => panic!("only pings expected: {other:?}"),
        }
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    for interval in [json!(0.01), json!(301), json!("soon"), json!(-1)] {
        ws_send(&mut ws, json!({"type": "heartbeat", "interval": interval})).await;
        let error = ws_next(&mut ws).await;
        assert_eq!(error["type"], "error", "{interval}: {error}");
        let code = error["code"].as_str().unwrap();
        assert!(
            code == "bad_heartbeat" || code == "bad_frame",
            "{interval}: {error}"
        );
    }
    gw.stop().await.unwrap();
}

/// A subscribed, idle connection is written by its topic's fan-out; the server's pings go out
/// between the fan-out's frames (written by the link itself while it is direct) and every
/// frame arrives whole and in order.
#[tokio::test]
async fn pings_go_out_between_messages_to_a_directly_written_subscriber() {
    let mut config = test_config();
    config.ws.min_ping_interval = std::time::Duration::from_millis(100);
    let gw = spawn_gateway(config).await;
    let mut ws = ws_connect(&gw).await;
    ws_send(&mut ws, json!({"type": "heartbeat", "interval": 0.1})).await;
    assert_eq!(ws_next(&mut ws).await["type"], "heartbeat");
    ws_subscribe(&mut ws, &["t"]).await;
    let mut pings = 0;
    for i in 0..5 {
        publish(&gw, "t", json!(i)).await;
        // The message, then the next ping, sent while the connection idles on the fan-out.
        let mut got_message = false;
        loop {
            match tokio::time::timeout(WAIT, ws.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap()
            {
                WsMessage::Ping(_) if got_message => {
                    pings += 1;
                    break;
                }
                WsMessage::Ping(_) => pings += 1,
                WsMessage::Text(text) => {
                    let frame: serde_json::Value = serde_json::from_str(&text).unwrap();
                    assert_eq!(
                        (&frame["type"], &frame["data"]),
                        (&json!("message"), &json!(i))
                    );
                    got_message = true;
                }
                other => panic!("unexpected frame: {other:?}"),
            }
        }
    }
    assert!(pings >= 5);
    gw.stop().await.unwrap();
}
