//! A message's wire encodings: `Message::sse_frame`, `sse_body` and `ws_frame`.
//!
//! Input, one part a line: topic, cursor (`<epoch>-<seq>`), event name (empty line: none),
//! then the payload: the rest as JSON, or, when the rest is not JSON, the rest as a JSON
//! string (so that raw CR and LF reach the string path). Parts that the core refuses are
//! skipped.
//!
//! Checks what the encoder promises: one SSE event ending in a blank line and holding no
//! other, no CR anywhere, the lines `id: topic=cursor`, `event: name` when named, then only
//! `data:` lines, whose values joined with LF give back the payload (a string's text with
//! line endings made LF, any other value as the compact JSON); `sse_body` is the frame
//! without its `id:` line; the WebSocket frame is one JSON object with the message's type,
//! topic, id, event and data. Accepted names hold only characters that need no escaping.

#![no_main]

use herald_core::{Cursor, EventName, Message, Payload, ResumeList, TopicName};
use libfuzzer_sys::fuzz_target;
use serde::Deserialize;
use serde_json::{Value, json};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.splitn(4, '\n');
    let (Some(topic), Some(cursor), Some(event)) = (parts.next(), parts.next(), parts.next())
    else {
        return;
    };
    let rest = parts.next().unwrap_or("");
    let Ok(topic) = TopicName::new(topic) else {
        return;
    };
    let Ok(cursor) = cursor.parse::<Cursor>() else {
        return;
    };
    let event = match event {
        "" => None,
        name => match EventName::new(name) {
            Ok(name) => Some(name),
            Err(_) => return,
        },
    };
    let payload = match Payload::from_json(rest.as_bytes()) {
        Ok(payload) => payload,
        Err(_) => Payload::from_value(&Value::String(rest.to_owned())),
    };
    check_names(&topic, event.as_ref());
    let message = Message::new(topic, cursor, event, payload);
    check_sse(&message);
    check_ws(&message);
});

/// Accepted names go verbatim into SSE lines and JSON strings.
fn check_names(topic: &TopicName, event: Option<&EventName>) {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_.:-".contains(c);
    assert!(topic.as_str().chars().all(|c| plain(c) || c == '@'));
    assert!((1..=128).contains(&topic.as_str().len()));
    if let Some(event) = event {
        assert!(event.as_str().chars().all(plain));
        assert!((1..=64).contains(&event.as_str().len()));
        assert!(!event.as_str().starts_with("herald."));
    }
}

/// The payload as a value. Payloads are at most 127 levels deep, so no recursion limit is
/// needed here, where a payload may sit one level down in a frame.
fn value(json: &[u8]) -> Value {
    let mut de = serde_json::Deserializer::from_slice(json);
    de.disable_recursion_limit();
    let value = Value::deserialize(&mut de).expect("valid JSON");
    de.end().expect("one value");
    value
}

fn check_sse(message: &Message) {
    let frame = message.sse_frame();
    let text = std::str::from_utf8(frame).expect("SSE frame is UTF-8");
    assert!(text.ends_with("\n\n"), "{text:?}");
    assert_eq!(
        text.find("\n\n"),
        Some(text.len() - 2),
        "one event: {text:?}"
    );
    assert!(!text.contains('\r'), "{text:?}");

    let mut lines = text[..text.len() - 2].split('\n');
    let id = lines.next().expect("an id line");
    let expected_id = format!("id: {}={}", message.topic(), message.cursor());
    assert_eq!(id, expected_id);
    // The id is a one-entry resume list naming this message.
    let list: ResumeList = id["id: ".len()..].parse().expect("id is a resume list");
    assert_eq!(list.get(message.topic().as_str()), Some(message.cursor()));
    let mut lines = lines.peekable();
    if let Some(event) = message.event() {
        assert_eq!(
            lines.next(),
            Some(format!("event: {}", event.as_str()).as_str())
        );
    }
    let mut data = Vec::new();
    for line in lines {
        // How an EventSource reads a field: name, colon, one optional space, value.
        let value = line
            .strip_prefix("data:")
            .unwrap_or_else(|| panic!("only data lines after id and event: {line:?} in {text:?}"));
        data.push(value.strip_prefix(' ').unwrap_or(value));
    }
    assert!(!data.is_empty(), "at least one data line: {text:?}");
    let data = data.join("\n");

    let raw = message.data().as_bytes();
    match value(raw) {
        Value::String(s) => {
            let sent = s.replace("\r\n", "\n").replace('\r', "\n");
            assert_eq!(data, sent, "string payload as its text");
        }
        payload => {
            assert_eq!(data.as_bytes(), &raw[..], "compact JSON on one line");
            assert_eq!(value(data.as_bytes()), payload);
        }
    }

    let body = message.sse_body();
    assert_eq!(&body[..], &frame[id.len() + 1..]);
    assert!(body.starts_with(b"event: ") || body.starts_with(b"data:"));
}

fn check_ws(message: &Message) {
    let frame = message.ws_frame();
    assert!(
        std::str::from_utf8(frame).is_ok(),
        "WebSocket text is UTF-8"
    );
    let got = value(frame);
    let mut expected = json!({
        "type": "message",
        "topic": message.topic().as_str(),
        "id": message.cursor().to_string(),
        "data": value(message.data().as_bytes()),
    });
    if let Some(event) = message.event() {
        expected["event"] = event.as_str().into();
    }
    assert_eq!(got, expected, "{:?}", String::from_utf8_lossy(frame));
}
