//! Token-bucket pacing for connects, publishes, echo requests and churn.
//!
//! A bucket fills at `rate` tokens per second up to `capacity`. A fixed rate is a bucket
//! whose capacity covers a few milliseconds of tokens, so that timer granularity (about
//! 1 ms) never caps the achieved rate, while an idle period never turns into a large burst.

use std::time::{Duration, Instant};

/// Paces work at a rate, optionally allowing bursts.
#[derive(Debug, Clone)]
pub(crate) struct Pacer {
    rate: f64,
    capacity: f64,
    tokens: f64,
    last: Instant,
}

impl Pacer {
    /// A steady rate: capacity is 5 ms worth of tokens, at least two, so that the fraction of a
    /// token earned while a timer oversleeps is kept rather than lost (with a capacity of one,
    /// 1 ms of oversleep per 10 ms period would cost 10% of the rate).
    pub(crate) fn fixed(rate: f64) -> Self {
        let mut p = Self::bucket(rate, (rate / 200.0).max(2.0));
        p.tokens = 1.0;
        p
    }

    /// A token bucket of `burst` capacity refilled at `rate` per second. It starts full.
    ///
    /// A rate that is not a positive finite number means "unlimited".
    pub(crate) fn bucket(rate: f64, burst: f64) -> Self {
        let capacity = burst.max(1.0);
        Self {
            rate,
            capacity,
            tokens: capacity,
            last: Instant::now(),
        }
    }

    /// Whether this pacer imposes no limit.
    pub(crate) fn is_unlimited(&self) -> bool {
        !(self.rate.is_finite() && self.rate > 0.0)
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.capacity);
    }

    /// Takes up to `max` whole tokens at `now`; `Err(wait)` says how long until one is due.
    pub(crate) fn take_at(&mut self, now: Instant, max: u64) -> Result<u64, Duration> {
        if max == 0 {
            return Ok(0);
        }
        if self.is_unlimited() {
            return Ok(max);
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            let n = (self.tokens.floor() as u64).min(max);
            self.tokens -= n as f64;
            Ok(n)
        } else {
            let missing = 1.0 - self.tokens;
            let secs = missing / self.rate;
            Err(Duration::from_secs_f64(secs.clamp(0.000_05, 3600.0)))
        }
    }

    /// Waits until at least one token is available and takes up to `max` of them.
    pub(crate) async fn acquire(&mut self, max: u64) -> u64 {
        loop {
            match self.take_at(Instant::now(), max) {
                Ok(n) => return n,
                Err(wait) => tokio::time::sleep(wait).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_rate_releases_tokens_over_time() {
        let mut p = Pacer::fixed(1000.0);
        let t0 = p.last;
        assert_eq!(p.take_at(t0, 100), Ok(1));
        assert!(p.take_at(t0, 100).is_err());
        // after 3 ms, 3 tokens are due (capacity 5)
        assert_eq!(p.take_at(t0 + Duration::from_millis(3), 100), Ok(3));
        // after a long idle period, at most the capacity is released
        assert_eq!(p.take_at(t0 + Duration::from_secs(10), 100), Ok(5));
    }

    #[test]
    fn total_over_a_second_matches_rate() {
        let mut p = Pacer::fixed(500.0);
        let t0 = p.last;
        let mut total = 0;
        for ms in 0..=1000 {
            if let Ok(n) = p.take_at(t0 + Duration::from_millis(ms), u64::MAX) {
                total += n;
            }
        }
        assert!((500..=502).contains(&total), "{total}");
    }

    #[test]
    fn bucket_allows_bursts_up_to_capacity() {
        let mut p = Pacer::bucket(10.0, 50.0);
        let t0 = p.last;
        assert_eq!(p.take_at(t0, 1000), Ok(50));
        assert!(p.take_at(t0, 1000).is_err());
        assert_eq!(p.take_at(t0 + Duration::from_secs(1), 1000), Ok(10));
        assert_eq!(p.take_at(t0 + Duration::from_secs(100), 1000), Ok(50));
    }

    #[test]
    fn oversleeping_timers_do_not_lower_the_rate() {
        // 100/s, but every wake-up comes 1 ms late (11 ms instead of 10)
        let mut p = Pacer::fixed(100.0);
        let t0 = p.last;
        let mut total = 0;
        for i in 1..=91 {
            if let Ok(n) = p.take_at(t0 + Duration::from_millis(11 * i), 10) {
                total += n;
            }
        }
        // 1.001 s elapsed: 100 tokens plus the initial one, give or take one
        assert!((99..=102).contains(&total), "{total}");
    }

    #[test]
    fn wait_hint_is_time_to_next_token() {
        let mut p = Pacer::fixed(10.0);
        let t0 = p.last;
        assert_eq!(p.take_at(t0, 1), Ok(1));
        let wait = p.take_at(t0, 1).unwrap_err();
        assert!(wait <= Duration::from_millis(100) && wait >= Duration::from_millis(99));
    }

    #[test]
    fn unlimited_and_max_are_respected() {
        let mut p = Pacer::fixed(0.0);
        assert!(p.is_unlimited());
        assert_eq!(p.take_at(Instant::now(), 7), Ok(7));
        let mut p = Pacer::bucket(10.0, 50.0);
        assert_eq!(p.take_at(p.last, 3), Ok(3));
        assert_eq!(p.take_at(p.last, 0), Ok(0));
    }
}
