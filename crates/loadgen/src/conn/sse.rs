//! SSE subscriber: a raw HTTP/1.1 client over a tokio `TcpStream`.
//!
//! It writes one `GET` request, reads the response head (bounded), then decodes the body
//! (chunked, fixed-length or until-close) straight into the incremental SSE parser. One read
//! buffer of `read_buffer` bytes per connection is the only per-connection allocation besides
//! the parser's partial-line buffer.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::lifecycle::{Client, Session};
use super::receiver::Receiver;
use super::{ConnCtx, ConnOutcome, Role, topics_of};
use crate::clock::unix_micros;
use crate::error::ConnError;
use crate::payload;
use crate::proto::chunked::ChunkedDecoder;
use crate::proto::http_head::{Framing, MAX_HEAD, parse_head};
use crate::proto::sse::{SseError, SseItem, SseParser};
use crate::target::Target;

enum Body {
    Chunked(ChunkedDecoder),
    Length(u64),
    UntilClose,
}

/// Builds the request for `topics` (names) on `target`, asking for Fossil deltas if `delta`
/// (which gives the JSON form: every event's data is a `message` frame).
pub(crate) fn request(target: &Target, param: &str, topics: &[String], delta: bool) -> String {
    let mut params: Vec<(&str, &str)> = topics.iter().map(|t| (param, t.as_str())).collect();
    if delta {
        params.push(("delta", "fossil"));
    }
    format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\nUser-Agent: herald-loadgen\r\n\r\n",
        target.with_query(&params),
        target.host_header
    )
}

/// An SSE subscriber before it is connected.
pub(crate) struct Sse {
    topics: Vec<(u32, String)>,
    hint: usize,
    churn: bool,
}

impl Sse {
    /// Subscriber `conn` of the worker.
    pub(crate) fn new(ctx: &ConnCtx, conn: u64, role: Role) -> Self {
        Self {
            topics: topics_of(&ctx.spec, conn),
            hint: conn as usize,
            churn: matches!(role, Role::Churn { .. }),
        }
    }
}

impl Client for Sse {
    type Session = SseSession;

    /// Writes the request and reads the response head (bounded).
    async fn open(
        self,
        ctx: &ConnCtx,
        target: &Target,
        mut stream: TcpStream,
    ) -> Result<SseSession, ConnError> {
        let spec = &ctx.spec;
        let names: Vec<String> = self.topics.iter().map(|(_, n)| n.clone()).collect();
        let req = request(target, &spec.topics.param, &names, spec.topics.delta);
        stream
            .write_all(req.as_bytes())
            .await
            .map_err(ConnError::Io)?;
        let mut buf = Vec::with_capacity(spec.read_buffer.max(1024));
        let head = loop {
            if buf.len() >= MAX_HEAD {
                return Err(ConnError::BadResponse("response head too large"));
            }
            let n = stream.read_buf(&mut buf).await.map_err(ConnError::Io)?;
            if n == 0 {
                return Err(ConnError::ClosedByServer);
            }
            match parse_head(&buf) {
                Ok(Some(head)) => break head,
                Ok(None) => {}
                Err(_) => return Err(ConnError::BadResponse("invalid HTTP response head")),
            }
        };
        if !(200..300).contains(&head.status) {
            return Err(ConnError::Status(head.status));
        }
        if !head
            .content_type
            .as_deref()
            .is_some_and(|c| c.contains("text/event-stream"))
        {
            return Err(ConnError::BadResponse(
                "content-type is not text/event-stream",
            ));
        }
        let leftover = buf.split_off(head.head_len);
        Ok(SseSession {
            stream,
            leftover,
            buf: Vec::new(),
            read_buffer: spec.read_buffer.max(256),
            events: Events {
                body: match head.framing {
                    Framing::Chunked => Body::Chunked(ChunkedDecoder::new()),
                    Framing::Length(n) => Body::Length(n),
                    Framing::UntilClose => Body::UntilClose,
                },
                parser: SseParser::new(spec.max_line, spec.max_event),
                delta: spec.topics.delta,
                rx: Receiver::new(ctx.stats.clone(), self.hint, self.topics, self.churn, false),
            },
        })
    }
}

/// A ready SSE subscriber.
pub(crate) struct SseSession {
    stream: TcpStream,
    /// Body bytes that came with the response head.
    leftover: Vec<u8>,
    buf: Vec<u8>,
    read_buffer: usize,
    events: Events,
}

/// The body decoder feeding the event parser, and what the events count towards.
struct Events {
    body: Body,
    parser: SseParser,
    /// Events are JSON `message` frames, possibly deltas.
    delta: bool,
    rx: Receiver,
}

impl Events {
    fn feed(&mut self, bytes: &[u8]) -> Result<(), ConnError> {
        let result = process(
            bytes,
            &mut self.body,
            &mut self.parser,
            &mut self.rx,
            self.delta,
            unix_micros(),
        )
        .and_then(Signals::into_result);
        self.rx.flush();
        result
    }
}

impl Session for SseSession {
    type Event = std::io::Result<usize>;

    fn on_ready(&mut self) -> Result<(), ConnError> {
        let result = self.events.feed(&self.leftover);
        self.leftover = Vec::new();
        self.buf = Vec::with_capacity(self.read_buffer);
        result
    }

    async fn next(&mut self, _ctx: &ConnCtx) -> std::io::Result<usize> {
        self.buf.clear();
        self.stream.read_buf(&mut self.buf).await
    }

    async fn handle(
        &mut self,
        _ctx: &ConnCtx,
        read: std::io::Result<usize>,
    ) -> Result<(), ConnError> {
        match read {
            Ok(0) => Err(ConnError::ClosedByServer),
            Ok(_) => self.events.feed(&self.buf),
            Err(e) => Err(ConnError::Io(e)),
        }
    }

    fn finish(self, churn: bool, outcome: &mut ConnOutcome) {
        if !churn {
            outcome.topics = self.events.rx.into_topics();
        }
    }
}

/// What one read produced besides deliveries.
#[derive(Default)]
struct Signals {
    shutdown: bool,
    disconnect: bool,
    ended: bool,
}

impl Signals {
    fn into_result(self) -> Result<(), ConnError> {
        if self.shutdown {
            Err(ConnError::ServerShutdown)
        } else if self.disconnect {
            Err(ConnError::ServerDisconnect)
        } else if self.ended {
            Err(ConnError::ClosedByServer)
        } else {
            Ok(())
        }
    }
}

fn sse_err(e: SseError) -> ConnError {
    match e {
        SseError::LineTooLong(_) | SseError::EventTooLarge(_) => ConnError::SseTooLarge,
    }
}

fn process(
    bytes: &[u8],
    body: &mut Body,
    parser: &mut SseParser,
    rx: &mut Receiver,
    delta: bool,
    now_us: u64,
) -> Result<Signals, ConnError> {
    let mut sig = Signals::default();
    let mut on_item = |item: SseItem<'_>| {
        if let SseItem::Event { event, data, .. } = item {
            match event {
                Some("herald.lost") => rx.on_lost(payload::find_str(data, b"\"topic\"")),
                Some("herald.shutdown") => sig.shutdown = true,
                Some("herald.disconnect") => sig.disconnect = true,
                _ if delta => rx.on_json_frame(data, now_us),
                _ => rx.on_message(None, data, now_us),
            }
        }
    };
    match body {
        Body::Chunked(dec) => {
            let mut input = bytes;
            while let Some(data) = dec
                .next_data(&mut input)
                .map_err(|_| ConnError::BadResponse("invalid chunked encoding"))?
            {
                parser.feed(data, &mut on_item).map_err(sse_err)?;
            }
            if dec.is_done() {
                sig.ended = true;
            }
        }
        Body::Length(left) => {
            let take = (*left).min(bytes.len() as u64) as usize;
            parser.feed(&bytes[..take], &mut on_item).map_err(sse_err)?;
            *left -= take as u64;
            if *left == 0 {
                sig.ended = true;
            }
        }
        Body::UntilClose => parser.feed(bytes, &mut on_item).map_err(sse_err)?,
    }
    Ok(sig)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::parse_target;

    #[test]
    fn request_names_every_topic() {
        let t = parse_target("http://127.0.0.1:8080", "/v1/sse", false).unwrap();
        let r = request(&t, "topic", &["a".into(), "b".into()], false);
        assert!(r.starts_with("GET /v1/sse?topic=a&topic=b HTTP/1.1\r\n"));
        let r = request(&t, "topic", &["d:a".into()], true);
        assert!(
            r.starts_with("GET /v1/sse?topic=d%3Aa&delta=fossil HTTP/1.1\r\n"),
            "{r}"
        );
        assert!(r.contains("Host: 127.0.0.1:8080\r\n"));
        assert!(r.ends_with("\r\n\r\n"));
    }
}
