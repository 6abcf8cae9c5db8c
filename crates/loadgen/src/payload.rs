//! Payloads written by the built-in publisher and echo clients, and the cheap scanner that
//! reads them back.
//!
//! Every generated payload is a JSON object `{"ts":<unix µs>,"seq":<n>,"topic":"<name>","pad":"..."}`
//! padded to an exact size. Receivers do not parse JSON: they look for the byte patterns
//! `"ts":`, `"seq":` and `"topic":"` and read the number or string that follows. This is
//! exact for the payloads generated here (keys are unique, numbers are plain integers, topic
//! names never contain quotes or backslashes) and cheap enough for 100k+ deliveries per second.
//! A JSON string payload that merely contains the text `"ts":` is escaped by the server as
//! `\"ts\":` and therefore cannot match by accident.

use memchr::memmem;

/// Fields found in a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Fields<'a> {
    /// The send timestamp, unix microseconds (or a foreign unit in raw modes).
    pub ts: Option<u64>,
    /// The per-topic sequence number.
    pub seq: Option<u64>,
    /// The topic name.
    pub topic: Option<&'a str>,
}

/// Scans `data` for `"ts"`, `"seq"` and `"topic"`.
pub(crate) fn scan(data: &[u8]) -> Fields<'_> {
    Fields {
        ts: find_u64(data, b"\"ts\""),
        seq: find_u64(data, b"\"seq\""),
        topic: find_str(data, b"\"topic\""),
    }
}

fn after_key<'a>(data: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let mut from = 0;
    while let Some(pos) = memmem::find(&data[from..], key) {
        let rest = &data[from + pos + key.len()..];
        let rest = trim_ws(rest);
        if let Some(rest) = rest.strip_prefix(b":") {
            return Some(trim_ws(rest));
        }
        from += pos + key.len();
    }
    None
}

fn trim_ws(s: &[u8]) -> &[u8] {
    let n = s
        .iter()
        .take_while(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        .count();
    &s[n..]
}

/// Reads the unsigned integer following `key:`.
pub(crate) fn find_u64(data: &[u8], key: &[u8]) -> Option<u64> {
    let rest = after_key(data, key)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for b in &rest[..digits] {
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(v)
}

/// Reads the string following `key:` (strings with escapes are not supported: `None`).
pub(crate) fn find_str<'a>(data: &'a [u8], key: &[u8]) -> Option<&'a str> {
    let rest = after_key(data, key)?;
    let rest = rest.strip_prefix(b"\"")?;
    let end = memchr::memchr2(b'"', b'\\', rest)?;
    if rest[end] != b'"' {
        return None;
    }
    std::str::from_utf8(&rest[..end]).ok()
}

/// Builds `{"ts":..,"seq":..,"topic":"..","pad":"..."}` of `size` bytes (or the smallest
/// possible size when `size` is too small). `topic` is omitted when `None`.
pub(crate) fn data_object(ts: u64, seq: u64, topic: Option<&str>, size: usize) -> String {
    let mut s = String::with_capacity(size.max(64));
    s.push_str("{\"ts\":");
    s.push_str(&ts.to_string());
    s.push_str(",\"seq\":");
    s.push_str(&seq.to_string());
    if let Some(t) = topic {
        s.push_str(",\"topic\":\"");
        s.push_str(t);
        s.push('"');
    }
    s.push_str(",\"pad\":\"");
    let fixed = s.len() + 2;
    if size > fixed {
        s.extend(std::iter::repeat_n('x', size - fixed));
    }
    s.push_str("\"}");
    s
}

/// Body of a Herald publish request: `{"topic":"..","data":{..}[,"event":".."]}`.
pub(crate) fn publish_body(topic: &str, event: Option<&str>, data: &str) -> String {
    let mut s = String::with_capacity(data.len() + topic.len() + 40);
    s.push_str("{\"topic\":\"");
    s.push_str(topic);
    s.push_str("\",\"data\":");
    s.push_str(data);
    if let Some(e) = event {
        s.push_str(",\"event\":");
        s.push_str(&serde_json::Value::String(e.to_owned()).to_string());
    }
    s.push('}');
    s
}

/// An echo request frame of exactly `size` bytes when possible.
///
/// Herald mode wraps the data object in `{"type":"ping","data":..}`; raw mode sends the data
/// object alone, as plain text.
pub(crate) fn echo_frame(ts: u64, seq: u64, size: usize, herald: bool) -> String {
    if herald {
        const WRAP: usize = "{\"type\":\"ping\",\"data\":}".len();
        let inner = data_object(ts, seq, None, size.saturating_sub(WRAP));
        format!("{{\"type\":\"ping\",\"data\":{inner}}}")
    } else {
        data_object(ts, seq, None, size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_object_has_exact_size_and_scans_back() {
        let d = data_object(1_700_000_000_000_001, 42, Some("load-3"), 100);
        assert_eq!(d.len(), 100);
        let v: serde_json::Value = serde_json::from_str(&d).unwrap();
        assert_eq!(v["seq"], 42);
        let f = scan(d.as_bytes());
        assert_eq!(f.ts, Some(1_700_000_000_000_001));
        assert_eq!(f.seq, Some(42));
        assert_eq!(f.topic, Some("load-3"));
        // too small a size gives the minimal object
        let d = data_object(1, 2, None, 3);
        assert_eq!(d, "{\"ts\":1,\"seq\":2,\"pad\":\"\"}");
    }

    #[test]
    fn echo_frames_have_exact_size() {
        let f = echo_frame(1_700_000_000_000_000, 7, 256, true);
        assert_eq!(f.len(), 256);
        let v: serde_json::Value = serde_json::from_str(&f).unwrap();
        assert_eq!(v["type"], "ping");
        assert_eq!(v["data"]["seq"], 7);
        let f = echo_frame(1_700_000_000_000_000, 7, 256, false);
        assert_eq!(f.len(), 256);
    }

    #[test]
    fn scanner_handles_whitespace_nesting_and_garbage() {
        let frame = br#"{"type":"message","topic":"t1","id":"9","data":{"ts": 123, "seq" :5,"topic":"t1"}}"#;
        let f = scan(frame);
        assert_eq!(f.ts, Some(123));
        assert_eq!(f.seq, Some(5));
        assert_eq!(f.topic, Some("t1"));
        assert_eq!(scan(b"hello").ts, None);
        assert_eq!(scan(b"{\"ts\":}").ts, None);
        assert_eq!(scan(b"{\"ts\":99999999999999999999999}").ts, None);
        assert_eq!(scan(b"{\"topic\":\"a\\\"b\"}").topic, None);
        assert_eq!(scan(b"{\"topic\":\"unterminated").topic, None);
        // the key as text inside an escaped JSON string does not match
        assert_eq!(scan(br#""say \"ts\": 5""#).ts, None);
        // a key that is a prefix match elsewhere ("tss") is skipped
        assert_eq!(scan(br#"{"tss":1,"ts":2}"#).ts, Some(2));
    }

    #[test]
    fn publish_body_is_valid_json() {
        let d = data_object(1, 2, Some("a"), 40);
        let b = publish_body("a", Some("tick \"x\""), &d);
        let v: serde_json::Value = serde_json::from_str(&b).unwrap();
        assert_eq!(v["topic"], "a");
        assert_eq!(v["data"]["seq"], 2);
        assert_eq!(v["event"], "tick \"x\"");
    }
}
