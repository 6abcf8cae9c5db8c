//! Reading an HTTP/1.1 request head ourselves, so that SSE streams can be served straight on
//! the socket, and handing everything else to hyper with the bytes already read put back.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use bytes::{Buf as _, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};

use super::raw::{FastPath, HeadShape, RawRequest};
use crate::telemetry::metrics;

/// What the first request on a connection is.
#[derive(Debug)]
pub(crate) enum Head {
    /// A request the fast path takes ([`FastPath::classify`]): served on the socket.
    Raw(RawRequest),
    /// Anything else: give it to hyper, starting with these bytes.
    Other(Bytes),
    /// The client closed, timed out or sent garbage before a whole head; an answer (if any)
    /// has been written.
    Done,
}

const MAX_HEADERS: usize = 64;

/// Reads until a whole request head is in, then asks `fast_path` whether it takes a `GET`
/// (without one, every request is `Other`). Bytes past the head stay in `Other`'s buffer for
/// hyper. A head that is too large or too slow is answered here (431, 408) on every listener
/// alike.
pub(crate) async fn read_head<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    timeout: Duration,
    max_bytes: usize,
    fast_path: Option<&dyn FastPath>,
) -> Head {
    let mut buf = BytesMut::with_capacity(1024);
    let read = async {
        loop {
            if buf.len() >= max_bytes {
                return Err(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
            }
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return Ok(false),
                Ok(_) => {}
            }
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&buf) {
                Ok(httparse::Status::Complete(_)) => return Ok(true),
                Ok(httparse::Status::Partial) => continue,
                // Let hyper answer malformed requests the way it always does.
                Err(httparse::Error::TooManyHeaders) => {
                    return Err(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
                }
                Err(_) => return Ok(true),
            }
        }
    };
    let complete = match tokio::time::timeout(timeout, read).await {
        Ok(Ok(complete)) => complete,
        Ok(Err(status)) => {
            metrics::client_error("http", "head_too_large");
            let _ = write_status(
                stream,
                status,
                "request_head_too_large",
                "request head is over the size limit",
            )
            .await;
            return Head::Done;
        }
        Err(_) => {
            metrics::client_error("http", "head_timeout");
            let _ = write_status(
                stream,
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                "request head not received in time",
            )
            .await;
            return Head::Done;
        }
    };
    if !complete {
        return if buf.is_empty() {
            Head::Done
        } else {
            Head::Other(buf.freeze())
        };
    }
    let Some(fast_path) = fast_path else {
        return Head::Other(buf.freeze());
    };
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(&buf) {
        Ok(httparse::Status::Complete(len)) if req.method == Some("GET") => len,
        _ => return Head::Other(buf.freeze()),
    };
    let target = req.path.unwrap_or("");
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (target, None),
    };
    let upgrade = req
        .headers
        .iter()
        .any(|h| h.name.eq_ignore_ascii_case("upgrade"));
    let shape = HeadShape {
        upgrade,
        http11: req.version == Some(1),
        body_follows: buf.len() != head_len,
    };
    let Some(route) = fast_path.classify(path, shape) else {
        return Head::Other(buf.freeze());
    };
    let mut map = HeaderMap::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_bytes(h.value),
        ) {
            map.append(name, value);
        }
    }
    Head::Raw(RawRequest {
        route,
        query: query.map(str::to_owned),
        headers: map,
    })
}

/// Writes a complete JSON error response and leaves the connection to be closed.
pub(crate) async fn write_status<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    status: StatusCode,
    code: &str,
    reason: &str,
) -> io::Result<()> {
    let body = serde_json::json!({ "code": code, "reason": reason }).to_string();
    write_response(
        stream,
        status,
        &[("retry-after", "5")][..usize::from(
            status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS,
        )],
        &body,
    )
    .await
}

/// Writes `status` with a JSON `body` and `connection: close`.
pub(crate) async fn write_response<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    status: StatusCode,
    extra_headers: &[(&str, &str)],
    body: &str,
) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    );
    for (name, value) in extra_headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head.push_str(body);
    tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(head.as_bytes()).await?;
        // Close politely: closing with unread request bytes would reset the connection and
        // could destroy the answer before the client reads it. Drain what it sent (bounded).
        stream.shutdown().await?;
        let mut scratch = [0u8; 1024];
        let mut drained = 0;
        while drained < 64 * 1024 {
            match stream.read(&mut scratch).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
        Ok(())
    })
    .await
    .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))?
}

/// A stream that first yields bytes already read from it.
#[derive(Debug)]
pub(crate) struct Rewind<S> {
    prefix: Bytes,
    inner: S,
}

impl<S> Rewind<S> {
    /// `prefix`, then whatever `inner` yields.
    pub(crate) fn new(prefix: Bytes, inner: S) -> Self {
        Self { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
            if self.prefix.is_empty() {
                // Free the head buffer as soon as it has been handed over.
                self.prefix = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    crate::server::stream::forward_async_write!(inner);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rewind_yields_the_prefix_first() {
        let (a, mut b) = tokio::io::duplex(64);
        let mut r = Rewind::new(Bytes::from_static(b"hello "), a);
        b.write_all(b"world").await.unwrap();
        drop(b);
        let mut out = String::new();
        r.read_to_string(&mut out).await.unwrap();
        assert_eq!(out, "hello world");
    }
}
