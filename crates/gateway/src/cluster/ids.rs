//! Connection ids unique across the cluster and across restarts, Snowflake-style: a 63-bit
//! number of 41 bits of milliseconds since 2024-01-01 (enough until 2093), 10 bits of node
//! number and 12 bits of sequence within the millisecond, written in decimal.
//!
//! The node number is leased from Redis when the node has one ([`super::lease`]), so no two
//! live nodes share it; without Redis it is a hash of the node id. Ids from one node never
//! repeat: the time part never goes backwards within a process (a millisecond whose 4,096 ids
//! are spent borrows the next one), and a restarted node starts at a later millisecond.

use std::sync::atomic::{AtomicU64, Ordering};

/// 2024-01-01T00:00:00Z in Unix milliseconds: the ids' time origin.
const EPOCH_MS: u64 = 1_704_067_200_000;
const SEQ_BITS: u32 = 12;
const NODE_BITS: u32 = 10;
/// How many node numbers there are (0 to 1023).
pub(crate) const NODES: u16 = 1 << NODE_BITS;

/// Makes this node's connection ids.
#[derive(Debug)]
pub struct ConnectionIds {
    node: AtomicU64,
    /// The last id's millisecond and sequence: `ms << SEQ_BITS | seq`.
    last: AtomicU64,
}

impl ConnectionIds {
    /// Ids of node number `node` (taken modulo `NODES`).
    pub(crate) fn new(node: u16) -> Self {
        Self {
            node: AtomicU64::new(u64::from(node % NODES)),
            last: AtomicU64::new(0),
        }
    }

    /// The node number a node without a lease uses: a hash of its id.
    pub fn hashed(node_id: &str) -> u16 {
        use std::hash::Hasher as _;
        let mut h = fnv::FnvHasher::default();
        h.write(node_id.as_bytes());
        (h.finish() % u64::from(NODES)) as u16
    }

    /// Sets the node number (a lease taken or moved).
    pub(crate) fn set_node(&self, node: u16) {
        self.node.store(u64::from(node % NODES), Ordering::Relaxed);
    }

    /// The next id.
    pub(crate) fn next(&self) -> u64 {
        self.next_at(crate::bridge::now_ms())
    }

    fn next_at(&self, unix_ms: u64) -> u64 {
        let now = unix_ms.saturating_sub(EPOCH_MS) & ((1 << 41) - 1);
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let (ms, seq) = (last >> SEQ_BITS, last & ((1 << SEQ_BITS) - 1));
            let next = if now > ms {
                now << SEQ_BITS
            } else if seq + 1 < 1 << SEQ_BITS {
                last + 1
            } else {
                (ms + 1) << SEQ_BITS
            };
            match self
                .last
                .compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => {
                    let node = self.node.load(Ordering::Relaxed);
                    return (next >> SEQ_BITS) << (SEQ_BITS + NODE_BITS)
                        | node << SEQ_BITS
                        | (next & ((1 << SEQ_BITS) - 1));
                }
                Err(actual) => last = actual,
            }
        }
    }
}

/// The node number inside connection id `id`.
pub fn node_of(id: u64) -> u16 {
    ((id >> SEQ_BITS) & u64::from(NODES - 1)) as u16
}

/// When connection id `id` was made, in Unix milliseconds.
#[cfg(test)]
pub(crate) fn unix_ms_of(id: u64) -> u64 {
    (id >> (SEQ_BITS + NODE_BITS)) + EPOCH_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_time_and_node_and_grow() {
        let ids = ConnectionIds::new(517);
        let t = 1_764_000_000_000;
        let a = ids.next_at(t);
        let b = ids.next_at(t);
        let c = ids.next_at(t + 1);
        assert!(a < b && b < c);
        assert_eq!((node_of(a), node_of(c)), (517, 517));
        assert_eq!((unix_ms_of(a), unix_ms_of(c)), (t, t + 1));
        assert!(a < 1 << 63, "fits a signed 64-bit integer");
        // A clock that steps back does not make an id again.
        assert!(ids.next_at(t - 1000) > c);
    }

    #[test]
    fn a_spent_millisecond_borrows_the_next() {
        let ids = ConnectionIds::new(1);
        let t = 1_764_000_000_000;
        let all: Vec<u64> = (0..5000).map(|_| ids.next_at(t)).collect();
        assert!(all.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(unix_ms_of(all[4095]), t);
        assert_eq!(unix_ms_of(all[4096]), t + 1);
    }

    #[test]
    fn ids_are_unique_across_threads_and_nodes() {
        let a = std::sync::Arc::new(ConnectionIds::new(3));
        let b = ConnectionIds::new(4);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let a = a.clone();
                std::thread::spawn(move || (0..20_000).map(|_| a.next()).collect::<Vec<_>>())
            })
            .collect();
        let mut all: Vec<u64> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        all.extend((0..20_000).map(|_| b.next()));
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
        assert_eq!(
            ConnectionIds::hashed("node-a"),
            ConnectionIds::hashed("node-a")
        );
        assert!(ConnectionIds::hashed("node-a") < NODES);
    }
}
