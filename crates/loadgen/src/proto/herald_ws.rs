//! Herald's WebSocket JSON protocol, client side.
//!
//! Client frames are built with serde_json. Server frames are classified by the cheap scanner
//! of [`crate::payload`]: the first `"type"` key decides the kind (Herald writes `type` first),
//! and for `message`/`pong` frames the `ts`, `seq` and `topic` fields are read without a full
//! parse. Only the rare frames (`subscribed`, `error`) would merit a full parse, and none of
//! their content is needed beyond the type.

use crate::payload::{self, Fields};

/// A classified server frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ServerFrame<'a> {
    /// `{"type":"message",..}`: a delivery.
    Message {
        /// The top-level topic.
        topic: Option<&'a str>,
        /// Fields scanned from the frame.
        fields: Fields<'a>,
    },
    /// `{"type":"subscribed",..}`.
    Subscribed,
    /// `{"type":"pong","data":..}`: an echo answer.
    Pong(Fields<'a>),
    /// `{"type":"lost",..}`: the server dropped messages for this client.
    Lost {
        /// The topic concerned, if given.
        topic: Option<&'a str>,
    },
    /// `{"type":"error",..}`.
    Error,
    /// Any other or unparseable frame.
    Unknown,
}

/// Classifies a server text frame.
pub(crate) fn classify(text: &str) -> ServerFrame<'_> {
    let bytes = text.as_bytes();
    match payload::find_str(bytes, b"\"type\"") {
        Some("message") => ServerFrame::Message {
            topic: payload::find_str(bytes, b"\"topic\""),
            fields: payload::scan(bytes),
        },
        Some("subscribed") => ServerFrame::Subscribed,
        Some("pong") => ServerFrame::Pong(payload::scan(bytes)),
        Some("lost") => ServerFrame::Lost {
            topic: payload::find_str(bytes, b"\"topic\""),
        },
        Some("error") => ServerFrame::Error,
        _ => ServerFrame::Unknown,
    }
}

/// `{"type":"subscribe","topics":[..]}`, with `"delta":"fossil"` if `delta`.
pub(crate) fn subscribe_frame(topics: &[String], delta: bool) -> String {
    if delta {
        serde_json::json!({ "type": "subscribe", "topics": topics, "delta": "fossil" }).to_string()
    } else {
        serde_json::json!({ "type": "subscribe", "topics": topics }).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_server_frames() {
        let m = r#"{"type":"message","topic":"load-1","id":"3-1","data":{"ts":10,"seq":4,"topic":"load-1","pad":""}}"#;
        match classify(m) {
            ServerFrame::Message { topic, fields } => {
                assert_eq!(topic, Some("load-1"));
                assert_eq!(fields.seq, Some(4));
                assert_eq!(fields.ts, Some(10));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            classify(r#"{"type":"subscribed","topics":["a"],"cursors":{"a":"1"}}"#),
            ServerFrame::Subscribed
        );
        match classify(r#"{"type":"pong","data":{"ts":5,"seq":6,"pad":"x"}}"#) {
            ServerFrame::Pong(f) => assert_eq!((f.ts, f.seq), (Some(5), Some(6))),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            classify(r#"{"type":"lost","topic":"a","reason":"lagged"}"#),
            ServerFrame::Lost { topic: Some("a") }
        );
        assert_eq!(
            classify(r#"{"type":"error","code":"bad_topic","reason":"x"}"#),
            ServerFrame::Error
        );
        assert_eq!(classify("not json"), ServerFrame::Unknown);
        assert_eq!(classify(r#"{"type":"weird"}"#), ServerFrame::Unknown);
    }

    #[test]
    fn subscribe_frame_is_herald_json() {
        let f = subscribe_frame(&["a".into(), "b".into()], false);
        let v: serde_json::Value = serde_json::from_str(&f).unwrap();
        assert_eq!(v["type"], "subscribe");
        assert_eq!(v["topics"][1], "b");
        assert!(v.get("delta").is_none());
        let v: serde_json::Value =
            serde_json::from_str(&subscribe_frame(&["a".into()], true)).unwrap();
        assert_eq!(v["delta"], "fossil");
    }
}
