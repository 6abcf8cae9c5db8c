//! The WebSocket protocol's client commands: parsing a text frame into a [`Command`].
//!
//! Kept here, free of I/O, so that it can be unit-tested and fuzzed on its own
//! (`crates/core/fuzz`). The gateway's WebSocket transport acts on the parsed command.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::value::RawValue;

/// A command sent by a WebSocket client, borrowed from the frame's text.
#[derive(Debug)]
pub enum Command<'a> {
    /// `{"type":"subscribe","topics":[...],"cursors":{topic: cursor},"last":N,"delta":"fossil"}`
    Subscribe {
        /// Topics to add (not yet validated).
        topics: Vec<String>,
        /// Where to resume each topic (not yet validated); missing topics start now.
        cursors: HashMap<String, String>,
        /// Topics without a cursor start with the newest `last` messages history holds.
        last: Option<usize>,
        /// The delta encoding the client takes on these topics (not yet validated).
        delta: Option<String>,
    },
    /// `{"type":"unsubscribe","topics":[...]}`
    Unsubscribe {
        /// Topics to drop.
        topics: Vec<String>,
    },
    /// `{"type":"heartbeat","interval":30}`: the client asks for server pings every
    /// `interval` seconds (not yet checked against the server's bounds).
    Heartbeat {
        /// Seconds.
        interval: f64,
    },
    /// `{"type":"auth","token":"..."}`: a token for the connection, or a fresh one.
    Auth {
        /// The JWT.
        token: String,
    },
    /// `{"type":"ping","data":...}`: answered by a `pong` carrying the same `data`.
    Ping {
        /// Any JSON value, echoed untouched.
        data: Option<&'a RawValue>,
    },
    /// `{"type":"publish","topic":"...","event":"...","data":...}`, with a W3C trace context
    /// in `traceparent` (and `tracestate`) when the client traces it, and an
    /// `idempotency_key` when the client may retry it.
    Publish {
        /// The topic (not yet validated).
        topic: String,
        /// The event name, if any (not yet validated).
        event: Option<String>,
        /// The payload, as the client wrote it.
        data: &'a RawValue,
        /// The W3C `traceparent` (not yet validated: a malformed one is ignored).
        traceparent: Option<String>,
        /// The W3C `tracestate` that goes with it.
        tracestate: Option<String>,
        /// The publish's idempotency key (not yet validated): a retry with the same key is
        /// answered with the first publish's id.
        idempotency_key: Option<String>,
    },
}

/// Why a frame is not a command: sent back to the client as an error frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {reason}")]
pub struct CommandError {
    /// Machine-readable: `bad_json` (not JSON) or `bad_frame` (JSON, but not a command).
    pub code: &'static str,
    /// For people.
    pub reason: String,
}

impl CommandError {
    fn frame(reason: String) -> Self {
        Self {
            code: "bad_frame",
            reason,
        }
    }
}

/// The frame as written: `type` names the command; which other fields it needs depends on
/// it. (A flat struct rather than a tagged enum: serde buffers tagged enums, which loses the
/// zero-copy `RawValue` that lets `ping` echo and `publish` forward payloads untouched.)
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Frame<'a> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    topics: Option<Vec<String>>,
    #[serde(default)]
    cursors: Option<HashMap<String, String>>,
    #[serde(default)]
    last: Option<usize>,
    #[serde(default)]
    delta: Option<String>,
    #[serde(default)]
    interval: Option<f64>,
    #[serde(default)]
    topic: Option<String>,
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    traceparent: Option<String>,
    #[serde(default)]
    tracestate: Option<String>,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(borrow, default)]
    data: Data<'a>,
}

/// A JSON value kept as text; `null` is present, a missing field is `Data(None)`.
#[derive(Debug, Default)]
struct Data<'a>(Option<&'a RawValue>);

impl<'de: 'a, 'a> Deserialize<'de> for Data<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&RawValue>::deserialize(d).map(|raw| Data(Some(raw)))
    }
}

/// Parses one text frame.
pub fn parse(text: &str) -> Result<Command<'_>, CommandError> {
    let frame: Frame<'_> = serde_json::from_str(text).map_err(|e| {
        // A type error can be met before a syntax error further on: say `bad_json` for
        // anything that is not JSON at all.
        let is_json = e.is_data() && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok();
        CommandError {
            code: if is_json { "bad_frame" } else { "bad_json" },
            reason: e.to_string(),
        }
    })?;
    // serde's derived `Deserialize` also takes a struct as an array of its fields in order
    // (`["ping"]`); a command is an object with a `type`.
    if !text
        .trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with('{')
    {
        return Err(CommandError::frame("a command is a JSON object".into()));
    }
    let kind = frame.kind;
    let missing = |field: &str| CommandError::frame(format!("{kind} needs {field:?}"));
    Ok(match &*kind {
        "subscribe" => Command::Subscribe {
            topics: frame.topics.ok_or_else(|| missing("topics"))?,
            cursors: frame.cursors.unwrap_or_default(),
            last: frame.last,
            delta: frame.delta,
        },
        "unsubscribe" => Command::Unsubscribe {
            topics: frame.topics.ok_or_else(|| missing("topics"))?,
        },
        "heartbeat" => Command::Heartbeat {
            interval: frame.interval.ok_or_else(|| missing("interval"))?,
        },
        "auth" => Command::Auth {
            token: frame.token.ok_or_else(|| missing("token"))?,
        },
        "ping" => {
            // Echoed data obeys the payload rules (nesting depth), like published data.
            // The data is valid JSON (serde read it to its end); it goes back as sent, so
            // only its depth is checked, without parsing it into values.
            if let Some(data) = frame.data.0
                && crate::message::json_depth(data.get().as_bytes())
                    > crate::message::MAX_PAYLOAD_DEPTH
            {
                // `bad_frame`: the text is JSON, the command is not acceptable.
                return Err(CommandError::frame(format!(
                    "payload is nested deeper than {} levels",
                    crate::message::MAX_PAYLOAD_DEPTH
                )));
            }
            Command::Ping { data: frame.data.0 }
        }
        "publish" => Command::Publish {
            topic: frame.topic.ok_or_else(|| missing("topic"))?,
            event: frame.event,
            data: frame.data.0.ok_or_else(|| missing("data"))?,
            traceparent: frame.traceparent,
            tracestate: frame.tracestate,
            idempotency_key: frame.idempotency_key,
        },
        other => {
            return Err(CommandError::frame(format!(
                "unknown type {other:?}; expected subscribe, unsubscribe, ping, publish or auth"
            )));
        }
    })
}

/// A binary frame of the `herald.msgpack` subprotocol, read: the command as JSON text for
/// [`parse`] (so that both formats are held to the same rules and answered with the same
/// errors), and the raw MessagePack bytes of its `data`, to carry as given.
#[derive(Debug)]
pub struct MsgpackFrame<'a> {
    /// The command as a JSON object (its `data` in its JSON form from [`from_msgpack`], `null`
    /// from [`command_from_msgpack`]).
    pub json: String,
    /// The `data` field's MessagePack bytes, when it has one.
    pub data: Option<&'a [u8]>,
}

/// Reads one binary frame of the `herald.msgpack` subprotocol: a MessagePack map with the
/// fields of the JSON command. `bad_msgpack` when it is not one MessagePack map with string
/// keys whose values all have a JSON form; the command itself is then checked by [`parse`].
pub fn from_msgpack(frame: &[u8]) -> Result<MsgpackFrame<'_>, CommandError> {
    read_msgpack(frame, true)
}

/// As [`from_msgpack`], but `json` holds `null` in place of `data`'s JSON form: the data is
/// checked to have one (and to be nested no deeper than a payload may), and is carried as
/// its MessagePack bytes, never converted. What a connection reads: its ping's data is
/// echoed as given and its publish's payload is made from the bytes, so converting them to
/// JSON only to parse them again was the whole cost of a large ping (60,000 nils, 60 KB on
/// the wire, were 300 KB of JSON: 8.7x a JSON ping of 64 KB).
pub fn command_from_msgpack(frame: &[u8]) -> Result<MsgpackFrame<'_>, CommandError> {
    read_msgpack(frame, false)
}

/// The fields of a `herald.msgpack` frame as a JSON command, `data` in its JSON form when
/// `data_as_json`, else as `null`.
fn read_msgpack(frame: &[u8], data_as_json: bool) -> Result<MsgpackFrame<'_>, CommandError> {
    let bad = |e: crate::msgpack::MsgpackError| CommandError {
        code: "bad_msgpack",
        reason: e.to_string(),
    };
    // Checks every field: a MessagePack value with a JSON form, nested at most
    // `MAX_PAYLOAD_DEPTH` deep.
    let fields = crate::msgpack::map_fields(frame).map_err(bad)?;
    let mut json = String::with_capacity(64);
    let mut data = None;
    json.push('{');
    for (i, (key, raw)) in fields.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        // Keys and values were checked by `map_fields`: both conversions succeed.
        json.push_str(&serde_json::to_string(key).unwrap_or_default());
        json.push(':');
        if *key == "data" {
            data = Some(*raw);
            if !data_as_json {
                json.push_str("null");
                continue;
            }
        }
        let value = crate::msgpack::to_json(raw).map_err(bad)?;
        json.push_str(std::str::from_utf8(&value).unwrap_or("null"));
    }
    json.push('}');
    Ok(MsgpackFrame { json, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_command() {
        let Command::Subscribe {
            topics,
            cursors,
            last,
            delta,
        } = parse(
            r#"{"type":"subscribe","topics":["a"],"cursors":{"a":"1-2"},"last":3,"delta":"fossil"}"#,
        )
        .unwrap()
        else {
            panic!("subscribe");
        };
        assert_eq!(topics, ["a"]);
        assert_eq!(delta.as_deref(), Some("fossil"));
        assert_eq!(cursors, HashMap::from([("a".into(), "1-2".into())]));
        assert_eq!(last, Some(3));
        assert!(matches!(
            parse(r#"{"type":"unsubscribe","topics":[]}"#).unwrap(),
            Command::Unsubscribe { topics } if topics.is_empty()
        ));
        assert!(matches!(
            parse(r#"{"type":"auth","token":"t"}"#).unwrap(),
            Command::Auth { token } if token == "t"
        ));
        let Command::Ping { data: Some(data) } =
            parse(r#"{"type":"ping","data":{"x": 1}}"#).unwrap()
        else {
            panic!("ping with data");
        };
        assert_eq!(data.get(), r#"{"x": 1}"#, "echoed as written");
        assert!(matches!(
            parse(r#"{"type":"ping"}"#).unwrap(),
            Command::Ping { data: None }
        ));
        let Command::Publish {
            topic,
            event,
            data,
            traceparent: None,
            tracestate: None,
            idempotency_key: None,
        } = parse(r#"{"type":"publish","topic":"t","event":"e","data":null}"#).unwrap()
        else {
            panic!("publish");
        };
        assert_eq!(
            (topic.as_str(), event.as_deref(), data.get()),
            ("t", Some("e"), "null")
        );
        let traced = r#"{"type":"publish","topic":"t","data":1,"traceparent":"00-a-b-01","tracestate":"v=1"}"#;
        let Command::Publish {
            traceparent,
            tracestate,
            ..
        } = parse(traced).unwrap()
        else {
            panic!("publish");
        };
        assert_eq!(
            (traceparent.as_deref(), tracestate.as_deref()),
            (Some("00-a-b-01"), Some("v=1"))
        );
    }

    #[test]
    fn refuses_what_is_not_a_command() {
        let code = |text: &str| parse(text).unwrap_err().code;
        assert_eq!(code("{"), "bad_json");
        assert_eq!(code("\"subscribe\""), "bad_frame");
        assert_eq!(code(r#"{"type":"subscribe"}"#), "bad_frame");
        assert_eq!(code(r#"{"type":"publish","topic":"t"}"#), "bad_frame");
        assert_eq!(code(r#"{"type":"dance"}"#), "bad_frame");
        assert_eq!(code(r#"{"type":"ping","extra":1}"#), "bad_frame");
        assert_eq!(code(r#"{"type":"subscribe","topics":[1]}"#), "bad_frame");
        // A type error before a syntax error is still not JSON.
        assert_eq!(code(r#"{"type":1, ["#), "bad_json");
        assert_eq!(code(r#"[[[{"type":"ping"}"#), "bad_json");
        // serde would take an array as the struct's fields in order (checked by fuzz/ws_command).
        assert_eq!(code(r#"["ping"]"#), "bad_frame");
        assert_eq!(
            code(r#" ["publish",null,null,"t",null,null,1]"#),
            "bad_frame"
        );
        assert!(parse(" \n{\"type\":\"ping\"}").is_ok());
        // Echoed ping data is held to the payload nesting limit.
        let deep = |n: usize| {
            format!(
                r#"{{"type":"ping","data":{}1{}}}"#,
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        assert!(parse(&deep(crate::message::MAX_PAYLOAD_DEPTH)).is_ok());
        assert_eq!(
            code(&deep(crate::message::MAX_PAYLOAD_DEPTH + 1)),
            "bad_frame"
        );
        let missing = parse(r#"{"type":"auth"}"#).unwrap_err();
        assert_eq!(missing.reason, "auth needs \"token\"");
    }

    #[test]
    fn a_msgpack_frame_is_the_same_command_with_its_data_as_given() {
        use crate::msgpack;
        // {"type":"publish","topic":"t","data":bin[1,2]}
        let mut frame = msgpack::from_json(&serde_json::json!({"type": "publish", "topic": "t"}));
        frame[0] = 0x83;
        frame.extend_from_slice(&[0xa4, b'd', b'a', b't', b'a', 0xc4, 2, 1, 2]);
        let read = from_msgpack(&frame).unwrap();
        assert_eq!(read.json, r#"{"type":"publish","topic":"t","data":"AQI="}"#);
        assert_eq!(read.data, Some(&[0xc4, 2, 1, 2][..]));
        assert!(matches!(
            parse(&read.json).unwrap(),
            Command::Publish { .. }
        ));
        // The same rules as JSON: a missing field, an unknown type.
        let subscribe = msgpack::from_json(&serde_json::json!({"type": "subscribe"}));
        let err = parse(&from_msgpack(&subscribe).unwrap().json).unwrap_err();
        assert_eq!(
            (err.code, err.reason.as_str()),
            ("bad_frame", "subscribe needs \"topics\"")
        );
        // A connection's read leaves the data's JSON form out, and keeps its bytes.
        let lean = command_from_msgpack(&frame).unwrap();
        assert_eq!(lean.json, r#"{"type":"publish","topic":"t","data":null}"#);
        assert_eq!(lean.data, read.data);
        // Data without a JSON form, or nested too deep, is refused all the same.
        let mut ext = frame[..frame.len() - 4].to_vec();
        ext.extend_from_slice(&[0xd4, 1, 1]);
        assert_eq!(command_from_msgpack(&ext).unwrap_err().code, "bad_msgpack");
        let mut deep = frame[..frame.len() - 4].to_vec();
        deep.extend(std::iter::repeat_n(0x91, 65));
        deep.push(0xc0);
        assert_eq!(command_from_msgpack(&deep).unwrap_err().code, "bad_msgpack");
        // Not MessagePack, not a map, a key that is not a string.
        assert_eq!(from_msgpack(&[0x92]).unwrap_err().code, "bad_msgpack");
        assert_eq!(from_msgpack(&[0x01]).unwrap_err().code, "bad_msgpack");
        assert_eq!(
            from_msgpack(&[0x81, 0x01, 0x01]).unwrap_err().code,
            "bad_msgpack"
        );
    }
}
