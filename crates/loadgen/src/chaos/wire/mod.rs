//! The chaos client's three transports, each run as one session: connect to a node with the
//! client's cursors, report what arrives, end when the leg's time is up or the connection
//! fails. Every transport speaks Herald's JSON message form (`format=json` for SSE), so one
//! decoder serves all three.

pub(crate) mod poll;
pub(crate) mod sse;
pub(crate) mod ws;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

/// Silence after which a connection counts as stalled (heartbeats come every 5 s).
pub(crate) const STALL: Duration = Duration::from_secs(8);
/// Heartbeat asked of the server (seconds; the server's lowest bound).
pub(crate) const HEARTBEAT_S: u64 = 5;

/// What a session reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// A message: its topic, id and the publisher's sequence number.
    Message { topic: String, id: String, seq: u64 },
    /// A loss signal.
    Lost { topic: String, reason: String },
    /// A position to resume a topic from (a resume list entry, a `subscribed` cursor).
    Cursor { topic: String, id: String },
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum End {
    /// The leg's time was up (the client's own reconnect).
    Scheduled,
    /// The run is over.
    Stopped,
    /// Connecting failed (refused, timed out, handshake).
    Connect,
    /// An error status (503 from a node that is not ready, ...).
    Status,
    /// The server closed the connection (or said it was shutting down).
    Closed,
    /// Nothing arrived for [`STALL`].
    Stall,
    /// A protocol or I/O error.
    Broken,
}

impl End {
    pub(crate) fn name(self) -> &'static str {
        match self {
            End::Scheduled => "scheduled",
            End::Stopped => "stopped",
            End::Connect => "connect_failed",
            End::Status => "error_status",
            End::Closed => "closed_by_server",
            End::Stall => "stalled",
            End::Broken => "broken",
        }
    }
}

/// What a session is given and reports to.
pub(crate) trait Sink {
    /// The session is open (subscribed, or a first poll answered).
    fn opened(&mut self);
    fn event(&mut self, e: Event);
}

/// One session's request: where, which topics, from which positions.
#[derive(Debug, Clone)]
pub(crate) struct Dial<'a> {
    pub(crate) target: &'a crate::target::Target,
    pub(crate) topics: &'a [String],
    pub(crate) cursors: &'a BTreeMap<String, String>,
    pub(crate) connect_timeout: Duration,
}

/// A resume list: `topic=id,topic=id`.
pub(crate) fn resume_list(cursors: &BTreeMap<String, String>) -> String {
    let mut s = String::new();
    for (t, id) in cursors {
        if !s.is_empty() {
            s.push(',');
        }
        s.push_str(t);
        s.push('=');
        s.push_str(id);
    }
    s
}

/// Reports every entry of a resume list as a cursor.
pub(crate) fn report_resume_list(list: &str, sink: &mut (dyn Sink + Send)) {
    for part in list.split(',') {
        if let Some((t, id)) = part.split_once('=')
            && !t.is_empty()
            && !id.is_empty()
        {
            sink.event(Event::Cursor {
                topic: t.to_owned(),
                id: id.to_owned(),
            });
        }
    }
}

#[derive(Debug, Deserialize)]
struct Frame {
    #[serde(rename = "type")]
    kind: Option<String>,
    topic: Option<String>,
    id: Option<String>,
    reason: Option<String>,
    data: Option<serde_json::Value>,
    cursors: Option<BTreeMap<String, String>>,
}

/// What one JSON frame (WS frame, `format=json` SSE data, poll entry) says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decoded {
    Events(Vec<Event>),
    Subscribed(Vec<Event>),
    Error,
    Other,
}

/// Decodes one JSON frame. `lost_reason` frames (`{"topic","reason"}` without a type, as SSE
/// `herald.lost` and poll `lost` entries are) are read as loss signals.
pub(crate) fn decode(text: &[u8], untyped_is_lost: bool) -> Decoded {
    match serde_json::from_slice::<Frame>(text) {
        Ok(f) => decode_frame(f, untyped_is_lost),
        Err(_) => Decoded::Other,
    }
}

/// [`decode`] for a frame already parsed as part of a larger document (a poll answer).
pub(crate) fn decode_value(v: serde_json::Value, untyped_is_lost: bool) -> Decoded {
    match serde_json::from_value::<Frame>(v) {
        Ok(f) => decode_frame(f, untyped_is_lost),
        Err(_) => Decoded::Other,
    }
}

fn decode_frame(f: Frame, untyped_is_lost: bool) -> Decoded {
    match (f.kind.as_deref(), untyped_is_lost) {
        (Some("message"), _) => {
            let seq = f
                .data
                .as_ref()
                .and_then(|d| d.get("seq"))
                .and_then(|s| s.as_u64());
            match (f.topic, f.id, seq) {
                (Some(topic), Some(id), Some(seq)) => Decoded::Events(vec![
                    Event::Cursor {
                        topic: topic.clone(),
                        id: id.clone(),
                    },
                    Event::Message { topic, id, seq },
                ]),
                _ => Decoded::Other,
            }
        }
        (Some("lost"), _) | (None, true) => match (f.topic, f.reason) {
            (Some(topic), Some(reason)) => Decoded::Events(vec![Event::Lost { topic, reason }]),
            _ => Decoded::Other,
        },
        (Some("subscribed"), _) => Decoded::Subscribed(
            f.cursors
                .unwrap_or_default()
                .into_iter()
                .map(|(topic, id)| Event::Cursor { topic, id })
                .collect(),
        ),
        (Some("error"), _) => Decoded::Error,
        _ => Decoded::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_messages_losses_and_cursors() {
        let m = br#"{"type":"message","topic":"a","id":"e-4","data":{"seq":9,"pad":""}}"#;
        assert_eq!(
            decode(m, false),
            Decoded::Events(vec![
                Event::Cursor {
                    topic: "a".into(),
                    id: "e-4".into()
                },
                Event::Message {
                    topic: "a".into(),
                    id: "e-4".into(),
                    seq: 9
                },
            ])
        );
        assert_eq!(
            decode(br#"{"topic":"a","reason":"expired"}"#, true),
            Decoded::Events(vec![Event::Lost {
                topic: "a".into(),
                reason: "expired".into()
            }])
        );
        assert_eq!(
            decode(br#"{"type":"lost","topic":"a","reason":"epoch"}"#, false),
            Decoded::Events(vec![Event::Lost {
                topic: "a".into(),
                reason: "epoch".into()
            }])
        );
        assert_eq!(
            decode(
                br#"{"type":"subscribed","topics":["a"],"cursors":{"a":"e-0"}}"#,
                false
            ),
            Decoded::Subscribed(vec![Event::Cursor {
                topic: "a".into(),
                id: "e-0".into()
            }])
        );
        assert_eq!(
            decode(br#"{"type":"error","code":"x"}"#, false),
            Decoded::Error
        );
        assert_eq!(decode(b"nope", false), Decoded::Other);
    }

    #[test]
    fn resume_lists_round_trip() {
        let mut c = BTreeMap::new();
        c.insert("a".to_owned(), "e-1".to_owned());
        c.insert("b".to_owned(), "f-2".to_owned());
        assert_eq!(resume_list(&c), "a=e-1,b=f-2");
    }
}
