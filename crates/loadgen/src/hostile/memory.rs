//! Server memory over the attack phase, from the RSS sampled on every tick.

use crate::report::model::MemoryReport;

/// Analyzes `samples` (seconds since the run began, RSS KiB) of one server for the attack
/// phase `[start, end]`, excluding `warmup` seconds from the start figure and the windows.
/// Samples of 0 (process not readable) are ignored. `None` without samples.
pub(crate) fn analyze(
    pid: u32,
    samples: &[(f64, u64)],
    start: f64,
    end: f64,
    warmup: f64,
) -> Option<MemoryReport> {
    // half a tick of tolerance: the tick sampling the end of the phase may land just after it
    let slack = 0.6;
    let phase: Vec<(f64, u64)> = samples
        .iter()
        .copied()
        .filter(|&(t, kb)| kb > 0 && t >= start - slack && t <= end + slack)
        .collect();
    let first = *phase.first()?;
    let last = *phase.last()?;
    let settled = start + warmup;
    let post: Vec<(f64, u64)> = phase
        .iter()
        .copied()
        .filter(|&(t, _)| t >= settled)
        .collect();
    let post = if post.is_empty() { phase.clone() } else { post };
    let post_start = post[0].0;
    let span = (last.0 - post_start).max(0.0);
    let window = if span >= 180.0 { 60.0 } else { span / 3.0 };
    let mean = |from: f64, to: f64| -> u64 {
        let v: Vec<u64> = post
            .iter()
            .filter(|&&(t, _)| t >= from - 1e-9 && t <= to + 1e-9)
            .map(|&(_, kb)| kb)
            .collect();
        if v.is_empty() {
            0
        } else {
            v.iter().sum::<u64>() / v.len() as u64
        }
    };
    let first_window = mean(post_start, post_start + window);
    let last_window = mean(last.0 - window, last.0);
    let per_minute = {
        // a phase overrunning its minutes by less than a second (the last tick) adds none
        let minutes = ((end - start - 1.0) / 60.0).ceil().max(1.0) as usize;
        (0..minutes)
            .map(|m| {
                let from = start + m as f64 * 60.0;
                let v: Vec<u64> = phase
                    .iter()
                    .filter(|&&(t, _)| t >= from && t < from + 60.0)
                    .map(|&(_, kb)| kb)
                    .collect();
                if v.is_empty() {
                    0
                } else {
                    v.iter().sum::<u64>() / v.len() as u64
                }
            })
            .collect()
    };
    Some(MemoryReport {
        pid,
        warmup_secs: warmup,
        rss_attack_start_kb: first.1,
        rss_start_kb: post[0].1,
        rss_peak_kb: phase.iter().map(|&(_, kb)| kb).max().unwrap_or(0),
        rss_end_kb: last.1,
        window_secs: window,
        rss_first_window_kb: first_window,
        rss_last_window_kb: last_window,
        rss_growth_kb: last_window as i64 - first_window as i64,
        rss_slope_kb_per_min: slope(&post) * 60.0,
        rss_per_minute_kb: per_minute,
        samples: phase.len(),
    })
}

/// Least-squares slope (KiB per second).
fn slope(points: &[(f64, u64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1 as f64).sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for &(t, kb) in points {
        num += (t - mx) * (kb as f64 - my);
        den += (t - mx) * (t - mx);
    }
    if den > 0.0 { num / den } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_memory_has_no_growth() {
        let s: Vec<(f64, u64)> = (0..400).map(|t| (t as f64, 50_000)).collect();
        let m = analyze(1, &s, 10.0, 310.0, 30.0).unwrap();
        assert_eq!(
            (m.rss_start_kb, m.rss_peak_kb, m.rss_end_kb),
            (50_000, 50_000, 50_000)
        );
        assert_eq!(m.window_secs, 60.0);
        assert_eq!(m.rss_growth_kb, 0);
        assert!(m.rss_slope_kb_per_min.abs() < 1e-9);
        assert_eq!(m.rss_per_minute_kb.len(), 5);
    }

    #[test]
    fn linear_growth_is_measured() {
        // 100 KiB per second from t=0; attack phase 10..310, warm-up 30 s
        let s: Vec<(f64, u64)> = (0..400).map(|t| (t as f64, 10_000 + 100 * t)).collect();
        let m = analyze(1, &s, 10.0, 310.0, 30.0).unwrap();
        assert_eq!(m.rss_attack_start_kb, 11_000);
        assert_eq!(m.rss_start_kb, 14_000);
        assert_eq!(m.rss_end_kb, 41_000);
        assert_eq!(m.rss_peak_kb, 41_000);
        // first window 40..100 (mean at 70 s), last window 250..310 (mean at 280 s)
        assert_eq!(m.rss_first_window_kb, 17_000);
        assert_eq!(m.rss_last_window_kb, 38_000);
        assert_eq!(m.rss_growth_kb, 21_000);
        assert!((m.rss_slope_kb_per_min - 6000.0).abs() < 1.0);
        assert_eq!(m.rss_per_minute_kb[0], 10_000 + 100 * 395 / 10);
    }

    #[test]
    fn short_runs_use_thirds_and_skip_zeros() {
        let s = vec![(0.0, 100), (1.0, 0), (2.0, 300), (3.0, 400), (4.0, 500)];
        let m = analyze(1, &s, 0.0, 4.0, 0.0).unwrap();
        assert_eq!(m.samples, 4);
        assert!((m.window_secs - 4.0 / 3.0).abs() < 1e-9);
        assert_eq!(m.rss_first_window_kb, 100);
        assert_eq!(m.rss_last_window_kb, 450);
        assert!(analyze(1, &[], 0.0, 1.0, 0.0).is_none());
    }
}
