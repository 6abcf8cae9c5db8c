//! A topic's bounded history: the recent messages a client can resume from.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::message::Message;

/// Why a subscriber cannot be given every message after its position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossReason {
    /// The position is older than the history kept: messages after it were evicted.
    Expired,
    /// The position belongs to another life of the topic (history was lost, e.g. a restart).
    Epoch,
    /// The subscriber fell behind the live stream and the history no longer covers the gap.
    Lagged,
}

impl LossReason {
    /// A stable lower-case name for wire formats and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::Epoch => "epoch",
            Self::Lagged => "lagged",
        }
    }
}

/// The last messages of one topic, bounded by count and by age.
#[derive(Debug)]
pub struct History {
    messages: VecDeque<Arc<Message>>,
    max_len: usize,
    max_age: Duration,
    /// Sequence number of the newest message ever evicted (0: nothing evicted yet).
    evicted_through: u64,
}

impl History {
    /// An empty history keeping at most `max_len` messages for at most `max_age`.
    pub fn new(max_len: usize, max_age: Duration) -> Self {
        Self {
            messages: VecDeque::new(),
            max_len,
            max_age,
            evicted_through: 0,
        }
    }

    /// Appends `message` (its sequence number must be above every kept one), evicting the
    /// oldest beyond the length limit.
    pub fn push(&mut self, message: Arc<Message>) {
        if self.max_len == 0 {
            self.evicted_through = message.cursor().seq;
            return;
        }
        while self.messages.len() >= self.max_len {
            self.evict_front();
        }
        self.messages.push_back(message);
    }

    /// Evicts the messages older than the age limit.
    pub fn evict_expired(&mut self, now: Instant) {
        while let Some(front) = self.messages.front() {
            if now.saturating_duration_since(front.published_at()) <= self.max_age {
                break;
            }
            self.evict_front();
        }
        if self.messages.is_empty() {
            // An empty ring keeps no capacity: idle topics cost no history memory.
            self.messages.shrink_to_fit();
        }
    }

    fn evict_front(&mut self) {
        if let Some(m) = self.messages.pop_front() {
            self.evicted_through = m.cursor().seq;
        }
    }

    /// The kept messages after sequence number `after`, oldest first, or `Err` when some
    /// message after `after` has been evicted.
    pub fn since(&self, after: u64) -> Result<Vec<Arc<Message>>, LossReason> {
        if after < self.evicted_through {
            return Err(LossReason::Expired);
        }
        let start = self.messages.partition_point(|m| m.cursor().seq <= after);
        Ok(self.messages.range(start..).cloned().collect())
    }

    /// Every kept message, oldest first, and the sequence number just before the first of
    /// them that can be resumed from without a loss.
    pub fn all(&self) -> (u64, Vec<Arc<Message>>) {
        (
            self.evicted_through,
            self.messages.iter().cloned().collect(),
        )
    }

    /// Starts over for a new epoch of which nothing at or before `seq` is held (a node
    /// that joins a shared log part-way has not seen its earlier messages).
    pub fn reset(&mut self, seq: u64) {
        self.messages.clear();
        self.messages.shrink_to_fit();
        self.evicted_through = seq;
    }

    /// Number of messages kept.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether no message is kept.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cursor::Cursor;
    use crate::message::Payload;
    use crate::name::TopicName;

    fn m(seq: u64) -> Arc<Message> {
        Arc::new(Message::new(
            TopicName::new("t").unwrap(),
            Cursor::new(1, seq),
            None,
            Payload::from_value(&serde_json::json!(seq)),
        ))
    }

    fn seqs(v: &[Arc<Message>]) -> Vec<u64> {
        v.iter().map(|m| m.cursor().seq).collect()
    }

    #[test]
    fn replays_exactly_what_follows() {
        let mut h = History::new(3, Duration::from_secs(60));
        for s in 1..=3 {
            h.push(m(s));
        }
        assert_eq!(seqs(&h.since(0).unwrap()), [1, 2, 3]);
        assert_eq!(seqs(&h.since(2).unwrap()), [3]);
        assert!(h.since(3).unwrap().is_empty());
        h.push(m(4));
        assert_eq!(h.len(), 3);
        assert_eq!(h.since(0).unwrap_err(), LossReason::Expired);
        assert_eq!(seqs(&h.since(1).unwrap()), [2, 3, 4]);
    }

    #[test]
    fn gaps_in_sequence_numbers_are_fine() {
        let mut h = History::new(2, Duration::from_secs(60));
        for s in [10, 20, 30] {
            h.push(m(s));
        }
        assert_eq!(seqs(&h.since(10).unwrap()), [20, 30]);
        assert_eq!(seqs(&h.since(15).unwrap()), [20, 30]);
        assert_eq!(h.since(9).unwrap_err(), LossReason::Expired);
    }

    #[test]
    fn age_limit_evicts() {
        let mut h = History::new(10, Duration::from_millis(10));
        h.push(m(1));
        h.push(m(2));
        h.evict_expired(Instant::now() + Duration::from_secs(1));
        assert!(h.is_empty());
        assert_eq!(h.since(1).unwrap_err(), LossReason::Expired);
        assert!(h.since(2).unwrap().is_empty());
    }

    #[test]
    fn zero_length_history_keeps_nothing() {
        let mut h = History::new(0, Duration::from_secs(1));
        h.push(m(1));
        assert!(h.is_empty());
        assert_eq!(h.since(0).unwrap_err(), LossReason::Expired);
        assert!(h.since(1).unwrap().is_empty());
    }
}
