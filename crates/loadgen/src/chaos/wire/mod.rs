//! The chaos client's three transports, each run as one session: connect to a node with the
//! client's cursors, report what arrives, end when the leg's time is up or the connection
//! fails. Every transport speaks Herald's JSON message form (`format=json` for SSE), so one
//! decoder serves all three. A client that asks for deltas (`delta=fossil`) keeps, per session,
//! each topic's last data ([`Bases`]) and applies the deltas to it (docs/protocol.md, "Delta
//! compression"); a delta that does not apply ends the session ([`End::Delta`]) and the client
//! resumes from its cursors, which replays the message in full.

pub(crate) mod poll;
pub(crate) mod sse;
pub(crate) mod ws;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;

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
    /// The message before it came as a delta, which applied.
    DeltaApplied,
    /// A delta did not apply: its message is not delivered and the session ends.
    DeltaFailed,
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
    /// A delta did not apply (the client resumes from its cursors).
    Delta,
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
            End::Delta => "delta_failed",
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
    /// Ask for Fossil deltas (every topic is in a namespace that allows them).
    pub(crate) delta: bool,
}

/// Largest data a delta may rebuild.
const DELTA_LIMIT: usize = 1 << 20;

/// Per topic, the data of the last message of a session that asked for deltas: what the
/// topic's next delta applies to (the exact text of the frame's `data`, or what a delta made).
#[derive(Debug, Default)]
pub(crate) struct Bases {
    on: bool,
    data: BTreeMap<String, Vec<u8>>,
}

impl Bases {
    /// Bases for a session; `on` when it asked for deltas (else nothing is kept).
    pub(crate) fn new(on: bool) -> Self {
        Self {
            on,
            data: BTreeMap::new(),
        }
    }

    /// Applies `delta` (the frame's `data`, a JSON string) to the topic's base, dropping it.
    fn apply(&mut self, topic: &str, delta: &RawValue) -> Option<Vec<u8>> {
        let base = self.data.remove(topic)?;
        let delta: String = serde_json::from_str(delta.get()).ok()?;
        herald_core::delta::apply(&base, delta.as_bytes(), DELTA_LIMIT).ok()
    }
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
    delta: Option<bool>,
    data: Option<Box<RawValue>>,
    cursors: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Deserialize)]
struct Data {
    seq: Option<u64>,
}

/// What one JSON frame (WS frame, `format=json` SSE data, poll entry) says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decoded {
    Events(Vec<Event>),
    Subscribed(Vec<Event>),
    Error,
    /// A delta that did not apply.
    DeltaFailed,
    Other,
}

/// Decodes one JSON frame (a poll answer's message included: its exact text). `lost_reason`
/// frames (`{"topic","reason"}` without a type, as SSE `herald.lost` and poll `lost` entries
/// are) are read as loss signals.
pub(crate) fn decode(text: &[u8], untyped_is_lost: bool, bases: &mut Bases) -> Decoded {
    match serde_json::from_slice::<Frame>(text) {
        Ok(f) => decode_frame(f, untyped_is_lost, bases),
        Err(_) => Decoded::Other,
    }
}

/// [`decode`] for a loss entry already parsed as part of a larger document (a poll answer).
pub(crate) fn decode_value(v: serde_json::Value, untyped_is_lost: bool) -> Decoded {
    match serde_json::from_value::<Frame>(v) {
        Ok(f) => decode_frame(f, untyped_is_lost, &mut Bases::default()),
        Err(_) => Decoded::Other,
    }
}

fn decode_frame(f: Frame, untyped_is_lost: bool, bases: &mut Bases) -> Decoded {
    match (f.kind.as_deref(), untyped_is_lost) {
        (Some("message"), _) => {
            let (Some(topic), Some(id), Some(raw)) = (f.topic, f.id, f.data) else {
                return Decoded::Other;
            };
            let delta = f.delta == Some(true);
            let data = if delta {
                match bases.apply(&topic, &raw) {
                    Some(data) => data,
                    None => return Decoded::DeltaFailed,
                }
            } else {
                raw.get().as_bytes().to_vec()
            };
            let seq = serde_json::from_slice::<Data>(&data)
                .ok()
                .and_then(|d| d.seq);
            if bases.on {
                bases.data.insert(topic.clone(), data);
            }
            let Some(seq) = seq else {
                return Decoded::Other;
            };
            let mut events = vec![
                Event::Cursor {
                    topic: topic.clone(),
                    id: id.clone(),
                },
                Event::Message { topic, id, seq },
            ];
            if delta {
                events.push(Event::DeltaApplied);
            }
            Decoded::Events(events)
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
        let b = &mut Bases::default();
        assert_eq!(
            decode(m, false, b),
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
            decode(br#"{"topic":"a","reason":"expired"}"#, true, b),
            Decoded::Events(vec![Event::Lost {
                topic: "a".into(),
                reason: "expired".into()
            }])
        );
        assert_eq!(
            decode(br#"{"type":"lost","topic":"a","reason":"epoch"}"#, false, b),
            Decoded::Events(vec![Event::Lost {
                topic: "a".into(),
                reason: "epoch".into()
            }])
        );
        assert_eq!(
            decode(
                br#"{"type":"subscribed","topics":["a"],"cursors":{"a":"e-0"}}"#,
                false,
                b
            ),
            Decoded::Subscribed(vec![Event::Cursor {
                topic: "a".into(),
                id: "e-0".into()
            }])
        );
        assert_eq!(
            decode(br#"{"type":"error","code":"x"}"#, false, b),
            Decoded::Error
        );
        assert_eq!(decode(b"nope", false, b), Decoded::Other);
    }

    #[test]
    fn applies_deltas_to_the_last_data_and_fails_without_it() {
        let first = br#"{"seq":1,"score":"0-0","pad":"abcdefghijklmnopqrstuvwxyz"}"#;
        let second = br#"{"seq":2,"score":"1-0","pad":"abcdefghijklmnopqrstuvwxyz"}"#;
        let delta = String::from_utf8(herald_core::delta::encode(first, second)).unwrap();
        let full = format!(
            r#"{{"type":"message","topic":"d:a","id":"e-1","data":{}}}"#,
            std::str::from_utf8(first).unwrap()
        );
        let frame = format!(
            r#"{{"type":"message","topic":"d:a","id":"e-2","delta":true,"data":{}}}"#,
            serde_json::to_string(&delta).unwrap()
        );
        let b = &mut Bases::new(true);
        // no base yet
        assert_eq!(decode(frame.as_bytes(), false, b), Decoded::DeltaFailed);
        assert!(matches!(
            decode(full.as_bytes(), false, b),
            Decoded::Events(_)
        ));
        match decode(frame.as_bytes(), false, b) {
            Decoded::Events(ev) => {
                assert!(ev.contains(&Event::DeltaApplied));
                assert!(
                    ev.iter()
                        .any(|e| matches!(e, Event::Message { seq: 2, .. }))
                );
            }
            other => panic!("{other:?}"),
        }
        // a truncated delta (no checksum) does not apply
        let cut = frame.replace(
            &format!("{};", &delta[delta.len() - 3..delta.len() - 1]),
            "",
        );
        assert_ne!(cut, frame);
        assert_eq!(decode(cut.as_bytes(), false, b), Decoded::DeltaFailed);
    }

    #[test]
    fn resume_lists_round_trip() {
        let mut c = BTreeMap::new();
        c.insert("a".to_owned(), "e-1".to_owned());
        c.insert("b".to_owned(), "f-2".to_owned());
        assert_eq!(resume_list(&c), "a=e-1,b=f-2");
    }
}
