//! Payload codecs the attacks speak besides JSON text: permessage-deflate (RFC 7692) for
//! compressed frames written by hand, and just enough MessagePack to build a hostile ping and
//! to read the `type` and `code` of a `herald.msgpack` answer.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// The four bytes a sync flush ends with; RFC 7692 strips them from a message (and the
/// receiver appends them again before inflating).
const SYNC_TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// Compresses one message as permessage-deflate sends it: raw DEFLATE, sync-flushed, the
/// trailing `00 00 ff ff` removed. Each message stands alone (no context taken over), which
/// every receiver accepts.
pub(crate) fn deflate_message(data: &[u8]) -> Vec<u8> {
    let mut c = Compress::new(Compression::default(), false);
    let mut out = Vec::with_capacity(data.len() / 4 + 64);
    loop {
        let consumed = c.total_in() as usize;
        let status = c
            .compress_vec(&data[consumed..], &mut out, FlushCompress::Sync)
            .expect("deflating into a Vec does not fail");
        if c.total_in() as usize == data.len() && out.len() < out.capacity() {
            break;
        }
        if status == Status::StreamEnd {
            break;
        }
        out.reserve(out.capacity().max(4096));
    }
    if out.ends_with(&SYNC_TAIL) {
        out.truncate(out.len() - SYNC_TAIL.len());
    }
    out
}

/// Inflates one permessage-deflate message (the server takes no context over: Herald always
/// answers `server_no_context_takeover`), at most `max` bytes; `None` when it is not valid
/// DEFLATE or inflates to more.
pub(crate) fn inflate_message(data: &[u8], max: usize) -> Option<Vec<u8>> {
    let mut d = Decompress::new(false);
    let mut input = data.to_vec();
    input.extend_from_slice(&SYNC_TAIL);
    let mut out = Vec::with_capacity((data.len() * 4).clamp(256, max.max(256)));
    loop {
        let consumed = d.total_in() as usize;
        let status = d
            .decompress_vec(&input[consumed..], &mut out, FlushDecompress::Sync)
            .ok()?;
        if d.total_in() as usize == input.len() || status == Status::StreamEnd {
            return Some(out);
        }
        if out.len() >= max {
            return None;
        }
        if out.len() == out.capacity() {
            out.reserve(out.capacity().min(max - out.len()).max(1));
        } else if d.total_in() as usize == consumed {
            // no progress with room to spare: truncated or invalid input
            return Some(out);
        }
    }
}

/// A MessagePack `{"type":"ping","data":[nil; n]}`: `n` one-byte values that a server
/// decoding into a tree turns into `n` nodes (and a JSON-speaking one into `n` `null`s).
pub(crate) fn msgpack_ping_of_nils(n: u16) -> Vec<u8> {
    let mut v = Vec::with_capacity(n as usize + 24);
    v.push(0x82); // fixmap, 2 entries
    v.extend_from_slice(b"\xa4type\xa4ping\xa4data");
    v.push(0xdc); // array 16
    v.extend_from_slice(&n.to_be_bytes());
    v.resize(v.len() + n as usize, 0xc0);
    v
}

/// Reads the short string (fixstr, at most 31 bytes) that follows the fixstr key `key` in a
/// MessagePack map: enough for the `type` and `code` of Herald's frames.
pub(crate) fn msgpack_str<'a>(data: &'a [u8], key: &str) -> Option<&'a str> {
    let mut needle = vec![0xa0 | key.len() as u8];
    needle.extend_from_slice(key.as_bytes());
    let at = memchr::memmem::find(data, &needle)? + needle.len();
    let tag = *data.get(at)?;
    if tag & 0xe0 != 0xa0 {
        return None;
    }
    let len = (tag & 0x1f) as usize;
    std::str::from_utf8(data.get(at + 1..at + 1 + len)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deflate_round_trips_and_compresses() {
        let data = format!(r#"{{"type":"ping","data":"{}"}}"#, "a".repeat(65_000));
        let z = deflate_message(data.as_bytes());
        assert!(z.len() < 1_000, "{} bytes", z.len());
        assert!(!z.ends_with(&SYNC_TAIL));
        assert_eq!(inflate_message(&z, 1 << 20).unwrap(), data.as_bytes());
        assert_eq!(inflate_message(&z, 1024), None);
        let small = deflate_message(b"hello");
        assert_eq!(inflate_message(&small, 1024).unwrap(), b"hello");
    }

    #[test]
    fn msgpack_ping_and_reading() {
        let p = msgpack_ping_of_nils(60_000);
        assert_eq!(p.len(), 1 + 15 + 3 + 60_000);
        assert_eq!(msgpack_str(&p, "type"), Some("ping"));
        assert_eq!(&p[16..19], &[0xdc, 0xea, 0x60]);
        assert!(p[19..].iter().all(|&b| b == 0xc0));
        let err = b"\x83\xa4type\xa5error\xa4code\xa9too_large\xa6reason\xa1x";
        assert_eq!(msgpack_str(err, "type"), Some("error"));
        assert_eq!(msgpack_str(err, "code"), Some("too_large"));
        assert_eq!(msgpack_str(b"\x81\xa4type\x01", "type"), None);
    }
}
