//! Live counters of one worker, shared by its connection tasks, and their serializable form.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};

use crate::error::ErrorKind;
use crate::histogram::Recorder;

/// Atomic counters and histogram recorders of one worker.
#[derive(Debug)]
pub struct Stats {
    /// Connection attempts of the main (non-churn) clients.
    pub attempts: AtomicU64,
    /// Main clients that became ready (subscribed / handshaken).
    pub connected: AtomicU64,
    /// Main clients currently open.
    pub open: AtomicU64,
    /// Highest value of `open`.
    pub peak_open: AtomicU64,
    /// Main clients that never became ready.
    pub failed: AtomicU64,
    /// Main clients that were ready and then ended before the run did.
    pub dropped: AtomicU64,
    /// Messages received by main clients (every receipt, duplicates included).
    pub deliveries: AtomicU64,
    /// Receipts that carried no sequence number.
    pub untracked: AtomicU64,
    /// Payload bytes received by main clients.
    pub bytes: AtomicU64,
    /// Loss notifications from the server (`herald.lost`, `{"type":"lost"}`).
    pub lost_events: AtomicU64,
    /// Churn clients started.
    pub churn_attempts: AtomicU64,
    /// Churn clients that became ready.
    pub churn_connected: AtomicU64,
    /// Churn clients that failed to become ready.
    pub churn_failed: AtomicU64,
    /// Churn clients closed by us after their hold time.
    pub churn_closed: AtomicU64,
    /// Messages received by churn clients.
    pub churn_deliveries: AtomicU64,
    /// Echo requests sent.
    pub echo_sent: AtomicU64,
    /// Echo answers received.
    pub echo_received: AtomicU64,
    errors: [AtomicU64; ErrorKind::COUNT],
    /// Publish→receive latency, or echo round trip (µs).
    pub latency: Recorder,
    /// Connect-to-ready time of main clients (µs).
    pub connect: Recorder,
    /// Connect-to-ready time of churn clients (µs).
    pub churn_connect: Recorder,
}

/// A plain copy of a worker's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// See [`Stats::attempts`].
    pub attempts: u64,
    /// See [`Stats::connected`].
    pub connected: u64,
    /// See [`Stats::open`].
    pub open: u64,
    /// See [`Stats::peak_open`].
    pub peak_open: u64,
    /// See [`Stats::failed`].
    pub failed: u64,
    /// See [`Stats::dropped`].
    pub dropped: u64,
    /// See [`Stats::deliveries`].
    pub deliveries: u64,
    /// See [`Stats::untracked`].
    pub untracked: u64,
    /// See [`Stats::bytes`].
    pub bytes: u64,
    /// See [`Stats::lost_events`].
    pub lost_events: u64,
    /// See [`Stats::churn_attempts`].
    pub churn_attempts: u64,
    /// See [`Stats::churn_connected`].
    pub churn_connected: u64,
    /// See [`Stats::churn_failed`].
    pub churn_failed: u64,
    /// See [`Stats::churn_closed`].
    pub churn_closed: u64,
    /// See [`Stats::churn_deliveries`].
    pub churn_deliveries: u64,
    /// See [`Stats::echo_sent`].
    pub echo_sent: u64,
    /// See [`Stats::echo_received`].
    pub echo_received: u64,
    /// Errors by kind (only non-zero kinds).
    pub errors: BTreeMap<ErrorKind, u64>,
}

impl Counters {
    /// Adds another worker's counters (peak_open adds too: peaks of workers are concurrent
    /// closely enough for an upper bound).
    pub fn add(&mut self, o: &Counters) {
        self.attempts += o.attempts;
        self.connected += o.connected;
        self.open += o.open;
        self.peak_open += o.peak_open;
        self.failed += o.failed;
        self.dropped += o.dropped;
        self.deliveries += o.deliveries;
        self.untracked += o.untracked;
        self.bytes += o.bytes;
        self.lost_events += o.lost_events;
        self.churn_attempts += o.churn_attempts;
        self.churn_connected += o.churn_connected;
        self.churn_failed += o.churn_failed;
        self.churn_closed += o.churn_closed;
        self.churn_deliveries += o.churn_deliveries;
        self.echo_sent += o.echo_sent;
        self.echo_received += o.echo_received;
        for (k, v) in &o.errors {
            *self.errors.entry(*k).or_default() += v;
        }
    }

    /// Total errors of all kinds.
    pub fn error_total(&self) -> u64 {
        self.errors.values().sum()
    }
}

impl Stats {
    /// Fresh counters; `shards` is the number of histogram shards.
    pub fn new(shards: usize) -> Self {
        Self {
            attempts: AtomicU64::new(0),
            connected: AtomicU64::new(0),
            open: AtomicU64::new(0),
            peak_open: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            deliveries: AtomicU64::new(0),
            untracked: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            lost_events: AtomicU64::new(0),
            churn_attempts: AtomicU64::new(0),
            churn_connected: AtomicU64::new(0),
            churn_failed: AtomicU64::new(0),
            churn_closed: AtomicU64::new(0),
            churn_deliveries: AtomicU64::new(0),
            echo_sent: AtomicU64::new(0),
            echo_received: AtomicU64::new(0),
            errors: std::array::from_fn(|_| AtomicU64::new(0)),
            latency: Recorder::new(shards),
            connect: Recorder::new(shards),
            churn_connect: Recorder::new(shards.min(4)),
        }
    }

    /// Counts one error.
    pub fn error(&self, kind: ErrorKind) {
        self.errors[kind.index()].fetch_add(1, Relaxed);
    }

    /// Marks one more main client open.
    pub fn opened(&self) {
        let now = self.open.fetch_add(1, Relaxed) + 1;
        self.peak_open.fetch_max(now, Relaxed);
    }

    /// Marks one main client closed.
    pub fn closed(&self) {
        self.open.fetch_sub(1, Relaxed);
    }

    /// A consistent-enough copy (each counter is read atomically; the set is not).
    pub fn counters(&self) -> Counters {
        let mut errors = BTreeMap::new();
        for k in ErrorKind::ALL {
            let v = self.errors[k.index()].load(Relaxed);
            if v > 0 {
                errors.insert(k, v);
            }
        }
        Counters {
            attempts: self.attempts.load(Relaxed),
            connected: self.connected.load(Relaxed),
            open: self.open.load(Relaxed),
            peak_open: self.peak_open.load(Relaxed),
            failed: self.failed.load(Relaxed),
            dropped: self.dropped.load(Relaxed),
            deliveries: self.deliveries.load(Relaxed),
            untracked: self.untracked.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            lost_events: self.lost_events.load(Relaxed),
            churn_attempts: self.churn_attempts.load(Relaxed),
            churn_connected: self.churn_connected.load(Relaxed),
            churn_failed: self.churn_failed.load(Relaxed),
            churn_closed: self.churn_closed.load(Relaxed),
            churn_deliveries: self.churn_deliveries.load(Relaxed),
            echo_sent: self.echo_sent.load(Relaxed),
            echo_received: self.echo_received.load(Relaxed),
            errors,
        }
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
