//! The kinds of fault the chaos run injects, and what each one is aimed at.

use serde::{Deserialize, Serialize};

/// One kind of fault. The names are the report's and the control script's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FaultKind {
    /// SIGKILL of a Herald node, restarted when the fault ends.
    NodeKill,
    /// SIGSTOP of a Herald node, SIGCONT when the fault ends.
    NodePause,
    /// The Redis master killed (Sentinel promotes the replica); restarted as a replica.
    RedisFailover,
    /// Every pub/sub connection to the Redis master dropped (`CLIENT KILL TYPE pubsub`): the
    /// nodes' live connections (and the sentinels' hello channels) are cut at once; the nodes
    /// resubscribe and repair what they missed from the streams. Nothing to heal.
    PubsubKill,
    /// The Kafka broker killed, started again when the fault ends.
    KafkaRestart,
    /// Added latency on a link (Toxiproxy `latency`).
    NetLatency,
    /// A link cut: open connections reset, new ones refused (Toxiproxy proxy disabled).
    NetCut,
    /// A half-open stall: connections stay open, no byte passes (Toxiproxy `timeout` 0).
    NetStall,
    /// A bandwidth limit on a link (Toxiproxy `bandwidth`).
    NetBandwidth,
}

impl FaultKind {
    /// Every kind, in report order.
    pub(crate) const ALL: [FaultKind; 9] = [
        FaultKind::NodeKill,
        FaultKind::NodePause,
        FaultKind::RedisFailover,
        FaultKind::PubsubKill,
        FaultKind::KafkaRestart,
        FaultKind::NetLatency,
        FaultKind::NetCut,
        FaultKind::NetStall,
        FaultKind::NetBandwidth,
    ];

    /// The name used in reports and passed to the control script.
    pub(crate) fn name(self) -> &'static str {
        match self {
            FaultKind::NodeKill => "node_kill",
            FaultKind::NodePause => "node_pause",
            FaultKind::RedisFailover => "redis_failover",
            FaultKind::PubsubKill => "pubsub_kill",
            FaultKind::KafkaRestart => "kafka_restart",
            FaultKind::NetLatency => "net_latency",
            FaultKind::NetCut => "net_cut",
            FaultKind::NetStall => "net_stall",
            FaultKind::NetBandwidth => "net_bandwidth",
        }
    }

    /// Parses a name as [`FaultKind::name`] writes it.
    pub(crate) fn parse(s: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// Parses one kind (clap value parser).
pub(crate) fn parse_kind(s: &str) -> Result<FaultKind, String> {
    FaultKind::parse(s.trim()).ok_or_else(|| format!("unknown fault kind `{s}`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for k in FaultKind::ALL {
            assert_eq!(FaultKind::parse(k.name()), Some(k));
        }
        assert_eq!(parse_kind(" net_cut"), Ok(FaultKind::NetCut));
        assert!(parse_kind("nope").is_err());
    }
}
