//! permessage-deflate (RFC 7692) spoken by hand over a TCP socket, to check the exact bytes:
//! the handshake's answer, RSV1 on compressed frames and the tail stripped, one compressed
//! frame shared by every subscriber, compressed messages from the client, and the limits.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use herald_gateway::Gateway;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::common::*;

const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// Opens a WebSocket offering `extensions` (none when empty); returns the socket and the
/// `sec-websocket-extensions` answer, if any.
async fn open(gw: &Gateway, extensions: &[&str]) -> (TcpStream, Option<String>) {
    let (raw, head) = open_with(gw, extensions, "").await;
    let answer = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("sec-websocket-extensions")
            .then(|| value.trim().to_string())
    });
    (raw, answer)
}

/// As [`open`], with `extra` header lines; returns the whole response head.
async fn open_with(gw: &Gateway, extensions: &[&str], extra: &str) -> (TcpStream, String) {
    open_at(gw, "/v1/ws", extensions, extra).await
}

/// As [`open_with`], at `target` (the path and query).
async fn open_at(
    gw: &Gateway,
    target: &str,
    extensions: &[&str],
    extra: &str,
) -> (TcpStream, String) {
    let mut raw = TcpStream::connect(gw.public_addr).await.unwrap();
    let mut request = format!(
        "GET {target} HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
    );
    request.push_str(extra);
    for offer in extensions {
        request.push_str(&format!("sec-websocket-extensions: {offer}\r\n"));
    }
    request.push_str("\r\n");
    raw.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        raw.read_exact(&mut b).await.unwrap();
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    (raw, head)
}

/// One whole server frame as it came: its first byte (FIN, RSV, opcode) and payload.
async fn frame(raw: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut h = [0u8; 2];
    tokio::time::timeout(WAIT, raw.read_exact(&mut h))
        .await
        .expect("a frame in time")
        .unwrap();
    assert_eq!(h[1] & 0x80, 0, "a server frame is not masked");
    let len = match h[1] & 0x7f {
        126 => u64::from(raw.read_u16().await.unwrap()),
        127 => raw.read_u64().await.unwrap(),
        n => u64::from(n),
    };
    let mut payload = vec![0u8; len as usize];
    raw.read_exact(&mut payload).await.unwrap();
    (h[0], payload)
}

/// The next data frame, pings skipped.
async fn data_frame(raw: &mut TcpStream) -> (u8, Vec<u8>) {
    loop {
        let (first, payload) = frame(raw).await;
        if first & 0x0f != 0x9 {
            return (first, payload);
        }
    }
}

/// A frame's JSON, inflated when RSV1 says it is compressed.
async fn next_json(raw: &mut TcpStream) -> Value {
    let (first, payload) = data_frame(raw).await;
    let text = if first & 0x40 != 0 {
        inflate(&payload, 15)
    } else {
        payload
    };
    serde_json::from_slice(&text).unwrap()
}

fn inflate(payload: &[u8], window_bits: u8) -> Vec<u8> {
    assert!(!payload.ends_with(&TAIL), "the tail is stripped");
    let mut d = Decompress::new_with_window_bits(false, window_bits);
    let mut input = payload.to_vec();
    input.extend_from_slice(&TAIL);
    let mut out = Vec::with_capacity(16 << 20);
    d.decompress_vec(&input, &mut out, FlushDecompress::Sync)
        .expect("valid DEFLATE data for this window");
    assert_eq!(d.total_in() as usize, input.len(), "all of it inflated");
    out
}

fn deflate(data: &[u8]) -> Vec<u8> {
    let mut c = Compress::new(Compression::default(), false);
    let mut out = Vec::with_capacity(data.len() + 64);
    c.compress_vec(data, &mut out, FlushCompress::Sync).unwrap();
    assert!(out.ends_with(&TAIL));
    out.truncate(out.len() - 4);
    out
}

/// Sends `payload` as one text message, compressed (RSV1) when `compressed`.
async fn send_text(raw: &mut TcpStream, payload: &[u8], compressed: bool) {
    let mut f = frame_header(true, 1, payload.len() as u64);
    if compressed {
        f[0] |= 0x40;
    }
    f.extend_from_slice(payload);
    raw.write_all(&f).await.unwrap();
}

async fn subscribe(raw: &mut TcpStream, topic: &str) {
    let command = json!({"type": "subscribe", "topics": [topic]}).to_string();
    send_text(raw, &deflate(command.as_bytes()), true).await;
    let reply = next_json(raw).await;
    assert_eq!(reply["type"], "subscribed", "{reply}");
}

/// A large, compressible payload: 4,000 records.
fn big() -> Value {
    let records: Vec<Value> = (0..4000)
        .map(|i| json!({"id": i, "name": "sensor", "state": "ok", "tags": ["a", "b"]}))
        .collect();
    json!(records)
}

const OFFER: &str = "permessage-deflate; client_max_window_bits";
const ANSWER: &str = "permessage-deflate; server_no_context_takeover; client_no_context_takeover";

#[tokio::test]
async fn the_handshake_accepts_the_first_valid_offer_and_declines_the_rest() {
    let gw = spawn_gateway(test_config()).await;
    assert_eq!(open(&gw, &[OFFER]).await.1.as_deref(), Some(ANSWER));
    assert_eq!(open(&gw, &[]).await.1, None);
    // Invalid offers are declined; the next valid one is taken.
    assert_eq!(
        open(
            &gw,
            &["permessage-deflate; server_max_window_bits=16, permessage-deflate; mystery"]
        )
        .await
        .1,
        None
    );
    assert_eq!(
        open(
            &gw,
            &[
                "x-webkit-deflate-frame",
                "permessage-deflate; server_max_window_bits, permessage-deflate; server_max_window_bits=10; client_no_context_takeover",
            ]
        )
        .await
        .1
        .as_deref(),
        Some(format!("{ANSWER}; server_max_window_bits=10").as_str())
    );
    gw.stop().await.unwrap();

    let mut config = test_config();
    config.ws.permessage_deflate = false;
    let gw = spawn_gateway(config).await;
    assert_eq!(open(&gw, &[OFFER]).await.1, None, "off by configuration");
    gw.stop().await.unwrap();
}

/// Two compressed subscribers, one plain: the compressed frame is identical for both and
/// inflates to the plain one; a short message goes uncompressed to all.
async fn shared_compressed_frames(direct_delivery: bool) {
    let mut config = test_config();
    config.topics.direct_delivery = direct_delivery;
    config.limits.max_payload_bytes = 1 << 20;
    let gw = spawn_gateway(config).await;
    let (mut a, _) = open(&gw, &[OFFER]).await;
    let (mut b, _) = open(&gw, &[OFFER]).await;
    let (mut plain, _) = open(&gw, &[]).await;
    subscribe(&mut a, "big").await;
    subscribe(&mut b, "big").await;
    send_frame(
        &mut plain,
        true,
        1,
        json!({"type": "subscribe", "topics": ["big"]})
            .to_string()
            .as_bytes(),
    )
    .await;
    assert_eq!(data_frame(&mut plain).await.0, 0x81);

    let series = r#"herald_bytes_sent_total{transport="ws"}"#;
    let sent_before = metric(&gw, series).await;
    let id = publish(&gw, "big", big()).await;
    let (first_a, packed_a) = data_frame(&mut a).await;
    let (first_b, packed_b) = data_frame(&mut b).await;
    let (first_plain, text) = data_frame(&mut plain).await;
    // Bytes are counted as they cross the wire: compressed for the compressed subscribers.
    assert_eq!(
        metric(&gw, series).await - sent_before,
        (2 * packed_a.len() + text.len()) as f64,
        "{direct_delivery}"
    );
    assert_eq!(first_a, 0xc1, "final, RSV1, text");
    assert_eq!(
        (first_b, &packed_b),
        (first_a, &packed_a),
        "one shared frame"
    );
    assert_eq!(first_plain, 0x81, "no RSV1 without the extension");
    assert!(
        packed_a.len() * 20 < text.len(),
        "{} compressed of {}",
        packed_a.len(),
        text.len()
    );
    assert_eq!(inflate(&packed_a, 15), text);
    let message: Value = serde_json::from_slice(&text).unwrap();
    assert_eq!(
        (&message["id"], &message["data"]),
        (&json!(id), &big()),
        "{direct_delivery}"
    );

    // Under `ws.deflate_min_size`: as is.
    publish(&gw, "big", json!("short")).await;
    for raw in [&mut a, &mut b, &mut plain] {
        let (first, payload) = data_frame(raw).await;
        assert_eq!(first, 0x81);
        assert_eq!(
            serde_json::from_slice::<Value>(&payload).unwrap()["data"],
            "short"
        );
    }
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn compressed_frames_are_shared_by_subscribers_on_direct_delivery() {
    shared_compressed_frames(true).await;
}

#[tokio::test]
async fn compressed_frames_are_shared_by_subscribers_written_by_their_task() {
    shared_compressed_frames(false).await;
}

#[tokio::test]
async fn a_small_server_window_gets_only_messages_that_fit_it_compressed() {
    let gw = spawn_gateway(test_config()).await;
    let (mut raw, answer) = open(&gw, &["permessage-deflate; server_max_window_bits=9"]).await;
    assert_eq!(
        answer.as_deref(),
        Some(format!("{ANSWER}; server_max_window_bits=9").as_str())
    );
    subscribe(&mut raw, "w").await;
    // A frame of at most 512 bytes inflates within a 512-byte window; a longer one is plain.
    publish(&gw, "w", json!("ab".repeat(200))).await;
    let (first, payload) = data_frame(&mut raw).await;
    assert_eq!(first, 0xc1);
    let text = inflate(&payload, 9);
    assert!(text.len() <= 512, "{}", text.len());
    publish(&gw, "w", json!("ab".repeat(400))).await;
    let (first, payload) = data_frame(&mut raw).await;
    assert_eq!(first, 0x81);
    assert_eq!(
        serde_json::from_slice::<Value>(&payload).unwrap()["data"],
        "ab".repeat(400)
    );
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn a_large_compressed_publish_is_inflated_and_a_big_reply_compressed() {
    let mut config = test_config();
    config.ws.max_message_size = 1 << 20;
    config.limits.max_payload_bytes = 1 << 20;
    config.dev = true;
    let gw = spawn_gateway(config).await;
    let (mut publisher, _) = open(&gw, &[OFFER]).await;
    let (mut subscriber, _) = open(&gw, &[OFFER]).await;
    subscribe(&mut subscriber, "up").await;
    let command = json!({"type": "publish", "topic": "up", "data": big()}).to_string();
    let packed = deflate(command.as_bytes());
    assert!(packed.len() * 20 < command.len() && command.len() > 200 * 1024);
    send_text(&mut publisher, &packed, true).await;
    let reply = next_json(&mut publisher).await;
    assert_eq!(reply["type"], "published", "{reply}");
    let message = next_json(&mut subscriber).await;
    assert_eq!(message["data"], big());
    // Plain and compressed messages mix on one connection, in order.
    send_text(&mut publisher, br#"{"type":"ping","data":1}"#, false).await;
    send_text(
        &mut publisher,
        &deflate(br#"{"type":"ping","data":2}"#),
        true,
    )
    .await;
    assert_eq!(next_json(&mut publisher).await["data"], 1);
    assert_eq!(next_json(&mut publisher).await["data"], 2);
    // A reply of the connection's own over `ws.deflate_min_size` goes compressed too.
    let data = json!("x".repeat(1000));
    let ping = json!({"type": "ping", "data": data}).to_string();
    send_text(&mut publisher, ping.as_bytes(), false).await;
    let (first, payload) = data_frame(&mut publisher).await;
    assert_eq!(first, 0xc1);
    assert_eq!(
        serde_json::from_slice::<Value>(&inflate(&payload, 15)).unwrap()["data"],
        data
    );
    gw.stop().await.unwrap();
}

/// The close frame's code and reason.
async fn closed(raw: &mut TcpStream) -> (u16, String) {
    let (first, payload) = data_frame(raw).await;
    assert_eq!(first, 0x88, "a close frame");
    let code = u16::from_be_bytes([payload[0], payload[1]]);
    (code, String::from_utf8(payload[2..].to_vec()).unwrap())
}

#[tokio::test]
async fn a_decompression_bomb_closes_with_1009() {
    let gw = spawn_gateway(test_config()).await;
    let (mut raw, _) = open(&gw, &[OFFER]).await;
    // 16 MiB of spaces in about 16 KB: past the 64 KiB limit once inflated.
    let bomb = deflate(&vec![b' '; 16 << 20]);
    assert!(bomb.len() < 64 * 1024);
    send_text(&mut raw, &bomb, true).await;
    let (code, reason) = closed(&mut raw).await;
    assert_eq!(code, 1009);
    assert_eq!(reason, "message too big: inflates to more than 65536 bytes");
    gw.stop().await.unwrap();
}

#[tokio::test]
async fn bad_compressed_messages_close_the_connection_with_a_reason() {
    let gw = spawn_gateway(test_config()).await;
    let (mut raw, _) = open(&gw, &[OFFER]).await;
    send_text(&mut raw, &[0xff, 0xff, 0xff, 0xff, 0x00], true).await;
    let (code, reason) = closed(&mut raw).await;
    assert_eq!(code, 1002);
    assert!(reason.contains("not valid DEFLATE data"), "{reason}");

    let (mut raw, _) = open(&gw, &[OFFER]).await;
    send_text(&mut raw, &deflate(&[0xc3, 0x28, b'x']), true).await;
    assert_eq!(
        closed(&mut raw).await.0,
        1007,
        "invalid UTF-8 once inflated"
    );

    // RSV1 without the extension negotiated is a protocol error, as before.
    let (mut raw, _) = open(&gw, &[]).await;
    send_text(&mut raw, &deflate(br#"{"type":"ping"}"#), true).await;
    assert_eq!(closed(&mut raw).await.0, 1002);

    // A compressed binary message is refused like a plain one, and not inflated.
    let (mut raw, _) = open(&gw, &[OFFER]).await;
    let mut f = frame_header(true, 2, 4);
    f[0] |= 0x40;
    f.extend_from_slice(&[1, 2, 3, 4]);
    raw.write_all(&f).await.unwrap();
    assert_eq!(next_json(&mut raw).await["code"], "unsupported_frame");
    gw.stop().await.unwrap();
}

/// A `herald.msgpack` connection with compression: the client's compressed binary frames are
/// inflated and read as MessagePack; Herald's frames go out as plain binary MessagePack (no
/// RSV1), on direct delivery and for its own replies; a compressed text frame is refused like
/// an uncompressed one.
#[tokio::test]
async fn a_msgpack_connection_inflates_compressed_binary_and_sends_plain_binary() {
    let mut config = test_config();
    config.limits.max_payload_bytes = 1 << 20;
    let gw = spawn_gateway(config).await;
    let (mut raw, head) =
        open_with(&gw, &[OFFER], "sec-websocket-protocol: herald.msgpack\r\n").await;
    let lower = head.to_ascii_lowercase();
    assert!(
        lower.contains("sec-websocket-protocol: herald.msgpack\r\n"),
        "{head}"
    );
    assert!(
        lower.contains(&format!("sec-websocket-extensions: {ANSWER}\r\n")),
        "{head}"
    );

    let decode = |payload: &[u8]| -> Value {
        rmp_serde::from_slice(payload).expect("one MessagePack value")
    };
    let command = rmp_serde::to_vec_named(&json!({"type": "subscribe", "topics": ["mp"]})).unwrap();
    let packed = deflate(&command);
    let mut f = frame_header(true, 2, packed.len() as u64);
    f[0] |= 0x40;
    f.extend_from_slice(&packed);
    raw.write_all(&f).await.unwrap();
    let (first, reply) = data_frame(&mut raw).await;
    assert_eq!(first, 0x82, "final, binary, no RSV1");
    assert_eq!(decode(&reply)["type"], "subscribed");

    let id = publish(&gw, "mp", big()).await;
    let (first, message) = data_frame(&mut raw).await;
    assert_eq!(first, 0x82, "a MessagePack message goes uncompressed");
    let message = decode(&message);
    assert_eq!((&message["id"], &message["data"]), (&json!(id), &big()));

    // A compressed text frame on a MessagePack connection: refused, the connection stays.
    send_text(&mut raw, &deflate(br#"{"type":"ping"}"#), true).await;
    let (first, refused) = data_frame(&mut raw).await;
    assert_eq!(first, 0x82);
    assert_eq!(decode(&refused)["code"], "unsupported_frame");
    let ping = rmp_serde::to_vec_named(&json!({"type": "ping"})).unwrap();
    let packed = deflate(&ping);
    let mut f = frame_header(true, 2, packed.len() as u64);
    f[0] |= 0x40;
    f.extend_from_slice(&packed);
    raw.write_all(&f).await.unwrap();
    assert_eq!(decode(&data_frame(&mut raw).await.1)["type"], "pong");
    gw.stop().await.unwrap();
}

/// A client that negotiated compression and sends large pings (or frames whose error quotes
/// them) made the gateway compress every reply again for that one connection (4-6 ms of CPU
/// per 64 KB ping, 11-14x the reply sent as it is). Replies of the connection's own over
/// 4 KiB go uncompressed (RSV1 clear), their data echoed exactly; short ones still go
/// compressed.
#[tokio::test]
async fn large_replies_a_client_causes_go_uncompressed() {
    let gw = spawn_gateway(test_config()).await;
    let (mut raw, answer) = open(&gw, &[OFFER]).await;
    assert!(answer.is_some());
    let data = json!("abcd".repeat(15_000));
    let ping = json!({"type": "ping", "data": data}).to_string();
    for compressed in [true, false] {
        let payload = if compressed {
            deflate(ping.as_bytes())
        } else {
            ping.clone().into_bytes()
        };
        send_text(&mut raw, &payload, compressed).await;
        let (first, reply) = data_frame(&mut raw).await;
        assert_eq!(first, 0x81, "final, text, no RSV1: sent as it is");
        let pong: Value = serde_json::from_slice(&reply).unwrap();
        assert_eq!((&pong["type"], &pong["data"]), (&json!("pong"), &data));
    }
    // An error frame that quotes a large frame: as it is too.
    let bad = json!({"type": "y".repeat(50_000)}).to_string();
    send_text(&mut raw, &deflate(bad.as_bytes()), true).await;
    let (first, reply) = data_frame(&mut raw).await;
    assert_eq!(first, 0x81);
    let error: Value = serde_json::from_slice(&reply).unwrap();
    assert_eq!(error["type"], "error", "{error}");
    // A short reply over `ws.deflate_min_size` still goes compressed.
    let small = json!({"type": "ping", "data": "z".repeat(1000)}).to_string();
    send_text(&mut raw, small.as_bytes(), false).await;
    let (first, _) = data_frame(&mut raw).await;
    assert_eq!(first, 0xc1, "final, RSV1, text");
    gw.stop().await.unwrap();
}

/// A client that asked for batch frames and negotiated compression gets each message in a
/// frame of its own, compressed once for every subscriber (batches would be made per
/// connection, uncompressed).
#[tokio::test]
async fn a_compressed_connection_gets_no_batch_frames() {
    let gw = spawn_gateway(test_config()).await;
    let (mut raw, head) = open_at(&gw, "/v1/ws?batch=1", &[OFFER], "").await;
    assert!(head.contains(ANSWER), "{head}");
    subscribe(&mut raw, "squeezed").await;
    let messages: Vec<Value> = (0..50)
        .map(|n| json!({"topic": "squeezed", "data": big_with(n)}))
        .collect();
    publish_batch(&gw, messages).await;
    for n in 0..50 {
        let message = next_json(&mut raw).await;
        assert_eq!(message["type"], "message", "{message}");
        assert_eq!(message["data"], big_with(n));
    }
    gw.stop().await.unwrap();
}

/// A message worth compressing (over `ws.deflate_min_size`), numbered.
fn big_with(n: u64) -> Value {
    json!({"n": n, "readings": "sensor ok; ".repeat(40)})
}
