//! Raw DEFLATE for WebSocket's permessage-deflate (RFC 7692) without context takeover: every
//! message is compressed and inflated on its own, so no connection keeps a compressor or an
//! inflater between messages. Each thread keeps one of each and resets it per message
//! (a zlib deflate state is a few hundred KB; allocating one per message or per connection
//! is what this avoids).

use std::cell::RefCell;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// The empty stored block a sync flush ends with; RFC 7692 section 7.2.1 removes it from a
/// compressed message and section 7.2.2 appends it again before inflating.
const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// zlib's default level. A message is compressed once for all its subscribers, so the bytes
/// saved on every delivery outweigh the CPU spent once: on a 2 KB JSON message level 1 costs
/// 5 µs against 15 µs but sends 412 bytes against 307 (zlib-rs; BENCHMARKS.md).
const LEVEL: u32 = 6;

thread_local! {
    static DEFLATER: RefCell<Option<Compress>> = const { RefCell::new(None) };
    static INFLATER: RefCell<Option<Decompress>> = const { RefCell::new(None) };
}

/// `data` compressed as one permessage-deflate message (the trailing `00 00 ff ff`
/// removed), or `None` when that would not be smaller than `data`.
pub fn compress(data: &[u8]) -> Option<Vec<u8>> {
    DEFLATER.with_borrow_mut(|slot| {
        let deflater = slot.get_or_insert_with(|| Compress::new(Compression::new(LEVEL), false));
        deflater.reset();
        // Room for `data` and the tail: anything longer is not worth sending.
        let mut out = Vec::with_capacity(data.len() + TAIL.len());
        let mut input = data;
        loop {
            let before = deflater.total_in();
            deflater
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .ok()?;
            input = &input[usize::try_from(deflater.total_in() - before).ok()?..];
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
            if out.len() == out.capacity() {
                return None; // full, with more to come (or the flush not done)
            }
        }
        if !out.ends_with(&TAIL) || out.len() - TAIL.len() >= data.len() {
            return None;
        }
        out.truncate(out.len() - TAIL.len());
        Some(out)
    })
}

/// Why a compressed message could not be inflated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InflateError {
    /// It inflates to more than the limit (nothing past the limit was allocated).
    #[error("inflates to more than {0} bytes")]
    TooBig(usize),
    /// Not valid DEFLATE data.
    #[error("not valid DEFLATE data")]
    Corrupt,
}

/// Inflates one permessage-deflate message (RFC 7692 section 7.2.2: the tail appended), to
/// at most `limit` bytes: a message that would inflate to more is refused, and no more than
/// `limit + 1` bytes are ever allocated for it.
pub fn inflate(data: &[u8], limit: usize) -> Result<Vec<u8>, InflateError> {
    INFLATER.with_borrow_mut(|slot| {
        let inflater = slot.get_or_insert_with(|| Decompress::new(false));
        inflater.reset(false);
        let result = inflate_with(inflater, data, limit);
        if result.is_err() {
            // Whatever state a bad stream left behind goes with it.
            *slot = None;
        }
        result
    })
}

fn inflate_with(
    inflater: &mut Decompress,
    data: &[u8],
    limit: usize,
) -> Result<Vec<u8>, InflateError> {
    let cap = limit.saturating_add(1);
    let mut out = Vec::with_capacity(data.len().saturating_mul(4).max(256).min(cap));
    for part in [data, &TAIL[..]] {
        let mut input = part;
        loop {
            if out.len() == out.capacity() {
                if out.len() >= cap {
                    return Err(InflateError::TooBig(limit));
                }
                let grown = out.capacity().saturating_mul(2).min(cap);
                out.reserve_exact(grown - out.len());
            }
            let (in_before, out_before) = (inflater.total_in(), out.len());
            let status = inflater
                .decompress_vec(input, &mut out, FlushDecompress::Sync)
                .map_err(|_| InflateError::Corrupt)?;
            let consumed = usize::try_from(inflater.total_in() - in_before)
                .map_err(|_| InflateError::Corrupt)?;
            input = &input[consumed..];
            if status == Status::StreamEnd {
                // A final block (BFINAL) ends the message; the tail is not needed after it.
                return finish(out, limit);
            }
            let room = out.len() < out.capacity();
            if input.is_empty() && room {
                break;
            }
            if consumed == 0 && out.len() == out_before && room {
                return Err(InflateError::Corrupt); // no progress with input and room left
            }
        }
    }
    finish(out, limit)
}

fn finish(out: Vec<u8>, limit: usize) -> Result<Vec<u8>, InflateError> {
    if out.len() > limit {
        Err(InflateError::TooBig(limit))
    } else {
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(n: usize) -> Vec<u8> {
        let items: Vec<String> = (0..n)
            .map(|i| format!(r#"{{"id":{i},"name":"item","ok":true}}"#))
            .collect();
        format!("[{}]", items.join(",")).into_bytes()
    }

    #[test]
    fn round_trips_without_the_tail() {
        for n in [10, 1000, 20_000] {
            let data = json(n);
            let packed = compress(&data).expect("JSON compresses");
            assert!(!packed.ends_with(&TAIL));
            assert!(
                packed.len() < data.len() / 3,
                "{} of {}",
                packed.len(),
                data.len()
            );
            assert_eq!(inflate(&packed, data.len()).unwrap(), data);
            // Independent of the message before: no context is taken over.
            assert_eq!(inflate(&packed, data.len()).unwrap(), data);
        }
    }

    #[test]
    fn what_does_not_shrink_is_not_compressed() {
        assert_eq!(compress(b"{}"), None);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        assert_eq!(compress(&noise), None);
    }

    #[test]
    fn a_bomb_is_refused_at_the_limit() {
        let zeros = vec![0u8; 10 << 20];
        let packed = compress(&zeros).unwrap();
        assert!(packed.len() < 20_000);
        assert_eq!(
            inflate(&packed, 64 * 1024),
            Err(InflateError::TooBig(64 * 1024))
        );
        // Exactly at the limit is fine; any limit, however small (found by fuzzing).
        let packed = compress(&zeros[..1000]).unwrap();
        assert_eq!(inflate(&packed, 1000).unwrap().len(), 1000);
        assert_eq!(inflate(&packed, 999), Err(InflateError::TooBig(999)));
        assert_eq!(inflate(&packed, 9), Err(InflateError::TooBig(9)));
        assert_eq!(inflate(&[0x03, 0x00], 0).unwrap(), b"");
    }

    #[test]
    fn garbage_is_corrupt_and_the_next_message_still_inflates() {
        assert_eq!(
            inflate(&[0xff, 0xff, 0xff, 0xff, 0x00], 1000),
            Err(InflateError::Corrupt)
        );
        let data = json(50);
        assert_eq!(inflate(&compress(&data).unwrap(), 1 << 20).unwrap(), data);
    }

    #[test]
    fn a_final_block_ends_the_message() {
        // Compressed with BFINAL set (Finish), as RFC 7692 allows a sender to.
        let data = json(100);
        let mut c = Compress::new(Compression::default(), false);
        let mut packed = Vec::with_capacity(data.len());
        c.compress_vec(&data, &mut packed, FlushCompress::Finish)
            .unwrap();
        assert_eq!(inflate(&packed, 1 << 20).unwrap(), data);
    }
}
