//! What the coordinator knows about its workers while a run goes on: their counters,
//! readiness, finals and errors, and the rates their progress lines give.

use std::time::Instant;

use crate::histogram::{self, Hist};
use crate::stats::Counters;
use crate::worker::protocol::{WorkerFinal, WorkerMsg};

/// What the coordinator knows about its workers.
#[derive(Debug)]
pub(crate) struct Fleet {
    /// Latest counters per worker.
    pub counters: Vec<Counters>,
    /// Ready reported.
    pub ready: Vec<bool>,
    /// Counters at `Started`.
    pub started: Vec<Option<Counters>>,
    /// Final reports.
    pub finals: Vec<Option<WorkerFinal>>,
    /// Fatal errors.
    pub fatal: Vec<Option<String>>,
    /// Latency samples since the last tick.
    pub interval_latency: Hist,
    /// Per worker: when its previous progress arrived, and its work counter then.
    last_progress: Vec<Option<(Instant, u64, u64)>>,
    /// Per worker: latest rates (receipts/s, echo answers/s) from consecutive progress lines.
    rates: Vec<(f64, f64)>,
}

impl Fleet {
    pub(crate) fn new(n: usize) -> Self {
        Self {
            counters: vec![Counters::default(); n],
            ready: vec![false; n],
            started: vec![None; n],
            finals: vec![None; n],
            fatal: vec![None; n],
            interval_latency: histogram::new_hist(),
            last_progress: vec![None; n],
            rates: vec![(0.0, 0.0); n],
        }
    }

    /// Sum of the workers' latest receipt and echo rates.
    pub(crate) fn rates(&self) -> (f64, f64) {
        self.rates
            .iter()
            .fold((0.0, 0.0), |a, r| (a.0 + r.0, a.1 + r.1))
    }

    pub(crate) fn absorb(&mut self, id: usize, msg: WorkerMsg) {
        if id >= self.counters.len() {
            return;
        }
        match msg {
            WorkerMsg::Progress(s) => {
                let now = Instant::now();
                let receipts = s.counters.deliveries + s.counters.churn_deliveries;
                let echoes = s.counters.echo_received;
                if let Some((t, r0, e0)) = self.last_progress[id] {
                    let dt = now.duration_since(t).as_secs_f64().max(1e-3);
                    self.rates[id] = (
                        receipts.saturating_sub(r0) as f64 / dt,
                        echoes.saturating_sub(e0) as f64 / dt,
                    );
                }
                self.last_progress[id] = Some((now, receipts, echoes));
                self.counters[id] = s.counters;
                if let Ok(h) = histogram::decode(&s.latency) {
                    let _ = histogram::merge(&mut self.interval_latency, &h);
                }
            }
            WorkerMsg::Ready { counters } => {
                self.counters[id] = counters;
                self.ready[id] = true;
            }
            WorkerMsg::Started { counters } => {
                self.counters[id] = counters.clone();
                self.started[id] = Some(counters);
            }
            WorkerMsg::Final(f) => {
                self.counters[id] = f.counters.clone();
                self.finals[id] = Some(*f);
            }
            WorkerMsg::Fatal { error } => {
                if self.finals[id].is_none() {
                    self.fatal[id] = Some(error);
                }
            }
        }
    }

    /// Sum of the latest counters.
    pub(crate) fn total(&self) -> Counters {
        let mut t = Counters::default();
        for c in &self.counters {
            t.add(c);
        }
        t
    }

    pub(crate) fn gone(&self, i: usize) -> bool {
        self.fatal[i].is_some() || self.finals[i].is_some()
    }

    pub(crate) fn all_ready(&self) -> bool {
        (0..self.ready.len()).all(|i| self.ready[i] || self.gone(i))
    }

    pub(crate) fn all_started(&self) -> bool {
        (0..self.started.len()).all(|i| self.started[i].is_some() || self.gone(i))
    }

    pub(crate) fn all_final(&self) -> bool {
        (0..self.finals.len()).all(|i| self.gone(i))
    }
}
