//! What one worker (a task set in this process, or a child process) is asked to do.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::target::Target;

/// The kind of client a worker runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ClientKind {
    /// Herald SSE subscribers (raw HTTP/1.1).
    Sse,
    /// WebSocket subscribers: Herald's JSON protocol, or `raw` (count any frame).
    Ws {
        /// Count every frame instead of speaking Herald's protocol.
        raw: bool,
        /// A text frame sent right after the handshake (raw mode).
        init_frame: Option<String>,
    },
    /// WebSocket echo clients.
    Echo {
        /// Plain text frames instead of Herald `ping` frames.
        raw: bool,
        /// Frame size in bytes.
        size: usize,
        /// Requests per second per client.
        rate_per_conn: f64,
    },
}

/// Topic naming and assignment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TopicPlan {
    /// Number of topics (0: subscribe to none, for servers without topics).
    pub count: u32,
    /// Topics per connection.
    pub per_conn: u32,
    /// Topic name prefix; topic `i` is `{prefix}{i}`.
    pub prefix: String,
    /// SSE query parameter naming a topic.
    pub param: String,
    /// Ask for Fossil deltas and apply them (Herald's `delta=fossil`).
    #[serde(default)]
    pub delta: bool,
}

impl TopicPlan {
    /// Name of topic `i`.
    pub(crate) fn name(&self, i: u32) -> String {
        format!("{}{i}", self.prefix)
    }

    /// Topic indexes of connection `conn`: consecutive topics starting at `conn % count`.
    pub(crate) fn topics_for(&self, conn: u64) -> Vec<u32> {
        if self.count == 0 {
            return Vec::new();
        }
        let n = self.per_conn.clamp(1, self.count);
        let first = (conn % u64::from(self.count)) as u32;
        (0..n).map(|j| (first + j) % self.count).collect()
    }
}

/// Churn: clients that connect, stay a while, and leave, while the main clients stay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ChurnSpec {
    /// New churn clients per second (this worker's share).
    pub rate: f64,
    /// How long each churn client stays connected, in milliseconds.
    pub hold_ms: u64,
}

/// Everything one worker needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct WorkerSpec {
    /// Worker number (0-based).
    pub worker_id: usize,
    /// Client kind.
    pub kind: ClientKind,
    /// Server endpoints; connection `i` uses `targets[i % len]`.
    pub targets: Vec<Target>,
    /// Global index of this worker's first connection.
    pub first_conn: u64,
    /// Number of main connections of this worker.
    pub conns: u64,
    /// New connections per second for this worker (0: as fast as allowed).
    pub ramp_rate: f64,
    /// Most connection attempts in progress at once.
    pub max_pending: usize,
    /// Topics.
    pub topics: TopicPlan,
    /// Source addresses; connection `i` binds `source_ips[i % len]` (empty: no bind).
    pub source_ips: Vec<IpAddr>,
    /// Connect + handshake timeout (ms).
    pub connect_timeout_ms: u64,
    /// Time allowed for a `subscribed` acknowledgement (ms).
    pub subscribe_timeout_ms: u64,
    /// Optional churn.
    pub churn: Option<ChurnSpec>,
    /// Read buffer per connection (bytes).
    pub read_buffer: usize,
    /// Longest SSE line accepted (bytes).
    pub max_line: usize,
    /// Largest SSE event / WebSocket message accepted (bytes).
    pub max_event: usize,
    /// Progress report interval (ms).
    pub tick_ms: u64,
    /// Hard limit on the worker's life (ms); it stops by itself after that.
    pub deadline_ms: u64,
    /// Histogram shards.
    pub hist_shards: usize,
}

impl WorkerSpec {
    /// Target of global connection index `conn`.
    pub(crate) fn target_for(&self, conn: u64) -> &Target {
        &self.targets[(conn % self.targets.len() as u64) as usize]
    }

    /// Source address of global connection index `conn`.
    pub(crate) fn source_for(&self, conn: u64) -> Option<IpAddr> {
        if self.source_ips.is_empty() {
            None
        } else {
            Some(self.source_ips[(conn % self.source_ips.len() as u64) as usize])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_are_spread_round_robin() {
        let p = TopicPlan {
            count: 4,
            per_conn: 2,
            prefix: "load-".into(),
            param: "topic".into(),
            delta: false,
        };
        assert_eq!(p.topics_for(0), vec![0, 1]);
        assert_eq!(p.topics_for(3), vec![3, 0]);
        assert_eq!(p.topics_for(5), vec![1, 2]);
        assert_eq!(p.name(2), "load-2");
        let none = TopicPlan { count: 0, ..p };
        assert!(none.topics_for(7).is_empty());
    }
}
