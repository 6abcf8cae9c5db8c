//! Delta compression: a message of a topic whose namespace allows it is sent, to the
//! subscribers that asked and hold the message before it, as a Fossil delta against that
//! message's data (docs/protocol.md, "Delta compression").
//!
//! A message knows its base (the cursor and data of the topic's message before it on this
//! node, [`crate::Topic`] records it) and makes each delta form at most once, on first use,
//! shared by every subscriber like its other encodings: the JSON form (WebSocket text, SSE,
//! long-poll, permessage-deflate) against the base's compact JSON, the MessagePack form
//! against the base's MessagePack data. A form whose delta is not smaller than the data it
//! replaces is not made: those subscribers get the full data.
//!
//! Encoding uses the `fossil-delta` crate. Decoding ([`apply`], for Herald's own Rust
//! readers: the loadgen and the fuzz target) is written here: that crate's decoder trusts its
//! input (it indexes past the end of a truncated delta and allocates whatever size a delta
//! claims), and a reader must survive whatever a server or a proxy sends it.

use std::fmt::Write as _;
use std::sync::OnceLock;

use bytes::Bytes;

use crate::cursor::Cursor;
use crate::frame::{
    after_id_line, deflate_wire, msgpack_data, server_frame, sse_json_event, ws_header_len,
};
use crate::name::{EventName, TopicName};
use crate::payload::Payload;

/// The message before a message on its topic, on this node: what its deltas apply to.
#[derive(Debug)]
pub(crate) struct Base {
    cursor: Cursor,
    data: Payload,
    json: OnceLock<Option<JsonDelta>>,
    msgpack: OnceLock<Option<MsgpackDelta>>,
}

impl Base {
    pub(crate) fn new(cursor: Cursor, data: Payload) -> Self {
        Self {
            cursor,
            data,
            json: OnceLock::new(),
            msgpack: OnceLock::new(),
        }
    }

    pub(crate) fn cursor(&self) -> Cursor {
        self.cursor
    }

    pub(crate) fn json(&self, head: Head<'_>, target: &Payload) -> Option<&JsonDelta> {
        self.json
            .get_or_init(|| JsonDelta::new(head, target, &self.data))
            .as_ref()
    }

    pub(crate) fn msgpack(&self, head: Head<'_>, target: &Payload) -> Option<&MsgpackDelta> {
        self.msgpack
            .get_or_init(|| MsgpackDelta::new(head, target, &self.data))
            .as_ref()
    }
}

/// What a message's frame says before its data: its topic, position and event.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Head<'a> {
    pub(crate) topic: &'a TopicName,
    pub(crate) cursor: Cursor,
    pub(crate) event: Option<&'a EventName>,
}

/// The fields a delta frame has before its `data`: the message frame's own, then `delta`.
fn json_head(head: Head<'_>) -> String {
    let mut out = String::with_capacity(80);
    // Topic and event names never need JSON escaping (see `name`), cursors are hex/decimal.
    let _ = write!(
        out,
        r#"{{"type":"message","topic":"{}","id":"{}""#,
        head.topic, head.cursor
    );
    if let Some(event) = head.event {
        let _ = write!(out, r#","event":"{}""#, event.as_str());
    }
    out.push_str(r#","delta":true,"data":"#);
    out
}

/// A message's delta in the JSON form: the WebSocket text frame
/// `{"type":"message",..,"delta":true,"data":"<delta>"}` (the delta as a JSON string), and
/// the SSE and compressed forms made from it on first use.
#[derive(Debug)]
pub struct JsonDelta {
    /// The whole WebSocket frame and its payload (a slice of it).
    ws: (Bytes, Bytes),
    sse: OnceLock<Bytes>,
    deflate: OnceLock<Option<Bytes>>,
}

impl JsonDelta {
    /// `None` when the delta is not valid UTF-8 (it copies part of a character: a JSON
    /// string cannot carry it) or the frame would not be smaller than the full one.
    fn new(head: Head<'_>, target: &Payload, base: &Payload) -> Option<Self> {
        let target = target.as_bytes();
        let delta = encode(base.as_bytes(), target);
        let text = std::str::from_utf8(&delta).ok()?;
        // Serialising a string cannot fail.
        let quoted = serde_json::to_vec(text).ok()?;
        // `"delta":true,` and the quoted delta against the data.
        if quoted.len() + 13 >= target.len() {
            return None;
        }
        let head = json_head(head);
        let wire = server_frame(0x81, &[head.as_bytes(), &quoted, b"}"]);
        let payload = wire.slice(ws_header_len(wire.len())..);
        Some(Self {
            ws: (wire, payload),
            sse: OnceLock::new(),
            deflate: OnceLock::new(),
        })
    }

    /// The WebSocket text frame's payload (what a poll answer and the SSE JSON form carry).
    pub fn ws_frame(&self) -> &Bytes {
        &self.ws.1
    }

    /// [`Self::ws_frame`] as a whole server frame, for direct delivery.
    pub fn ws_wire_frame(&self) -> &Bytes {
        &self.ws.0
    }

    /// The SSE event of the JSON form: `id: topic=cursor`, `data: <frame>`, blank line.
    pub(crate) fn sse_json_frame(&self, head: Head<'_>) -> &Bytes {
        self.sse
            .get_or_init(|| sse_json_event(head.topic, head.cursor, self.ws_frame()))
    }

    /// [`Self::sse_json_frame`] without its `id:` line (a zero-copy slice), for streams
    /// that write their own multi-topic id.
    pub(crate) fn sse_json_body(&self, head: Head<'_>) -> Bytes {
        after_id_line(self.sse_json_frame(head))
    }

    /// The frame compressed for permessage-deflate (RSV1 set), when that is smaller.
    pub fn ws_deflate_wire_frame(&self) -> Option<&Bytes> {
        self.deflate
            .get_or_init(|| deflate_wire(self.ws_frame()))
            .as_ref()
    }

    /// The payload of [`Self::ws_deflate_wire_frame`] (a zero-copy slice).
    pub fn ws_deflate_payload(&self) -> Option<Bytes> {
        self.ws_deflate_wire_frame()
            .map(|wire| wire.slice(ws_header_len(wire.len())..))
    }
}

/// A message's delta in the MessagePack form (`herald.msgpack`): the binary frame whose
/// `data` is a `bin` holding the delta against the base's MessagePack data.
#[derive(Debug)]
pub struct MsgpackDelta {
    ws: (Bytes, Bytes),
}

impl MsgpackDelta {
    fn new(head: Head<'_>, target: &Payload, base: &Payload) -> Option<Self> {
        let target = msgpack_data(target);
        let delta = encode(&msgpack_data(base), &target);
        // `delta` `true` (7 bytes) and the bin's header (at most 5) against the data.
        if delta.len() + 12 >= target.len() {
            return None;
        }
        let mut body = Vec::with_capacity(64 + delta.len());
        // Writing to a Vec cannot fail.
        let _ = rmp::encode::write_map_len(&mut body, 5 + u32::from(head.event.is_some()));
        let _ = rmp::encode::write_str(&mut body, "type");
        let _ = rmp::encode::write_str(&mut body, "message");
        let _ = rmp::encode::write_str(&mut body, "topic");
        let _ = rmp::encode::write_str(&mut body, head.topic.as_str());
        let _ = rmp::encode::write_str(&mut body, "id");
        let _ = rmp::encode::write_str(&mut body, &head.cursor.to_string());
        if let Some(event) = head.event {
            let _ = rmp::encode::write_str(&mut body, "event");
            let _ = rmp::encode::write_str(&mut body, event.as_str());
        }
        let _ = rmp::encode::write_str(&mut body, "delta");
        let _ = rmp::encode::write_bool(&mut body, true);
        let _ = rmp::encode::write_str(&mut body, "data");
        let _ = rmp::encode::write_bin(&mut body, &delta);
        let wire = server_frame(0x82, &[&body]);
        let payload = wire.slice(ws_header_len(wire.len())..);
        Some(Self {
            ws: (wire, payload),
        })
    }

    /// The binary frame's payload.
    pub fn ws_msgpack_frame(&self) -> &Bytes {
        &self.ws.1
    }

    /// [`Self::ws_msgpack_frame`] as a whole server frame, for direct delivery.
    pub fn ws_msgpack_wire_frame(&self) -> &Bytes {
        &self.ws.0
    }
}

/// The Fossil delta that turns `base` into `target`.
pub fn encode(base: &[u8], target: &[u8]) -> Vec<u8> {
    // The crate's `delta(a, b)` is the delta that makes `a` from `b`.
    fossil_delta::delta(target, base)
}

/// Why a delta could not be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    /// It ends before its checksum, or a command is cut short.
    #[error("delta is truncated")]
    Truncated,
    /// A byte where a number or a command was expected.
    #[error("unexpected byte {0:#04x} in delta")]
    Unexpected(u8),
    /// It claims a result longer than the reader allows.
    #[error("delta claims {claimed} bytes, more than the limit of {limit}")]
    TooBig {
        /// The size it claims.
        claimed: u64,
        /// The reader's limit.
        limit: usize,
    },
    /// A copy reaches past the end of the base, or the result past its claimed size.
    #[error("delta copies or inserts out of range")]
    OutOfRange,
    /// The result does not have the size the delta claims.
    #[error("delta result has {got} bytes, it claims {claimed}")]
    WrongSize {
        /// The size reached.
        got: usize,
        /// The size claimed.
        claimed: usize,
    },
    /// The result's checksum is not the one the delta carries (applied to the wrong base).
    #[error("delta checksum does not match: applied to the wrong base?")]
    Checksum,
}

/// Applies a Fossil delta to `base`, checking every bound and the checksum: a result of at
/// most `limit` bytes, or why not. Never panics, whatever `delta` holds.
pub fn apply(base: &[u8], delta: &[u8], limit: usize) -> Result<Vec<u8>, DeltaError> {
    let mut reader = Reader { input: delta };
    let claimed = reader.number()?;
    if claimed > limit as u64 {
        return Err(DeltaError::TooBig { claimed, limit });
    }
    let claimed = claimed as usize;
    reader.expect(b'\n')?;
    let mut out = Vec::with_capacity(claimed);
    loop {
        let n = reader.number()?;
        match reader.byte()? {
            b'@' => {
                let offset = reader.number()?;
                reader.expect(b',')?;
                let end = offset.checked_add(n).ok_or(DeltaError::OutOfRange)?;
                if end > base.len() as u64 || out.len() as u64 + n > claimed as u64 {
                    return Err(DeltaError::OutOfRange);
                }
                out.extend_from_slice(&base[offset as usize..end as usize]);
            }
            b':' => {
                if out.len() as u64 + n > claimed as u64 {
                    return Err(DeltaError::OutOfRange);
                }
                out.extend_from_slice(reader.take(n)?);
            }
            b';' => {
                if out.len() != claimed {
                    return Err(DeltaError::WrongSize {
                        got: out.len(),
                        claimed,
                    });
                }
                if u64::from(checksum(&out)) != n {
                    return Err(DeltaError::Checksum);
                }
                return Ok(out);
            }
            other => return Err(DeltaError::Unexpected(other)),
        }
    }
}

struct Reader<'a> {
    input: &'a [u8],
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Result<u8, DeltaError> {
        let (&first, rest) = self.input.split_first().ok_or(DeltaError::Truncated)?;
        self.input = rest;
        Ok(first)
    }

    fn expect(&mut self, want: u8) -> Result<(), DeltaError> {
        match self.byte()? {
            got if got == want => Ok(()),
            got => Err(DeltaError::Unexpected(got)),
        }
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], DeltaError> {
        let n = usize::try_from(n).map_err(|_| DeltaError::Truncated)?;
        if n > self.input.len() {
            return Err(DeltaError::Truncated);
        }
        let (taken, rest) = self.input.split_at(n);
        self.input = rest;
        Ok(taken)
    }

    /// A base-64 number in Fossil's digits (`0-9A-Z_a-z~`), at least one digit, at most 64
    /// bits.
    fn number(&mut self) -> Result<u64, DeltaError> {
        let mut value: u64 = 0;
        let mut digits = 0;
        while let Some(&b) = self.input.first() {
            let Some(digit) = digit(b) else { break };
            value = value
                .checked_mul(64)
                .and_then(|v| v.checked_add(u64::from(digit)))
                .ok_or(DeltaError::OutOfRange)?;
            digits += 1;
            self.input = &self.input[1..];
        }
        match (digits, self.input.first()) {
            (0, Some(&b)) => Err(DeltaError::Unexpected(b)),
            (0, None) => Err(DeltaError::Truncated),
            _ => Ok(value),
        }
    }
}

fn digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'Z' => Some(b - b'A' + 10),
        b'_' => Some(36),
        b'a'..=b'z' => Some(b - b'a' + 37),
        b'~' => Some(63),
        _ => None,
    }
}

/// Fossil's checksum: the sum of the big-endian 32-bit words of `data`, the last one padded
/// with zeros.
fn checksum(data: &[u8]) -> u32 {
    data.chunks(4).fold(0u32, |sum, chunk| {
        let mut word = [0u8; 4];
        word[..chunk.len()].copy_from_slice(chunk);
        sum.wrapping_add(u32::from_be_bytes(word))
    })
}

#[cfg(test)]
mod tests;
