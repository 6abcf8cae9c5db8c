//! Incremental, bounded `text/event-stream` parser.
//!
//! Bytes are fed as they arrive, split anywhere (even inside a `\r\n`). Lines end in `\n`,
//! `\r\n` or `\r`, per the HTML standard. A line longer than `max_line` or an event whose
//! data exceeds `max_event` is an error, so a misbehaving server cannot grow memory without
//! bound. Complete lines that lie inside one chunk are parsed in place, without copying.

/// Buffers that grew past this (one large event) are shrunk back to [`KEEP`] bytes, so that
/// a single large event does not pin memory on each of 100k connections.
const SHRINK_ABOVE: usize = 64 * 1024;
const KEEP: usize = 4096;

/// One parsed item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SseItem<'a> {
    /// A dispatched event: the `event:` name if any, the data lines joined by `\n`, and the
    /// last event id seen on the stream.
    Event {
        /// Event name (`event:` field), if set.
        event: Option<&'a str>,
        /// Data lines joined with `\n`.
        data: &'a [u8],
        /// Last event id of the stream, if any.
        id: Option<&'a [u8]>,
    },
    /// A comment line (`: ping`), without the colon and one leading space.
    Comment(&'a [u8]),
    /// A `retry:` field with a valid number.
    Retry(u64),
}

/// The stream broke a bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SseError {
    /// A single line was longer than the bound.
    #[error("SSE line longer than {0} bytes")]
    LineTooLong(usize),
    /// An event's data was larger than the bound.
    #[error("SSE event data larger than {0} bytes")]
    EventTooLarge(usize),
}

/// Incremental SSE parser state.
#[derive(Debug)]
pub(crate) struct SseParser {
    line: Vec<u8>,
    data: Vec<u8>,
    event: String,
    id: Vec<u8>,
    has_id: bool,
    has_data: bool,
    skip_lf: bool,
    max_line: usize,
    max_event: usize,
}

impl SseParser {
    /// A parser with the given bounds (bytes).
    pub(crate) fn new(max_line: usize, max_event: usize) -> Self {
        Self {
            line: Vec::new(),
            data: Vec::new(),
            event: String::new(),
            id: Vec::new(),
            has_id: false,
            has_data: false,
            skip_lf: false,
            max_line,
            max_event,
        }
    }

    /// Bytes currently buffered (partial line plus pending event data).
    #[cfg(test)]
    pub(crate) fn buffered(&self) -> usize {
        self.line.len() + self.data.len()
    }

    /// Feeds a chunk, calling `on` for every complete item.
    pub(crate) fn feed<F>(&mut self, mut chunk: &[u8], on: &mut F) -> Result<(), SseError>
    where
        F: FnMut(SseItem<'_>),
    {
        while !chunk.is_empty() {
            if self.skip_lf {
                self.skip_lf = false;
                if chunk[0] == b'\n' {
                    chunk = &chunk[1..];
                    continue;
                }
            }
            match memchr::memchr2(b'\n', b'\r', chunk) {
                Some(pos) => {
                    if chunk[pos] == b'\r' {
                        self.skip_lf = true;
                    }
                    if self.line.is_empty() {
                        self.check_line(pos)?;
                        self.process_line(&chunk[..pos], on)?;
                    } else {
                        self.check_line(self.line.len() + pos)?;
                        self.line.extend_from_slice(&chunk[..pos]);
                        let line = std::mem::take(&mut self.line);
                        let r = self.process_line(&line, on);
                        self.line = line;
                        self.line.clear();
                        if self.line.capacity() > SHRINK_ABOVE {
                            self.line.shrink_to(KEEP);
                        }
                        r?;
                    }
                    chunk = &chunk[pos + 1..];
                }
                None => {
                    self.check_line(self.line.len() + chunk.len())?;
                    self.line.extend_from_slice(chunk);
                    break;
                }
            }
        }
        Ok(())
    }

    fn check_line(&self, len: usize) -> Result<(), SseError> {
        if len > self.max_line {
            Err(SseError::LineTooLong(self.max_line))
        } else {
            Ok(())
        }
    }

    fn process_line<F>(&mut self, line: &[u8], on: &mut F) -> Result<(), SseError>
    where
        F: FnMut(SseItem<'_>),
    {
        if line.is_empty() {
            if self.has_data || !self.event.is_empty() {
                on(SseItem::Event {
                    event: (!self.event.is_empty()).then_some(self.event.as_str()),
                    data: &self.data,
                    id: self.has_id.then_some(self.id.as_slice()),
                });
            }
            self.data.clear();
            if self.data.capacity() > SHRINK_ABOVE {
                self.data.shrink_to(KEEP);
            }
            self.event.clear();
            self.has_data = false;
            return Ok(());
        }
        if line[0] == b':' {
            on(SseItem::Comment(strip_space(&line[1..])));
            return Ok(());
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => (&line[..i], strip_space(&line[i + 1..])),
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                let extra = value.len() + usize::from(self.has_data);
                if self.data.len() + extra > self.max_event {
                    return Err(SseError::EventTooLarge(self.max_event));
                }
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => {
                self.event.clear();
                self.event.push_str(&String::from_utf8_lossy(value));
            }
            b"id" if !value.contains(&0) => {
                self.id.clear();
                self.id.extend_from_slice(value);
                self.has_id = true;
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                if let Some(ms) = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok()) {
                    on(SseItem::Retry(ms));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

fn strip_space(v: &[u8]) -> &[u8] {
    v.strip_prefix(b" ").unwrap_or(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Eq)]
    enum Owned {
        Event(Option<String>, String, Option<String>),
        Comment(String),
        Retry(u64),
    }

    fn collect(p: &mut SseParser, chunks: &[&[u8]]) -> Result<Vec<Owned>, SseError> {
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, &mut |item| {
                out.push(match item {
                    SseItem::Event { event, data, id } => Owned::Event(
                        event.map(str::to_owned),
                        String::from_utf8_lossy(data).into_owned(),
                        id.map(|i| String::from_utf8_lossy(i).into_owned()),
                    ),
                    SseItem::Comment(c) => Owned::Comment(String::from_utf8_lossy(c).into_owned()),
                    SseItem::Retry(r) => Owned::Retry(r),
                })
            })?;
        }
        Ok(out)
    }

    const STREAM: &[u8] = b"retry: 3000\nid: 0-0\n\n: ping\n\nid: 1-5\ndata: {\"seq\":1}\n\nid: 1-6\nevent: herald.lost\ndata: line1\ndata: line2\n\n";

    fn expected() -> Vec<Owned> {
        vec![
            Owned::Retry(3000),
            Owned::Comment("ping".into()),
            Owned::Event(None, "{\"seq\":1}".into(), Some("1-5".into())),
            Owned::Event(
                Some("herald.lost".into()),
                "line1\nline2".into(),
                Some("1-6".into()),
            ),
        ]
    }

    #[test]
    fn parses_whole_stream() {
        let mut p = SseParser::new(1024, 4096);
        assert_eq!(collect(&mut p, &[STREAM]).unwrap(), expected());
        assert_eq!(p.buffered(), 0);
    }

    #[test]
    fn every_split_point_gives_the_same_items() {
        for cut in 0..=STREAM.len() {
            let mut p = SseParser::new(1024, 4096);
            let (a, b) = STREAM.split_at(cut);
            assert_eq!(collect(&mut p, &[a, b]).unwrap(), expected(), "cut {cut}");
        }
        // byte by byte
        let mut p = SseParser::new(1024, 4096);
        let bytes: Vec<&[u8]> = STREAM.chunks(1).collect();
        assert_eq!(collect(&mut p, &bytes).unwrap(), expected());
    }

    #[test]
    fn crlf_and_cr_line_endings_even_split() {
        let crlf = String::from_utf8(STREAM.to_vec())
            .unwrap()
            .replace('\n', "\r\n");
        let cr = String::from_utf8(STREAM.to_vec())
            .unwrap()
            .replace('\n', "\r");
        for s in [crlf, cr] {
            for cut in 0..=s.len() {
                let mut p = SseParser::new(1024, 4096);
                let (a, b) = s.as_bytes().split_at(cut);
                assert_eq!(collect(&mut p, &[a, b]).unwrap(), expected(), "cut {cut}");
            }
        }
    }

    #[test]
    fn field_without_colon_and_space_rules() {
        let mut p = SseParser::new(1024, 4096);
        let items = collect(&mut p, &[b"data\ndata:x\ndata:  y\nfoo: bar\n\n"]).unwrap();
        assert_eq!(items, vec![Owned::Event(None, "\nx\n y".into(), None)]);
    }

    #[test]
    fn no_dispatch_without_data_or_event_and_named_empty_events() {
        let mut p = SseParser::new(1024, 4096);
        let items = collect(&mut p, &[b"id: 7\n\nevent: herald.shutdown\n\n"]).unwrap();
        assert_eq!(
            items,
            vec![Owned::Event(
                Some("herald.shutdown".into()),
                String::new(),
                Some("7".into())
            )]
        );
    }

    #[test]
    fn bounds_are_enforced() {
        let mut p = SseParser::new(16, 4096);
        let long = [b'a'; 40];
        assert_eq!(
            collect(&mut p, &[b"data: ", &long]),
            Err(SseError::LineTooLong(16))
        );
        let mut p = SseParser::new(16, 10);
        assert_eq!(
            collect(&mut p, &[b"data: 123456\ndata: 123456\n"]),
            Err(SseError::EventTooLarge(10))
        );
        // a bounded line split over chunks is fine
        let mut p = SseParser::new(16, 100);
        assert_eq!(
            collect(&mut p, &[b"data: 01", b"23456789\n\n"]).unwrap(),
            vec![Owned::Event(None, "0123456789".into(), None)]
        );
    }

    #[test]
    fn invalid_retry_is_ignored() {
        let mut p = SseParser::new(1024, 4096);
        assert!(
            collect(&mut p, &[b"retry: 1x\nretry:\n"])
                .unwrap()
                .is_empty()
        );
    }
}
