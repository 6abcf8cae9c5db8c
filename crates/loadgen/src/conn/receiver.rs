//! Per-connection delivery accounting, shared by SSE and WebSocket subscribers, and the
//! client side of Herald's delta compression (docs/protocol.md, "Delta compression"): with
//! `--delta` every message frame goes through [`Receiver::on_json_frame`], which keeps each
//! topic's last data as the base of the next delta.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use crate::clock::normalize_ts_to_micros;
use crate::error::ErrorKind;
use crate::payload;
use crate::seq::SeqTracker;
use crate::stats::Stats;

struct TopicState {
    index: u32,
    name: String,
    tracker: SeqTracker,
    lost: u64,
    /// The data of the topic's last message (delta mode): what its next delta applies to.
    base: Option<Vec<u8>>,
}

/// Largest data a delta may rebuild: a bound on what a bad delta makes the client allocate.
const DELTA_LIMIT: usize = 16 << 20;

/// A JSON `message` frame's data: the text after the first `"data":` up to the frame's final
/// `}` (Herald writes `data` last), and whether `"delta":true` comes before it.
fn split_frame(frame: &[u8]) -> Option<(&[u8], bool)> {
    let at = memchr::memmem::find(frame, b"\"data\":")?;
    let end = memchr::memrchr(b'}', frame)?;
    let data = frame.get(at + 7..end)?;
    let delta = memchr::memmem::find(&frame[..at], b"\"delta\":true").is_some();
    Some((data, delta))
}

/// Counts what one connection receives; counters are batched locally and flushed after
/// every read so that shared atomics are touched once per read, not once per message.
pub(crate) struct Receiver {
    stats: Arc<Stats>,
    hint: usize,
    churn: bool,
    foreign_ts: bool,
    topics: Vec<TopicState>,
    deliveries: u64,
    untracked: u64,
    bytes: u64,
    lost: u64,
}

impl Receiver {
    /// A receiver for a connection subscribed to `topics` (index, name).
    ///
    /// `foreign_ts` normalizes `ts` values of unknown unit (raw mode); `churn` sends counts to
    /// the churn counters and skips sequence tracking.
    pub(crate) fn new(
        stats: Arc<Stats>,
        hint: usize,
        topics: Vec<(u32, String)>,
        churn: bool,
        foreign_ts: bool,
    ) -> Self {
        Self {
            stats,
            hint,
            churn,
            foreign_ts,
            topics: topics
                .into_iter()
                .map(|(index, name)| TopicState {
                    index,
                    name,
                    tracker: SeqTracker::new(),
                    lost: 0,
                    base: None,
                })
                .collect(),
            deliveries: 0,
            untracked: 0,
            bytes: 0,
            lost: 0,
        }
    }

    fn topic_slot(&self, topic: Option<&str>) -> Option<usize> {
        match topic {
            Some(name) => self.topics.iter().position(|t| t.name == name),
            None if self.topics.len() == 1 => Some(0),
            None => None,
        }
    }

    /// One delivered message with payload `data`; `topic` if the frame named it.
    pub(crate) fn on_message(&mut self, topic: Option<&str>, data: &[u8], now_us: u64) {
        let fields = payload::scan(data);
        self.deliveries += 1;
        self.bytes += data.len() as u64;
        if let Some(ts) = fields.ts {
            let ts = if self.foreign_ts {
                normalize_ts_to_micros(ts)
            } else {
                ts
            };
            self.stats
                .latency
                .record(self.hint, now_us.saturating_sub(ts));
        }
        if self.churn {
            return;
        }
        let slot = fields
            .seq
            .and_then(|seq| Some((seq, self.topic_slot(topic.or(fields.topic))?)));
        match slot {
            Some((seq, i)) => {
                self.topics[i].tracker.record(seq);
            }
            None => self.untracked += 1,
        }
    }

    /// A JSON `message` frame (WebSocket text, SSE `format=json`) of a subscription that
    /// asked for deltas: a full message becomes its topic's base; a delta is applied to the
    /// base and the data it rebuilds is delivered (and becomes the base). A delta that does
    /// not apply (no base, malformed, bad checksum) is counted as `delta_apply`, drops the
    /// base, and delivers nothing: its message shows as missing.
    pub(crate) fn on_json_frame(&mut self, frame: &[u8], now_us: u64) {
        let topic = payload::find_str(frame, b"\"topic\"");
        let Some((data, delta)) = split_frame(frame) else {
            self.untracked += 1;
            return;
        };
        let slot = self.topic_slot(topic);
        if !delta {
            if let Some(i) = slot {
                let base = self.topics[i].base.get_or_insert_with(Vec::new);
                base.clear();
                base.extend_from_slice(data);
            }
            self.on_message(topic, data, now_us);
            return;
        }
        let rebuilt = slot.and_then(|i| {
            let base = self.topics[i].base.take()?;
            let delta: String = serde_json::from_slice(data).ok()?;
            herald_core::delta::apply(&base, delta.as_bytes(), DELTA_LIMIT).ok()
        });
        match (slot, rebuilt) {
            (Some(i), Some(new)) => {
                self.on_message(topic, &new, now_us);
                self.topics[i].base = Some(new);
            }
            _ => self.stats.error(ErrorKind::DeltaApply),
        }
    }

    /// A loss notification, for `topic` if named.
    pub(crate) fn on_lost(&mut self, topic: Option<&str>) {
        self.lost += 1;
        if let Some(i) = self.topic_slot(topic) {
            self.topics[i].lost += 1;
        }
    }

    /// Adds the batched counts to the shared counters.
    pub(crate) fn flush(&mut self) {
        let s = &self.stats;
        if self.deliveries > 0 {
            if self.churn {
                s.churn_deliveries.fetch_add(self.deliveries, Relaxed);
            } else {
                s.deliveries.fetch_add(self.deliveries, Relaxed);
                s.bytes.fetch_add(self.bytes, Relaxed);
            }
        }
        if self.untracked > 0 {
            s.untracked.fetch_add(self.untracked, Relaxed);
        }
        if self.lost > 0 {
            s.lost_events.fetch_add(self.lost, Relaxed);
        }
        self.deliveries = 0;
        self.untracked = 0;
        self.bytes = 0;
        self.lost = 0;
    }

    /// Per-topic trackers, for the final accounting.
    pub(crate) fn into_topics(mut self) -> Vec<(u32, SeqTracker, u64)> {
        self.flush();
        std::mem::take(&mut self.topics)
            .into_iter()
            .map(|t| (t.index, t.tracker, t.lost))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applies_deltas_and_counts_the_ones_that_do_not_apply() {
        let stats = Arc::new(Stats::new(1));
        let mut r = Receiver::new(stats.clone(), 0, vec![(0, "d:t".into())], false, false);
        let now = crate::clock::unix_micros();
        let first = payload::data_object(now - 1000, 0, Some("d:t"), 120);
        let second = payload::data_object(now - 900, 1, Some("d:t"), 120);
        let delta = herald_core::delta::encode(first.as_bytes(), second.as_bytes());
        let delta = String::from_utf8(delta).unwrap();
        let full = format!(r#"{{"type":"message","topic":"d:t","id":"e-1","data":{first}}}"#);
        let cut = &delta[..delta.len() - 1];
        let frame = |d: &str| {
            format!(
                r#"{{"type":"message","topic":"d:t","id":"e-2","delta":true,"data":{}}}"#,
                serde_json::to_string(d).unwrap()
            )
        };
        // a delta before any full message has no base
        r.on_json_frame(frame(&delta).as_bytes(), now);
        r.on_json_frame(full.as_bytes(), now);
        r.on_json_frame(frame(&delta).as_bytes(), now);
        // a truncated delta (no final `;`) does not apply
        r.on_json_frame(frame(cut).as_bytes(), now);
        r.flush();
        let c = stats.counters();
        assert_eq!(c.deliveries, 2);
        assert_eq!(c.errors.get(&ErrorKind::DeltaApply), Some(&2));
        let topics = r.into_topics();
        let o = topics[0].1.outcome(2, &[], true);
        assert_eq!((o.delivered, o.duplicates), (2, 0));
    }

    #[test]
    fn routes_by_topic_and_flushes() {
        let stats = Arc::new(Stats::new(1));
        let mut r = Receiver::new(
            stats.clone(),
            0,
            vec![(0, "t-0".into()), (1, "t-1".into())],
            false,
            false,
        );
        let now = crate::clock::unix_micros();
        let d0 = payload::data_object(now - 1000, 0, Some("t-0"), 80);
        let d1 = payload::data_object(now - 1000, 0, Some("t-1"), 80);
        r.on_message(None, d0.as_bytes(), now);
        r.on_message(Some("t-1"), d1.as_bytes(), now);
        r.on_message(None, d1.as_bytes(), now);
        r.on_message(None, b"{\"no\":\"seq\"}", now);
        r.on_lost(Some("t-1"));
        r.flush();
        let c = stats.counters();
        assert_eq!((c.deliveries, c.untracked, c.lost_events), (4, 1, 1));
        assert_eq!(stats.latency.take().len(), 3);
        let topics = r.into_topics();
        assert_eq!(topics[0].1.distinct(), 1);
        assert_eq!(topics[1].1.distinct(), 1);
        assert_eq!(topics[1].2, 1);
        let o = topics[1].1.outcome(1, &[], true);
        assert_eq!((o.delivered, o.duplicates), (1, 1));
    }
}
