//! Traces of messages (OpenTelemetry), exported over OTLP: a publish, its append to the log,
//! and each node's ingest and fan-out of it, joined into one trace by the W3C trace context
//! that travels with the message (docs/operations.md, "Traces").
//!
//! Off unless `telemetry.otlp_endpoint` is set: [`Tracing`] is then `None` inside, and every
//! call on it returns at its first instruction. On, a message is traced only when its publish
//! was sampled (a sampled `traceparent`, or `trace_sample_ratio`); an untraced message costs
//! one look at an `Option` per step. One span per node per step, never one per delivery.
//!
//! Each gateway has a tracer provider of its own (several run in one test process), made by
//! [`Tracing::start`]: the SDK's batch thread collects its spans, and each export runs on the
//! gateway's runtime.

mod context;
mod export;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use herald_core::{Cursor, Topic, TopicName};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt as _, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::{Context, KeyValue, StringValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider, SpanProcessor,
};

pub(crate) use context::Carried;

use crate::config::{Config, TelemetryConfig};

/// A publish, on the node that took it.
pub(crate) const PUBLISH: &str = "herald.publish";
/// The publish's append to the log that carries its topic (Redis, Kafka).
pub(crate) const APPEND: &str = "herald.append";
/// A node's ingest of the message from the log.
pub(crate) const INGEST: &str = "herald.ingest";
/// A node's fan-out of the message to its subscribers.
pub(crate) const FANOUT: &str = "herald.fanout";

/// How often the batch exporter sends what it holds.
const EXPORT_EVERY: Duration = Duration::from_secs(1);

/// A gateway's tracing: off (nothing is made), or its tracer.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tracing(Option<Arc<Inner>>);

#[derive(Debug)]
struct Inner {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    node: Arc<str>,
    /// Whether a publish without a sampled context may start a trace (ratio above 0).
    roots: bool,
    /// Whether [`Tracing::shutdown`] has run.
    shut: AtomicBool,
}

/// A recording span of a traced message; ends when dropped.
#[derive(Debug)]
pub(crate) struct Traced {
    span: opentelemetry_sdk::trace::Span,
    tracing: Arc<Inner>,
}

/// A fan-out being traced: the subscribers as it began.
#[derive(Debug)]
pub(crate) struct FanOut {
    span: Traced,
    direct: usize,
    woken: usize,
}

impl Tracing {
    /// No tracing.
    pub(crate) fn off() -> Self {
        Self(None)
    }

    /// Tracing as `config.telemetry` asks: off without an endpoint, else spans batched to
    /// the OTLP endpoint, the exports running on the current runtime.
    pub(crate) fn start(config: &Config) -> anyhow::Result<Self> {
        if !config.telemetry.tracing() {
            return Ok(Self::off());
        }
        let exporter = export::otlp(&config.telemetry)?;
        let batch = BatchConfigBuilder::default()
            .with_scheduled_delay(EXPORT_EVERY)
            .build();
        let processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(batch)
            .build();
        crate::telemetry::metrics::trace_export_errors_shown();
        tracing::info!(
            endpoint = config.telemetry.otlp_endpoint.as_deref().unwrap_or_default(),
            protocol = ?config.telemetry.otlp_protocol,
            sample_ratio = config.telemetry.trace_sample_ratio,
            "tracing on"
        );
        Ok(Self::with_processor(
            processor,
            &config.telemetry,
            &config.cluster.node_id,
        ))
    }

    /// Tracing into `processor`, for `node`.
    fn with_processor(
        processor: impl SpanProcessor + 'static,
        config: &TelemetryConfig,
        node: &str,
    ) -> Self {
        let ratio = config.trace_sample_ratio;
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .with_attribute(KeyValue::new("service.instance.id", node.to_string()))
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                ratio,
            ))))
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("herald");
        Self(Some(Arc::new(Inner {
            provider,
            tracer,
            node: node.into(),
            roots: ratio > 0.0,
            shut: AtomicBool::new(false),
        })))
    }

    /// Whether tracing is on (a record's trace context is worth reading).
    pub(crate) fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// The span of a publish to `topic` of a `bytes`-long payload from `source` (`http`,
    /// `ws`), child of the context the publisher `carried`; `None` unless it is sampled.
    pub(crate) fn publish(
        &self,
        carried: Carried<'_>,
        source: &'static str,
        topic: &TopicName,
        bytes: usize,
    ) -> Option<Traced> {
        let inner = self.0.as_ref()?;
        let parent = carried.span_context();
        if parent.is_none() && !inner.roots {
            return None;
        }
        let attributes = vec![
            KeyValue::new("messaging.system", "herald"),
            KeyValue::new("messaging.operation.type", "send"),
            KeyValue::new("messaging.destination.name", topic.to_string()),
            KeyValue::new("messaging.message.body.size", bytes as i64),
            KeyValue::new("herald.source", source),
            inner.node(),
        ];
        inner.start(PUBLISH, SpanKind::Producer, parent, attributes)
    }

    /// The span of this node's ingest of the message at `position` in `topic`, read from
    /// `log` (`redis`, `kafka`) `lag_ms` after it was written, child of the context its
    /// record `carried`; `None` unless that context is sampled.
    pub(crate) fn ingest(
        &self,
        carried: Carried<'_>,
        log: &'static str,
        topic: &TopicName,
        position: Cursor,
        lag_ms: u64,
    ) -> Option<Traced> {
        let inner = self.0.as_ref()?;
        let parent = carried.span_context().filter(SpanContext::is_sampled)?;
        let attributes = vec![
            KeyValue::new("messaging.system", "herald"),
            KeyValue::new("messaging.operation.type", "receive"),
            KeyValue::new("messaging.destination.name", topic.to_string()),
            KeyValue::new("messaging.message.id", position.to_string()),
            KeyValue::new("herald.log", log),
            KeyValue::new("herald.lag_ms", lag_ms as i64),
            inner.node(),
        ];
        inner.start(INGEST, SpanKind::Consumer, Some(parent), attributes)
    }

    /// Exports what is left and stops the exporter (at most a few seconds; the drain's end).
    pub(crate) async fn shutdown(&self) {
        let Some(inner) = &self.0 else { return };
        inner.shut.store(true, Ordering::Relaxed);
        let provider = inner.provider.clone();
        // The processor's shutdown blocks until its last export (on this runtime) is done.
        let done = tokio::task::spawn_blocking(move || {
            provider.shutdown_with_timeout(Duration::from_secs(3))
        });
        let _ = tokio::time::timeout(Duration::from_secs(5), done).await;
    }
}

impl Drop for Inner {
    /// A node dropped without its drain (a test that failed, an embedder's runtime shut down):
    /// the provider's own shutdown waits for the batch task's answer, which must not block a
    /// thread that may be the one dropping that task; a thread of its own waits instead.
    fn drop(&mut self) {
        if self.shut.load(Ordering::Relaxed) {
            return;
        }
        let provider = self.provider.clone();
        let _ = std::thread::Builder::new()
            .name("herald-trace-stop".into())
            .spawn(move || provider.shutdown_with_timeout(Duration::from_secs(3)));
    }
}

impl Inner {
    fn node(&self) -> KeyValue {
        KeyValue::new(
            "herald.node",
            Value::String(StringValue::from(self.node.clone())),
        )
    }

    /// Starts a span under `parent` (none: a root); `None` when the sampler says no.
    fn start(
        self: &Arc<Self>,
        name: &'static str,
        kind: SpanKind,
        parent: Option<SpanContext>,
        attributes: Vec<KeyValue>,
    ) -> Option<Traced> {
        let parent = match parent {
            Some(context) => Context::new().with_remote_span_context(context),
            None => Context::new(),
        };
        let span = (self.tracer.span_builder(name))
            .with_kind(kind)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        span.is_recording().then(|| Traced {
            span,
            tracing: self.clone(),
        })
    }
}

impl Traced {
    /// A span under this one (sampled as this one is, so `None` only if the sampler was
    /// replaced).
    pub(crate) fn child(
        &self,
        name: &'static str,
        kind: SpanKind,
        mut attributes: Vec<KeyValue>,
    ) -> Option<Traced> {
        attributes.push(self.tracing.node());
        let parent = Some(self.span.span_context().clone());
        self.tracing.start(name, kind, parent, attributes)
    }

    /// The `traceparent` that makes a record's readers continue this span's trace.
    pub(crate) fn traceparent(&self) -> String {
        context::traceparent(self.span.span_context())
    }

    /// The `tracestate` that goes with [`Self::traceparent`], when it has entries.
    pub(crate) fn tracestate(&self) -> Option<String> {
        context::tracestate(self.span.span_context())
    }

    /// Records the id the message was given.
    pub(crate) fn set_id(&mut self, id: Cursor) {
        (self.span).set_attribute(KeyValue::new("messaging.message.id", id.to_string()));
    }

    /// Marks an ingest whose position was delivered already (a replay): nothing fanned out.
    pub(crate) fn duplicate(&mut self) {
        (self.span).set_attribute(KeyValue::new("herald.duplicate", true));
    }

    /// Marks the step failed, with why.
    pub(crate) fn fail(&mut self, reason: impl std::fmt::Display) {
        self.span.set_status(Status::error(reason.to_string()));
    }

    /// A `tracing` span whose log lines carry this trace's id (`trace_id=...`). At the
    /// error level, so that it is on whenever any log line is (a span below the filter's
    /// level would leave a warning without its trace id).
    pub(crate) fn log_span(&self) -> tracing::Span {
        let trace_id = self.span.span_context().trace_id();
        tracing::error_span!("traced", trace_id = %trace_id)
    }

    /// Starts the span of this node's fan-out of the message to `topic`'s subscribers.
    pub(crate) fn fan_out(&self, topic: &Topic) -> Option<FanOut> {
        let span = self.child(FANOUT, SpanKind::Internal, Vec::new())?;
        let (direct, woken) = topic.subscriber_split();
        Some(FanOut {
            span,
            direct,
            woken,
        })
    }
}

impl FanOut {
    /// Ends the fan-out span with the subscribers it reached: written at once by the fan-out
    /// (direct), woken to write the message themselves, and parked during it (direct
    /// subscribers whose socket was full: they catch up on their own task).
    pub(crate) fn end(mut self, topic: &Topic) {
        let (direct_after, _) = topic.subscriber_split();
        let span = &mut self.span.span;
        span.set_attributes([
            KeyValue::new("herald.subscribers", (self.direct + self.woken) as i64),
            KeyValue::new("herald.subscribers.direct", self.direct as i64),
            KeyValue::new("herald.subscribers.woken", self.woken as i64),
            KeyValue::new(
                "herald.subscribers.parked",
                self.direct.saturating_sub(direct_after) as i64,
            ),
        ]);
    }
}

#[cfg(test)]
mod tests;
