//! WebSocket client commands: `herald_core::protocol::parse` on arbitrary UTF-8 text.
//!
//! Checks: it never panics; an error's code is `bad_json` or `bad_frame`, and never `bad_json`
//! for text that is JSON; an accepted command came from a JSON object whose `type` names
//! it, and carries that object's fields (topics, cursors, token, topic, event); the `data` of
//! a ping or publish is exactly one JSON value equal to the object's `data` (a ping has none
//! only when the field is absent).

#![no_main]

use herald_core::protocol::{Command, parse};
use libfuzzer_sys::fuzz_target;
use serde::de::IgnoredAny;
use serde_json::Value;
use serde_json::value::RawValue;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The text as a tree, when serde_json takes it as one: no lone surrogates, numbers in
    // range, at most 127 levels deep.
    let tree = serde_json::from_str::<Value>(text);
    let command = match parse(text) {
        Ok(command) => command,
        Err(e) => {
            assert!(matches!(e.code, "bad_json" | "bad_frame"), "{e:?}");
            if e.code == "bad_json" {
                assert!(tree.is_err(), "valid JSON called bad_json: {text:?} {e:?}");
            }
            return;
        }
    };
    // `IgnoredAny` skips values like the `RawValue` fields do: any depth, any number.
    assert!(
        serde_json::from_str::<IgnoredAny>(text).is_ok(),
        "accepted text that is not JSON: {text:?}"
    );
    assert!(
        text.trim_start_matches([' ', '\t', '\n', '\r'])
            .starts_with('{'),
        "a command is a JSON object: {text:?}"
    );
    // The fields, when the text is a tree (a payload may be deeper, or hold a huge number).
    let Ok(Value::Object(object)) = tree else {
        return;
    };
    let field = |name: &str| object.get(name);
    let kind = field("type").and_then(Value::as_str);
    let strings = |v: &Vec<String>| Value::from(v.clone());
    match command {
        Command::Subscribe {
            topics,
            cursors,
            last,
            delta,
        } => {
            assert_eq!(field("delta").and_then(Value::as_str), delta.as_deref(), "{text:?}");
            assert_eq!(kind, Some("subscribe"));
            let given = field("last").and_then(Value::as_u64);
            assert_eq!(given, last.map(|n| n as u64), "{text:?}");
            assert_eq!(field("topics"), Some(&strings(&topics)));
            for (topic, cursor) in &cursors {
                let given = field("cursors").and_then(|c| c.get(topic));
                assert_eq!(given.and_then(Value::as_str), Some(cursor.as_str()));
            }
            let given = field("cursors").and_then(Value::as_object);
            assert_eq!(given.map_or(0, |c| c.len()), cursors.len());
        }
        Command::Unsubscribe { topics } => {
            assert_eq!(kind, Some("unsubscribe"));
            assert_eq!(field("topics"), Some(&strings(&topics)));
        }
        Command::Heartbeat { interval } => {
            assert_eq!(kind, Some("heartbeat"));
            let given = field("interval").and_then(Value::as_f64);
            assert_eq!(given, Some(interval), "{text:?}");
        }
        Command::Auth { token } => {
            assert_eq!(kind, Some("auth"));
            assert_eq!(field("token").and_then(Value::as_str), Some(token.as_str()));
        }
        Command::Ping { data } => {
            assert_eq!(kind, Some("ping"));
            assert_eq!(data.is_some(), field("data").is_some(), "{text:?}");
            if let Some(data) = data {
                check_raw(data, field("data"));
            }
        }
        Command::Publish {
            topic,
            event,
            data,
            traceparent,
            tracestate,
            idempotency_key,
        } => {
            assert_eq!(kind, Some("publish"));
            assert_eq!(
                field("idempotency_key").and_then(Value::as_str),
                idempotency_key.as_deref()
            );
            assert_eq!(field("topic").and_then(Value::as_str), Some(topic.as_str()));
            assert_eq!(
                field("event").and_then(Value::as_str),
                event.as_deref(),
                "{text:?}"
            );
            check_raw(data, field("data"));
            assert_eq!(
                field("traceparent").and_then(Value::as_str),
                traceparent.as_deref()
            );
            assert_eq!(
                field("tracestate").and_then(Value::as_str),
                tracestate.as_deref()
            );
        }
    }
});

/// `raw` is one JSON value on its own (what ping echoes and publish forwards), equal to the
/// object's field.
fn check_raw(raw: &RawValue, field: Option<&Value>) {
    let text = raw.get();
    assert!(serde_json::from_str::<IgnoredAny>(text).is_ok(), "{text:?}");
    assert_eq!(text.trim(), text, "no surrounding whitespace");
    let value: Value = serde_json::from_str(text).expect("shallower than the whole frame");
    assert_eq!(Some(&value), field);
}
