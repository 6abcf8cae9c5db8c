//! Messages between the coordinator and its workers.
//!
//! Child processes speak this as JSON lines: the coordinator writes the [`crate::spec::WorkerSpec`] as the
//! first line of the child's stdin, then [`Control`] lines; the child writes [`WorkerMsg`]
//! lines on stdout. Histograms travel as base64 of their HDR V2 serialization.

use serde::{Deserialize, Serialize};

use crate::seq::SeqOutcome;
use crate::stats::Counters;

/// What was published to one topic, for the final accounting.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TopicPublished {
    /// Sequence numbers `0..issued` were sent.
    pub issued: u64,
    /// Sorted sequence numbers whose publish request failed.
    pub failed: Vec<u64>,
}

/// Everything the built-in publisher sent, indexed by topic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PublishSummary {
    /// Per topic index.
    pub topics: Vec<TopicPublished>,
}

/// Coordinator → worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Control {
    /// The measured phase begins: clients ready from now on are late joiners; echo clients
    /// start sending; churn starts.
    Start,
    /// Stop sending echo requests and stop churning (drain follows).
    Quiesce,
    /// Close everything and report. The summary is `None` without a built-in publisher.
    Stop {
        /// What was published.
        summary: Option<PublishSummary>,
    },
}

/// Interval data sent every tick.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Snapshot {
    /// Cumulative counters.
    pub counters: Counters,
    /// Latency samples since the previous snapshot (base64 V2).
    pub latency: String,
    /// Connect samples since the previous snapshot (base64 V2).
    pub connect: String,
}

/// Accounting of one topic, over the subscribers of one worker.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TopicTally {
    /// Subscribers counted (ready before the measured phase).
    pub subscribers: u64,
    /// Of those, how many ended early.
    pub dropped: u64,
    /// Sum of their sequence accounting.
    pub outcome: SeqOutcome,
    /// Distinct messages received by subscribers without accounting (no publisher).
    pub received: u64,
    /// Loss notifications received.
    pub lost_events: u64,
}

impl TopicTally {
    /// Adds another tally.
    pub(crate) fn add(&mut self, o: &TopicTally) {
        self.subscribers += o.subscribers;
        self.dropped += o.dropped;
        self.outcome.add(&o.outcome);
        self.received += o.received;
        self.lost_events += o.lost_events;
    }
}

/// A worker's final report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct WorkerFinal {
    /// Final counters.
    pub counters: Counters,
    /// Whole-run latency histogram (base64 V2).
    pub latency: String,
    /// Whole-run connect histogram of main clients (base64 V2).
    pub connect: String,
    /// Whole-run connect histogram of churn clients (base64 V2).
    pub churn_connect: String,
    /// Per topic index.
    pub topics: Vec<TopicTally>,
    /// Clients ready before `Start` (the measured cohort).
    pub cohort: u64,
    /// Clients that became ready after `Start`.
    pub late_joiners: u64,
    /// Echo accounting (echo clients only).
    pub echo: Option<SeqOutcome>,
    /// CPU time of the worker process (µs); 0 for in-process workers.
    pub cpu_us: u64,
    /// Seconds from the first connect attempt until the last main client was ready or failed.
    pub ramp_secs: f64,
}

/// Worker → coordinator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub(crate) enum WorkerMsg {
    /// Periodic progress.
    Progress(Snapshot),
    /// All main connection attempts have finished (ready or failed).
    Ready {
        /// Counters at that moment.
        counters: Counters,
    },
    /// `Start` was applied.
    Started {
        /// Counters at that moment.
        counters: Counters,
    },
    /// The final report.
    Final(Box<WorkerFinal>),
    /// The worker could not run.
    Fatal {
        /// Why.
        error: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_roundtrip_as_json_lines() {
        let msgs = vec![
            WorkerMsg::Ready {
                counters: Counters::default(),
            },
            WorkerMsg::Final(Box::default()),
            WorkerMsg::Fatal { error: "x".into() },
        ];
        for m in msgs {
            let line = serde_json::to_string(&m).unwrap();
            assert!(!line.contains('\n'));
            let back: WorkerMsg = serde_json::from_str(&line).unwrap();
            assert_eq!(back, m);
        }
        let c = Control::Stop {
            summary: Some(PublishSummary {
                topics: vec![TopicPublished {
                    issued: 3,
                    failed: vec![1],
                }],
            }),
        };
        let back: Control = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
    }
}
