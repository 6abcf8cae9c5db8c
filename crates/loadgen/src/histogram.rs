//! HDR histograms: creation, sharded recording, V2 serialization (base64) and merging.
//!
//! All histograms record microseconds from 1 µs to 1 hour with 3 significant digits;
//! values outside that range are clamped, never dropped.

use std::sync::{Mutex, MutexGuard};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Deserializer, Serializer, V2Serializer};
use serde::{Deserialize, Serialize};

/// The histogram type used everywhere (values in microseconds).
pub(crate) type Hist = Histogram<u64>;

const MAX_MICROS: u64 = 3_600_000_000;

/// A new, empty microsecond histogram.
pub(crate) fn new_hist() -> Hist {
    // The bounds are constants that hdrhistogram accepts; failure is impossible.
    Histogram::new_with_bounds(1, MAX_MICROS, 3).unwrap_or_else(|_| unreachable!())
}

/// Records a value, clamping it into the histogram's range.
pub(crate) fn record(h: &mut Hist, micros: u64) {
    h.saturating_record(micros.clamp(1, MAX_MICROS));
}

/// An error decoding a serialized histogram.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HistError {
    /// Not base64.
    #[error("histogram is not valid base64: {0}")]
    Base64(#[from] base64::DecodeError),
    /// Not a V2 histogram.
    #[error("histogram is not a valid V2 encoding: {0:?}")]
    Decode(hdrhistogram::serialization::DeserializeError),
    /// Histograms with incompatible bounds.
    #[error("cannot merge histograms: {0:?}")]
    Merge(hdrhistogram::errors::AdditionError),
}

/// Serializes with the V2 serializer and base64-encodes the bytes.
pub(crate) fn encode(h: &Hist) -> String {
    let mut buf = Vec::new();
    // Writing into a Vec cannot fail for in-range histograms.
    if V2Serializer::new().serialize(h, &mut buf).is_err() {
        buf.clear();
    }
    B64.encode(buf)
}

/// Decodes a string made by [`encode`]. An empty string is an empty histogram.
pub(crate) fn decode(s: &str) -> Result<Hist, HistError> {
    if s.is_empty() {
        return Ok(new_hist());
    }
    let bytes = B64.decode(s)?;
    let mut cursor = std::io::Cursor::new(bytes);
    let decoded: Hist = Deserializer::new()
        .deserialize(&mut cursor)
        .map_err(HistError::Decode)?;
    let mut out = new_hist();
    merge(&mut out, &decoded)?;
    Ok(out)
}

/// Adds `from` into `into`.
pub(crate) fn merge(into: &mut Hist, from: &Hist) -> Result<(), HistError> {
    into.add(from).map_err(HistError::Merge)
}

/// Percentiles of a latency histogram, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Percentiles {
    /// Number of samples.
    pub count: u64,
    /// Smallest sample.
    pub min_ms: f64,
    /// Arithmetic mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest sample.
    pub max_ms: f64,
}

/// Summarizes a microsecond histogram.
pub(crate) fn summarize(h: &Hist) -> Percentiles {
    if h.is_empty() {
        return Percentiles::default();
    }
    let ms = |us: u64| us as f64 / 1000.0;
    Percentiles {
        count: h.len(),
        min_ms: ms(h.min()),
        mean_ms: h.mean() / 1000.0,
        p50_ms: ms(h.value_at_quantile(0.50)),
        p90_ms: ms(h.value_at_quantile(0.90)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        p999_ms: ms(h.value_at_quantile(0.999)),
        max_ms: ms(h.max()),
    }
}

/// A histogram shared by many tasks: writes go to one of several mutex-protected shards
/// (picked by the caller, usually from the connection index) to keep contention low.
#[derive(Debug)]
pub(crate) struct Recorder {
    shards: Vec<Mutex<Hist>>,
}

fn lock(m: &Mutex<Hist>) -> MutexGuard<'_, Hist> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Recorder {
    /// A recorder with `shards` shards (at least one).
    pub(crate) fn new(shards: usize) -> Self {
        Self {
            shards: (0..shards.max(1)).map(|_| Mutex::new(new_hist())).collect(),
        }
    }

    /// Records `micros` in shard `hint % shards`.
    pub(crate) fn record(&self, hint: usize, micros: u64) {
        let shard = &self.shards[hint % self.shards.len()];
        record(&mut lock(shard), micros);
    }

    /// Moves everything recorded since the last call into a new histogram.
    pub(crate) fn take(&self) -> Hist {
        let mut out = new_hist();
        for shard in &self.shards {
            let mut h = lock(shard);
            // same bounds: cannot fail
            let _ = out.add(&*h);
            h.reset();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_roundtrip() {
        let mut h = new_hist();
        for v in [1, 10, 100, 1000, 10_000, 250_000] {
            record(&mut h, v);
        }
        let back = decode(&encode(&h)).unwrap();
        assert_eq!(back.len(), 6);
        assert_eq!(back.max(), h.max());
        assert_eq!(back.value_at_quantile(0.5), h.value_at_quantile(0.5));
        assert_eq!(decode("").unwrap().len(), 0);
        assert!(decode("!!!").is_err());
        assert!(decode("aGVsbG8=").is_err());
    }

    #[test]
    fn merge_adds_counts_and_keeps_extremes() {
        let mut a = new_hist();
        let mut b = new_hist();
        for v in 1..=1000 {
            record(&mut a, v);
        }
        for v in 1001..=2000 {
            record(&mut b, v);
        }
        let mut m = decode(&encode(&a)).unwrap();
        merge(&mut m, &decode(&encode(&b)).unwrap()).unwrap();
        assert_eq!(m.len(), 2000);
        assert_eq!(m.min(), 1);
        assert!(m.max() >= 1999);
        let p = summarize(&m);
        assert!((p.p50_ms - 1.0).abs() < 0.01, "{p:?}");
    }

    #[test]
    fn clamps_out_of_range_values() {
        let mut h = new_hist();
        record(&mut h, 0);
        record(&mut h, u64::MAX);
        assert_eq!(h.len(), 2);
        assert!(h.max() >= MAX_MICROS);
    }

    #[test]
    fn recorder_take_drains_all_shards() {
        let r = Recorder::new(4);
        for i in 0..100 {
            r.record(i, 50);
        }
        assert_eq!(r.take().len(), 100);
        assert_eq!(r.take().len(), 0);
    }

    #[test]
    fn summary_of_empty_is_zero() {
        assert_eq!(summarize(&new_hist()), Percentiles::default());
    }
}
