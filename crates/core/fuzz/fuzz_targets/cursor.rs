//! Cursors and resume lists, as parsed from clients (`Last-Event-ID`, `?cursor=`, WebSocket
//! `cursors`).
//!
//! Checks, for arbitrary text:
//! - `Cursor` accepts exactly `<lower-case hex>-<decimal>` with both parts fitting a `u64`
//!   and at most `MAX_CURSOR_LEN` bytes (checked against an independent reference parser),
//!   and what it accepts re-displays to a canonical form that parses to the same value;
//! - `ResumeList` never holds more than `MAX_RESUME_ENTRIES` entries or a topic twice, keeps
//!   the last cursor given for a topic, and its written form re-parses equal.
//!
//! And for the first 16 bytes read as two `u64`s: `Cursor::new(epoch, seq)` round-trips.

#![no_main]

use herald_core::cursor::{MAX_CURSOR_LEN, MAX_RESUME_ENTRIES};
use herald_core::name::validate_topic;
use herald_core::{Cursor, CursorError, ResumeList};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some((epoch, seq)) = data
        .get(..16)
        .map(|b| (b[..8].try_into().unwrap(), b[8..].try_into().unwrap()))
    {
        let c = Cursor::new(u64::from_le_bytes(epoch), u64::from_be_bytes(seq));
        let text = c.to_string();
        assert!(text.len() <= MAX_CURSOR_LEN, "{text:?}");
        assert_eq!(text.parse::<Cursor>(), Ok(c), "{text:?}");
    }
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    check_cursor(s);
    check_resume_list(s);
});

/// The grammar, written independently of `Cursor::from_str`: digits accumulated in `u128`.
fn reference_cursor(s: &str) -> Option<Cursor> {
    fn number(t: &str, radix: u32) -> Option<u64> {
        if t.is_empty() {
            return None;
        }
        let mut n: u128 = 0;
        for b in t.bytes() {
            let d = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' if radix == 16 => b - b'a' + 10,
                _ => return None,
            };
            n = n * u128::from(radix) + u128::from(d);
            if n > u128::from(u64::MAX) {
                return None;
            }
        }
        Some(n as u64)
    }
    if s.len() > MAX_CURSOR_LEN {
        return None;
    }
    let dash = s.find('-')?;
    Some(Cursor::new(
        number(&s[..dash], 16)?,
        number(&s[dash + 1..], 10)?,
    ))
}

fn check_cursor(s: &str) {
    let parsed = s.parse::<Cursor>();
    assert_eq!(parsed.as_ref().ok(), reference_cursor(s).as_ref(), "{s:?}");
    if s.len() > MAX_CURSOR_LEN {
        assert_eq!(
            parsed,
            Err(CursorError::TooLong {
                max: MAX_CURSOR_LEN
            })
        );
    }
    if let Ok(c) = parsed {
        let text = c.to_string();
        assert!(text.len() <= s.len(), "canonical form is never longer");
        assert_eq!(text.parse::<Cursor>(), Ok(c), "{s:?} -> {text:?}");
    }
}

fn check_resume_list(s: &str) {
    let Ok(list) = s.parse::<ResumeList>() else {
        return;
    };
    let entries: Vec<_> = list.iter().cloned().collect();
    assert!(
        entries.len() <= MAX_RESUME_ENTRIES,
        "{} entries",
        entries.len()
    );
    for (i, (topic, cursor)) in entries.iter().enumerate() {
        assert!(validate_topic(topic.as_str()).is_ok(), "{topic:?}");
        assert!(
            entries[..i].iter().all(|(t, _)| t != topic),
            "{topic:?} twice"
        );
        assert_eq!(list.get(topic.as_str()), Some(*cursor));
    }
    // The last cursor given for a topic wins; every topic given is in the list.
    let trimmed = s.trim();
    if !trimmed.is_empty() {
        for entry in trimmed.split(',') {
            let (topic, _) = entry.split_once('=').expect("an accepted entry has '='");
            let last = trimmed
                .split(',')
                .rev()
                .find_map(|e| e.strip_prefix(topic)?.strip_prefix('='))
                .expect("the entry itself");
            assert_eq!(list.get(topic), last.parse().ok(), "{topic:?} in {s:?}");
        }
    } else {
        assert!(list.is_empty());
    }
    let text = list.to_string();
    assert_eq!(
        text.parse::<ResumeList>().as_ref(),
        Ok(&list),
        "{s:?} -> {text:?}"
    );
}
