//! Reading and parsing an HTTP/1.1 response head, bounded in size.

/// How the response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// `Content-Length: n`.
    Length(u64),
    /// Neither: the body runs until the connection closes.
    UntilClose,
}

/// A parsed response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResponseHead {
    /// Status code.
    pub status: u16,
    /// Body framing.
    pub framing: Framing,
    /// Value of `Content-Type`, lower-cased, if present.
    pub content_type: Option<String>,
    /// Length of the head in bytes (the body starts here).
    pub head_len: usize,
}

/// A response head that cannot be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HeadError {
    /// Not HTTP.
    #[error("invalid HTTP response head")]
    Invalid,
    /// Larger than the bound.
    #[error("HTTP response head too large")]
    TooLarge,
}

/// Largest accepted response head.
pub(crate) const MAX_HEAD: usize = 16 * 1024;

/// Tries to parse a head from the start of `buf`: `Ok(None)` means more bytes are needed.
pub(crate) fn parse_head(buf: &[u8]) -> Result<Option<ResponseHead>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(buf) {
        Ok(httparse::Status::Complete(head_len)) => {
            let status = resp.code.ok_or(HeadError::Invalid)?;
            let mut framing = Framing::UntilClose;
            let mut content_type = None;
            for h in resp.headers.iter() {
                if h.name.eq_ignore_ascii_case("transfer-encoding") {
                    let v = String::from_utf8_lossy(h.value).to_ascii_lowercase();
                    if v.split(',').any(|p| p.trim() == "chunked") {
                        framing = Framing::Chunked;
                    }
                } else if h.name.eq_ignore_ascii_case("content-length")
                    && framing != Framing::Chunked
                {
                    let n = std::str::from_utf8(h.value)
                        .ok()
                        .and_then(|s| s.trim().parse().ok())
                        .ok_or(HeadError::Invalid)?;
                    framing = Framing::Length(n);
                } else if h.name.eq_ignore_ascii_case("content-type") {
                    content_type = Some(String::from_utf8_lossy(h.value).to_ascii_lowercase());
                }
            }
            Ok(Some(ResponseHead {
                status,
                framing,
                content_type,
                head_len,
            }))
        }
        Ok(httparse::Status::Partial) => {
            if buf.len() >= MAX_HEAD {
                Err(HeadError::TooLarge)
            } else {
                Ok(None)
            }
        }
        Err(_) => Err(HeadError::Invalid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_chunked_sse_head() {
        let raw = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n";
        let h = parse_head(raw).unwrap().unwrap();
        assert_eq!(h.status, 200);
        assert_eq!(h.framing, Framing::Chunked);
        assert_eq!(h.content_type.as_deref(), Some("text/event-stream"));
        assert_eq!(&raw[h.head_len..], b"5\r\n");
    }

    #[test]
    fn partial_length_and_errors() {
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nconte").unwrap(), None);
        let h = parse_head(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((h.status, h.framing), (404, Framing::Length(9)));
        let h = parse_head(b"HTTP/1.0 200 OK\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.framing, Framing::UntilClose);
        assert_eq!(parse_head(b"garbage\r\n\r\n"), Err(HeadError::Invalid));
        let big = [b'a'; MAX_HEAD + 1];
        let mut v = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        v.extend_from_slice(&big);
        assert_eq!(parse_head(&v), Err(HeadError::TooLarge));
    }
}
