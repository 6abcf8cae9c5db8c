//! Messages and their wire encodings, built once and shared by every subscriber.

use std::fmt::Write as _;
use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};

use crate::cursor::Cursor;
use crate::delta::{Base, Head, JsonDelta, MsgpackDelta};
use crate::frame::{
    after_id_line, deflate_wire, msgpack_data, server_frame, sse_json_event, ws_header_len,
};
use crate::name::{EventName, TopicName};

pub use crate::payload::{MAX_PAYLOAD_DEPTH, Payload, json_depth};

/// One published message. Built once per publish and shared as `Arc<Message>`; its SSE and
/// WebSocket encodings are made at most once, on first use, and shared as [`Bytes`] so that
/// fan-out costs a reference-count bump per subscriber, never an encoding or a copy.
#[derive(Debug)]
pub struct Message {
    topic: TopicName,
    cursor: Cursor,
    event: Option<EventName>,
    data: Payload,
    published_unix_ms: u64,
    published_at: Instant,
    sse: OnceLock<Bytes>,
    sse_json: OnceLock<Bytes>,
    /// The WebSocket frame as it goes on the wire (header and payload), and its payload: a
    /// zero-copy slice of it.
    ws: OnceLock<(Bytes, Bytes)>,
    /// The same for the MessagePack WebSocket frame (binary), built only when a `herald.msgpack`
    /// subscriber needs it. Boxed: a message that no MessagePack subscriber gets (the common
    /// case) pays 16 bytes for it, not 72 (measured: `Message` 280 bytes, 256 before).
    ws_msgpack: OnceLock<Box<(Bytes, Bytes)>>,
    /// The WebSocket frame compressed for permessage-deflate (RSV1 set), when compressing
    /// shrinks it.
    ws_deflate: OnceLock<Option<Bytes>>,
    /// The topic's message before this one, when its namespace allows deltas
    /// ([`crate::delta`]); boxed: most messages have none.
    base: Option<Box<Base>>,
}

impl Message {
    /// A message at `cursor` in `topic`, stamped with the current time.
    pub fn new(topic: TopicName, cursor: Cursor, event: Option<EventName>, data: Payload) -> Self {
        let published_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Self {
            topic,
            cursor,
            event,
            data,
            published_unix_ms,
            published_at: Instant::now(),
            sse: OnceLock::new(),
            sse_json: OnceLock::new(),
            ws: OnceLock::new(),
            ws_msgpack: OnceLock::new(),
            ws_deflate: OnceLock::new(),
            base: None,
        }
    }

    /// The message, recording the topic's message before it (`cursor`, `data`) as the base its
    /// deltas apply to.
    pub(crate) fn with_base(mut self, cursor: Cursor, data: Payload) -> Self {
        self.base = Some(Box::new(Base::new(cursor, data)));
        self
    }

    /// The position of the message its deltas apply to, when it may be sent as one (its
    /// namespace allows deltas and this node holds the topic's message before it).
    pub fn delta_base(&self) -> Option<Cursor> {
        self.base.as_ref().map(|b| b.cursor())
    }

    /// Its delta in the JSON form, made once on first use; `None` without a base, or when
    /// the delta would not be smaller than the data.
    pub fn json_delta(&self) -> Option<&JsonDelta> {
        self.base.as_ref()?.json(self.head(), &self.data)
    }

    /// Its delta in the MessagePack form, as [`Self::json_delta`].
    pub fn msgpack_delta(&self) -> Option<&MsgpackDelta> {
        self.base.as_ref()?.msgpack(self.head(), &self.data)
    }

    /// What a frame of it says before its data.
    fn head(&self) -> Head<'_> {
        Head {
            topic: &self.topic,
            cursor: self.cursor,
            event: self.event.as_ref(),
        }
    }

    /// The topic it was published to.
    pub fn topic(&self) -> &TopicName {
        &self.topic
    }

    /// Its position in the topic's stream.
    pub fn cursor(&self) -> Cursor {
        self.cursor
    }

    /// The event name the publisher gave, if any.
    pub fn event(&self) -> Option<&EventName> {
        self.event.as_ref()
    }

    /// The payload.
    pub fn data(&self) -> &Payload {
        &self.data
    }

    /// Publish time, milliseconds since the Unix epoch.
    pub fn published_unix_ms(&self) -> u64 {
        self.published_unix_ms
    }

    /// Publish time on this node's monotonic clock (for publish→write latency).
    pub fn published_at(&self) -> Instant {
        self.published_at
    }

    /// The whole SSE event: `id: topic=cursor`, `event:` when named, the `data:` lines and the
    /// blank line. A JSON string payload is sent as its text, one `data:` line per line of it;
    /// any other value as compact JSON on one line.
    pub fn sse_frame(&self) -> &Bytes {
        self.sse.get_or_init(|| self.encode_sse())
    }

    /// The SSE event without its `id:` line, for streams that write their own (multi-topic)
    /// id. A zero-copy slice of [`Self::sse_frame`].
    pub fn sse_body(&self) -> Bytes {
        after_id_line(self.sse_frame())
    }

    /// The SSE event of the JSON form (`format=json`): `id: topic=cursor`, then one `data:`
    /// line holding the WebSocket frame, `{"type":"message","topic":..,"id":..,"event":..,
    /// "data":..}`, and no `event:` line, so that every message names its topic and id, a JSON
    /// string payload stays JSON, and a browser's `EventSource` delivers named events to
    /// `onmessage` like any other. Compact JSON has no line break, so one line always holds it.
    pub fn sse_json_frame(&self) -> &Bytes {
        self.sse_json
            .get_or_init(|| sse_json_event(&self.topic, self.cursor, self.ws_frame()))
    }

    /// [`Self::sse_json_frame`] without its `id:` line, for multi-topic streams: a zero-copy
    /// slice.
    pub fn sse_json_body(&self) -> Bytes {
        after_id_line(self.sse_json_frame())
    }

    /// The WebSocket text frame:
    /// `{"type":"message","topic":..,"id":..,"event":..,"data":..}` (`event` only when named).
    /// Always valid UTF-8.
    pub fn ws_frame(&self) -> &Bytes {
        &self.ws_encoded().1
    }

    /// [`Self::ws_frame`] as a whole WebSocket frame from a server (RFC 6455 section 5.2:
    /// final, text, unmasked, then the payload), for a socket written without a WebSocket
    /// library in between (direct delivery).
    pub fn ws_wire_frame(&self) -> &Bytes {
        &self.ws_encoded().0
    }

    /// [`Self::ws_frame`] compressed for WebSocket's permessage-deflate without context
    /// takeover (RFC 7692), as a whole server frame (final, RSV1, text): compressed once, on
    /// first use, and shared by every subscriber whose connection negotiated it. `None` when
    /// compressing does not make the frame smaller.
    pub fn ws_deflate_wire_frame(&self) -> Option<&Bytes> {
        self.ws_deflate
            .get_or_init(|| deflate_wire(self.ws_frame()))
            .as_ref()
    }

    /// The payload of [`Self::ws_deflate_wire_frame`] (a zero-copy slice of it), for a
    /// WebSocket library that writes the frame's header itself.
    pub fn ws_deflate_payload(&self) -> Option<Bytes> {
        self.ws_deflate_wire_frame()
            .map(|wire| wire.slice(ws_header_len(wire.len())..))
    }

    fn ws_encoded(&self) -> &(Bytes, Bytes) {
        self.ws.get_or_init(|| {
            let wire = self.encode_ws();
            let payload = wire.slice(ws_header_len(wire.len())..);
            (wire, payload)
        })
    }

    /// The MessagePack WebSocket frame (`herald.msgpack`): a map with the fields of
    /// [`Self::ws_frame`] (`type`, `topic`, `id`, `event` only when named, `data`), `data`
    /// being the payload as its publisher sent it, or the MessagePack form of a JSON payload
    /// (made here, once per message).
    pub fn ws_msgpack_frame(&self) -> &Bytes {
        &self.ws_msgpack_encoded().1
    }

    /// [`Self::ws_msgpack_frame`] as a whole binary WebSocket frame from a server, for direct
    /// delivery.
    pub fn ws_msgpack_wire_frame(&self) -> &Bytes {
        &self.ws_msgpack_encoded().0
    }

    fn ws_msgpack_encoded(&self) -> &(Bytes, Bytes) {
        self.ws_msgpack.get_or_init(|| {
            let data = msgpack_data(&self.data);
            let mut body = Vec::with_capacity(64 + data.len());
            // Writing to a Vec cannot fail.
            let _ = rmp::encode::write_map_len(&mut body, 4 + u32::from(self.event.is_some()));
            let _ = rmp::encode::write_str(&mut body, "type");
            let _ = rmp::encode::write_str(&mut body, "message");
            let _ = rmp::encode::write_str(&mut body, "topic");
            let _ = rmp::encode::write_str(&mut body, self.topic.as_str());
            let _ = rmp::encode::write_str(&mut body, "id");
            let _ = rmp::encode::write_str(&mut body, &self.cursor.to_string());
            if let Some(event) = &self.event {
                let _ = rmp::encode::write_str(&mut body, "event");
                let _ = rmp::encode::write_str(&mut body, event.as_str());
            }
            let _ = rmp::encode::write_str(&mut body, "data");
            let wire = server_frame(0x82, &[&body, &data]);
            let payload = wire.slice(ws_header_len(wire.len())..);
            Box::new((wire, payload))
        })
    }

    fn encode_sse(&self) -> Bytes {
        let mut head = String::with_capacity(64);
        let _ = writeln!(head, "id: {}={}", self.topic, self.cursor);
        if let Some(event) = &self.event {
            let _ = writeln!(head, "event: {}", event.as_str());
        }
        let raw = self.data.as_bytes();
        let text: Option<String> = if raw.first() == Some(&b'"') {
            serde_json::from_slice(raw).ok()
        } else {
            None
        };
        let mut out = BytesMut::with_capacity(head.len() + raw.len() + 16);
        out.put_slice(head.as_bytes());
        match text {
            Some(text) => {
                for line in split_lines(&text) {
                    out.put_slice(b"data: ");
                    out.put_slice(line.as_bytes());
                    out.put_u8(b'\n');
                }
            }
            None => {
                out.put_slice(b"data: ");
                out.put_slice(raw);
                out.put_u8(b'\n');
            }
        }
        out.put_u8(b'\n');
        out.freeze()
    }

    fn encode_ws(&self) -> Bytes {
        let raw = self.data.as_bytes();
        let mut out = String::with_capacity(64 + self.topic.as_str().len());
        // Topic and event names never need JSON escaping (see `name`), cursors are hex/decimal.
        let _ = write!(
            out,
            r#"{{"type":"message","topic":"{}","id":"{}""#,
            self.topic, self.cursor
        );
        if let Some(event) = &self.event {
            let _ = write!(out, r#","event":"{}""#, event.as_str());
        }
        out.push_str(r#","data":"#);
        // Final fragment, text.
        server_frame(0x81, &[out.as_bytes(), raw, b"}"])
    }
}

/// A message as one subscriber gets it: as its delta when `delta` (the subscriber asked for
/// deltas and holds the message's base: [`crate::FeedEvent::Delta`]) and the message has one
/// in the form asked for, else in full. Each form is made once per message and shared.
#[derive(Clone, Copy, Debug)]
pub struct Outbound<'m> {
    message: &'m Message,
    delta: bool,
}

impl<'m> Outbound<'m> {
    /// `message`, as a delta when `delta` and it has one.
    pub fn new(message: &'m Message, delta: bool) -> Self {
        Self { message, delta }
    }

    /// The message.
    pub fn message(&self) -> &'m Message {
        self.message
    }

    fn json(&self) -> Option<&'m JsonDelta> {
        self.message.json_delta().filter(|_| self.delta)
    }

    fn msgpack(&self) -> Option<&'m MsgpackDelta> {
        self.message.msgpack_delta().filter(|_| self.delta)
    }

    /// Whether the JSON forms go as a delta.
    pub fn is_json_delta(&self) -> bool {
        self.json().is_some()
    }

    /// [`Message::ws_frame`] or [`JsonDelta::ws_frame`].
    pub fn ws_frame(&self) -> &'m Bytes {
        self.json()
            .map_or_else(|| self.message.ws_frame(), |d| d.ws_frame())
    }

    /// [`Message::ws_wire_frame`] or [`JsonDelta::ws_wire_frame`].
    pub fn ws_wire_frame(&self) -> &'m Bytes {
        self.json()
            .map_or_else(|| self.message.ws_wire_frame(), |d| d.ws_wire_frame())
    }

    /// [`Message::ws_deflate_wire_frame`] or [`JsonDelta::ws_deflate_wire_frame`].
    pub fn ws_deflate_wire_frame(&self) -> Option<&'m Bytes> {
        match self.json() {
            Some(d) => d.ws_deflate_wire_frame(),
            None => self.message.ws_deflate_wire_frame(),
        }
    }

    /// [`Message::ws_deflate_payload`] or [`JsonDelta::ws_deflate_payload`].
    pub fn ws_deflate_payload(&self) -> Option<Bytes> {
        match self.json() {
            Some(d) => d.ws_deflate_payload(),
            None => self.message.ws_deflate_payload(),
        }
    }

    /// [`Message::sse_json_frame`] or the delta's (`JsonDelta::sse_json_frame`).
    pub fn sse_json_frame(&self) -> &'m Bytes {
        match self.json() {
            Some(d) => d.sse_json_frame(self.message.head()),
            None => self.message.sse_json_frame(),
        }
    }

    /// [`Message::sse_json_body`] or the delta's (`JsonDelta::sse_json_body`).
    pub fn sse_json_body(&self) -> Bytes {
        match self.json() {
            Some(d) => d.sse_json_body(self.message.head()),
            None => self.message.sse_json_body(),
        }
    }

    /// [`Message::ws_msgpack_frame`] or [`MsgpackDelta::ws_msgpack_frame`].
    pub fn ws_msgpack_frame(&self) -> &'m Bytes {
        self.msgpack()
            .map_or_else(|| self.message.ws_msgpack_frame(), |d| d.ws_msgpack_frame())
    }

    /// [`Message::ws_msgpack_wire_frame`] or [`MsgpackDelta::ws_msgpack_wire_frame`].
    pub fn ws_msgpack_wire_frame(&self) -> &'m Bytes {
        self.msgpack().map_or_else(
            || self.message.ws_msgpack_wire_frame(),
            |d| d.ws_msgpack_wire_frame(),
        )
    }
}

/// Splits on every line ending SSE recognises (`\r\n`, `\n`, `\r`), so that no line of a
/// payload can end an event early or inject a field.
fn split_lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let s = rest?;
        match s.find(['\r', '\n']) {
            Some(i) => {
                let skip = if s[i..].starts_with("\r\n") { 2 } else { 1 };
                rest = Some(&s[i + skip..]);
                Some(&s[..i])
            }
            None => {
                rest = None;
                Some(s)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(event: Option<&str>, data: serde_json::Value) -> Message {
        Message::new(
            TopicName::new("news").unwrap(),
            Cursor::new(0xab, 7),
            event.map(|e| EventName::new(e).unwrap()),
            Payload::from_value(&data),
        )
    }

    #[test]
    fn sse_json_value_is_one_compact_line() {
        let m = msg(Some("created"), json!({"a": 1, "b": [1, 2]}));
        assert_eq!(
            &m.sse_frame()[..],
            b"id: news=ab-7\nevent: created\ndata: {\"a\":1,\"b\":[1,2]}\n\n"
        );
        assert_eq!(
            &m.sse_body()[..],
            b"event: created\ndata: {\"a\":1,\"b\":[1,2]}\n\n"
        );
    }

    #[test]
    fn sse_string_is_sent_as_text_one_data_line_per_line() {
        let m = msg(None, json!("hello\nworld\r\nagain\rend"));
        assert_eq!(
            &m.sse_frame()[..],
            b"id: news=ab-7\ndata: hello\ndata: world\ndata: again\ndata: end\n\n"
        );
        // A payload cannot inject fields or end the event early.
        let m = msg(None, json!("x\n\nid: evil\nevent: evil"));
        assert_eq!(
            &m.sse_frame()[..],
            b"id: news=ab-7\ndata: x\ndata: \ndata: id: evil\ndata: event: evil\n\n"
        );
    }

    #[test]
    fn ws_deflate_frame_is_made_once_with_rsv1_and_inflates_to_the_frame() {
        for n in [20, 200, 20_000] {
            let m = msg(None, json!(vec!["abc"; n]));
            let wire = m
                .ws_deflate_wire_frame()
                .expect("repetitive JSON compresses");
            assert_eq!(wire[0], 0xc1, "final, RSV1, text");
            let payload = m.ws_deflate_payload().unwrap();
            assert_eq!(wire.len() - payload.len(), ws_header_len(wire.len()));
            assert_eq!(&wire[wire.len() - payload.len()..], &payload[..]);
            let text = crate::deflate::inflate(&payload, 1 << 20).unwrap();
            assert_eq!(&text[..], &m.ws_frame()[..]);
            assert_eq!(
                m.ws_deflate_wire_frame().unwrap().as_ptr(),
                wire.as_ptr(),
                "encoded once"
            );
        }
        // Too short to shrink: none.
        assert!(msg(None, json!(1)).ws_deflate_wire_frame().is_none());
    }

    #[test]
    fn ws_frame_embeds_the_payload() {
        let m = msg(Some("e"), json!({"k": "v\"q"}));
        let frame: serde_json::Value = serde_json::from_slice(m.ws_frame()).unwrap();
        assert_eq!(
            frame,
            json!({"type": "message", "topic": "news", "id": "ab-7", "event": "e", "data": {"k": "v\"q"}})
        );
        let m = msg(None, json!(null));
        assert_eq!(
            &m.ws_frame()[..],
            br#"{"type":"message","topic":"news","id":"ab-7","data":null}"#
        );
    }

    #[test]
    fn encodings_are_made_once_and_shared() {
        let m = msg(None, json!(1));
        assert_eq!(m.sse_frame().as_ptr(), m.sse_frame().as_ptr());
        assert_eq!(m.ws_frame().as_ptr(), m.ws_frame().as_ptr());
        assert_eq!(m.sse_json_frame().as_ptr(), m.sse_json_frame().as_ptr());
    }

    #[test]
    fn sse_json_form_names_topic_id_and_event_in_one_data_line() {
        let m = msg(Some("created"), json!("two\nlines"));
        assert_eq!(
            &m.sse_json_frame()[..],
            b"id: news=ab-7\ndata: {\"type\":\"message\",\"topic\":\"news\",\"id\":\"ab-7\",\"event\":\"created\",\"data\":\"two\\nlines\"}\n\n"
        );
        let body = m.sse_json_body();
        assert!(body.starts_with(b"data: {"), "{body:?}");
        assert_eq!(body.iter().filter(|&&b| b == b'\n').count(), 2);
        let json: serde_json::Value = serde_json::from_slice(&body[6..body.len() - 2]).unwrap();
        assert_eq!(json["data"], json!("two\nlines"));
        let m = msg(None, json!({"k": 1}));
        assert_eq!(
            &m.sse_json_body()[..],
            b"data: {\"type\":\"message\",\"topic\":\"news\",\"id\":\"ab-7\",\"data\":{\"k\":1}}\n\n"
        );
    }

    #[test]
    fn msgpack_frame_carries_the_payload_as_given_and_converts_json_once() {
        use crate::msgpack;
        // bin has no JSON type: the MessagePack subscriber gets it as sent.
        let given = [0x82, 0xa1, b'b', 0xc4, 2, 0xff, 0x00, 0xa1, b'n', 0x07];
        let m = Message::new(
            TopicName::new("news").unwrap(),
            Cursor::new(0xab, 7),
            Some(EventName::new("e").unwrap()),
            Payload::from_msgpack(&given).unwrap(),
        );
        assert_eq!(&m.data().as_bytes()[..], br#"{"b":"/wA=","n":7}"#);
        let frame = m.ws_msgpack_frame();
        let fields = msgpack::map_fields(frame).unwrap();
        let names: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
        assert_eq!(names, ["type", "topic", "id", "event", "data"]);
        assert_eq!(msgpack::as_str(fields[0].1), Some("message"));
        assert_eq!(msgpack::as_str(fields[2].1), Some("ab-7"));
        assert_eq!(fields[4].1, &given[..]);
        assert_eq!(frame.as_ptr(), m.ws_msgpack_frame().as_ptr(), "made once");
        let wire = m.ws_msgpack_wire_frame();
        assert_eq!(&wire[..2], &[0x82, frame.len() as u8]);
        assert_eq!(&wire[2..], &frame[..]);

        // A JSON payload gets its MessagePack form.
        let m = msg(None, json!({"k": [1, "x"]}));
        let fields = msgpack::map_fields(m.ws_msgpack_frame()).unwrap();
        assert_eq!(fields.len(), 4);
        assert_eq!(
            fields[3].1,
            &msgpack::from_json(&json!({"k": [1, "x"]}))[..]
        );
        let big = msg(None, json!("y".repeat(70_000)));
        let wire = big.ws_msgpack_wire_frame();
        assert_eq!(wire[1], 127);
        assert_eq!(&wire[10..], &big.ws_msgpack_frame()[..]);
    }
}
