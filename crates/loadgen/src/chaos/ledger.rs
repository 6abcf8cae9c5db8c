//! What the publisher knows about each message it sent: per topic and sequence number,
//! whether the publish was acknowledged (it must be delivered), or its fate is unknown (a
//! timeout or an error: it may or may not have been written, so it may arrive late or never).

use std::sync::Mutex;

/// The fate of one publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Not answered yet (or never sent).
    Pending,
    /// Answered 2xx: it is in the log and must reach every subscriber.
    Acked,
    /// Failed or timed out: it may or may not have been written.
    Uncertain,
}

/// Looks up a publish's fate (the checker's view of the ledger; tests stub it).
pub(crate) trait Fates {
    fn fate(&self, topic: usize, seq: u64) -> Fate;
    /// The highest sequence number of `topic` whose publish was answered (0: none): every
    /// later one was sent, at the earliest, while the caller was looking.
    fn answered(&self, topic: usize) -> u64;
}

/// Per topic, the fate of sequence numbers 1.. (index 0 unused).
#[derive(Debug)]
pub(crate) struct Ledger {
    topics: Vec<Mutex<Vec<Fate>>>,
}

impl Ledger {
    pub(crate) fn new(topics: usize) -> Self {
        Ledger {
            topics: (0..topics)
                .map(|_| Mutex::new(vec![Fate::Pending]))
                .collect(),
        }
    }

    /// Records the fate of `seq` (sequence numbers are issued in order, one at a time per
    /// topic, so `seq` is at most one past the end).
    pub(crate) fn record(&self, topic: usize, seq: u64, fate: Fate) {
        let mut v = self.topics[topic].lock().unwrap_or_else(|e| e.into_inner());
        let i = seq as usize;
        if v.len() <= i {
            v.resize(i + 1, Fate::Pending);
        }
        v[i] = fate;
    }

    /// The highest acknowledged sequence number of `topic` (0: none).
    pub(crate) fn last_acked(&self, topic: usize) -> u64 {
        let v = self.topics[topic].lock().unwrap_or_else(|e| e.into_inner());
        v.iter().rposition(|f| *f == Fate::Acked).unwrap_or(0) as u64
    }

    /// Counts (acked, uncertain) over every topic.
    pub(crate) fn totals(&self) -> (u64, u64) {
        let mut acked = 0;
        let mut uncertain = 0;
        for t in &self.topics {
            for f in t.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                match f {
                    Fate::Acked => acked += 1,
                    Fate::Uncertain => uncertain += 1,
                    Fate::Pending => {}
                }
            }
        }
        (acked, uncertain)
    }
}

impl Fates for Ledger {
    fn fate(&self, topic: usize, seq: u64) -> Fate {
        let v = self.topics[topic].lock().unwrap_or_else(|e| e.into_inner());
        v.get(seq as usize).copied().unwrap_or(Fate::Pending)
    }

    fn answered(&self, topic: usize) -> u64 {
        let v = self.topics[topic].lock().unwrap_or_else(|e| e.into_inner());
        v.iter().rposition(|f| *f != Fate::Pending).unwrap_or(0) as u64
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
        assert_eq!(l.totals(), (2, 2));
        assert_eq!(l.answered(0), 4);
        assert_eq!(l.answered(1), 0);
    }
}
