//! The process metrics a dashboard expects (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_open_fds`, `process_max_fds`,
//! `process_start_time_seconds`, `process_threads`, ...), from the `metrics-process`
//! collector, refreshed on every `/metrics` scrape.

use std::sync::OnceLock;

use metrics_process::Collector;

fn collector() -> &'static Collector {
    static COLLECTOR: OnceLock<Collector> = OnceLock::new();
    COLLECTOR.get_or_init(Collector::default)
}

/// Describes the process metrics (once, with the recorder).
pub(crate) fn describe() {
    collector().describe();
}

/// Reads the process's figures into the metrics (on each scrape).
pub(crate) fn collect() {
    collector().collect();
}
