//! Logs (`tracing`), metrics (`metrics` with the Prometheus exporter) and traces of messages
//! (OpenTelemetry, [`trace`]).

pub(crate) mod metrics;
pub(crate) mod process;
pub(crate) mod trace;

use metrics_exporter_prometheus::PrometheusHandle;
use tracing_subscriber::EnvFilter;

use crate::config::{Config, LogFormat};

/// A node's telemetry, built once beside its state: the metrics recorder's handle (what
/// `/metrics` renders) and the tracer messages are traced with (off unless configured).
#[derive(Clone, Debug)]
pub(crate) struct Telemetry {
    /// What `/metrics` renders.
    pub(crate) metrics: PrometheusHandle,
    /// The tracer of every publish and of every record read from a log.
    pub(crate) tracing: trace::Tracing,
}

impl Telemetry {
    /// The recorder this thread records into ([`metrics::current`]) and tracing as
    /// `config.telemetry` asks ([`trace::Tracing::start`]).
    pub(crate) fn start(config: &Config) -> anyhow::Result<Self> {
        Ok(Self {
            metrics: metrics::current(),
            tracing: trace::Tracing::start(config)?,
        })
    }

    /// `metrics`, without tracing.
    pub(crate) fn untraced(metrics: PrometheusHandle) -> Self {
        Self {
            metrics,
            tracing: trace::Tracing::off(),
        }
    }
}

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
