//! SSE subscriber: a raw HTTP/1.1 client over a tokio `TcpStream`.
//!
//! It writes one `GET` request, reads the response head (bounded), then decodes the body
//! (chunked, fixed-length or until-close) straight into the incremental SSE parser. One read
//! buffer of `read_buffer` bytes per connection is the only per-connection allocation besides
//! the parser's partial-line buffer.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::receiver::Receiver;
use super::{ConnCtx, ConnOutcome, Life, Role, dial::dial, hold_timer};
use crate::clock::unix_micros;
use crate::error::ConnError;
use crate::payload;
use crate::proto::chunked::ChunkedDecoder;
use crate::proto::http_head::{Framing, MAX_HEAD, ResponseHead, parse_head};
use crate::proto::sse::{SseError, SseItem, SseParser};
use crate::target::Target;

enum Body {
    Chunked(ChunkedDecoder),
    Length(u64),
    UntilClose,
}

/// Builds the request for `topics` (names) on `target`.
pub fn request(target: &Target, param: &str, topics: &[String]) -> String {
    let params: Vec<(&str, &str)> = topics.iter().map(|t| (param, t.as_str())).collect();
    format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\nUser-Agent: herald-loadgen\r\n\r\n",
        target.with_query(&params),
        target.host_header
    )
}

async fn open(
    ctx: &ConnCtx,
    conn: u64,
    topics: &[String],
) -> Result<(TcpStream, ResponseHead, Vec<u8>), ConnError> {
    let spec = &ctx.spec;
    let target = spec.target_for(conn);
    let timeout = Duration::from_millis(spec.connect_timeout_ms);
    let mut stream = dial(target.addr, spec.source_for(conn), timeout).await?;
    let req = request(target, &spec.topics.param, topics);
    stream
        .write_all(req.as_bytes())
        .await
        .map_err(ConnError::Io)?;
    let mut buf = Vec::with_capacity(spec.read_buffer.max(1024));
    loop {
        if buf.len() >= MAX_HEAD {
            return Err(ConnError::BadResponse("response head too large"));
        }
        let n = stream.read_buf(&mut buf).await.map_err(ConnError::Io)?;
        if n == 0 {
            return Err(ConnError::ClosedByServer);
        }
        match parse_head(&buf) {
            Ok(Some(head)) => {
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
                let rest = buf.split_off(head.head_len);
                return Ok((stream, head, rest));
            }
            Ok(None) => {}
            Err(_) => return Err(ConnError::BadResponse("invalid HTTP response head")),
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
    now_us: u64,
) -> Result<Signals, ConnError> {
    let mut sig = Signals::default();
    let mut on_item = |item: SseItem<'_>| {
        if let SseItem::Event { event, data, .. } = item {
            match event {
                Some("herald.lost") => rx.on_lost(payload::find_str(data, b"\"topic\"")),
                Some("herald.shutdown") => sig.shutdown = true,
                Some("herald.disconnect") => sig.disconnect = true,
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

/// Runs one SSE subscriber until the run stops it, its hold time ends (churn), or it fails.
pub async fn run(ctx: Arc<ConnCtx>, conn: u64, role: Role) -> ConnOutcome {
    let spec = &ctx.spec;
    let stats = &ctx.stats;
    let life = Life::begin(&ctx, conn, role);
    let churn = life.churn();
    let topics: Vec<(u32, String)> = spec
        .topics
        .topics_for(conn)
        .into_iter()
        .map(|i| (i, spec.topics.name(i)))
        .collect();
    let names: Vec<String> = topics.iter().map(|(_, n)| n.clone()).collect();
    let limit = Duration::from_millis(spec.connect_timeout_ms);
    let Some((mut stream, head, leftover)) = life.open(limit, open(&ctx, conn, &names)).await
    else {
        return ConnOutcome::default();
    };
    let hint = conn as usize;
    let cohort = life.cohort();
    let mut rx = Receiver::new(stats.clone(), hint, topics, churn, false);
    let mut parser = SseParser::new(spec.max_line, spec.max_event);
    let mut body = match head.framing {
        Framing::Chunked => Body::Chunked(ChunkedDecoder::new()),
        Framing::Length(n) => Body::Length(n),
        Framing::UntilClose => Body::UntilClose,
    };
    let mut result: Result<(), ConnError> =
        process(&leftover, &mut body, &mut parser, &mut rx, unix_micros())
            .and_then(Signals::into_result);
    drop(leftover);
    rx.flush();
    let mut buf = Vec::with_capacity(spec.read_buffer.max(256));
    let hold = hold_timer(role);
    tokio::pin!(hold);
    let mut stopped = false;
    while result.is_ok() {
        buf.clear();
        tokio::select! {
            biased;
            _ = ctx.stop.cancelled() => { stopped = true; break; }
            _ = &mut hold => { stopped = true; break; }
            r = stream.read_buf(&mut buf) => match r {
                Ok(0) => result = Err(ConnError::ClosedByServer),
                Ok(_) => {
                    result = process(&buf, &mut body, &mut parser, &mut rx, unix_micros()).and_then(Signals::into_result);
                    rx.flush();
                }
                Err(e) => result = Err(ConnError::Io(e)),
            }
        }
    }
    let stopped = life.end(&result, stopped);
    ConnOutcome {
        ready: true,
        cohort,
        stayed: stopped,
        topics: if churn { Vec::new() } else { rx.into_topics() },
        echo: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::parse_target;

    #[test]
    fn request_names_every_topic() {
        let t = parse_target("http://127.0.0.1:8080", "/v1/sse", false).unwrap();
        let r = request(&t, "topic", &["a".into(), "b".into()]);
        assert!(r.starts_with("GET /v1/sse?topic=a&topic=b HTTP/1.1\r\n"));
        assert!(r.contains("Host: 127.0.0.1:8080\r\n"));
        assert!(r.ends_with("\r\n\r\n"));
    }
}
