//! Cursors: positions in a topic's stream, and resume lists naming one per topic.
//!
//! A [`Cursor`] is written `<epoch>-<seq>`: the epoch in lower-case hex, the sequence number in
//! decimal (`9f86d081884c7d65-42`). The epoch names one life of a topic's stream; it changes
//! when the stream's history is lost (a topic reclaimed and created anew, a node restarted with
//! in-memory history), so a cursor from another epoch can never be mistaken for a position in
//! this one. Sequence numbers grow within an epoch; they need not be contiguous (a shared log
//! may leave gaps), and the first message of an epoch has a sequence number above 0, so
//! `<epoch>-0` means "before everything".
//!
//! A [`ResumeList`] names one cursor per topic, `topic=cursor,topic=cursor`; it is the SSE
//! `id:` of a multi-topic stream and the long-poll cursor.

use std::fmt::{self, Write as _};
use std::str::FromStr;

use crate::error::CursorError;
use crate::name::TopicName;

/// Longest text accepted as one cursor: 16 hex digits, a dash and 20 decimal digits.
pub const MAX_CURSOR_LEN: usize = 16 + 1 + 20;

/// A position in one topic's stream: the message with this sequence number in this epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cursor {
    /// The life of the topic's stream this position belongs to.
    pub epoch: u64,
    /// The sequence number of the last message at or before this position.
    pub seq: u64,
}

impl Cursor {
    /// A cursor at `seq` in `epoch`.
    pub const fn new(epoch: u64, seq: u64) -> Self {
        Self { epoch, seq }
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}-{}", self.epoch, self.seq)
    }
}

impl FromStr for Cursor {
    type Err = CursorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() > MAX_CURSOR_LEN {
            return Err(CursorError::TooLong {
                max: MAX_CURSOR_LEN,
            });
        }
        let (epoch, seq) = s.split_once('-').ok_or(CursorError::Malformed)?;
        let digits = |t: &str, radix: u32| {
            !t.is_empty()
                && t.chars()
                    .all(|c| c.is_digit(radix) && !c.is_ascii_uppercase())
        };
        if !digits(epoch, 16) || !digits(seq, 10) {
            return Err(CursorError::Malformed);
        }
        Ok(Self {
            epoch: u64::from_str_radix(epoch, 16).map_err(|_| CursorError::Malformed)?,
            seq: seq.parse().map_err(|_| CursorError::Malformed)?,
        })
    }
}

/// Most entries a [`ResumeList`] may hold when parsed from a client.
pub const MAX_RESUME_ENTRIES: usize = 256;

/// One cursor per topic, written `topic=cursor,topic=cursor` (topic names never contain `,`
/// or `=`). Order is kept as given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResumeList {
    entries: Vec<(TopicName, Cursor)>,
}

impl ResumeList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces the cursor of `topic`.
    pub fn set(&mut self, topic: TopicName, cursor: Cursor) {
        match self.entries.iter_mut().find(|(t, _)| *t == topic) {
            Some(entry) => entry.1 = cursor,
            None => self.entries.push((topic, cursor)),
        }
    }

    /// The cursor given for `topic`, if any.
    pub fn get(&self, topic: &str) -> Option<Cursor> {
        self.entries
            .iter()
            .find(|(t, _)| t.as_str() == topic)
            .map(|(_, c)| *c)
    }

    /// The entries in order.
    pub fn iter(&self) -> impl Iterator<Item = &(TopicName, Cursor)> {
        self.entries.iter()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Writes `topic=cursor,...` for the given entries into `out` (cleared first).
    pub fn write_entries<'a>(
        out: &mut String,
        entries: impl IntoIterator<Item = (&'a TopicName, Cursor)>,
    ) {
        out.clear();
        for (i, (topic, cursor)) in entries.into_iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            // Writing into a String cannot fail.
            let _ = write!(out, "{topic}={cursor}");
        }
    }
}

impl fmt::Display for ResumeList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = String::new();
        Self::write_entries(&mut s, self.entries.iter().map(|(t, c)| (t, *c)));
        f.write_str(&s)
    }
}

impl FromStr for ResumeList {
    type Err = CursorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let mut list = Self::new();
        if s.is_empty() {
            return Ok(list);
        }
        for (i, entry) in s.split(',').enumerate() {
            if i >= MAX_RESUME_ENTRIES {
                return Err(CursorError::TooManyTopics {
                    max: MAX_RESUME_ENTRIES,
                });
            }
            let bad = || CursorError::BadEntry(entry.chars().take(64).collect());
            let (topic, cursor) = entry.split_once('=').ok_or_else(bad)?;
            let topic = TopicName::new(topic)?;
            let cursor = cursor.parse().map_err(|_| bad())?;
            list.set(topic, cursor);
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_round_trips() {
        for c in [
            Cursor::new(0, 0),
            Cursor::new(0x9f86_d081_884c_7d65, 42),
            Cursor::new(u64::MAX, u64::MAX),
        ] {
            assert_eq!(c.to_string().parse::<Cursor>(), Ok(c));
        }
        assert_eq!(Cursor::new(0xab, 7).to_string(), "ab-7");
    }

    #[test]
    fn cursor_refuses_garbage() {
        for bad in [
            "",
            "-",
            "ab",
            "ab-",
            "-1",
            "AB-1",
            "zz-1",
            "ab-x",
            "ab-+1",
            "ab--1",
            "ab-1-2",
            "+ab-1",
            " ab-1",
            "ab-1 ",
            "ab-99999999999999999999",
        ] {
            assert!(bad.parse::<Cursor>().is_err(), "{bad:?}");
        }
        assert_eq!(
            "a".repeat(100).parse::<Cursor>(),
            Err(CursorError::TooLong { max: 37 })
        );
    }

    #[test]
    fn resume_list_round_trips() {
        let list: ResumeList = "a=1-2,user:x@y=ff-0".parse().unwrap();
        assert_eq!(list.get("a"), Some(Cursor::new(1, 2)));
        assert_eq!(list.get("user:x@y"), Some(Cursor::new(0xff, 0)));
        assert_eq!(list.get("b"), None);
        assert_eq!(list.to_string(), "a=1-2,user:x@y=ff-0");
        assert!("".parse::<ResumeList>().unwrap().is_empty());
    }

    #[test]
    fn resume_list_refuses_garbage() {
        for bad in [
            "a",
            "a=",
            "=1-2",
            "a/b=1-2",
            "a=1-2,",
            "a=1-2,,b=1-2",
            "a=zz",
        ] {
            assert!(bad.parse::<ResumeList>().is_err(), "{bad:?}");
        }
        let many = (0..300)
            .map(|i| format!("t{i}=1-1"))
            .collect::<Vec<_>>()
            .join(",");
        assert_eq!(
            many.parse::<ResumeList>(),
            Err(CursorError::TooManyTopics { max: 256 })
        );
    }
}
