//! The stream entries as the reader reads them: their ids, an `XRANGE` reply's entries, and
//! an entry delivered to this node's subscribers (whether it came in a live notice or from
//! the stream).

use herald_core::{Cursor, EventName, Payload, TopicName};
use redis::Value;

use crate::bridge::logs::{Ingest, now_ms};
use crate::telemetry::trace::Carried;

/// A stream entry id, ordered as Redis orders them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct EntryId(pub(super) u64, pub(super) u64);

impl EntryId {
    pub(super) fn parse(id: &str) -> Option<Self> {
        let (ms, n) = id.split_once('-')?;
        Some(Self(ms.parse().ok()?, n.parse().ok()?))
    }

    /// The sequence number of a position at this id (`ms << 21 | n`, as [`parse_entry_id`];
    /// the largest one of its millisecond when `n` does not fit).
    pub(super) fn seq(self) -> u64 {
        let n = self.1.min((1 << SEQ_BITS) - 1);
        (self.0 << SEQ_BITS) | n
    }
}

impl std::fmt::Display for EntryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.0, self.1)
    }
}

/// The entries of an `XRANGE` reply: each id with its fields and values.
pub(super) type Entries = Vec<(String, Vec<(Vec<u8>, Vec<u8>)>)>;

pub(super) fn range_entries(reply: Value) -> Entries {
    let Value::Array(entries) = reply else {
        return Vec::new();
    };
    let bytes = |v: Value| match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.into_bytes()),
        _ => None,
    };
    entries
        .into_iter()
        .filter_map(|entry| {
            let Value::Array(parts) = entry else {
                return None;
            };
            let mut parts = parts.into_iter();
            let id = String::from_utf8(bytes(parts.next()?)?).ok()?;
            let pairs: Vec<(Value, Value)> = match parts.next()? {
                Value::Array(flat) => {
                    let mut flat = flat.into_iter();
                    std::iter::from_fn(|| Some((flat.next()?, flat.next()?))).collect()
                }
                Value::Map(map) => map,
                _ => return None,
            };
            let fields = (pairs.into_iter())
                .filter_map(|(n, v)| Some((bytes(n)?, bytes(v)?)))
                .collect();
            Some((id, fields))
        })
        .collect()
}

/// Delivers one stream entry (its id, and its fields through `field`) to this node's
/// subscribers.
pub(super) fn ingest_entry<'f>(
    ingest: &Ingest,
    epoch: u64,
    id: &str,
    field: impl Fn(&str) -> Option<&'f [u8]>,
) {
    let Some(seq) = parse_entry_id(id) else {
        tracing::warn!(%id, "redis stream entry with an unexpected id skipped");
        return;
    };
    let text = |name: &str| field(name).and_then(|v| std::str::from_utf8(v).ok());
    let (Some(topic), Some(data)) = (text("t"), field("d")) else {
        tracing::warn!(%id, "redis stream entry without topic or data skipped");
        return;
    };
    let Ok(topic) = TopicName::new(topic) else {
        tracing::warn!(%id, "redis stream entry with an invalid topic skipped");
        return;
    };
    let event = text("e").and_then(|e| EventName::new(e).ok());
    let payload = match field("m") {
        Some(msgpack) => Payload::from_msgpack(msgpack).map_err(|e| e.to_string()),
        None => Payload::from_json(data).map_err(|e| e.to_string()),
    };
    let Ok(payload) = payload else {
        tracing::warn!(%id, "redis stream entry with an invalid payload skipped");
        return;
    };
    let age_ms = now_ms().saturating_sub(seq >> SEQ_BITS);
    // The trace context of a traced message (fields `tp`, `tps`), read only when tracing is on.
    let (traceparent, tracestate) = match ingest.traces() {
        true => (text("tp"), text("tps")),
        false => (None, None),
    };
    let trace = Carried {
        traceparent,
        tracestate,
    };
    ingest.deliver(
        topic,
        Cursor::new(epoch, seq),
        event,
        payload,
        age_ms,
        trace,
    );
}

/// Bits of a stream entry's per-millisecond counter kept in a sequence number.
pub(super) const SEQ_BITS: u32 = 21;

/// `<ms>-<n>` → `ms << 21 | n`.
pub(super) fn parse_entry_id(id: &str) -> Option<u64> {
    let (ms, n) = id.split_once('-')?;
    let (ms, n): (u64, u64) = (ms.parse().ok()?, n.parse().ok()?);
    if ms >= 1 << (64 - SEQ_BITS) || n >= 1 << SEQ_BITS {
        return None;
    }
    Some(ms << SEQ_BITS | n)
}
