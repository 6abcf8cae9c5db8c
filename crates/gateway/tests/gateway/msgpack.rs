//! The `herald.msgpack` WebSocket subprotocol and MessagePack publishing, driven by a real
//! MessagePack client library (`rmpv`, `rmp-serde`) over tokio-tungstenite: the raw-socket
//! fast path (direct delivery included), TLS, HTTP publishing with
//! `Content-Type: application/msgpack`, and the JSON transports' view of the same messages.

use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use rmpv::Value as Mp;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message as WsMessage;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

use crate::common::*;

/// A `herald.msgpack` request for `url`.
fn msgpack_request(url: &str) -> tokio_tungstenite::tungstenite::handshake::client::Request {
    let mut request = url.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "herald.msgpack".parse().unwrap());
    request
}

/// A `herald.msgpack` client on the plain listener; checks the server named the subprotocol.
pub(crate) async fn mp_connect(gw: &herald_gateway::Gateway) -> WsStream {
    let url = format!("ws://{}/v1/ws", gw.public_addr);
    let (ws, response) = tokio_tungstenite::connect_async(msgpack_request(&url))
        .await
        .expect("websocket connects");
    assert_eq!(
        response.headers()["sec-websocket-protocol"],
        "herald.msgpack"
    );
    ws
}

/// A map value from `(key, value)` pairs.
pub(crate) fn map(fields: Vec<(&str, Mp)>) -> Mp {
    Mp::Map(fields.into_iter().map(|(k, v)| (Mp::from(k), v)).collect())
}

pub(crate) fn encode(value: &Mp) -> Vec<u8> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, value).unwrap();
    out
}

pub(crate) async fn mp_send<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    value: Mp,
) {
    ws.send(WsMessage::Binary(encode(&value).into()))
        .await
        .unwrap();
}

/// The next binary frame, decoded (pings skipped); a text frame fails the test.
pub(crate) async fn mp_next<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut WebSocketStream<S>) -> Mp {
    loop {
        let frame = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("websocket stalled")
            .expect("websocket ended")
            .expect("websocket error");
        match frame {
            WsMessage::Binary(bytes) => {
                let mut slice = &bytes[..];
                let value = rmpv::decode::read_value(&mut slice).unwrap();
                assert!(slice.is_empty(), "one value per frame");
                return value;
            }
            WsMessage::Ping(_) | WsMessage::Pong(_) => {}
            other => panic!("expected a binary frame, got {other:?}"),
        }
    }
}

/// `value[key]` of a map.
pub(crate) fn field<'a>(value: &'a Mp, key: &str) -> &'a Mp {
    value
        .as_map()
        .unwrap_or_else(|| panic!("not a map: {value}"))
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
        .unwrap_or(&Mp::Nil)
}

pub(crate) fn kind(value: &Mp) -> &str {
    field(value, "type").as_str().unwrap_or("")
}

pub(crate) async fn mp_subscribe<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    topics: &[&str],
) -> Mp {
    let topics = Mp::Array(topics.iter().map(|t| Mp::from(*t)).collect());
    mp_send(
        ws,
        map(vec![("type", "subscribe".into()), ("topics", topics)]),
    )
    .await;
    let reply = mp_next(ws).await;
    assert_eq!(kind(&reply), "subscribed", "{reply}");
    reply
}

/// POSTs `body` as MessagePack to `/v1/publish` (or `path`) on the admin listener.
pub(crate) async fn post_msgpack(
    gw: &herald_gateway::Gateway,
    path: &str,
    body: &Mp,
) -> reqwest::Response {
    http()
        .post(format!("http://{}{path}", gw.admin_addr))
        .header("content-type", "application/msgpack")
        .body(encode(body))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn msgpack_publish_reaches_a_msgpack_socket_as_sent_and_sse_as_json() {
    let gw = spawn_gateway(test_config()).await;
    let mut ws = mp_connect(&gw).await;
    let subscribed = mp_subscribe(&mut ws, &["mp"]).await;
    assert_eq!(field(&subscribed, "topics"), &Mp::Array(vec!["mp".into()]));
    let mut sse = SseClient::connect(&gw, "topic=mp", None).await;
    sse.next_block().await.unwrap();

    // Binary and integer data, as a MessagePack client writes it.
    let data = map(vec![
        ("blob", Mp::Binary(vec![0, 1, 254, 255])),
        ("n", Mp::from(-7)),
        ("f", Mp::F64(1.5)),
    ]);
    let resp = post_msgpack(
        &gw,
        "/v1/publish",
        &map(vec![
            ("topic", "mp".into()),
            ("data", data.clone()),
            ("event", "created".into()),
        ]),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let id = resp.json::<serde_json::Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();

    let message = mp_next(&mut ws).await;
    assert_eq!(kind(&message), "message");
    assert_eq!(field(&message, "topic").as_str(), Some("mp"));
    assert_eq!(field(&message, "id").as_str(), Some(id.as_str()));
    assert_eq!(field(&message, "event").as_str(), Some("created"));
    assert_eq!(field(&message, "data"), &data, "carried as given");

    // SSE gets the JSON form: binary as base64.
    let event = sse.next_event().await.unwrap();
    assert_eq!(event.event.as_deref(), Some("created"));
    let json: serde_json::Value = serde_json::from_str(&event.data.unwrap()).unwrap();
    assert_eq!(json, json!({"blob": "AAH+/w==", "n": -7, "f": 1.5}));

    // A JSON publish reaches the MessagePack client in MessagePack.
    publish(&gw, "mp", json!({"k": [1, "two", null, true]})).await;
    let message = mp_next(&mut ws).await;
    assert_eq!(
        field(&message, "data"),
        &map(vec![(
            "k",
            Mp::Array(vec![1.into(), "two".into(), Mp::Nil, true.into()])
        )])
    );
    assert_eq!(field(&message, "event"), &Mp::Nil, "no event: no field");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn msgpack_commands_are_answered_in_msgpack_and_publish_as_sent() {
    let mut config = test_config();
    config.dev = true; // clients may publish
    let gw = spawn_gateway(config).await;
    let mut ws = mp_connect(&gw).await;
    let mut json_ws = ws_connect(&gw).await;
    ws_subscribe(&mut json_ws, &["chat"]).await;
    mp_subscribe(&mut ws, &["chat"]).await;

    // ping echoes its data as sent, binary included.
    let data = Mp::Array(vec![Mp::Binary(vec![9, 9]), Mp::from(u64::MAX)]);
    mp_send(
        &mut ws,
        map(vec![("type", "ping".into()), ("data", data.clone())]),
    )
    .await;
    let pong = mp_next(&mut ws).await;
    assert_eq!(kind(&pong), "pong");
    assert_eq!(field(&pong, "data"), &data);

    // A serde struct through rmp-serde, as an application would send it.
    #[derive(serde::Serialize)]
    struct Publish<'a> {
        #[serde(rename = "type")]
        kind: &'a str,
        topic: &'a str,
        data: (u8, &'a str),
    }
    let frame = rmp_serde::to_vec_named(&Publish {
        kind: "publish",
        topic: "chat",
        data: (1, "hi"),
    })
    .unwrap();
    ws.send(WsMessage::Binary(frame.into())).await.unwrap();
    let (mut published, mut message) = (None, None);
    while published.is_none() || message.is_none() {
        let frame = mp_next(&mut ws).await;
        match kind(&frame) {
            "published" => published = Some(frame),
            "message" => message = Some(frame),
            other => panic!("unexpected {other}: {frame}"),
        }
    }
    let (published, message) = (published.unwrap(), message.unwrap());
    assert_eq!(field(&published, "id"), field(&message, "id"));
    assert_eq!(
        field(&message, "data"),
        &Mp::Array(vec![1.into(), "hi".into()])
    );
    let json_message = ws_next(&mut json_ws).await;
    assert_eq!(json_message["data"], json!([1, "hi"]));

    // A cursor from another epoch: the loss signal, in MessagePack too.
    mp_send(
        &mut ws,
        map(vec![
            ("type", "subscribe".into()),
            ("topics", Mp::Array(vec!["gone".into()])),
            ("cursors", map(vec![("gone", "1-5".into())])),
        ]),
    )
    .await;
    let (mut lost, mut subscribed) = (None, false);
    while lost.is_none() || !subscribed {
        let frame = mp_next(&mut ws).await;
        match kind(&frame) {
            "lost" => lost = Some(frame),
            "subscribed" => subscribed = true,
            other => panic!("unexpected {other}: {frame}"),
        }
    }
    let lost = lost.unwrap();
    assert_eq!(field(&lost, "topic").as_str(), Some("gone"));
    assert!(field(&lost, "reason").is_str(), "{lost}");

    // heartbeat, auth, unsubscribe: the same commands, answered in MessagePack.
    mp_send(
        &mut ws,
        map(vec![("type", "heartbeat".into()), ("interval", 20.into())]),
    )
    .await;
    let reply = mp_next(&mut ws).await;
    assert_eq!(kind(&reply), "heartbeat");
    mp_send(
        &mut ws,
        map(vec![
            ("type", "unsubscribe".into()),
            ("topics", Mp::Array(vec!["chat".into()])),
        ]),
    )
    .await;
    let reply = mp_next(&mut ws).await;
    assert_eq!(kind(&reply), "unsubscribed");
    assert_eq!(field(&reply, "topics"), &Mp::Array(vec!["chat".into()]));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn bad_msgpack_frames_get_error_frames_and_the_connection_stays() {
    let gw = spawn_gateway(test_config()).await;
    let mut ws = mp_connect(&gw).await;
    let error = |frame: &Mp| {
        assert_eq!(kind(frame), "error", "{frame}");
        (
            field(frame, "code").as_str().unwrap().to_string(),
            field(frame, "reason").as_str().unwrap().to_string(),
        )
    };
    // Text on a MessagePack connection.
    ws.send(WsMessage::Text(r#"{"type":"ping"}"#.into()))
        .await
        .unwrap();
    let (code, reason) = error(&mp_next(&mut ws).await);
    assert_eq!(code, "unsupported_frame");
    assert!(reason.contains("herald.msgpack"), "{reason}");
    // Not MessagePack; not a map; a value with no JSON form.
    ws.send(WsMessage::Binary(vec![0xc1].into())).await.unwrap();
    assert_eq!(error(&mp_next(&mut ws).await).0, "bad_msgpack");
    mp_send(&mut ws, Mp::from("subscribe")).await;
    assert_eq!(error(&mp_next(&mut ws).await).0, "bad_msgpack");
    let ext = map(vec![
        ("type", "ping".into()),
        ("data", Mp::Ext(-1, vec![0; 4])),
    ]);
    let (code, reason) = error(&{
        mp_send(&mut ws, ext).await;
        mp_next(&mut ws).await
    });
    assert_eq!(code, "bad_msgpack");
    assert!(reason.contains("extension"), "{reason}");
    // The same command rules and reasons as JSON.
    mp_send(&mut ws, map(vec![("type", "subscribe".into())])).await;
    assert_eq!(
        error(&mp_next(&mut ws).await),
        ("bad_frame".into(), "subscribe needs \"topics\"".into())
    );
    mp_send(
        &mut ws,
        map(vec![
            ("type", "subscribe".into()),
            ("topics", Mp::Array(vec!["no spaces".into()])),
        ]),
    )
    .await;
    assert_eq!(error(&mp_next(&mut ws).await).0, "bad_topic");
    // Still open.
    mp_send(&mut ws, map(vec![("type", "ping".into())])).await;
    assert_eq!(kind(&mp_next(&mut ws).await), "pong");

    // And a JSON connection still refuses binary frames, naming the subprotocol.
    let mut json_ws = ws_connect(&gw).await;
    json_ws
        .send(WsMessage::Binary(
            encode(&map(vec![("type", "ping".into())])).into(),
        ))
        .await
        .unwrap();
    let reply = ws_next(&mut json_ws).await;
    assert_eq!(reply["code"], "unsupported_frame");
    assert!(reply["reason"].as_str().unwrap().contains("herald.msgpack"));
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn bad_msgpack_publishes_are_400_with_a_reason() {
    let gw = spawn_gateway(test_config()).await;
    let reason = |resp: serde_json::Value| {
        (
            resp["code"].as_str().unwrap().to_string(),
            resp["reason"].as_str().unwrap().to_string(),
        )
    };
    let refused = async |body: Vec<u8>| {
        let resp = http()
            .post(format!("http://{}/v1/publish", gw.admin_addr))
            .header("content-type", "application/msgpack")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400);
        reason(resp.json().await.unwrap())
    };
    let (code, why) = refused(vec![0x82, 0xa5]).await;
    assert_eq!(code, "bad_msgpack");
    assert!(why.contains("truncated"), "{why}");
    let with = |data: Mp| encode(&map(vec![("topic", "t".into()), ("data", data)]));
    let (_, why) = refused(with(Mp::Ext(5, vec![1]))).await;
    assert!(why.contains("extension"), "{why}");
    let (_, why) = refused(with(Mp::Map(vec![(Mp::from(1), Mp::from(2))]))).await;
    assert!(why.contains("keys must be strings"), "{why}");
    let (_, why) = refused(with(Mp::F64(f64::NAN))).await;
    assert!(why.contains("NaN"), "{why}");
    let (code, why) = refused(encode(&map(vec![("topic", "t".into())]))).await;
    assert_eq!(
        (code.as_str(), why.as_str()),
        ("bad_msgpack", "missing field \"data\"")
    );
    let (_, why) = refused(encode(&map(vec![
        ("topic", "t".into()),
        ("data", 1.into()),
        ("extra", 1.into()),
    ])))
    .await;
    assert!(why.contains("unknown field \"extra\""), "{why}");
    let (code, _) = refused(encode(&map(vec![
        ("topic", "no spaces".into()),
        ("data", 1.into()),
    ])))
    .await;
    assert_eq!(code, "bad_topic");

    // A batch in MessagePack: one result per message.
    let batch = map(vec![(
        "messages",
        Mp::Array(vec![
            map(vec![("topic", "t".into()), ("data", Mp::Binary(vec![1]))]),
            map(vec![("topic", "t".into())]),
        ]),
    )]);
    let resp = post_msgpack(&gw, "/v1/publish/batch", &batch).await;
    assert_eq!(resp.status(), 200);
    let results: serde_json::Value = resp.json().await.unwrap();
    assert!(results["results"][0]["id"].is_string(), "{results}");
    assert_eq!(results["results"][1]["code"], "bad_msgpack");
    // History holds the JSON form.
    let history = get_json(format!("http://{}/v1/topics/t/history", gw.admin_addr)).await;
    assert!(
        history.to_string().contains(r#""data":"AQ==""#),
        "{history}"
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn the_first_known_subprotocol_is_chosen_and_unknown_ones_get_json() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let gw = spawn_gateway(test_config()).await;
    // By hand: a client library fails when its offer is not taken, which is the point here.
    let handshake = async |offer: &str| {
        let mut raw = tokio::net::TcpStream::connect(gw.public_addr)
            .await
            .unwrap();
        let request = format!(
            "GET /v1/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             Sec-WebSocket-Protocol: {offer}\r\n\r\n"
        );
        raw.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0];
            raw.read_exact(&mut byte).await.unwrap();
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 101"), "{head}");
        head.lines()
            .find_map(|l| l.strip_prefix("sec-websocket-protocol: "))
            .map(str::to_string)
    };
    assert_eq!(handshake("chat, mqtt").await, None);
    assert_eq!(
        handshake("chat, herald.msgpack, herald.json")
            .await
            .as_deref(),
        Some("herald.msgpack")
    );
    assert_eq!(
        handshake("herald.json, herald.msgpack").await.as_deref(),
        Some("herald.json")
    );
    gw.stop().await.unwrap();
}

/// Over TLS: a `herald.msgpack` WebSocket (HTTP/1.1), fed by a MessagePack publish sent over
/// HTTP/2 on the same listener (dev mode serves the publish API there).
#[tokio::test]
async fn msgpack_over_tls_and_http2() {
    use http_body_util::{BodyExt as _, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let mut config = crate::tls::tls_config();
    config.dev = true;
    let gw = spawn_gateway(config).await;
    let tls = crate::tls::tls_connect(&gw, &[b"http/1.1"]).await;
    let (mut ws, response) =
        tokio_tungstenite::client_async(msgpack_request("wss://localhost/v1/ws"), tls)
            .await
            .expect("wss handshake");
    assert_eq!(
        response.headers()["sec-websocket-protocol"],
        "herald.msgpack"
    );
    mp_subscribe(&mut ws, &["wss"]).await;

    let h2 = crate::tls::tls_connect(&gw, &[b"h2"]).await;
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(h2))
            .await
            .unwrap();
    tokio::spawn(conn);
    let body = map(vec![("topic", "wss".into()), ("data", Mp::Binary(vec![7]))]);
    let request = hyper::Request::post("https://localhost/v1/publish")
        .header("content-type", "application/msgpack")
        .body(Full::new(bytes::Bytes::from(encode(&body))))
        .unwrap();
    let resp = sender.send_request(request).await.unwrap();
    assert_eq!(resp.version(), hyper::Version::HTTP_2);
    let status = resp.status();
    let answer = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(status, 200, "{answer:?}");
    let message = mp_next(&mut ws).await;
    assert_eq!(field(&message, "data"), &Mp::Binary(vec![7]));
    gw.stop().await.unwrap();
}

/// The fan-out writes MessagePack frames to an idle socket itself; a client that stalls,
/// pings, and reads again gets every frame whole and in order, its pong between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_msgpack_frames_stay_whole_when_a_stalled_client_reads_again() {
    let mut config = test_config();
    config.topics.history_len = 512;
    config.topics.channel_capacity = 512;
    config.limits.write_timeout = Duration::from_secs(30);
    let gw = spawn_gateway(config).await;
    let mut ws = mp_connect(&gw).await;
    mp_subscribe(&mut ws, &["stall"]).await;
    // 50 KB of binary is 66 KB of base64: over the 64 KiB payload limit, which the JSON form
    // every JSON subscriber gets is held to as well.
    let resp = post_msgpack(
        &gw,
        "/v1/publish",
        &map(vec![
            ("topic", "stall".into()),
            ("data", Mp::Binary(vec![0; 50_000])),
        ]),
    )
    .await;
    assert_eq!(resp.status(), 413);
    let why: serde_json::Value = resp.json().await.unwrap();
    assert!(
        why["reason"].as_str().unwrap().contains("compact JSON"),
        "{why}"
    );
    let pad = Mp::Binary(vec![0x5a; 40_000]);
    let send = async |n: u64| {
        let data = map(vec![("n", n.into()), ("pad", pad.clone())]);
        let resp = post_msgpack(
            &gw,
            "/v1/publish",
            &map(vec![("topic", "stall".into()), ("data", data)]),
        )
        .await;
        assert_eq!(resp.status(), 200);
    };
    send(0).await;
    assert_eq!(
        field(&mp_next(&mut ws).await, "data")
            .as_map()
            .unwrap()
            .len(),
        2
    );
    for n in 1..=200 {
        send(n).await;
    }
    mp_send(
        &mut ws,
        map(vec![("type", "ping".into()), ("data", "p1".into())]),
    )
    .await;
    let (mut got, mut pong) = (Vec::new(), false);
    while got.len() < 200 || !pong {
        let frame = mp_next(&mut ws).await;
        match kind(&frame) {
            "message" => {
                let data = field(&frame, "data");
                assert_eq!(field(data, "pad"), &pad);
                got.push(field(data, "n").as_u64().unwrap());
            }
            "pong" => pong = true,
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(got, (1..=200).collect::<Vec<_>>());
    send(201).await;
    assert_eq!(
        field(field(&mp_next(&mut ws).await, "data"), "n").as_u64(),
        Some(201)
    );
    gw.stop().await.unwrap();
}

/// Over the Redis bridge a MessagePack payload stays as sent: published on one node, it
/// reaches a `herald.msgpack` socket on another node with its binary intact, and an SSE stream
/// there in its JSON form; a JSON publish reaches the same socket in MessagePack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_msgpack_payload_crosses_the_redis_bridge_as_sent() {
    skip_without!("HERALD_TEST_REDIS_URL");
    let prefix = format!("test-msgpack-{:x}", rand::random::<u32>());
    let a = spawn_ready(cluster_config(&prefix, "a")).await;
    let b = spawn_ready(cluster_config(&prefix, "b")).await;
    let mut ws = mp_connect(&b).await;
    mp_subscribe(&mut ws, &["bridged"]).await;
    let mut sse = SseClient::connect(&b, "topic=bridged", None).await;
    sse.next_block().await.unwrap();
    let data = map(vec![
        ("raw", Mp::Binary(vec![0, 0xff])),
        ("f", Mp::F32(0.5)),
    ]);
    let body = map(vec![("topic", "bridged".into()), ("data", data.clone())]);
    assert_eq!(post_msgpack(&a, "/v1/publish", &body).await.status(), 200);
    let message = mp_next(&mut ws).await;
    assert_eq!(field(&message, "data"), &data, "binary and f32 kept");
    assert_eq!(
        sse.next_event().await.unwrap().data.as_deref(),
        Some(r#"{"raw":"AP8=","f":0.5}"#)
    );
    publish(&a, "bridged", json!({"from": "json"})).await;
    assert_eq!(
        field(&mp_next(&mut ws).await, "data"),
        &map(vec![("from", "json".into())])
    );
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

/// A `herald.msgpack` ping of 60,000 nils (60 KB on the wire, 300 KB as JSON) was converted to
/// JSON and parsed again before its pong (8.7x the CPU of a 64 KB JSON ping). Its data is now
/// checked in one scan and echoed as its own bytes: the pong carries exactly the bytes sent,
/// and data without a JSON form or nested too deep is refused all the same.
#[tokio::test]
async fn a_large_msgpack_ping_is_echoed_as_its_own_bytes() {
    let gw = spawn_gateway(test_config()).await;
    let mut ws = mp_connect(&gw).await;
    let mut data = vec![0xdd];
    data.extend_from_slice(&60_000u32.to_be_bytes());
    data.resize(5 + 60_000, 0xc0);
    let mut ping = encode(&map(vec![("type", "ping".into())]));
    ping[0] = 0x82;
    ping.extend_from_slice(&[0xa4, b'd', b'a', b't', b'a']);
    ping.extend_from_slice(&data);
    ws.send(WsMessage::Binary(ping.clone().into()))
        .await
        .unwrap();
    let pong = loop {
        match tokio::time::timeout(WAIT, ws.next()).await.unwrap() {
            Some(Ok(WsMessage::Binary(bytes))) => break bytes,
            Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_))) => {}
            other => panic!("expected the pong, got {other:?}"),
        }
    };
    let mut expected = encode(&map(vec![("type", "pong".into())]));
    expected[0] = 0x82;
    expected.extend_from_slice(&[0xa4, b'd', b'a', b't', b'a']);
    expected.extend_from_slice(&data);
    assert!(pong[..] == expected[..], "the data echoed byte for byte");
    // Checked all the same: nested deeper than a payload may be, or without a JSON form.
    let mut deep = ping[..ping.len() - data.len()].to_vec();
    deep.extend(std::iter::repeat_n(0x91, 65));
    deep.push(0xc0);
    ws.send(WsMessage::Binary(deep.into())).await.unwrap();
    let reply = mp_next(&mut ws).await;
    assert_eq!(
        field(&reply, "code").as_str(),
        Some("bad_msgpack"),
        "{reply}"
    );
    let mut bad_utf8 = ping[..ping.len() - data.len()].to_vec();
    bad_utf8.extend_from_slice(&[0xa2, 0xff, 0xfe]);
    ws.send(WsMessage::Binary(bad_utf8.into())).await.unwrap();
    let reply = mp_next(&mut ws).await;
    assert_eq!(
        field(&reply, "code").as_str(),
        Some("bad_msgpack"),
        "{reply}"
    );
    gw.stop().await.unwrap();
}
