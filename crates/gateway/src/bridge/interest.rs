//! Interest routing: which partitions of a log this node follows.
//!
//! A log's topics hash into a fixed number of partitions (Redis streams, Kafka partitions). Under
//! `cluster.routing = "interest"` a node reads only the partitions holding a topic it has a
//! subscriber for; under `"broadcast"` it reads them all, always. [`Interest`] is the set of
//! followed partitions and the one place that changes it:
//!
//! - a subscription first [`Interest::want`]s the partitions of its topics (every partition for a
//!   pattern): a partition not followed yet is added, and the subscription waits
//!   ([`Interest::wait`]) until the log's reader has read that partition's history, so that it
//!   resumes, replays `last` and answers history as on a node that had followed it all along;
//! - a sweep ([`Interest::sweep`], every second) marks the partitions that still hold a subscribed
//!   topic, and drops those that held none for `cluster.interest_linger`; the node then
//!   forgets those partitions' topics (their history would have a hole once it reads the partition
//!   again), under the same lock, so no subscription can pick a topic up half-way;
//! - the reader ingests a record only while its partition is followed ([`Interest::reading`]).
//!
//! A partition is caught up once the reader has read what the log held when it started reading
//! it; the node's readiness counts only the partitions it followed when its reader (re)connected,
//! not those added for a new subscription (a node does not leave its load balancer each time
//! a client subscribes to a new partition).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

// tokio's clock (std's underneath), so that a test can pass the linger in paused time.
use tokio::time::Instant;

use parking_lot::{RwLock, RwLockReadGuard};
use tokio_util::sync::CancellationToken;

use super::logs::Ingest;

use crate::telemetry::metrics;

/// The partitions of one log that this node follows.
#[derive(Debug)]
pub(crate) struct Interest {
    bridge: &'static str,
    /// Every partition, always (`routing = "broadcast"`).
    broadcast: bool,
    linger: Duration,
    started: Instant,
    /// Which partitions are followed; changed under the write lock only.
    followed: RwLock<Vec<bool>>,
    /// Bumped whenever the followed set changes, for the readers.
    generation: AtomicU64,
    /// Per partition: when a subscription last needed it (ms since `started`).
    wanted_at: Vec<AtomicU64>,
    /// Per partition: the generation at which it was last followed (a reader that read it
    /// before it was dropped and followed again reads it again from its history window).
    since: Vec<AtomicU64>,
    /// Per partition: the reader has read what the log held when it started reading it.
    caught_up: Vec<AtomicBool>,
    /// Per partition: followed since the reader's pass began, and not caught up yet (what
    /// readiness waits for).
    initial: Vec<AtomicBool>,
    /// Bumped when a partition is caught up (waiters) or the followed set grows (readers).
    changes: tokio::sync::watch::Sender<u64>,
}

impl Interest {
    /// `partitions` partitions of `bridge`'s log, all followed for good when `broadcast`, else
    /// none until wanted, each dropped `linger` after it was last wanted.
    pub(crate) fn new(
        bridge: &'static str,
        partitions: u32,
        broadcast: bool,
        linger: Duration,
    ) -> Self {
        let n = partitions as usize;
        let interest = Self {
            bridge,
            broadcast,
            linger,
            started: Instant::now(),
            followed: RwLock::new(vec![broadcast; n]),
            generation: AtomicU64::new(0),
            wanted_at: (0..n).map(|_| AtomicU64::new(0)).collect(),
            since: (0..n).map(|_| AtomicU64::new(0)).collect(),
            caught_up: (0..n).map(|_| AtomicBool::new(false)).collect(),
            initial: (0..n).map(|_| AtomicBool::new(false)).collect(),
            changes: tokio::sync::watch::Sender::new(0),
        };
        metrics::bridge_partitions_followed(bridge, if broadcast { n } else { 0 });
        interest
    }

    /// Whether every partition is followed for good.
    pub(crate) fn is_broadcast(&self) -> bool {
        self.broadcast
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64 + 1
    }

    /// The generation of the set, and the followed partitions in order, each with the
    /// generation at which it was followed.
    pub(crate) fn followed(&self) -> (u64, Vec<(u32, u64)>) {
        let followed = self.followed.read();
        let generation = self.generation.load(Ordering::Acquire);
        let partitions = (followed.iter().enumerate())
            .filter(|(_, f)| **f)
            .map(|(g, _)| (g as u32, self.since[g].load(Ordering::Acquire)))
            .collect();
        (generation, partitions)
    }

    /// The generation of the followed set: it changes whenever the set does.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// How many partitions are followed.
    pub(crate) fn followed_count(&self) -> usize {
        self.followed.read().iter().filter(|f| **f).count()
    }

    /// A view for ingesting a batch of records: the followed set cannot shrink (and the
    /// node cannot forget a partition's topics) while it is held.
    pub(crate) fn reading(&self) -> Reading<'_> {
        Reading((self.followed.read(), &self.since))
    }

    /// Marks `partitions` as needed now, following those not followed yet. Returns the partitions
    /// of `partitions` that are not caught up: the caller waits for them ([`Self::wait`]).
    pub(crate) fn want(&self, partitions: impl IntoIterator<Item = u32>) -> Vec<u32> {
        let now = self.now_ms();
        let mut pending = Vec::new();
        let mut new = Vec::new();
        {
            let followed = self.followed.read();
            for g in partitions {
                self.wanted_at[g as usize].store(now, Ordering::Relaxed);
                if !followed[g as usize] {
                    new.push(g);
                } else if !self.caught_up[g as usize].load(Ordering::Acquire) {
                    pending.push(g);
                }
            }
        }
        if !new.is_empty() {
            let mut followed = self.followed.write();
            let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
            for &g in &new {
                if !followed[g as usize] {
                    followed[g as usize] = true;
                    self.since[g as usize].store(generation, Ordering::Release);
                    self.caught_up[g as usize].store(false, Ordering::Release);
                    self.initial[g as usize].store(false, Ordering::Release);
                }
                // Wanted again under the write lock: a sweep that ran in between cannot
                // have dropped it for an old mark.
                self.wanted_at[g as usize].store(now, Ordering::Relaxed);
            }
            let count = followed.iter().filter(|f| **f).count();
            drop(followed);
            metrics::bridge_partitions_followed(self.bridge, count);
            self.changes.send_modify(|v| *v += 1);
            pending.extend(new);
        }
        pending.sort_unstable();
        pending.dedup();
        pending.retain(|&g| !self.caught_up[g as usize].load(Ordering::Acquire));
        pending
    }

    /// Waits until every partition of `partitions` is caught up, for at most `timeout`; false when
    /// the time ran out.
    pub(crate) async fn wait(&self, partitions: &[u32], timeout: Duration) -> bool {
        let mut changes = self.changes.subscribe();
        let all_caught_up = || {
            partitions
                .iter()
                .all(|&g| self.caught_up[g as usize].load(Ordering::Acquire))
        };
        let waited = tokio::time::timeout(timeout, async {
            loop {
                changes.borrow_and_update();
                if all_caught_up() {
                    return;
                }
                if changes.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        })
        .await;
        waited.is_ok() || all_caught_up()
    }

    /// A receiver that sees every change of the followed set (and every catch-up).
    pub(crate) fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The reader has read what the log held for `partition` (or, `false`, it lost the partition
    /// and reads it again).
    pub(crate) fn set_caught_up(&self, partition: u32, caught_up: bool) {
        self.caught_up[partition as usize].store(caught_up, Ordering::Release);
        if caught_up {
            self.initial[partition as usize].store(false, Ordering::Release);
            self.changes.send_modify(|v| *v += 1);
        }
    }

    /// Whether `partition` is followed and caught up.
    #[cfg(test)]
    pub(crate) fn is_caught_up(&self, partition: u32) -> bool {
        self.caught_up[partition as usize].load(Ordering::Acquire)
    }

    /// A reader's pass started reading `partition`: not caught up until it says so, and,
    /// when `initial` (a reconnect lost it, or the node reads everything and just started),
    /// the node is not ready until then.
    pub(crate) fn started(&self, partition: u32, initial: bool) {
        self.caught_up[partition as usize].store(false, Ordering::Release);
        self.initial[partition as usize].store(initial, Ordering::Release);
    }

    /// Partitions whose reader lost them (or, under broadcast, just started) that are not caught
    /// up yet.
    pub(crate) fn initial_pending(&self) -> usize {
        let followed = self.followed.read();
        (followed.iter().zip(&self.initial))
            .filter(|(f, i)| **f && i.load(Ordering::Acquire))
            .count()
    }

    /// Marks the partitions in `interested` as needed now (every partition when `all`), then drops
    /// the followed partitions nobody needed for the linger; `forget` is called with the dropped
    /// partitions while the followed set is locked, so that no subscription and no ingest sees
    /// them half-way. Returns the dropped partitions.
    pub(crate) fn sweep(
        &self,
        interested: impl IntoIterator<Item = u32>,
        all: bool,
        forget: impl FnOnce(&[u32]),
    ) -> Vec<u32> {
        if self.broadcast {
            return Vec::new();
        }
        let now = self.now_ms();
        {
            let followed = self.followed.read();
            if all {
                for (g, f) in followed.iter().enumerate() {
                    if *f {
                        self.wanted_at[g].store(now, Ordering::Relaxed);
                    }
                }
            } else {
                for g in interested {
                    if followed[g as usize] {
                        self.wanted_at[g as usize].store(now, Ordering::Relaxed);
                    }
                }
            }
        }
        let linger = self.linger.as_millis() as u64;
        let stale =
            |g: usize| now.saturating_sub(self.wanted_at[g].load(Ordering::Relaxed)) > linger;
        if !(self.followed.read().iter().enumerate()).any(|(g, f)| *f && stale(g)) {
            return Vec::new();
        }
        let mut followed = self.followed.write();
        let dropped: Vec<u32> = (0..followed.len())
            .filter(|&g| followed[g] && stale(g))
            .map(|g| g as u32)
            .collect();
        for &g in &dropped {
            followed[g as usize] = false;
            self.caught_up[g as usize].store(false, Ordering::Release);
            self.initial[g as usize].store(false, Ordering::Release);
        }
        self.generation.fetch_add(1, Ordering::AcqRel);
        forget(&dropped);
        let count = followed.iter().filter(|f| **f).count();
        drop(followed);
        metrics::bridge_partitions_followed(self.bridge, count);
        self.changes.send_modify(|v| *v += 1);
        dropped
    }
}

impl Interest {
    /// A subscription's backfill: wants `partitions` and waits until every one of them is caught
    /// up, for at most `timeout`. `Err` with how many are still not caught up when the time
    /// ran out. Immediate under broadcast routing, or when they are followed and caught up.
    pub(crate) async fn backfill(
        &self,
        partitions: impl IntoIterator<Item = u32>,
        timeout: Duration,
    ) -> Result<(), usize> {
        if self.broadcast {
            return Ok(());
        }
        let pending = self.want(partitions);
        if pending.is_empty() || self.wait(&pending, timeout).await {
            return Ok(());
        }
        Err(pending.len())
    }

    /// The sweep of a log's followed set, every [`SWEEP_EVERY`] until `stop`: marks the
    /// partitions that hold a topic subscribed on this node (`partitions_of` names a topic's
    /// partitions; every partition while a pattern is subscribed), drops those that held none for
    /// the linger, makes `ingest` forget their topics under the followed set's lock, and hands
    /// the dropped partitions to `dropped` (the log's own state of them goes too).
    pub(crate) async fn sweep_until(
        &self,
        ingest: &Ingest,
        partitions_of: impl Fn(&str, &mut Vec<u32>),
        stop: &CancellationToken,
        mut dropped: impl FnMut(&[u32]),
    ) {
        if self.broadcast {
            return;
        }
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(SWEEP_EVERY) => {}
            }
            let mut interested = Vec::new();
            ingest.each_subscribed(|t| partitions_of(t, &mut interested));
            let gone = self.sweep(interested, ingest.has_patterns(), |gone| {
                let gone: HashSet<u32> = gone.iter().copied().collect();
                let forgotten = ingest.forget(|t| {
                    let mut of = Vec::new();
                    partitions_of(t, &mut of);
                    of.iter().any(|g| gone.contains(g))
                });
                tracing::debug!(
                    bridge = self.bridge,
                    partitions = gone.len(),
                    topics = forgotten,
                    "partitions no longer followed"
                );
            });
            if !gone.is_empty() {
                dropped(&gone);
            }
        }
    }
}

/// How often a log's followed set is swept ([`Interest::sweep_until`]).
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// The followed set, held while a batch of records is ingested (see [`Interest::reading`]).
pub(crate) struct Reading<'a>((RwLockReadGuard<'a, Vec<bool>>, &'a [AtomicU64]));

impl Reading<'_> {
    /// Whether `partition` is followed, since generation `since` (as the reader read it): a
    /// record of a partition that is not is dropped.
    pub(crate) fn follows(&self, partition: u32, since: u64) -> bool {
        self.0.0[partition as usize]
            && self.0.1[partition as usize].load(Ordering::Acquire) == since
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_wanted_group_is_followed_until_caught_up_then_dropped_after_the_linger() {
        let interest = Interest::new("test", 8, false, Duration::from_secs(1));
        assert!(interest.followed().1.is_empty());
        assert_eq!(interest.want([3, 5, 3]), vec![3, 5]);
        assert_eq!(interest.followed().1, vec![(3, 1), (5, 1)]);
        assert!(!interest.wait(&[3], Duration::from_millis(20)).await);
        interest.set_caught_up(3, true);
        assert!(interest.wait(&[3], Duration::from_millis(20)).await);
        assert_eq!(
            interest.want([3]),
            Vec::<u32>::new(),
            "followed and caught up"
        );
        // Still wanted within the linger: nothing is dropped.
        let mut forgotten = Vec::new();
        interest.sweep([], false, |g| forgotten.extend_from_slice(g));
        assert!(forgotten.is_empty());
        // Partition 5 keeps a subscriber; 3 has none for longer than the linger (paused time:
        // the clock moves on at once).
        tokio::time::advance(Duration::from_millis(1_100)).await;
        let dropped = interest.sweep([5], false, |g| forgotten.extend_from_slice(g));
        assert_eq!(dropped, vec![3]);
        assert_eq!(forgotten, vec![3]);
        assert_eq!(interest.followed().1, vec![(5, 1)]);
        assert!(!interest.is_caught_up(3));
    }

    #[test]
    fn broadcast_follows_every_group_for_good() {
        let interest = Interest::new("test", 4, true, Duration::from_secs(1));
        assert_eq!(interest.followed().1, vec![(0, 0), (1, 0), (2, 0), (3, 0)]);
        assert!(
            interest
                .sweep([], false, |_| panic!("nothing to forget"))
                .is_empty()
        );
    }

    #[tokio::test]
    async fn a_waiter_wakes_when_its_group_is_caught_up() {
        let interest =
            std::sync::Arc::new(Interest::new("test", 4, false, Duration::from_secs(60)));
        let pending = interest.want([2]);
        let waiter = {
            let interest = interest.clone();
            tokio::spawn(async move { interest.wait(&pending, Duration::from_secs(10)).await })
        };
        tokio::task::yield_now().await;
        interest.set_caught_up(2, true);
        assert!(waiter.await.unwrap());
    }
}
