//! Incremental decoder for HTTP/1.1 `Transfer-Encoding: chunked` bodies.
//!
//! Streaming responses without a length (SSE from hyper/axum, for example) are chunked. The
//! decoder hands back slices of the input (no copy) and keeps only a few counters of state,
//! so chunk boundaries, size lines and CRLFs may be split anywhere across reads.

/// Malformed chunked framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ChunkError {
    /// A chunk-size line that is not hex, too long, or not terminated properly.
    #[error("invalid chunk size line")]
    BadSize,
    /// Missing CRLF after chunk data.
    #[error("missing CRLF after chunk data")]
    BadDelimiter,
    /// An over-long extension or trailer line.
    #[error("chunk extension or trailer too long")]
    TooLong,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size { value: u64, digits: u8 },
    Ext { value: u64, len: usize },
    SizeLf { value: u64 },
    Data(u64),
    DataCr,
    DataLf,
    Trailer { len: usize },
    Done,
}

const MAX_EXT: usize = 4096;

/// Chunked body decoder state.
#[derive(Debug, Clone)]
pub(crate) struct ChunkedDecoder {
    state: State,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    /// A decoder at the start of a body.
    pub(crate) fn new() -> Self {
        Self {
            state: State::Size {
                value: 0,
                digits: 0,
            },
        }
    }

    /// Whether the terminating zero-size chunk (and trailers) were read.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Returns the next slice of body data found in `input`, advancing `input` past what was
    /// consumed. `Ok(None)` means `input` is exhausted (or the body is done).
    pub(crate) fn next_data<'a>(
        &mut self,
        input: &mut &'a [u8],
    ) -> Result<Option<&'a [u8]>, ChunkError> {
        while let Some((&b, rest)) = input.split_first() {
            match self.state {
                State::Data(n) => {
                    let take = (n.min(input.len() as u64)) as usize;
                    let (data, rest) = input.split_at(take);
                    *input = rest;
                    let left = n - take as u64;
                    self.state = if left == 0 {
                        State::DataCr
                    } else {
                        State::Data(left)
                    };
                    return Ok(Some(data));
                }
                State::Done => return Ok(None),
                _ => {}
            }
            *input = rest;
            self.state = match self.state {
                State::Size { value, digits } => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        if digits >= 15 {
                            return Err(ChunkError::BadSize);
                        }
                        let d = (b as char).to_digit(16).unwrap_or(0) as u64;
                        State::Size {
                            value: value * 16 + d,
                            digits: digits + 1,
                        }
                    }
                    b';' | b' ' | b'\t' if digits > 0 => State::Ext { value, len: 0 },
                    b'\r' if digits > 0 => State::SizeLf { value },
                    b'\n' if digits > 0 => after_size(value),
                    _ => return Err(ChunkError::BadSize),
                },
                State::Ext { value, len } => match b {
                    b'\n' => after_size(value),
                    _ if len >= MAX_EXT => return Err(ChunkError::TooLong),
                    _ => State::Ext {
                        value,
                        len: len + 1,
                    },
                },
                State::SizeLf { value } => match b {
                    b'\n' => after_size(value),
                    _ => return Err(ChunkError::BadSize),
                },
                State::DataCr => match b {
                    b'\r' => State::DataLf,
                    b'\n' => State::Size {
                        value: 0,
                        digits: 0,
                    },
                    _ => return Err(ChunkError::BadDelimiter),
                },
                State::DataLf => match b {
                    b'\n' => State::Size {
                        value: 0,
                        digits: 0,
                    },
                    _ => return Err(ChunkError::BadDelimiter),
                },
                State::Trailer { len } => match b {
                    b'\n' if len == 0 => State::Done,
                    b'\n' => State::Trailer { len: 0 },
                    b'\r' => State::Trailer { len },
                    _ if len >= MAX_EXT => return Err(ChunkError::TooLong),
                    _ => State::Trailer { len: len + 1 },
                },
                State::Data(_) | State::Done => self.state,
            };
        }
        Ok(None)
    }
}

fn after_size(value: u64) -> State {
    if value == 0 {
        State::Trailer { len: 0 }
    } else {
        State::Data(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(dec: &mut ChunkedDecoder, chunks: &[&[u8]]) -> Result<Vec<u8>, ChunkError> {
        let mut out = Vec::new();
        for c in chunks {
            let mut input: &[u8] = c;
            while let Some(d) = dec.next_data(&mut input)? {
                out.extend_from_slice(d);
            }
        }
        Ok(out)
    }

    const BODY: &[u8] =
        b"5\r\nhello\r\n1a;name=val\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: 1\r\n\r\n";

    #[test]
    fn decodes_whole_body() {
        let mut d = ChunkedDecoder::new();
        let out = decode_all(&mut d, &[BODY]).unwrap();
        assert_eq!(out, b"helloabcdefghijklmnopqrstuvwxyz");
        assert!(d.is_done());
    }

    #[test]
    fn decodes_at_every_split() {
        for cut in 0..=BODY.len() {
            let mut d = ChunkedDecoder::new();
            let (a, b) = BODY.split_at(cut);
            let out = decode_all(&mut d, &[a, b]).unwrap();
            assert_eq!(out, b"helloabcdefghijklmnopqrstuvwxyz", "cut {cut}");
            assert!(d.is_done());
        }
        let mut d = ChunkedDecoder::new();
        let bytes: Vec<&[u8]> = BODY.chunks(1).collect();
        assert_eq!(
            decode_all(&mut d, &bytes).unwrap(),
            b"helloabcdefghijklmnopqrstuvwxyz"
        );
    }

    #[test]
    fn streaming_body_without_end() {
        let mut d = ChunkedDecoder::new();
        let out = decode_all(&mut d, &[b"3\r\nabc\r\n", b"2\r\nde\r\n"]).unwrap();
        assert_eq!(out, b"abcde");
        assert!(!d.is_done());
    }

    #[test]
    fn rejects_garbage() {
        let mut d = ChunkedDecoder::new();
        assert_eq!(decode_all(&mut d, &[b"zz\r\n"]), Err(ChunkError::BadSize));
        let mut d = ChunkedDecoder::new();
        assert_eq!(
            decode_all(&mut d, &[b"2\r\nabX"]),
            Err(ChunkError::BadDelimiter)
        );
        let mut d = ChunkedDecoder::new();
        assert_eq!(
            decode_all(&mut d, &[b"fffffffffffffffff\r\n"]),
            Err(ChunkError::BadSize)
        );
        let mut d = ChunkedDecoder::new();
        assert_eq!(decode_all(&mut d, &[b"\r\n"]), Err(ChunkError::BadSize));
    }
}
