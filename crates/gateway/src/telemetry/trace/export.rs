//! The OTLP exporter (gRPC or HTTP), wrapped so that every failed export is counted in
//! `herald_trace_export_errors_total` and logged at most once a minute: a collector that is
//! down costs the gateway a counter and a dropped batch, never a publish. The SDK's batch
//! thread collects the spans; each export runs on the node's runtime ([`OnRuntime`]), where
//! the OTLP clients' connections live and the node's metrics are recorded.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

use crate::config::{OtlpProtocol, TelemetryConfig};
use crate::telemetry::metrics;

/// The longest one export may take, retries included.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The OTLP exporter `config` asks for (its endpoint must be set), exporting on the current
/// runtime.
pub(super) fn otlp(
    config: &TelemetryConfig,
) -> anyhow::Result<OnRuntime<Counted<opentelemetry_otlp::SpanExporter>>> {
    let endpoint = config
        .otlp_endpoint
        .as_deref()
        .context("telemetry.otlp_endpoint is not set")?;
    let exporter = match config.otlp_protocol {
        OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .with_timeout(EXPORT_TIMEOUT)
            .build(),
        OtlpProtocol::Http => {
            let client = reqwest::Client::builder()
                .timeout(EXPORT_TIMEOUT)
                .no_proxy()
                .tls_backend_preconfigured(client_tls())
                .build()
                .context("telemetry: the OTLP/HTTP client")?;
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_http_client(client)
                .with_endpoint(http_traces_url(endpoint))
                .with_timeout(EXPORT_TIMEOUT)
                .build()
        }
    };
    let exporter =
        exporter.with_context(|| format!("telemetry: the OTLP exporter for {endpoint}"))?;
    Ok(OnRuntime::new(Counted::new(exporter)))
}

/// The traces URL under a collector's base URL: `/v1/traces` added unless it is there.
fn http_traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    match base.ends_with("/v1/traces") {
        true => base.to_string(),
        false => format!("{base}/v1/traces"),
    }
}

/// TLS for an `https://` collector: the system's trust store.
fn client_tls() -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("ring supports the default protocol versions")
    .with_root_certificates(roots)
    .with_no_client_auth()
}

/// An exporter whose exports run on the runtime it was made on: the SDK's batch thread (one
/// per node, which wakes once a second or when 512 spans wait, not once per span as a task
/// reading a channel would) only waits for them.
#[derive(Debug)]
pub(super) struct OnRuntime<E> {
    inner: Arc<E>,
    runtime: tokio::runtime::Handle,
}

impl<E> OnRuntime<E> {
    /// On the current runtime (panics outside one).
    pub(super) fn new(inner: E) -> Self {
        Self {
            inner: Arc::new(inner),
            runtime: tokio::runtime::Handle::current(),
        }
    }
}

impl<E: SpanExporter + 'static> SpanExporter for OnRuntime<E> {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let inner = self.inner.clone();
        // A runtime that has shut down answers at once (the task is cancelled).
        let task = (self.runtime).spawn(async move { inner.export(batch).await });
        async move {
            task.await
                .unwrap_or_else(|e| Err(OTelSdkError::InternalFailure(e.to_string())))
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        // Set when the provider is built, before any export holds a clone.
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.set_resource(resource);
        }
    }
}

/// An exporter whose failures are counted and logged (at most once a minute).
#[derive(Debug)]
pub(super) struct Counted<E> {
    inner: E,
    started: Instant,
    /// Seconds after `started` of the last warning, plus one (0: never warned).
    warned: AtomicU64,
}

impl<E> Counted<E> {
    pub(super) fn new(inner: E) -> Self {
        Self {
            inner,
            started: Instant::now(),
            warned: AtomicU64::new(0),
        }
    }

    fn failed(&self, error: &dyn std::fmt::Display, spans: usize) {
        metrics::trace_export_error();
        let now = self.started.elapsed().as_secs() + 1;
        let last = self.warned.load(Ordering::Relaxed);
        if (last == 0 || now >= last + 60)
            && self
                .warned
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                error = %error,
                spans,
                "trace export failed; spans dropped (counted in herald_trace_export_errors_total)"
            );
        }
    }
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        if let Err(e) = &result {
            self.failed(e, spans);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_http_url_is_the_base_url_with_v1_traces() {
        for (given, url) in [
            ("http://c:4318", "http://c:4318/v1/traces"),
            ("http://c:4318/", "http://c:4318/v1/traces"),
            ("https://c/otlp", "https://c/otlp/v1/traces"),
            ("http://c:4318/v1/traces", "http://c:4318/v1/traces"),
        ] {
            assert_eq!(http_traces_url(given), url);
        }
    }
}
