//! How a message's encodings are framed: whole WebSocket frames from a server, the SSE event
//! of the JSON form, a payload's MessagePack form. Shared by a message's own encodings and its
//! deltas' ([`crate::delta`]).

use std::fmt::Write as _;

use bytes::{BufMut, Bytes, BytesMut};

use crate::cursor::Cursor;
use crate::name::TopicName;
use crate::payload::Payload;

/// A payload's MessagePack form: as its publisher sent it, or made from its JSON.
pub(crate) fn msgpack_data(data: &Payload) -> std::borrow::Cow<'_, [u8]> {
    match data.msgpack() {
        Some(given) => std::borrow::Cow::Borrowed(given),
        None => std::borrow::Cow::Owned(
            crate::msgpack::from_json_text(data.as_bytes()).unwrap_or_else(|| vec![0xc0]),
        ),
    }
}

/// The SSE event of the JSON form carrying `frame` (a WebSocket text frame's payload):
/// `id: topic=cursor`, one `data:` line, the blank line.
pub(crate) fn sse_json_event(topic: &TopicName, cursor: Cursor, frame: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(frame.len() + 48);
    let _ = write!(out, "id: {topic}={cursor}\ndata: ");
    out.put_slice(frame);
    out.put_slice(b"\n\n");
    out.freeze()
}

/// An SSE event without its first (`id:`) line: a zero-copy slice.
pub(crate) fn after_id_line(frame: &Bytes) -> Bytes {
    let id_end = frame.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
    frame.slice(id_end..)
}

/// `frame` compressed for permessage-deflate as a whole server frame (final, RSV1, text),
/// when compressing makes it smaller.
pub(crate) fn deflate_wire(frame: &[u8]) -> Option<Bytes> {
    crate::deflate::compress(frame).map(|packed| server_frame(0xc1, &[&packed]))
}

/// A whole, final, unmasked WebSocket frame from a server whose first byte is `opcode`
/// (0x81 text, 0x82 binary, 0xc1 compressed text: RSV1 set), carrying `parts` one after the
/// other.
pub(crate) fn server_frame(opcode: u8, parts: &[&[u8]]) -> Bytes {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut wire = BytesMut::with_capacity(10 + len);
    wire.put_u8(opcode);
    match len {
        0..=125 => wire.put_u8(len as u8),
        126..=0xffff => {
            wire.put_u8(126);
            wire.put_u16(len as u16);
        }
        _ => {
            wire.put_u8(127);
            wire.put_u64(len as u64);
        }
    }
    for part in parts {
        wire.put_slice(part);
    }
    wire.freeze()
}

/// The length of the header of a server's WebSocket frame `total` bytes long in all.
pub(crate) fn ws_header_len(total: usize) -> usize {
    match total {
        0..=127 => 2,
        128..=0x1_0003 => 4,
        _ => 10,
    }
}
