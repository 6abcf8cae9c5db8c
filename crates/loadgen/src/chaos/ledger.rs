//! What the publisher knows about each message it sent: per topic and sequence number,
//! whether the publish was acknowledged (it must be delivered, once), or its fate is still
//! unknown (every try timed out or failed: it may or may not have been written, so it may
//! arrive late or never), and how many times it was sent. A publish of unknown fate is sent
//! again with the same idempotency key until it is answered, so a publish acknowledged after
//! a retry is as certain as any other: the log holds it once, whichever try wrote it.

use std::sync::Mutex;

/// The fate of one publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Not answered yet (or never sent); a publish being retried is pending.
    Pending,
    /// Answered 2xx (on its first try or a retry): it is in the log and must reach every
    /// subscriber exactly once.
    Acked,
    /// No try was answered (retries exhausted, the run ended, or refused after a try whose
    /// fate is unknown): it may or may not have been written.
    Uncertain,
}

/// Looks up a publish's fate (the checker's view of the ledger; tests stub it).
pub(crate) trait Fates {
    fn fate(&self, topic: usize, seq: u64) -> Fate;
    /// The highest sequence number of `topic` whose publish was answered (0: none): every
    /// later one was sent, at the earliest, while the caller was looking.
    fn answered(&self, topic: usize) -> u64;
    /// Whether the publish was sent more than once (so far).
    fn retried(&self, _topic: usize, _seq: u64) -> bool {
        false
    }
}

/// One publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    fate: Fate,
    /// Times it was sent (its first try included); 0 before it is.
    tries: u32,
}

const UNSENT: Entry = Entry {
    fate: Fate::Pending,
    tries: 0,
};

/// The ledger's counts over every topic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    /// Publishes acknowledged (first try or a retry).
    pub(crate) acked: u64,
    /// Publishes whose fate is still unknown.
    pub(crate) uncertain: u64,
    /// Publishes sent more than once (with the same idempotency key).
    pub(crate) retried: u64,
    /// Sends beyond each publish's first.
    pub(crate) retries: u64,
    /// Retried publishes that were acknowledged in the end.
    pub(crate) acked_after_retry: u64,
}

/// Per topic, the entries of sequence numbers 1.. (index 0 unused).
#[derive(Debug)]
pub(crate) struct Ledger {
    topics: Vec<Mutex<Vec<Entry>>>,
}

impl Ledger {
    pub(crate) fn new(topics: usize) -> Self {
        Ledger {
            topics: (0..topics).map(|_| Mutex::new(vec![UNSENT])).collect(),
        }
    }

    fn entries(&self, topic: usize) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        self.topics[topic].lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update(&self, topic: usize, seq: u64, f: impl FnOnce(&mut Entry)) {
        let mut v = self.entries(topic);
        let i = seq as usize;
        if v.len() <= i {
            v.resize(i + 1, UNSENT);
        }
        f(&mut v[i]);
    }

    /// Records that `seq` is being sent for the `tries`-th time (sequence numbers are issued
    /// in order, one at a time per topic, so `seq` is at most one past the end).
    pub(crate) fn sending(&self, topic: usize, seq: u64, tries: u32) {
        self.update(topic, seq, |e| e.tries = e.tries.max(tries));
    }

    /// Records the fate of `seq`.
    pub(crate) fn record(&self, topic: usize, seq: u64, fate: Fate) {
        self.update(topic, seq, |e| {
            e.fate = fate;
            e.tries = e.tries.max(1);
        });
    }

    /// The highest acknowledged sequence number of `topic` (0: none).
    pub(crate) fn last_acked(&self, topic: usize) -> u64 {
        let v = self.entries(topic);
        v.iter().rposition(|e| e.fate == Fate::Acked).unwrap_or(0) as u64
    }

    /// Acknowledged publishes of `topic` in `from..=to` that were retried.
    pub(crate) fn acked_after_retry_in(&self, topic: usize, from: u64, to: u64) -> u64 {
        let v = self.entries(topic);
        let to = (to as usize).min(v.len().saturating_sub(1));
        let from = (from as usize).max(1);
        if from > to {
            return 0;
        }
        v[from..=to]
            .iter()
            .filter(|e| e.fate == Fate::Acked && e.tries > 1)
            .count() as u64
    }

    /// Counts over every topic.
    pub(crate) fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for topic in 0..self.topics.len() {
            for e in self.entries(topic).iter() {
                match e.fate {
                    Fate::Acked => t.acked += 1,
                    Fate::Uncertain => t.uncertain += 1,
                    Fate::Pending => {}
                }
                if e.tries > 1 {
                    t.retried += 1;
                    t.retries += u64::from(e.tries - 1);
                    if e.fate == Fate::Acked {
                        t.acked_after_retry += 1;
                    }
                }
            }
        }
        t
    }
}

impl Fates for Ledger {
    fn fate(&self, topic: usize, seq: u64) -> Fate {
        let v = self.entries(topic);
        v.get(seq as usize).map_or(Fate::Pending, |e| e.fate)
    }

    fn answered(&self, topic: usize) -> u64 {
        let v = self.entries(topic);
        v.iter().rposition(|e| e.fate != Fate::Pending).unwrap_or(0) as u64
    }

    fn retried(&self, topic: usize, seq: u64) -> bool {
        let v = self.entries(topic);
        v.get(seq as usize).is_some_and(|e| e.tries > 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_fates_and_last_acked() {
        let l = Ledger::new(2);
        l.record(0, 1, Fate::Acked);
        l.record(0, 2, Fate::Uncertain);
        l.record(0, 3, Fate::Acked);
        l.record(0, 4, Fate::Uncertain);
        assert_eq!(l.last_acked(0), 3);
        assert_eq!(l.last_acked(1), 0);
        assert_eq!(l.fate(0, 2), Fate::Uncertain);
        assert_eq!(l.fate(0, 9), Fate::Pending);
        let t = l.totals();
        assert_eq!((t.acked, t.uncertain, t.retried, t.retries), (2, 2, 0, 0));
        assert_eq!(l.answered(0), 4);
        assert_eq!(l.answered(1), 0);
    }

    #[test]
    fn retries_are_counted_and_a_publish_being_retried_is_pending() {
        let l = Ledger::new(1);
        l.sending(0, 1, 1);
        l.record(0, 1, Fate::Acked);
        // 2: unanswered on its first try, sent again twice, acknowledged on the third
        l.sending(0, 2, 1);
        l.sending(0, 2, 2);
        assert_eq!(l.fate(0, 2), Fate::Pending);
        assert!(l.retried(0, 2));
        assert_eq!(l.answered(0), 1, "a publish being retried is not answered");
        l.sending(0, 2, 3);
        l.record(0, 2, Fate::Acked);
        // 3: retried, never answered
        l.sending(0, 3, 2);
        l.record(0, 3, Fate::Uncertain);
        // 4: sent once, acknowledged
        l.record(0, 4, Fate::Acked);
        assert!(!l.retried(0, 1) && !l.retried(0, 4) && !l.retried(0, 99));
        assert_eq!(
            l.totals(),
            Totals {
                acked: 3,
                uncertain: 1,
                retried: 2,
                retries: 3,
                acked_after_retry: 1,
            }
        );
        assert_eq!(l.acked_after_retry_in(0, 1, 4), 1);
        assert_eq!(l.acked_after_retry_in(0, 3, 4), 0);
        assert_eq!(l.acked_after_retry_in(0, 0, 100), 1);
        assert_eq!(l.acked_after_retry_in(0, 5, 4), 0);
        assert_eq!(l.last_acked(0), 4);
    }
}
