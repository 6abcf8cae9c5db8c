//! Batch frames: several messages ready for one WebSocket subscriber at once, in one frame
//! (docs/protocol.md, "Batch frames"), for a client that asked for them (`?batch=1`).
//!
//! Every frame has costs a client pays per frame whatever it carries (the frame parse, a read
//! and a wake-up, a hand-off to the application): a burst of 100 messages in one frame costs
//! the client those once. The elements are the messages' own payloads, made once per message
//! and shared like every frame: a JSON batch is a JSON array of them (`[`, `,` between, `]`),
//! a MessagePack batch a MessagePack array. The topic's fan-out writes a batch without
//! copying ([`BatchFormat::head`], [`BatchFormat::separator`], [`BatchFormat::tail`] around the
//! payloads, one vectored write); a connection's own task, which writes through tungstenite,
//! copies them into one payload ([`BatchFormat::payload`]).

use bytes::{BufMut as _, Bytes, BytesMut};

/// Most messages in one batch frame.
pub const MAX_MESSAGES: usize = 64;

/// Most bytes of message payloads in one batch frame: a batch is never larger than a
/// message may be, so a client's frame limit that fits one message fits a batch (a message
/// bigger than this goes alone, in a frame of its own).
pub const MAX_BYTES: usize = 64 * 1024;

/// How a subscriber that asked for batch frames takes several messages at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchFormat {
    /// A text frame holding a JSON array of message frames.
    Json,
    /// A binary frame holding a MessagePack array of message maps.
    Msgpack,
}

/// The bytes before a batch's first element: the WebSocket frame's header and the array's
/// opening, on the stack.
#[derive(Clone, Copy, Debug)]
pub struct Head {
    bytes: [u8; 16],
    len: u8,
}

impl Head {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    fn put(&mut self, bytes: &[u8]) {
        let at = usize::from(self.len);
        self.bytes[at..at + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len() as u8;
    }
}

impl BatchFormat {
    /// The array's opening for `n` elements.
    fn open(self, n: usize, head: &mut Head) {
        match self {
            Self::Json => head.put(b"["),
            Self::Msgpack => match n {
                0..=15 => head.put(&[0x90 | n as u8]),
                _ => {
                    let n = u16::try_from(n).unwrap_or(u16::MAX).to_be_bytes();
                    head.put(&[0xdc, n[0], n[1]]);
                }
            },
        }
    }

    /// The payload's length for `n` elements of `elements` bytes in all.
    fn payload_len(self, n: usize, elements: usize) -> usize {
        match self {
            Self::Json => elements + n.saturating_sub(1) + 2,
            Self::Msgpack => elements + if n <= 15 { 1 } else { 3 },
        }
    }

    /// The bytes before the first of `n` elements (at most [`MAX_MESSAGES`]) of `elements`
    /// bytes in all, as a server sends them: the whole frame's header (final, unmasked, text
    /// or binary) and the array's opening.
    pub fn head(self, n: usize, elements: usize) -> Head {
        let len = self.payload_len(n, elements);
        let mut head = Head {
            bytes: [0; 16],
            len: 0,
        };
        head.put(&[match self {
            Self::Json => 0x81,
            Self::Msgpack => 0x82,
        }]);
        match len {
            0..=125 => head.put(&[len as u8]),
            126..=0xffff => {
                head.put(&[126]);
                head.put(&(len as u16).to_be_bytes());
            }
            _ => {
                head.put(&[127]);
                head.put(&(len as u64).to_be_bytes());
            }
        }
        self.open(n, &mut head);
        head
    }

    /// Between two elements.
    pub fn separator(self) -> &'static [u8] {
        match self {
            Self::Json => b",",
            Self::Msgpack => b"",
        }
    }

    /// After the last element.
    pub fn tail(self) -> &'static [u8] {
        match self {
            Self::Json => b"]",
            Self::Msgpack => b"",
        }
    }

    /// A batch frame's payload (no WebSocket header) holding `elements` in order: a copy, for
    /// a writer that frames it itself.
    pub fn payload(self, elements: &[&[u8]]) -> Bytes {
        let total: usize = elements.iter().map(|e| e.len()).sum();
        let mut out = BytesMut::with_capacity(self.payload_len(elements.len(), total));
        let mut head = Head {
            bytes: [0; 16],
            len: 0,
        };
        self.open(elements.len(), &mut head);
        out.put_slice(head.as_slice());
        for (i, element) in elements.iter().enumerate() {
            if i > 0 {
                out.put_slice(self.separator());
            }
            out.put_slice(element);
        }
        out.put_slice(self.tail());
        out.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole frame as the fan-out writes it: head, elements with separators, tail.
    fn wire(form: BatchFormat, elements: &[&[u8]]) -> Vec<u8> {
        let total = elements.iter().map(|e| e.len()).sum();
        let mut out = form.head(elements.len(), total).as_slice().to_vec();
        for (i, e) in elements.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(form.separator());
            }
            out.extend_from_slice(e);
        }
        out.extend_from_slice(form.tail());
        out
    }

    /// (opcode, payload) of one whole server frame.
    fn unframe(wire: &[u8]) -> (u8, &[u8]) {
        let (len, at) = match wire[1] {
            126 => (usize::from(u16::from_be_bytes([wire[2], wire[3]])), 4),
            127 => (
                usize::try_from(u64::from_be_bytes(wire[2..10].try_into().unwrap())).unwrap(),
                10,
            ),
            n => (usize::from(n), 2),
        };
        assert_eq!(wire.len(), at + len, "the header's length is the payload's");
        (wire[0], &wire[at..])
    }

    #[test]
    fn a_json_batch_is_a_text_frame_holding_an_array_of_the_frames() {
        let a = br#"{"type":"message","topic":"t","id":"e-1","data":1}"#;
        let b = br#"{"type":"message","topic":"t","id":"e-2","data":[1,2]}"#;
        for elements in [vec![&a[..]], vec![&a[..], &b[..]], vec![&a[..]; 60]] {
            let wire = wire(BatchFormat::Json, &elements);
            let (opcode, payload) = unframe(&wire);
            assert_eq!(opcode, 0x81);
            assert_eq!(payload, &BatchFormat::Json.payload(&elements)[..]);
            let parsed: Vec<serde_json::Value> = serde_json::from_slice(payload).unwrap();
            assert_eq!(parsed.len(), elements.len());
            for (got, sent) in parsed.iter().zip(&elements) {
                assert_eq!(
                    got,
                    &serde_json::from_slice::<serde_json::Value>(sent).unwrap()
                );
            }
        }
    }

    #[test]
    fn a_msgpack_batch_is_a_binary_frame_holding_an_array_of_the_maps() {
        let map =
            |i: i64| crate::msgpack::from_json(&serde_json::json!({"type": "message", "seq": i}));
        for n in [1usize, 2, 15, 16, 64] {
            let maps: Vec<Vec<u8>> = (0..n as i64).map(map).collect();
            let elements: Vec<&[u8]> = maps.iter().map(|m| &m[..]).collect();
            let wire = wire(BatchFormat::Msgpack, &elements);
            let (opcode, payload) = unframe(&wire);
            assert_eq!(opcode, 0x82);
            assert_eq!(payload, &BatchFormat::Msgpack.payload(&elements)[..]);
            let parsed: Vec<serde_json::Value> =
                serde_json::from_slice(&crate::msgpack::to_json(payload).unwrap()).unwrap();
            let seqs: Vec<i64> = parsed.iter().map(|m| m["seq"].as_i64().unwrap()).collect();
            assert_eq!(seqs, (0..n as i64).collect::<Vec<_>>());
        }
    }

    #[test]
    fn every_header_length_form_is_right() {
        let big = vec![b'1'; 70_000];
        for len in [0usize, 100, 123, 124, 200, 65_000, 70_000] {
            let elements = [&big[..len.max(1)]];
            let wire = wire(BatchFormat::Json, &elements);
            let (_, payload) = unframe(&wire);
            assert_eq!(payload.len(), len.max(1) + 2);
        }
    }
}
