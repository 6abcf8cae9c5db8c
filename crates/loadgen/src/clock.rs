//! Wall-clock helpers shared by publishers and receivers.
//!
//! Latency is measured across processes on one machine, so it uses the wall clock
//! (`SystemTime`, unix microseconds), which every process of the machine shares.

use std::time::{SystemTime, UNIX_EPOCH};

/// Current time as unix microseconds.
pub(crate) fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Converts a timestamp of unknown unit to unix microseconds.
///
/// Used by raw modes, where a foreign server may put seconds, milliseconds, microseconds
/// or nanoseconds in its `ts` field: the magnitude decides (a 2001–2286 date is assumed).
pub(crate) fn normalize_ts_to_micros(ts: u64) -> u64 {
    if ts >= 100_000_000_000_000_000 {
        ts / 1_000
    } else if ts >= 100_000_000_000_000 {
        ts
    } else if ts >= 100_000_000_000 {
        ts.saturating_mul(1_000)
    } else {
        ts.saturating_mul(1_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_units() {
        let us = 1_700_000_000_123_456;
        assert_eq!(normalize_ts_to_micros(us), us);
        assert_eq!(normalize_ts_to_micros(us * 1000), us);
        assert_eq!(
            normalize_ts_to_micros(1_700_000_000_123),
            1_700_000_000_123_000
        );
        assert_eq!(normalize_ts_to_micros(1_700_000_000), 1_700_000_000_000_000);
    }
}
