use super::*;
use crate::cursor::Cursor;
use crate::message::Message;
use crate::name::{EventName, TopicName};
use serde_json::json;

fn message(seq: u64, data: serde_json::Value, base: Option<&Message>) -> Message {
    let m = Message::new(
        TopicName::new("match:1").unwrap(),
        Cursor::new(0xab, seq),
        Some(EventName::new("score").unwrap()),
        Payload::from_value(&data),
    );
    match base {
        Some(b) => m.with_base(b.cursor(), b.data().clone()),
        None => m,
    }
}

fn state(goals: u32, note: &str) -> serde_json::Value {
    let players: Vec<_> = (0..22)
        .map(|i| json!({"name": format!("Player {i}"), "number": i + 1, "goals": 0, "cards": []}))
        .collect();
    json!({"home": "Herald FC", "away": "Gateway United", "score": [goals, 0], "note": note, "players": players})
}

#[test]
fn a_json_delta_frame_carries_a_delta_that_rebuilds_the_data_exactly() {
    let first = message(1, state(0, "kick-off"), None);
    assert!(first.delta_base().is_none() && first.json_delta().is_none());
    let second = message(2, state(1, "goal — Ünal 12'"), Some(&first));
    assert_eq!(second.delta_base(), Some(Cursor::new(0xab, 1)));
    let delta = second.json_delta().expect("a small change pays");
    let frame: serde_json::Value = serde_json::from_slice(delta.ws_frame()).unwrap();
    assert_eq!(frame["type"], "message");
    assert_eq!(frame["topic"], "match:1");
    assert_eq!(frame["id"], "ab-2");
    assert_eq!(frame["event"], "score");
    assert_eq!(frame["delta"], true);
    let text = frame["data"].as_str().unwrap();
    let rebuilt = apply(first.data().as_bytes(), text.as_bytes(), 1 << 20).unwrap();
    assert_eq!(&rebuilt[..], &second.data().as_bytes()[..]);
    assert!(
        delta.ws_frame().len() * 4 < second.ws_frame().len(),
        "a quarter or less"
    );
    // `data` is last, and the wire frame wraps the payload.
    assert!(delta.ws_frame().ends_with(b"\"}"));
    assert_eq!(&delta.ws_wire_frame()[..1], &[0x81]);
    assert!(delta.ws_wire_frame().ends_with(delta.ws_frame()));
    // Made once and shared.
    assert_eq!(
        second.json_delta().unwrap().ws_frame().as_ptr(),
        delta.ws_frame().as_ptr()
    );
    // SSE: one data line holding the frame, after the message's own id.
    let sent = crate::message::Outbound::new(&second, true);
    let sse = sent.sse_json_frame();
    assert!(sse.starts_with(b"id: match:1=ab-2\ndata: {"));
    assert_eq!(sse.iter().filter(|&&b| b == b'\n').count(), 3, "{sse:?}");
    assert_eq!(
        &sent.sse_json_body()[6..],
        &sse[sse.len() - delta.ws_frame().len() - 2..]
    );
}

#[test]
fn a_delta_that_does_not_pay_is_not_made() {
    let first = message(1, json!({"n": 1}), None);
    let second = message(2, json!({"n": 2}), Some(&first));
    assert!(second.json_delta().is_none(), "tiny payloads go full");
    assert!(second.msgpack_delta().is_none());
    // Unrelated data: the delta is as long as the data.
    let random = |mut seed: u64| {
        let text: String = (0..400)
            .map(|_| {
                // xorshift64
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                char::from(b'a' + (seed % 26) as u8)
            })
            .collect();
        json!({ "blob": text })
    };
    let first = message(1, random(1), None);
    let second = message(2, random(2), Some(&first));
    assert!(second.json_delta().is_none());
}

#[test]
fn a_delta_that_splits_a_character_is_not_sent_as_json() {
    // The base and the target share the first byte of a two-byte character: a delta may copy
    // it and insert the second byte alone, which no JSON string can hold. Whatever the
    // encoder does, what is sent is valid UTF-8 and rebuilds the data.
    let filler = "x".repeat(200);
    let first = message(1, json!(format!("{filler}é{filler}")), None);
    let second = message(2, json!(format!("{filler}è{filler}")), Some(&first));
    if let Some(delta) = second.json_delta() {
        let frame: serde_json::Value = serde_json::from_slice(delta.ws_frame()).unwrap();
        let rebuilt = apply(
            first.data().as_bytes(),
            frame["data"].as_str().unwrap().as_bytes(),
            1 << 20,
        )
        .unwrap();
        assert_eq!(&rebuilt[..], &second.data().as_bytes()[..]);
    }
}

#[test]
fn a_msgpack_delta_applies_to_the_msgpack_data() {
    let first = message(1, state(0, "kick-off"), None);
    let second = message(2, state(1, "goal"), Some(&first));
    let delta = second.msgpack_delta().expect("pays");
    let fields = crate::msgpack::map_fields(delta.ws_msgpack_frame()).unwrap();
    let names: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
    assert_eq!(names, ["type", "topic", "id", "event", "delta", "data"]);
    assert_eq!(fields[4].1, &[0xc3], "true");
    // A bin: its header, then the delta.
    let bin = fields[5].1;
    let (len, header) = match bin[0] {
        0xc4 => (usize::from(bin[1]), 2),
        0xc5 => (usize::from(u16::from_be_bytes([bin[1], bin[2]])), 3),
        other => panic!("not a bin: {other:#x}"),
    };
    assert_eq!(bin.len(), header + len);
    let base = crate::frame::msgpack_data(first.data());
    let rebuilt = apply(&base, &bin[header..], 1 << 20).unwrap();
    assert_eq!(rebuilt, crate::frame::msgpack_data(second.data()).to_vec());
    assert!(
        delta
            .ws_msgpack_wire_frame()
            .ends_with(delta.ws_msgpack_frame())
    );
    assert_eq!(delta.ws_msgpack_wire_frame()[0], 0x82);
}

#[test]
fn apply_agrees_with_the_encoder_on_many_edits() {
    let mut base = state(0, "start").to_string().into_bytes();
    for round in 0..200u32 {
        let mut target = base.clone();
        let at = (round as usize * 37) % target.len();
        match round % 3 {
            0 => target.insert(at, b'0' + (round % 10) as u8),
            1 => {
                target.remove(at);
            }
            _ => target
                .splice(at..at, b"inserted text".iter().copied())
                .for_each(drop),
        }
        let delta = encode(&base, &target);
        assert_eq!(
            apply(&base, &delta, 1 << 20).unwrap(),
            target,
            "round {round}"
        );
        assert_eq!(
            fossil_delta::apply(&base, &delta).unwrap(),
            target,
            "as the crate reads it"
        );
        base = target;
    }
}

#[test]
fn apply_refuses_every_malformed_delta_without_panicking() {
    let base = b"hello, world: the base text of this test".to_vec();
    let target = b"hello, there: the base text of this test!".to_vec();
    let good = encode(&base, &target);
    assert_eq!(apply(&base, &good, 1 << 20).unwrap(), target);
    // Every prefix is truncated or wrong, never a panic.
    for cut in 0..good.len() {
        assert!(apply(&base, &good[..cut], 1 << 20).is_err(), "cut at {cut}");
    }
    // The wrong base: the checksum (or a range) says so.
    assert!(apply(b"another base of another length entirely!!", &good, 1 << 20).is_err());
    assert_eq!(
        apply(&base, b"3\n3:abc!;", 100),
        Err(DeltaError::Unexpected(b'!'))
    );
    assert_eq!(
        apply(&base, b"~~~~~~~~\n0;", 1 << 20),
        Err(DeltaError::TooBig {
            claimed: (1 << 48) - 1,
            limit: 1 << 20
        })
    );
    assert_eq!(
        apply(&base, b"~~~~~~~~~~~~\n", usize::MAX),
        Err(DeltaError::OutOfRange)
    );
    assert_eq!(
        apply(&base, b"5\n5@~~~~~~,0;", 100),
        Err(DeltaError::OutOfRange)
    );
    assert_eq!(
        apply(&base, b"5\n~~~~~~~~~~@1,0;", 100),
        Err(DeltaError::OutOfRange)
    );
    assert_eq!(apply(&base, b"2\n9:abc", 100), Err(DeltaError::OutOfRange));
    assert_eq!(apply(&base, b"9\n2:abc", 100), Err(DeltaError::Truncated));
    assert!(matches!(
        apply(&base, b"3\n2:ab0;", 100),
        Err(DeltaError::WrongSize { .. })
    ));
    assert_eq!(apply(&base, b"2\n2:ab0;", 100), Err(DeltaError::Checksum));
    assert_eq!(apply(&base, b"", 100), Err(DeltaError::Truncated));
    assert_eq!(apply(&base, b"\n", 100), Err(DeltaError::Unexpected(b'\n')));
}
