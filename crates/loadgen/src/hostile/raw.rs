//! Raw wire helpers for attacks: HTTP requests written byte for byte, response heads read with
//! the loadgen's bounded parser, and WebSocket frames assembled from tungstenite's frame
//! header codec (a WebSocket client would refuse to send most of what the attacks send).

use std::io;
use std::time::Duration;

use base64::Engine as _;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::FrameHeader;
use tokio_tungstenite::tungstenite::protocol::frame::coding::OpCode;

use super::codec;
use super::outcome::Outcome;
use crate::payload;
use crate::proto::http_head::{Framing, MAX_HEAD, ResponseHead, parse_head};

/// Largest server WebSocket frame the attacks read (pongs of big pings, error frames).
pub(crate) const MAX_SERVER_FRAME: usize = 1 << 20;

/// A small, fast, non-cryptographic generator (xorshift64*): masks, keys and noise.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value).
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// `n` random bytes.
    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        v.truncate(n);
        v
    }

    /// A WebSocket masking key.
    pub(crate) fn mask(&mut self) -> [u8; 4] {
        (self.next_u64() as u32).to_le_bytes()
    }

    /// A valid `Sec-WebSocket-Key`: base64 of 16 random bytes.
    pub(crate) fn ws_key(&mut self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.bytes(16))
    }
}

/// Maps an I/O error on an open connection.
pub(crate) fn io_outcome(e: &io::Error) -> Outcome {
    match e.kind() {
        io::ErrorKind::ConnectionReset
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionAborted => Outcome::Reset,
        _ => Outcome::Io,
    }
}

/// A `GET` request head: `target` is written as is (no encoding), then `Host`, the extra
/// header lines (each without CRLF) and the blank line.
pub(crate) fn get(target: &str, host: &str, extra: &[String]) -> Vec<u8> {
    request("GET", target, host, extra, None)
}

/// A request of `method`, as [`get`], with a body when given (its `Content-Length` added;
/// the caller names its `Content-Type`, or leaves it out on purpose).
pub(crate) fn request(
    method: &str,
    target: &str,
    host: &str,
    extra: &[String],
    body: Option<&[u8]>,
) -> Vec<u8> {
    let mut s = format!(
        "{method} {target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: herald-loadgen-hostile\r\n"
    );
    for h in extra {
        s.push_str(h);
        s.push_str("\r\n");
    }
    if let Some(b) = body {
        s.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    s.push_str("\r\n");
    let mut out = s.into_bytes();
    out.extend_from_slice(body.unwrap_or_default());
    out
}

/// Most body bytes read to find a refusal's JSON `code`.
const MAX_ERROR_BODY: usize = 8 * 1024;

/// The outcome of a response head: an error status whose body is JSON reads on (at most
/// [`MAX_ERROR_BODY`]) to name its `code` ([`Outcome::Refused`]); anything else (a 200 or
/// 101 that may be a stream, a text/plain refusal) is its plain status.
pub(crate) async fn refusal<R: AsyncRead + Unpin>(
    r: &mut R,
    head: &ResponseHead,
    buf: &mut Vec<u8>,
) -> Outcome {
    let json = head
        .content_type
        .as_deref()
        .is_some_and(|t| t.starts_with("application/json"));
    if head.status < 400 || !json {
        return Outcome::Status(head.status);
    }
    let start = head.head_len.min(buf.len());
    loop {
        let body = &buf[start..];
        if let Some(code) = payload::find_str(body, b"\"code\"") {
            return Outcome::refused(head.status, code);
        }
        let complete = match head.framing {
            Framing::Length(n) => body.len() as u64 >= n,
            _ => false,
        };
        if complete || body.len() >= MAX_ERROR_BODY {
            return Outcome::Status(head.status);
        }
        buf.reserve(4096);
        match r.read_buf(buf).await {
            Ok(0) | Err(_) => return Outcome::Status(head.status),
            Ok(_) => {}
        }
    }
}

/// Reads the body of `head` slowly, as a client on a poor link: `chunk` bytes every `every`,
/// into a scratch buffer (nothing is kept), until the body ends (its `Content-Length`, or the
/// connection closing) or `hold` has passed. The socket's receive buffer is made small first,
/// so the server cannot hand its whole answer to the kernel and forget it.
pub(crate) async fn slow_read(
    stream: &mut TcpStream,
    head: &ResponseHead,
    buffered: usize,
    chunk: usize,
    every: Duration,
    hold: Duration,
) {
    let _ = nix::sys::socket::setsockopt(
        &*stream,
        nix::sys::socket::sockopt::RcvBuf,
        &chunk.max(4096),
    );
    let mut left = match head.framing {
        Framing::Length(n) => n.saturating_sub(buffered.saturating_sub(head.head_len) as u64),
        _ => u64::MAX,
    };
    let mut scratch = vec![0u8; chunk.max(1)];
    let until = tokio::time::Instant::now() + hold;
    while left > 0 && tokio::time::Instant::now() + every <= until {
        tokio::time::sleep(every).await;
        match tokio::time::timeout_at(until, stream.read(&mut scratch)).await {
            Ok(Ok(n)) if n > 0 => left = left.saturating_sub(n as u64),
            _ => return,
        }
    }
}

/// Reads until `buf` holds a whole response head (bounded by [`MAX_HEAD`]).
pub(crate) async fn read_head<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> Result<ResponseHead, Outcome> {
    loop {
        if !buf.is_empty() {
            match parse_head(buf) {
                Ok(Some(head)) => return Ok(head),
                Ok(None) => {}
                Err(_) => return Err(Outcome::BadResponse),
            }
        }
        if buf.len() >= MAX_HEAD {
            return Err(Outcome::BadResponse);
        }
        buf.reserve(4096);
        match r.read_buf(buf).await {
            Ok(0) => return Err(Outcome::Closed),
            Ok(_) => {}
            Err(e) => return Err(io_outcome(&e)),
        }
    }
}

/// Writes `request` while reading the answer, so that a server answering (and closing) before
/// the whole request is in — the right thing for an oversized head — is seen answering rather
/// than as a failed write. A write error only matters when no answer came.
pub(crate) async fn exchange(
    stream: &mut TcpStream,
    request: &[u8],
    buf: &mut Vec<u8>,
) -> Result<ResponseHead, Outcome> {
    let (mut r, mut w) = stream.split();
    head_while_writing(w.write_all(request), read_head(&mut r, buf)).await
}

/// Sends `prefix`, then one byte of `trickle` (cycled) every `every`, until an answer arrives.
/// The caller bounds the time.
pub(crate) async fn trickle(
    stream: &mut TcpStream,
    prefix: &[u8],
    trickle: &[u8],
    every: Duration,
    buf: &mut Vec<u8>,
) -> Result<ResponseHead, Outcome> {
    let (mut r, mut w) = stream.split();
    let write = async {
        w.write_all(prefix).await?;
        for b in trickle.iter().cycle() {
            tokio::time::sleep(every).await;
            w.write_all(std::slice::from_ref(b)).await?;
        }
        Ok::<(), io::Error>(())
    };
    head_while_writing(write, read_head(&mut r, buf)).await
}

/// Drives `write` and `read` together until `read` is done; says whether the write failed
/// (a connection closed after a failed write is a reset, not a close).
async fn read_while_writing<T, O>(
    write: impl Future<Output = io::Result<T>>,
    read: impl Future<Output = O>,
) -> (O, bool) {
    tokio::pin!(write);
    tokio::pin!(read);
    let (mut writing, mut write_failed) = (true, false);
    loop {
        tokio::select! {
            res = &mut write, if writing => {
                writing = false;
                write_failed = res.is_err();
            }
            o = &mut read => return (o, write_failed),
        }
    }
}

/// [`read_while_writing`] for a response head.
async fn head_while_writing<T>(
    write: impl Future<Output = io::Result<T>>,
    read: impl Future<Output = Result<ResponseHead, Outcome>>,
) -> Result<ResponseHead, Outcome> {
    match read_while_writing(write, read).await {
        (Err(Outcome::Closed), true) => Err(Outcome::Reset),
        (other, _) => other,
    }
}

/// WebSocket opcodes.
pub(crate) mod op {
    /// Continuation.
    pub(crate) const CONT: u8 = 0x0;
    /// Text.
    pub(crate) const TEXT: u8 = 0x1;
    /// Binary.
    pub(crate) const BINARY: u8 = 0x2;
    /// Close.
    pub(crate) const CLOSE: u8 = 0x8;
    /// Ping.
    pub(crate) const PING: u8 = 0x9;
    /// Pong.
    pub(crate) const PONG: u8 = 0xA;
}

/// Appends a client frame header (always masked, as clients must) claiming `len` bytes,
/// whatever `len` and the payload that follows (or does not) are.
pub(crate) fn frame_header(out: &mut Vec<u8>, opcode: u8, fin: bool, len: u64, mask: [u8; 4]) {
    let header = FrameHeader {
        is_final: fin,
        opcode: OpCode::from(opcode & 0x0f),
        mask: Some(mask),
        ..FrameHeader::default()
    };
    header
        .format(len, out)
        .expect("writing to a Vec does not fail");
}

/// Appends a complete masked client frame.
pub(crate) fn push_frame(out: &mut Vec<u8>, opcode: u8, fin: bool, payload: &[u8], mask: [u8; 4]) {
    frame_header(out, opcode, fin, payload.len() as u64, mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
}

/// Appends one message compressed with permessage-deflate: a single final frame with RSV1
/// set (the flag marks the first frame of a compressed message).
pub(crate) fn push_deflated(out: &mut Vec<u8>, opcode: u8, message: &[u8], mask: [u8; 4]) {
    let z = codec::deflate_message(message);
    let at = out.len();
    push_frame(out, opcode, true, &z, mask);
    out[at] |= 0x40;
}

/// One complete masked client frame.
pub(crate) fn frame(opcode: u8, fin: bool, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let mut v = Vec::with_capacity(payload.len() + 14);
    push_frame(&mut v, opcode, fin, payload, mask);
    v
}

/// A frame from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServerFrame {
    /// FIN bit.
    pub fin: bool,
    /// RSV1 bit: a compressed message (permessage-deflate).
    pub rsv1: bool,
    /// Opcode.
    pub opcode: u8,
    /// Payload (unmasked).
    pub payload: Vec<u8>,
}

/// Parses one frame from the start of `buf`: `Ok(None)` needs more bytes; `Err` is a frame
/// larger than `max`.
pub(crate) fn parse_frame(buf: &[u8], max: usize) -> Result<Option<(ServerFrame, usize)>, ()> {
    let mut cursor = io::Cursor::new(buf);
    let Some((header, len)) = FrameHeader::parse(&mut cursor).map_err(|_| ())? else {
        return Ok(None);
    };
    if len > max as u64 {
        return Err(());
    }
    let start = cursor.position() as usize;
    let end = start + len as usize;
    if buf.len() < end {
        return Ok(None);
    }
    let mut payload = buf[start..end].to_vec();
    if let Some(m) = header.mask {
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= m[i % 4];
        }
    }
    Ok(Some((
        ServerFrame {
            fin: header.is_final,
            rsv1: header.rsv1,
            opcode: header.opcode.into(),
            payload,
        },
        end,
    )))
}

/// Reads the next server frame from `buf[*off..]`, reading more when needed. Consumed bytes
/// are only dropped from `buf` before a read, so a burst of small frames (pongs to a flood)
/// costs linear time.
pub(crate) async fn next_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    off: &mut usize,
) -> Result<ServerFrame, Outcome> {
    loop {
        match parse_frame(&buf[*off..], MAX_SERVER_FRAME) {
            Ok(Some((f, used))) => {
                *off += used;
                return Ok(f);
            }
            Ok(None) => {}
            Err(()) => return Err(Outcome::BadResponse),
        }
        buf.drain(..*off);
        *off = 0;
        buf.reserve(4096);
        match r.read_buf(buf).await {
            Ok(0) => return Err(Outcome::Closed),
            Ok(_) => {}
            Err(e) => return Err(io_outcome(&e)),
        }
    }
}

/// What a WebSocket attack waits for: a reply whose `type` is in `want`, `need` times (a
/// close or an `error` frame ends the wait at once).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Awaited<'a> {
    /// Reply types that count as the answer.
    pub want: &'a [&'a str],
    /// How many of them.
    pub need: usize,
}

#[cfg(test)]
impl<'a> Awaited<'a> {
    /// One reply of a type in `want`.
    pub(crate) fn one(want: &'a [&'a str]) -> Self {
        Self { want, need: 1 }
    }
}

/// Reads frames until the server says something decisive: a close frame, an `error` frame, or
/// `awaited.need` replies whose `type` is in `awaited.want`. Messages, pings and pongs are
/// skipped. Compressed messages (RSV1) are inflated; binary frames are read as MessagePack
/// (`herald.msgpack`), and one without a readable `type` is the reply `binary`.
pub(crate) async fn ws_answer<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    awaited: Awaited<'_>,
) -> Outcome {
    let mut off = 0;
    let o = decisive(r, buf, &mut off, awaited).await;
    buf.drain(..off.min(buf.len()));
    o
}

async fn decisive<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    off: &mut usize,
    awaited: Awaited<'_>,
) -> Outcome {
    let mut got = 0;
    loop {
        let f = match next_frame(r, buf, off).await {
            Ok(f) => f,
            Err(o) => return o,
        };
        match f.opcode {
            op::CLOSE => {
                let code = (f.payload.len() >= 2)
                    .then(|| u16::from_be_bytes([f.payload[0], f.payload[1]]));
                return Outcome::WsClose(code);
            }
            op::TEXT | op::BINARY => {
                let inflated;
                let data = if f.rsv1 {
                    match codec::inflate_message(&f.payload, MAX_SERVER_FRAME) {
                        Some(d) => {
                            inflated = d;
                            &inflated[..]
                        }
                        None => return Outcome::BadResponse,
                    }
                } else {
                    &f.payload[..]
                };
                let field = |key: &str| {
                    if f.opcode == op::TEXT {
                        payload::find_str(data, format!("\"{key}\"").as_bytes())
                    } else {
                        codec::msgpack_str(data, key)
                    }
                };
                match field("type") {
                    Some("error") => return Outcome::ws_error(field("code").unwrap_or("")),
                    Some(t) if awaited.want.contains(&t) => {
                        got += 1;
                        if got >= awaited.need {
                            return Outcome::ws_reply(t);
                        }
                    }
                    None if f.opcode == op::BINARY => return Outcome::ws_reply("binary"),
                    _ => {}
                }
            }
            // pongs to a flood, and the server's own keep-alive pings
            op::PING | op::PONG => {}
            _ => {}
        }
    }
}

/// Writes `out` while reading the answer (see [`ws_answer`]), so that a server that answers or
/// closes mid-write is heard, and pongs to a flood cannot back up into a deadlock.
pub(crate) async fn ws_exchange(
    stream: &mut TcpStream,
    out: &[u8],
    buf: &mut Vec<u8>,
    awaited: Awaited<'_>,
) -> Outcome {
    let (mut r, mut w) = stream.split();
    match read_while_writing(write_chunked(&mut w, out), ws_answer(&mut r, buf, awaited)).await {
        (Outcome::Closed, true) => Outcome::Reset,
        (other, _) => other,
    }
}

/// Writes in 16 KiB pieces (a ping flood is many small frames in one buffer).
async fn write_chunked<W: AsyncWrite + Unpin>(w: &mut W, out: &[u8]) -> io::Result<()> {
    for chunk in out.chunks(16 * 1024) {
        w.write_all(chunk).await?;
    }
    Ok(())
}

/// Ends a WebSocket connection from our side: a masked close frame, then a short wait for the
/// server's answer so that its side ends cleanly. Best effort, bounded.
pub(crate) async fn ws_goodbye(stream: &mut TcpStream, mask: [u8; 4]) {
    let close = frame(op::CLOSE, true, &1000u16.to_be_bytes(), mask);
    let _ = tokio::time::timeout(Duration::from_millis(200), async {
        stream.write_all(&close).await?;
        let mut scratch = [0u8; 512];
        while stream.read(&mut scratch).await? > 0 {}
        Ok::<(), io::Error>(())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_masked_and_sized() {
        let f = frame(op::TEXT, true, b"hello", [1, 2, 3, 4]);
        assert_eq!(f[0], 0x81);
        assert_eq!(f[1], 0x80 | 5);
        assert_eq!(&f[2..6], &[1, 2, 3, 4]);
        let unmasked: Vec<u8> = f[6..]
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ [1, 2, 3, 4][i % 4])
            .collect();
        assert_eq!(unmasked, b"hello");
        let mut h = Vec::new();
        frame_header(&mut h, op::BINARY, false, 70_000, [0; 4]);
        assert_eq!(h[0], 0x02);
        assert_eq!(h[1], 0x80 | 127);
        assert_eq!(u64::from_be_bytes(h[2..10].try_into().unwrap()), 70_000);
        let mut h = Vec::new();
        frame_header(&mut h, op::TEXT, true, 300, [0; 4]);
        assert_eq!((h[1], u16::from_be_bytes([h[2], h[3]])), (0x80 | 126, 300));
    }

    #[test]
    fn parses_server_frames() {
        // unmasked close 1009 with a reason
        let mut raw = vec![0x88, 6, 0x03, 0xf1];
        raw.extend_from_slice(b"big!");
        raw.push(0x81);
        let (f, used) = parse_frame(&raw, 1024).unwrap().unwrap();
        assert_eq!((f.opcode, f.fin, used), (op::CLOSE, true, 8));
        assert_eq!(u16::from_be_bytes([f.payload[0], f.payload[1]]), 1009);
        assert_eq!(parse_frame(&raw[used..], 1024), Ok(None));
        // our own masked frames parse back
        let f = frame(op::TEXT, true, &[7u8; 300], [9, 8, 7, 6]);
        let (g, used) = parse_frame(&f, 1024).unwrap().unwrap();
        assert_eq!((g.payload, used), (vec![7u8; 300], f.len()));
        assert!(parse_frame(&f, 100).is_err());
    }

    #[tokio::test]
    async fn ws_answer_classifies() {
        let mut data = Vec::new();
        data.extend_from_slice(&[0x89, 0]); // ping: skipped
        let msg = br#"{"type":"message","topic":"a","data":1}"#;
        data.push(0x81);
        data.push(msg.len() as u8);
        data.extend_from_slice(msg);
        let err = br#"{"type":"error","code":"bad_json","reason":"x"}"#;
        data.push(0x81);
        data.push(err.len() as u8);
        data.extend_from_slice(err);
        let mut r = &data[..];
        let mut buf = Vec::new();
        assert_eq!(
            ws_answer(&mut r, &mut buf, Awaited::one(&["pong"])).await,
            Outcome::ws_error("bad_json")
        );
        let mut r = &b""[..];
        assert_eq!(
            ws_answer(&mut r, &mut buf, Awaited::one(&[])).await,
            Outcome::Closed
        );
    }

    #[tokio::test]
    async fn a_burst_of_pongs_is_read_in_linear_time() {
        let mut data = Vec::new();
        for _ in 0..100_000 {
            data.extend_from_slice(&[0x8A, 8, 1, 2, 3, 4, 5, 6, 7, 8]);
        }
        let pong = br#"{"type":"pong","data":{}}"#;
        data.push(0x81);
        data.push(pong.len() as u8);
        data.extend_from_slice(pong);
        let t = std::time::Instant::now();
        let mut r = &data[..];
        let mut buf = Vec::new();
        assert_eq!(
            ws_answer(&mut r, &mut buf, Awaited::one(&["pong"])).await,
            Outcome::ws_reply("pong")
        );
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }

    #[tokio::test]
    async fn compressed_msgpack_and_counted_answers() {
        // two compressed pongs (the server's frames are not masked), then a msgpack error
        let pong = br#"{"type":"pong","data":"zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz"}"#;
        let mut data = Vec::new();
        for _ in 0..2 {
            let z = codec::deflate_message(pong);
            data.push(0xC1); // FIN, RSV1, text
            data.push(z.len() as u8);
            data.extend_from_slice(&z);
        }
        let err = b"\x82\xa4type\xa5error\xa4code\xa9too_large";
        data.push(0x82);
        data.push(err.len() as u8);
        data.extend_from_slice(err);
        let awaited = Awaited {
            want: &["pong"],
            need: 2,
        };
        let mut r = &data[..];
        let mut buf = Vec::new();
        assert_eq!(
            ws_answer(&mut r, &mut buf, awaited).await,
            Outcome::ws_reply("pong")
        );
        let mut r = &data[..];
        let mut buf = Vec::new();
        let three = Awaited { need: 3, ..awaited };
        assert_eq!(
            ws_answer(&mut r, &mut buf, three).await,
            Outcome::ws_error("too_large")
        );
        // our own compressed frame carries RSV1 and inflates back
        let mut f = Vec::new();
        push_deflated(&mut f, op::TEXT, pong, [1, 2, 3, 4]);
        let (g, _) = parse_frame(&f, 1024).unwrap().unwrap();
        assert!(g.rsv1 && g.fin);
        assert_eq!(codec::inflate_message(&g.payload, 1024).unwrap(), pong);
    }

    #[tokio::test]
    async fn refusals_read_their_json_code() {
        let json = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 40\r\n\r\n{\"code\":\"bad_limit\",\"reason\":\"limit!!!!\"}";
        let text = b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: 5\r\n\r\noops!";
        for (raw, want) in [
            (&json[..], Outcome::refused(400, "bad_limit")),
            (&text[..], Outcome::Status(400)),
        ] {
            let mut r = raw;
            let mut buf = Vec::new();
            let head = read_head(&mut r, &mut buf).await.unwrap();
            assert_eq!(refusal(&mut r, &head, &mut buf).await, want);
        }
        let post = request(
            "POST",
            "/p",
            "h",
            &["Content-Type: text/plain".into()],
            Some(b"{}"),
        );
        let s = String::from_utf8(post).unwrap();
        assert!(s.starts_with("POST /p HTTP/1.1\r\n"));
        assert!(s.ends_with("Content-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}"));
    }

    #[test]
    fn rng_keys_are_valid() {
        let mut rng = Rng::new(7);
        let key = rng.ws_key();
        assert_eq!(key.len(), 24);
        assert_ne!(rng.next_u64(), rng.next_u64());
        assert_eq!(rng.bytes(13).len(), 13);
    }

    #[test]
    fn get_builds_a_request_head() {
        let r = get("/v1/sse?topic=a", "h:1", &["X-A: b".into()]);
        let s = String::from_utf8(r).unwrap();
        assert!(s.starts_with("GET /v1/sse?topic=a HTTP/1.1\r\nHost: h:1\r\n"));
        assert!(s.ends_with("X-A: b\r\n\r\n"));
    }
}
