//! Keep-alive timing: timers on a grid the process shares, the intervals a client may ask
//! for, and the jitter that spreads reconnections.

use std::time::Duration;

use crate::error::ApiError;

/// When a keep-alive timer (a WebSocket ping, an SSE heartbeat) with interval `every`, last
/// reset at `after`, fires: the first point at or after `after + every` of a grid shared by
/// every connection ([`on_grid`]).
pub(crate) fn next_keep_alive(
    after: tokio::time::Instant,
    every: Duration,
) -> tokio::time::Instant {
    on_grid(after + every, every)
}

/// The first point at or after `at` of a grid shared by every connection, its step a
/// sixteenth of `every` (the timer's interval) and at most a second.
///
/// Why: a connection's timer follows the time it opened, so 15,000 connections pinged every
/// 30 s wake the process 500 times a second, at 500 different moments, and their pongs come
/// back one at a time: an idle thread woken for each. On the grid, the timers due within the
/// same second fire together, in one wake-up, and their pongs arrive together (measured in
/// BENCHMARKS.md, "Keep-alive timers on a grid"). A timer fires at most one step late.
fn on_grid(at: tokio::time::Instant, every: Duration) -> tokio::time::Instant {
    static EPOCH: std::sync::OnceLock<tokio::time::Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(tokio::time::Instant::now);
    let step = (every / 16).clamp(Duration::from_millis(1), Duration::from_secs(1));
    let since = at.saturating_duration_since(epoch).as_nanos();
    let step_ns = step.as_nanos();
    let steps = since.div_ceil(step_ns);
    // Past `u64` nanoseconds (584 years) there is nothing to align to.
    u64::try_from(steps * step_ns).map_or(at, |ns| epoch + Duration::from_nanos(ns))
}

/// A heartbeat interval a client asked for, `seconds`, if it lies within `[min, max]`
/// (`sse.min_heartbeat`..`sse.max_heartbeat`, `ws.min_ping_interval`..`ws.max_ping_interval`).
pub(crate) fn asked_interval(
    seconds: f64,
    min: Duration,
    max: Duration,
) -> Result<Duration, ApiError> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| (min..=max).contains(d))
        .ok_or_else(|| {
            ApiError::bad_request(
                "bad_heartbeat",
                format!(
                    "a heartbeat is {} to {} seconds",
                    min.as_secs_f64(),
                    max.as_secs_f64()
                ),
            )
        })
}

/// A random duration up to `max`, to spread reconnections.
pub(crate) fn jitter(max: std::time::Duration) -> std::time::Duration {
    let ms = max.as_millis().min(u64::MAX as u128) as u64;
    std::time::Duration::from_millis(if ms == 0 {
        0
    } else {
        rand::random_range(0..=ms)
    })
}

#[cfg(test)]
mod tests {
    use super::{next_keep_alive, on_grid};
    use std::time::Duration;
    use tokio::time::Instant;

    #[test]
    fn keep_alive_timers_due_within_one_step_fire_together() {
        let every = Duration::from_secs(30); // a step of 1 s
        let base = on_grid(Instant::now() + every, every);
        // Timers due anywhere within the step before a grid point all fire at that point.
        for late in [1, 250, 999] {
            let at = base + Duration::from_millis(late);
            let fires = on_grid(at, every);
            assert_eq!(fires, base + Duration::from_secs(1), "due {late} ms after");
        }
        // A point on the grid is its own.
        assert_eq!(on_grid(base, every), base);
    }

    #[test]
    fn two_connections_reset_apart_are_pinged_in_one_wake_up() {
        let every = Duration::from_secs(30);
        // Take a moment just past a grid point, so that both resets fall in one step.
        let first = on_grid(Instant::now(), every) + Duration::from_millis(10);
        let second = first + Duration::from_millis(300);
        let due = next_keep_alive(first, every);
        assert_eq!(due, next_keep_alive(second, every));
        assert!(due >= second + every && due - (first + every) <= Duration::from_secs(1));
    }

    #[test]
    fn the_grid_step_is_a_sixteenth_of_the_interval_at_most_a_second() {
        for (every, step) in [
            (Duration::from_secs(5), Duration::from_micros(312_500)),
            (Duration::from_secs(16), Duration::from_secs(1)),
            (Duration::from_secs(300), Duration::from_secs(1)),
        ] {
            let start = on_grid(Instant::now() + every, every);
            for offset in [Duration::from_millis(1), step / 2, step] {
                let fires = on_grid(start + offset, every);
                assert!(fires >= start + offset, "never early");
                assert!(fires - start <= step, "at most one step late ({every:?})");
            }
        }
    }
}
