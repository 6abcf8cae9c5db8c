//! Per-subscription sequence tracking: which of the published sequence numbers of one topic
//! a subscriber received, with duplicates, in bounded memory.
//!
//! In-order delivery costs one comparison and no memory: `base` is the first sequence number
//! not yet resolved, and every number below it was received or recorded as a hole. A number
//! that arrives ahead of `base` is kept in a 4096-bit window, allocated only while there is
//! such disorder. When the window must slide past numbers that never arrived, they become
//! holes (stored as ranges, at most [`MAX_HOLE_RANGES`]); a hole that arrives later is a late
//! delivery, not a duplicate. Past the range cap, holes are only counted and the result is
//! flagged approximate.

use serde::{Deserialize, Serialize};

/// Window size in sequence numbers.
pub(crate) const WINDOW: u64 = 4096;
const WORDS: usize = (WINDOW / 64) as usize;
/// Most hole ranges remembered per tracker.
pub(crate) const MAX_HOLE_RANGES: usize = 4096;

/// Tracks received sequence numbers of one topic on one subscription.
#[derive(Debug, Clone, Default)]
pub(crate) struct SeqTracker {
    base: u64,
    window: Option<Box<[u64; WORDS]>>,
    pending: u64,
    holes: Vec<(u64, u64)>,
    holes_overflow: u64,
    distinct: u64,
    duplicates: u64,
    stale: u64,
    max_seq: Option<u64>,
}

/// The accounting of one tracker against what was published.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SeqOutcome {
    /// Sequence numbers this subscriber should have received.
    pub expected: u64,
    /// Expected sequence numbers received (each counted once).
    pub delivered: u64,
    /// Expected sequence numbers never received.
    pub missing: u64,
    /// Receipts of a number already received.
    pub duplicates: u64,
    /// Received numbers whose publish request reported failure (the server took them anyway).
    pub unconfirmed: u64,
    /// Received numbers that were never published (or published after this subscriber left).
    pub unexpected: u64,
    /// Receipts too old to classify (only after the hole-range cap was hit).
    pub stale: u64,
    /// Whether the hole-range cap was hit, making the numbers approximate.
    pub approximate: bool,
}

impl SeqOutcome {
    /// Adds another outcome into this one.
    pub(crate) fn add(&mut self, o: &SeqOutcome) {
        self.expected += o.expected;
        self.delivered += o.delivered;
        self.missing += o.missing;
        self.duplicates += o.duplicates;
        self.unconfirmed += o.unconfirmed;
        self.unexpected += o.unexpected;
        self.stale += o.stale;
        self.approximate |= o.approximate;
    }
}

impl SeqTracker {
    /// A tracker expecting sequence numbers from 0.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Distinct sequence numbers received.
    pub(crate) fn distinct(&self) -> u64 {
        self.distinct
    }

    /// Records one receipt. Returns `false` for a duplicate.
    pub(crate) fn record(&mut self, seq: u64) -> bool {
        self.max_seq = Some(self.max_seq.map_or(seq, |m| m.max(seq)));
        if seq < self.base {
            return self.record_below_base(seq);
        }
        if seq == self.base && self.window.is_none() {
            self.base += 1;
            self.distinct += 1;
            return true;
        }
        if seq >= self.base + WINDOW {
            self.slide_to(seq - WINDOW + 1);
        }
        let w = self.window.get_or_insert_with(|| Box::new([0; WORDS]));
        let (word, bit) = slot(seq);
        if w[word] & bit != 0 {
            self.duplicates += 1;
            return false;
        }
        w[word] |= bit;
        self.pending += 1;
        self.distinct += 1;
        self.compact();
        true
    }

    fn record_below_base(&mut self, seq: u64) -> bool {
        if let Some(i) = self.holes.iter().position(|&(a, b)| a <= seq && seq < b) {
            let (a, b) = self.holes[i];
            match (seq == a, seq + 1 == b) {
                (true, true) => {
                    self.holes.remove(i);
                }
                (true, false) => self.holes[i].0 = seq + 1,
                (false, true) => self.holes[i].1 = seq,
                (false, false) => {
                    self.holes[i].1 = seq;
                    self.holes.insert(i + 1, (seq + 1, b));
                }
            }
            self.distinct += 1;
            true
        } else if self.holes_overflow > 0 {
            self.stale += 1;
            false
        } else {
            self.duplicates += 1;
            false
        }
    }

    fn add_hole(&mut self, a: u64, b: u64) {
        if a >= b {
            return;
        }
        if let Some(last) = self.holes.last_mut()
            && last.1 == a
        {
            last.1 = b;
            return;
        }
        if self.holes.len() < MAX_HOLE_RANGES {
            self.holes.push((a, b));
        } else {
            self.holes_overflow += b - a;
        }
    }

    /// Advances `base` to `new_base`, turning unreceived numbers into holes.
    fn slide_to(&mut self, new_base: u64) {
        let stop = new_base.min(self.base + WINDOW);
        while self.base < stop {
            let received = self.take_bit(self.base);
            if !received {
                self.add_hole(self.base, self.base + 1);
            }
            self.base += 1;
        }
        if new_base > self.base {
            self.add_hole(self.base, new_base);
            self.base = new_base;
        }
    }

    fn take_bit(&mut self, seq: u64) -> bool {
        let Some(w) = self.window.as_mut() else {
            return false;
        };
        let (word, bit) = slot(seq);
        let set = w[word] & bit != 0;
        if set {
            w[word] &= !bit;
            self.pending -= 1;
        }
        set
    }

    fn compact(&mut self) {
        while self.pending > 0 && self.take_bit(self.base) {
            self.base += 1;
        }
        if self.pending == 0 {
            self.window = None;
        }
    }

    fn is_received(&self, seq: u64) -> bool {
        if seq < self.base {
            !self.holes.iter().any(|&(a, b)| a <= seq && seq < b)
        } else if seq < self.base + WINDOW {
            self.window.as_ref().is_some_and(|w| {
                let (word, bit) = slot(seq);
                w[word] & bit != 0
            })
        } else {
            false
        }
    }

    /// Received numbers in `[0, end)`.
    fn received_below(&self, end: u64) -> u64 {
        let below = end.min(self.base);
        let mut n = below;
        for &(a, b) in &self.holes {
            let (a, b) = (a.min(below), b.min(below));
            n -= b - a;
        }
        n = n.saturating_sub(self.holes_overflow.min(n));
        if let Some(w) = &self.window {
            for seq in self.base..end.min(self.base + WINDOW) {
                let (word, bit) = slot(seq);
                if w[word] & bit != 0 {
                    n += 1;
                }
            }
        }
        n
    }

    /// Compares what was received with what was published.
    ///
    /// `issued` numbers `0..issued` were sent to the topic; `failed` (sorted) are those whose
    /// publish request failed, which are not expected. A subscriber that `stayed` until the end
    /// expects every other number; one that dropped out expects only up to the highest number
    /// it received (what was published after it left is not counted as expected).
    pub(crate) fn outcome(&self, issued: u64, failed: &[u64], stayed: bool) -> SeqOutcome {
        let end = if stayed {
            issued
        } else {
            self.max_seq.map_or(0, |m| (m + 1).min(issued))
        };
        let failed_in: Vec<u64> = failed.iter().copied().filter(|&f| f < end).collect();
        let received_in = self.received_below(end);
        let unconfirmed = failed_in.iter().filter(|&&f| self.is_received(f)).count() as u64;
        let expected = end - failed_in.len() as u64;
        let delivered = received_in.saturating_sub(unconfirmed);
        SeqOutcome {
            expected,
            delivered,
            missing: expected.saturating_sub(delivered),
            duplicates: self.duplicates,
            unconfirmed,
            unexpected: self.distinct.saturating_sub(received_in),
            stale: self.stale,
            approximate: self.holes_overflow > 0,
        }
    }
}

fn slot(seq: u64) -> (usize, u64) {
    let i = seq % WINDOW;
    ((i / 64) as usize, 1u64 << (i % 64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_is_complete_without_window() {
        let mut t = SeqTracker::new();
        for s in 0..10_000 {
            assert!(t.record(s));
        }
        assert!(t.window.is_none());
        let o = t.outcome(10_000, &[], true);
        assert_eq!(o.expected, 10_000);
        assert_eq!(o.delivered, 10_000);
        assert_eq!(o.missing, 0);
        assert_eq!(o.duplicates, 0);
    }

    #[test]
    fn detects_duplicates_in_and_out_of_window() {
        let mut t = SeqTracker::new();
        assert!(t.record(0));
        assert!(t.record(2));
        assert!(!t.record(2));
        assert!(!t.record(0));
        assert!(t.record(1));
        let o = t.outcome(3, &[], true);
        assert_eq!((o.delivered, o.missing, o.duplicates), (3, 0, 2));
        assert!(t.window.is_none(), "window is released after catching up");
    }

    #[test]
    fn reordering_within_window_is_not_loss() {
        let mut t = SeqTracker::new();
        for s in (0..1000).rev() {
            t.record(s);
        }
        let o = t.outcome(1000, &[], true);
        assert_eq!((o.delivered, o.missing, o.duplicates), (1000, 0, 0));
    }

    #[test]
    fn counts_missing_numbers_and_tail() {
        let mut t = SeqTracker::new();
        for s in 0..100 {
            if s % 10 != 3 {
                t.record(s);
            }
        }
        // 10 holes inside, and 20 more published after the last receipt
        let o = t.outcome(120, &[], true);
        assert_eq!(o.expected, 120);
        assert_eq!(o.delivered, 90);
        assert_eq!(o.missing, 30);
    }

    #[test]
    fn window_slides_and_late_arrivals_fill_holes() {
        let mut t = SeqTracker::new();
        t.record(0);
        // jump far ahead: 1..N become holes
        let far = 3 * WINDOW;
        t.record(far);
        assert!(t.base > 1);
        let o = t.outcome(far + 1, &[], true);
        assert_eq!(o.delivered, 2);
        assert_eq!(o.missing, far - 1);
        // a hole arrives late: counted delivered, not duplicate
        assert!(t.record(5));
        assert!(!t.record(5));
        let o = t.outcome(far + 1, &[], true);
        assert_eq!(o.delivered, 3);
        assert_eq!(o.duplicates, 1);
        assert!(!o.approximate);
    }

    #[test]
    fn failed_publishes_are_not_expected() {
        let mut t = SeqTracker::new();
        for s in [0, 1, 3, 4] {
            t.record(s);
        }
        // seq 2 failed and never arrived; seq 4 failed but arrived anyway
        let o = t.outcome(5, &[2, 4], true);
        assert_eq!(o.expected, 3);
        assert_eq!(o.delivered, 3);
        assert_eq!(o.missing, 0);
        assert_eq!(o.unconfirmed, 1);
    }

    #[test]
    fn dropped_subscriber_expects_up_to_last_receipt() {
        let mut t = SeqTracker::new();
        for s in [0, 1, 2, 4] {
            t.record(s);
        }
        let o = t.outcome(100, &[], false);
        assert_eq!(o.expected, 5);
        assert_eq!(o.delivered, 4);
        assert_eq!(o.missing, 1);
        let empty = SeqTracker::new().outcome(100, &[], false);
        assert_eq!(empty.expected, 0);
    }

    #[test]
    fn numbers_beyond_issued_are_unexpected() {
        let mut t = SeqTracker::new();
        for s in 0..12 {
            t.record(s);
        }
        let o = t.outcome(10, &[], true);
        assert_eq!(o.delivered, 10);
        assert_eq!(o.unexpected, 2);
    }

    #[test]
    fn hole_cap_makes_result_approximate_but_bounded() {
        let mut t = SeqTracker::new();
        let n = (MAX_HOLE_RANGES as u64 + 100) * 2;
        for s in (0..n).step_by(2) {
            t.record(s);
        }
        t.record(n + 2 * WINDOW);
        assert!(t.holes.len() <= MAX_HOLE_RANGES);
        let o = t.outcome(n + 2 * WINDOW + 1, &[], true);
        assert!(o.approximate);
        assert_eq!(o.delivered + o.missing, o.expected);
    }
}
