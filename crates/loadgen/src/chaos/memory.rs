//! The nodes' memory across a chaos run: every [`EVERY`], each node's
//! `process_resident_memory_bytes` and `process_start_time_seconds` from its admin listener's
//! `/metrics`. A node restarted since the last sample (a new start time) begins a new life;
//! for each life the report gives its resident memory once settled (the first sample at least
//! [`SETTLE`] into the life, or its first), its peak and its last, so that growth across the
//! faults a node lives through shows as `last − settled`.

use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::publish::http::Poster;
use crate::target::Target;

/// Time between two samples.
pub(crate) const EVERY: Duration = Duration::from_secs(5);
/// How long into a node's life its memory is taken as settled (connections made, history
/// filled).
pub(crate) const SETTLE: Duration = Duration::from_secs(60);

const MIB: f64 = 1024.0 * 1024.0;

/// One node's memory, life by life.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct NodeMemory {
    /// The node's index (as given with `--admin-url`).
    pub(crate) node: usize,
    pub(crate) lives: Vec<Life>,
}

/// One life of a node (from a start to a kill or the end of the run).
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Life {
    /// When it was first sampled, seconds into the run.
    pub(crate) first_at_s: f64,
    /// When it was last sampled.
    pub(crate) last_at_s: f64,
    pub(crate) first_mib: f64,
    pub(crate) settled_mib: f64,
    pub(crate) peak_mib: f64,
    pub(crate) last_mib: f64,
    pub(crate) samples: u64,
    /// The life lasted [`SETTLE`] or more (its `settled_mib` is then taken that far in; a
    /// shorter life, ended by a kill, has no growth to speak of).
    pub(crate) settled: bool,
    #[serde(skip)]
    start_time: f64,
}

impl Life {
    /// `last − settled`: what the node grew by after settling, in MiB (0 for a life too short
    /// to settle).
    pub(crate) fn growth_mib(&self) -> f64 {
        match self.settled {
            true => self.last_mib - self.settled_mib,
            false => 0.0,
        }
    }
}

impl NodeMemory {
    fn sample(&mut self, at: f64, start_time: f64, rss: f64) {
        let mib = rss / MIB;
        let new_life = self.lives.last().is_none_or(|l| l.start_time != start_time);
        if new_life {
            self.lives.push(Life {
                first_at_s: at,
                first_mib: mib,
                settled_mib: mib,
                start_time,
                ..Life::default()
            });
        }
        let life = self.lives.last_mut().expect("a life was just made");
        life.last_at_s = at;
        life.last_mib = mib;
        life.peak_mib = life.peak_mib.max(mib);
        life.samples += 1;
        if !life.settled && at - life.first_at_s >= SETTLE.as_secs_f64() {
            life.settled = true;
            life.settled_mib = mib;
        }
    }
}

/// The value of the unlabelled series `name` in a Prometheus text exposition.
fn series(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// Samples every node until `stop`; a node that does not answer (killed, paused, cut off)
/// is skipped for that round.
pub(crate) async fn run(
    admin: Vec<Target>,
    t0: Instant,
    stop: CancellationToken,
) -> Vec<NodeMemory> {
    let mut pollers: Vec<Poster> = (admin.into_iter())
        .map(|t| Poster::new(t, None, Duration::from_secs(2)))
        .collect();
    let mut nodes: Vec<NodeMemory> = (0..pollers.len())
        .map(|node| NodeMemory {
            node,
            ..NodeMemory::default()
        })
        .collect();
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        for (poller, node) in pollers.iter_mut().zip(nodes.iter_mut()) {
            let Ok((200, body)) = poller.get("/metrics").await else {
                continue;
            };
            let text = String::from_utf8_lossy(&body);
            if let (Some(rss), Some(start)) = (
                series(&text, "process_resident_memory_bytes"),
                series(&text, "process_start_time_seconds"),
            ) {
                node.sample(t0.elapsed().as_secs_f64(), start, rss);
            }
        }
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_begins_a_new_life_and_growth_is_counted_from_settled() {
        let mut n = NodeMemory::default();
        n.sample(5.0, 100.0, 50.0 * MIB);
        n.sample(70.0, 100.0, 80.0 * MIB);
        n.sample(200.0, 100.0, 90.0 * MIB);
        n.sample(205.0, 300.0, 40.0 * MIB);
        assert_eq!(n.lives.len(), 2);
        let first = &n.lives[0];
        assert_eq!(
            (
                first.first_mib,
                first.settled_mib,
                first.peak_mib,
                first.last_mib
            ),
            (50.0, 80.0, 90.0, 90.0)
        );
        assert_eq!(first.growth_mib(), 10.0);
        let second = &n.lives[1];
        assert_eq!((second.settled_mib, second.samples), (40.0, 1));
        assert_eq!(second.growth_mib(), 0.0, "too short a life to settle");
    }

    #[test]
    fn series_are_read_by_name_without_labels() {
        let text = "# HELP x\nprocess_resident_memory_bytes 1234\nprocess_resident_memory_bytes_max 9\nprocess_start_time_seconds 17.5\n";
        assert_eq!(series(text, "process_resident_memory_bytes"), Some(1234.0));
        assert_eq!(series(text, "process_start_time_seconds"), Some(17.5));
        assert_eq!(series(text, "missing"), None);
    }
}
