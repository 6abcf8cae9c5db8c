//! MessagePack payloads and `herald.msgpack` commands on arbitrary bytes:
//! `herald_core::Payload::from_msgpack` and `herald_core::protocol::from_msgpack`.
//!
//! Checks: neither panics nor recurses without bound; an accepted payload's JSON form is one
//! JSON value whose MessagePack form gives the same JSON form back (the conversion loses
//! nothing a JSON reader can see), and its MessagePack bytes are the input, untouched; a
//! command frame accepted as MessagePack is a JSON object that `protocol::parse` reads
//! without panicking, and its `data` bytes, when present, are a payload on their own;
//! `protocol::command_from_msgpack` accepts exactly the frames `from_msgpack` does, with the
//! same `data` bytes.

#![no_main]

use herald_core::msgpack;
use herald_core::protocol;
use herald_core::Payload;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(payload) = Payload::from_msgpack(data) {
        assert_eq!(payload.msgpack().map(|m| &m[..]), Some(data));
        let value: serde_json::Value =
            serde_json::from_slice(payload.as_bytes()).expect("the JSON form is JSON");
        let again = msgpack::to_json(&msgpack::from_json(&value)).expect("round trip");
        let again: serde_json::Value = serde_json::from_slice(&again).unwrap();
        assert_eq!(again, value);
    }
    // A connection's read (data checked, not converted) accepts exactly the same frames and
    // carries the same data bytes.
    let lean = protocol::command_from_msgpack(data);
    assert_eq!(
        lean.as_ref().ok().map(|f| f.data),
        protocol::from_msgpack(data).ok().map(|f| f.data)
    );
    if let Ok(lean) = lean {
        let _ = protocol::parse(&lean.json);
    }
    if let Ok(frame) = protocol::from_msgpack(data) {
        let object: serde_json::Value =
            serde_json::from_str(&frame.json).expect("the command's JSON form is JSON");
        assert!(object.is_object());
        let _ = protocol::parse(&frame.json);
        if let Some(raw) = frame.data {
            assert!(Payload::from_msgpack(raw).is_ok(), "data is a value of its own");
        }
    }
});
