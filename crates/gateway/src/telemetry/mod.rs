//! Logs (`tracing`), metrics (`metrics` with the Prometheus exporter) and traces of messages
//! (OpenTelemetry, [`trace`]).

pub(crate) mod metrics;
pub(crate) mod process;
pub(crate) mod trace;

use tracing_subscriber::EnvFilter;

use crate::config::{Config, LogFormat};

/// Installs the global `tracing` subscriber: `RUST_LOG` if set, else `config.log_filter`;
/// text or JSON lines on stderr. Call once, from `main`.
pub fn init_logging(config: &Config) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&config.log_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
