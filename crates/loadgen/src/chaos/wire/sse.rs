//! An SSE session in the JSON form (`format=json`), resuming with `Last-Event-ID`.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{
    Bases, Decoded, Dial, End, Event, HEARTBEAT_S, STALL, Sink, decode, report_resume_list,
    resume_list,
};
use crate::conn::dial::dial;
use crate::proto::chunked::ChunkedDecoder;
use crate::proto::http_head::{Framing, MAX_HEAD, parse_head};
use crate::proto::sse::{SseItem, SseParser};

/// Bounds of one SSE line and event (the chaos run's messages are small).
const MAX_LINE: usize = 256 * 1024;

fn request(d: &Dial<'_>) -> String {
    let mut params: Vec<(&str, &str)> = d.topics.iter().map(|t| ("topic", t.as_str())).collect();
    let hb = HEARTBEAT_S.to_string();
    params.push(("format", "json"));
    params.push(("heartbeat", &hb));
    if d.delta {
        params.push(("delta", "fossil"));
    }
    let mut r = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\nUser-Agent: herald-loadgen-chaos\r\n",
        d.target.with_query(&params),
        d.target.host_header
    );
    if !d.cursors.is_empty() {
        r.push_str("Last-Event-ID: ");
        r.push_str(&resume_list(d.cursors));
        r.push_str("\r\n");
    }
    r.push_str("\r\n");
    r
}

/// Runs one SSE session until `until`, `stop`, or a failure.
pub(crate) async fn run(
    d: Dial<'_>,
    until: Instant,
    stop: &CancellationToken,
    sink: &mut (dyn Sink + Send),
) -> End {
    let Ok(mut stream) = dial(d.target.addr, None, d.connect_timeout).await else {
        return End::Connect;
    };
    if stream.write_all(request(&d).as_bytes()).await.is_err() {
        return End::Connect;
    }
    let mut buf = Vec::with_capacity(8192);
    let head = loop {
        if buf.len() >= MAX_HEAD {
            return End::Broken;
        }
        match tokio::time::timeout(d.connect_timeout, stream.read_buf(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return End::Connect,
            Err(_) => return End::Connect,
            Ok(Ok(_)) => {}
        }
        match parse_head(&buf) {
            Ok(Some(h)) => break h,
            Ok(None) => {}
            Err(_) => return End::Broken,
        }
    };
    if !(200..300).contains(&head.status) {
        return End::Status;
    }
    sink.opened();
    let mut chunked = matches!(head.framing, Framing::Chunked).then(ChunkedDecoder::new);
    let mut parser = SseParser::new(MAX_LINE, MAX_LINE);
    let mut pending = buf.split_off(head.head_len);
    let mut ended = None;
    let mut bases = Bases::new(d.delta);
    loop {
        let mut on_item = |item: SseItem<'_>| {
            if ended.is_some() {
                return; // after a delta that did not apply, nothing more is taken
            }
            if let SseItem::Event { event, data, id } = item {
                if let Some(id) = id.and_then(|i| std::str::from_utf8(i).ok()) {
                    report_resume_list(id, sink);
                }
                match event {
                    Some("herald.lost") => {
                        if let Decoded::Events(ev) = decode(data, true, &mut bases) {
                            ev.into_iter().for_each(|e| sink.event(e));
                        }
                    }
                    Some("herald.shutdown" | "herald.disconnect") => ended = Some(End::Closed),
                    Some(_) => {}
                    None => match decode(data, false, &mut bases) {
                        Decoded::Events(ev) => ev.into_iter().for_each(|e| sink.event(e)),
                        Decoded::DeltaFailed => {
                            sink.event(Event::DeltaFailed);
                            ended = Some(End::Delta);
                        }
                        _ => {}
                    },
                }
            }
        };
        let fed = match chunked.as_mut() {
            Some(dec) => {
                let mut input = &pending[..];
                let mut r = Ok(());
                loop {
                    match dec.next_data(&mut input) {
                        Ok(Some(data)) => {
                            if parser.feed(data, &mut on_item).is_err() {
                                r = Err(End::Broken);
                                break;
                            }
                        }
                        Ok(None) => break,
                        Err(_) => {
                            r = Err(End::Broken);
                            break;
                        }
                    }
                }
                if dec.is_done() {
                    r = Err(End::Closed);
                }
                r
            }
            None => parser.feed(&pending, &mut on_item).map_err(|_| End::Broken),
        };
        if let Err(e) = fed {
            return e;
        }
        if let Some(e) = ended {
            return e;
        }
        pending.clear();
        tokio::select! {
            _ = stop.cancelled() => return End::Stopped,
            _ = tokio::time::sleep_until(until) => return End::Scheduled,
            r = tokio::time::timeout(STALL, stream.read_buf(&mut pending)) => match r {
                Err(_) => return End::Stall,
                Ok(Ok(0)) => return End::Closed,
                Ok(Err(_)) => return End::Broken,
                Ok(Ok(_)) => {}
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::target::parse_target;

    #[test]
    fn request_resumes_every_topic_in_json_form() {
        let t = parse_target("http://127.0.0.1:8080", "/v1/sse", false).unwrap();
        let topics = vec!["a".to_owned(), "b".to_owned()];
        let mut cursors = BTreeMap::new();
        cursors.insert("a".to_owned(), "e-3".to_owned());
        let d = Dial {
            target: &t,
            topics: &topics,
            cursors: &cursors,
            connect_timeout: Duration::from_secs(1),
            delta: true,
        };
        let r = request(&d);
        assert!(
            r.starts_with(
                "GET /v1/sse?topic=a&topic=b&format=json&heartbeat=5&delta=fossil HTTP/1.1\r\n"
            ),
            "{r}"
        );
        assert!(r.contains("\r\nLast-Event-ID: a=e-3\r\n"), "{r}");
    }
}
