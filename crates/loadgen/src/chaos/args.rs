//! `herald-loadgen chaos` flags. Every flag's doc comment is its `--help` text.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::fault::{FaultKind, parse_kind};

fn duration(s: &str) -> Result<Duration, humantime::DurationError> {
    humantime::parse_duration(s)
}

/// A chaos soak: clients over SSE, WebSocket and long-poll that reconnect and switch
/// transport on a seeded schedule, publishers with per-topic sequence numbers, and faults
/// injected through a control script; every client's stream is checked as it arrives.
#[derive(Debug, Clone, Args)]
pub(crate) struct ChaosArgs {
    /// Public URL of a node (e.g. through its Toxiproxy proxy); repeat, one per node, in the
    /// order the control script numbers them (node1, node2, ...). Loopback only.
    #[arg(long = "url", required = true)]
    pub(crate) urls: Vec<String>,
    /// Admin URL of a node (publishing), same order as --url.
    #[arg(long = "admin-url", required = true)]
    pub(crate) admin_urls: Vec<String>,
    /// The control script: called as `CONTROL start|stop KIND TARGET PARAM` (see the README).
    /// Without it no fault is injected.
    #[arg(long)]
    pub(crate) control: Option<PathBuf>,
    /// Seed of the fault schedule, the clients' reconnects and topics, and the publishers'
    /// node choices (default: from the clock; the report names it).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// Length of the run.
    #[arg(long, value_parser = duration, default_value = "120s")]
    pub(crate) duration: Duration,
    /// Clients.
    #[arg(long, default_value_t = 300)]
    pub(crate) clients: u64,
    /// Topics shared by many clients (each client follows one or two of them).
    #[arg(long, default_value_t = 8)]
    pub(crate) shared_topics: usize,
    /// Topics with a single subscriber (given to the first clients, one each).
    #[arg(long, default_value_t = 100)]
    pub(crate) solo_topics: usize,
    /// Prefix of the topics Kafka carries in the cluster (its `cluster.kafka_prefixes`, e.g.
    /// `kf.`): half the shared topics and a third of the solo topics get it. Without it every
    /// topic goes through Redis.
    #[arg(long)]
    pub(crate) kafka_prefix: Option<String>,
    /// Namespace whose topics allow Fossil deltas (the nodes' `[namespaces.<name>]` has
    /// `delta = "fossil"`): half the shared topics (those not fed from Kafka) and a third of
    /// the solo topics are named `<name>:...`, and the even-numbered clients whose topics are
    /// all in it ask for deltas on every transport and apply them. The verdict then wants
    /// deltas applied and none failing.
    #[arg(long)]
    pub(crate) delta_namespace: Option<String>,
    /// Fault kinds to draw from, comma-separated (default: every kind; `kafka_restart` and
    /// the Kafka link only with --kafka-prefix).
    #[arg(long, value_delimiter = ',', value_parser = parse_kind)]
    pub(crate) faults: Option<Vec<FaultKind>>,
    /// Shortest pause between two faults.
    #[arg(long, value_parser = duration, default_value = "2s")]
    pub(crate) fault_gap_min: Duration,
    /// Longest pause between two faults.
    #[arg(long, value_parser = duration, default_value = "5s")]
    pub(crate) fault_gap_max: Duration,
    /// Faults start after this much of the run.
    #[arg(long, value_parser = duration, default_value = "8s")]
    pub(crate) warmup: Duration,
    /// Faults end this long before the run does (clients recover, publishing goes on).
    #[arg(long, value_parser = duration, default_value = "20s")]
    pub(crate) settle: Duration,
    /// Publishing stops this long before the run ends (the last messages arrive).
    #[arg(long, value_parser = duration, default_value = "8s")]
    pub(crate) drain: Duration,
    /// Shortest time a client keeps a connection before reconnecting on its own.
    #[arg(long, value_parser = duration, default_value = "5s")]
    pub(crate) reconnect_min: Duration,
    /// Longest time a client keeps a connection before reconnecting on its own.
    #[arg(long, value_parser = duration, default_value = "30s")]
    pub(crate) reconnect_max: Duration,
    /// Probability that a client's own reconnect also switches transport.
    #[arg(long, default_value_t = 0.3)]
    pub(crate) switch: f64,
    /// Time between two messages of a shared topic.
    #[arg(long, value_parser = duration, default_value = "250ms")]
    pub(crate) shared_every: Duration,
    /// Time between two messages of a solo topic.
    #[arg(long, value_parser = duration, default_value = "1s")]
    pub(crate) solo_every: Duration,
    /// Timeout of connect + handshake (+ subscribe) of one client session.
    #[arg(long, value_parser = duration, default_value = "5s")]
    pub(crate) connect_timeout: Duration,
    /// Timeout of one publish request (a try that times out has an unknown fate and is sent
    /// again with the same idempotency key).
    #[arg(long, value_parser = duration, default_value = "3s")]
    pub(crate) publish_timeout: Duration,
    /// How long a publish of unknown fate is retried (with its idempotency key, on the next
    /// node, 100 ms-2 s apart) before it is left of unknown fate; keep it well inside the
    /// cluster's `cluster.idempotency_window` (5 min).
    #[arg(long, value_parser = duration, default_value = "60s")]
    pub(crate) publish_retry_for: Duration,
    /// Most tries of one publish, its first included (1: no retry).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) publish_max_tries: u32,
    /// Write the JSON report here.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Write the HTML report here.
    #[arg(long)]
    pub(crate) html: Option<PathBuf>,
    /// Print the seed's fault schedule and the first clients' reconnect plans as JSON, and exit.
    #[arg(long)]
    pub(crate) plan_only: bool,
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use crate::cli::{Cli, Command};

    #[test]
    fn parses_a_fault_list_and_durations() {
        let cli = Cli::try_parse_from([
            "herald-loadgen",
            "chaos",
            "--url",
            "http://127.0.0.1:1",
            "--admin-url",
            "http://127.0.0.1:2",
            "--faults",
            "node_kill,net_cut",
            "--duration",
            "2m",
        ])
        .unwrap();
        let Command::Chaos(a) = cli.command else {
            panic!("not chaos")
        };
        assert_eq!(
            a.faults,
            Some(vec![super::FaultKind::NodeKill, super::FaultKind::NetCut])
        );
        assert_eq!(a.duration.as_secs(), 120);
        assert!(
            Cli::try_parse_from([
                "herald-loadgen",
                "chaos",
                "--url",
                "x",
                "--admin-url",
                "y",
                "--faults",
                "nope"
            ])
            .is_err()
        );
    }
}
