//! Live counters of one worker, shared by its connection tasks, and their serializable form.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};

use crate::error::ErrorKind;
use crate::histogram::Recorder;

/// Declares [`Stats`] (atomic, live) and [`Counters`] (plain, serializable) from one list of
/// counters, with the code that copies and adds them, so that a counter is named once.
macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// Atomic counters and histogram recorders of one worker.
        #[derive(Debug)]
        pub(crate) struct Stats {
            $($(#[doc = $doc])* pub(crate) $name: AtomicU64,)*
            errors: [AtomicU64; ErrorKind::COUNT],
            /// Publish→receive latency, or echo round trip (µs).
            pub(crate) latency: Recorder,
            /// Connect-to-ready time of main clients (µs).
            pub(crate) connect: Recorder,
            /// Connect-to-ready time of churn clients (µs).
            pub(crate) churn_connect: Recorder,
        }

        /// A plain copy of a worker's counters (see [`Stats`] for each one's meaning).
        #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
        pub(crate) struct Counters {
            $($(#[doc = $doc])* pub(crate) $name: u64,)*
            /// Errors by kind (only non-zero kinds).
            pub(crate) errors: BTreeMap<ErrorKind, u64>,
        }

        impl Counters {
            /// Adds another worker's counters (peak_open adds too: peaks of workers are
            /// concurrent closely enough for an upper bound).
            pub(crate) fn add(&mut self, o: &Counters) {
                $(self.$name += o.$name;)*
                for (k, v) in &o.errors {
                    *self.errors.entry(*k).or_default() += v;
                }
            }
        }

        impl Stats {
            /// Fresh counters; `shards` is the number of histogram shards.
            pub(crate) fn new(shards: usize) -> Self {
                Self {
                    $($name: AtomicU64::new(0),)*
                    errors: std::array::from_fn(|_| AtomicU64::new(0)),
                    latency: Recorder::new(shards),
                    connect: Recorder::new(shards),
                    churn_connect: Recorder::new(shards.min(4)),
                }
            }

            /// A consistent-enough copy (each counter is read atomically; the set is not).
            pub(crate) fn counters(&self) -> Counters {
                let mut errors = BTreeMap::new();
                for k in ErrorKind::ALL {
                    let v = self.errors[k.index()].load(Relaxed);
                    if v > 0 {
                        errors.insert(k, v);
                    }
                }
                Counters {
                    $($name: self.$name.load(Relaxed),)*
                    errors,
                }
            }
        }
    };
}

counters! {
    /// Connection attempts of the main (non-churn) clients.
    attempts,
    /// Main clients that became ready (subscribed / handshaken).
    connected,
    /// Main clients currently open.
    open,
    /// Highest value of `open`.
    peak_open,
    /// Main clients that never became ready.
    failed,
    /// Main clients that were ready and then ended before the run did.
    dropped,
    /// Messages received by main clients (every receipt, duplicates included).
    deliveries,
    /// Receipts that carried no sequence number.
    untracked,
    /// Payload bytes received by main clients.
    bytes,
    /// Loss notifications from the server (`herald.lost`, `{"type":"lost"}`).
    lost_events,
    /// Churn clients started.
    churn_attempts,
    /// Churn clients that became ready.
    churn_connected,
    /// Churn clients that failed to become ready.
    churn_failed,
    /// Churn clients closed by us after their hold time.
    churn_closed,
    /// Messages received by churn clients.
    churn_deliveries,
    /// Echo requests sent.
    echo_sent,
    /// Echo answers received.
    echo_received,
}

impl Counters {
    /// Total errors of all kinds.
    pub(crate) fn error_total(&self) -> u64 {
        self.errors.values().sum()
    }
}

impl Stats {
    /// Counts one error.
    pub(crate) fn error(&self, kind: ErrorKind) {
        self.errors[kind.index()].fetch_add(1, Relaxed);
    }

    /// Marks one more main client open.
    pub(crate) fn opened(&self) {
        let now = self.open.fetch_add(1, Relaxed) + 1;
        self.peak_open.fetch_max(now, Relaxed);
    }

    /// Marks one main client closed.
    pub(crate) fn closed(&self) {
        self.open.fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_and_errors() {
        let s = Stats::new(2);
        s.error(ErrorKind::Io);
        s.error(ErrorKind::Io);
        s.opened();
        s.opened();
        s.closed();
        let c = s.counters();
        assert_eq!(c.errors.get(&ErrorKind::Io), Some(&2));
        assert_eq!((c.open, c.peak_open), (1, 2));
        let mut total = Counters::default();
        total.add(&c);
        total.add(&c);
        assert_eq!(total.error_total(), 4);
        assert_eq!(total.open, 2);
    }
}
