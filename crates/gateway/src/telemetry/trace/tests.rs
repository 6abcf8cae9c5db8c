use std::sync::{Arc, Mutex};

use herald_core::{Payload, TopicConfig};
use opentelemetry::Value;
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SimpleSpanProcessor, SpanData, SpanExporter};

use super::*;

const SAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const UNSAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";

/// Every span exported, as it ends.
#[derive(Clone, Debug, Default)]
struct Collected(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Collected {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

impl Collected {
    fn named(&self, name: &str) -> SpanData {
        let spans = self.0.lock().unwrap();
        let mut named = spans.iter().filter(|s| s.name == name);
        let span = named.next().unwrap_or_else(|| panic!("no {name} span"));
        assert!(named.next().is_none(), "one {name} span");
        span.clone()
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

fn attribute(span: &SpanData, key: &str) -> Value {
    (span.attributes.iter())
        .find(|kv| kv.key.as_str() == key)
        .unwrap_or_else(|| panic!("{} has no {key}", span.name))
        .value
        .clone()
}

fn tracing(ratio: f64) -> (Tracing, Collected) {
    let spans = Collected::default();
    let config = TelemetryConfig {
        otlp_endpoint: Some("http://collector:4317".into()),
        trace_sample_ratio: ratio,
        ..TelemetryConfig::default()
    };
    let processor = SimpleSpanProcessor::new(spans.clone());
    (Tracing::with_processor(processor, &config, "node-a"), spans)
}

fn carried(traceparent: &str) -> Carried<'_> {
    Carried {
        traceparent: Some(traceparent),
        tracestate: None,
    }
}

fn topic() -> (TopicName, Topic) {
    let name = TopicName::new("orders").unwrap();
    (
        name.clone(),
        Topic::with_epoch(name, &TopicConfig::default(), 7),
    )
}

#[test]
fn a_sampled_parent_is_followed_through_publish_append_ingest_and_fan_out() {
    // Ratio 0: Herald starts no trace itself, and still follows a sampled parent.
    let (tracing, spans) = tracing(0.0);
    let (name, topic) = topic();
    let _subscriber = topic.subscribe(None);
    let mut publish = (tracing.publish(carried(SAMPLED), "http", &name, 12)).expect("sampled");
    let mut append = (publish.child(APPEND, SpanKind::Producer, Vec::new())).unwrap();
    // What the log record carries, read back by a node's ingest.
    let traceparent = append.traceparent();
    let position = Cursor::new(7, 1);
    let ingest = tracing.ingest(carried(&traceparent), "redis", &name, position, 3);
    let ingest = ingest.expect("the record's context is sampled");
    let fan_out = ingest.fan_out(&topic).unwrap();
    topic.ingest(position, None, Payload::from_value(&serde_json::json!(1)));
    fan_out.end(&topic);
    drop(ingest);
    append.set_id(position);
    drop(append);
    publish.set_id(position);
    drop(publish);

    let trace_id = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
    let [publish, append, ingest, fan_out] =
        [PUBLISH, APPEND, INGEST, FANOUT].map(|name| spans.named(name));
    for span in [&publish, &append, &ingest, &fan_out] {
        assert_eq!(span.span_context.trace_id(), trace_id, "{}", span.name);
        assert_eq!(attribute(span, "herald.node"), Value::from("node-a"));
    }
    let parent = |span: &SpanData| span.parent_span_id;
    assert_eq!(
        parent(&publish),
        SpanId::from_hex("00f067aa0ba902b7").unwrap()
    );
    assert_eq!(parent(&append), publish.span_context.span_id());
    assert_eq!(parent(&ingest), append.span_context.span_id());
    assert_eq!(parent(&fan_out), ingest.span_context.span_id());
    assert_eq!(attribute(&publish, "herald.source"), Value::from("http"));
    assert_eq!(
        attribute(&publish, "messaging.message.body.size"),
        Value::I64(12)
    );
    assert_eq!(
        attribute(&publish, "messaging.message.id"),
        Value::from(position.to_string())
    );
    assert_eq!(attribute(&ingest, "herald.lag_ms"), Value::I64(3));
    assert_eq!(attribute(&ingest, "herald.log"), Value::from("redis"));
    assert_eq!(attribute(&fan_out, "herald.subscribers"), Value::I64(1));
    assert_eq!(
        attribute(&fan_out, "herald.subscribers.woken"),
        Value::I64(1)
    );
    assert_eq!(
        attribute(&fan_out, "herald.subscribers.direct"),
        Value::I64(0)
    );
}

/// Log lines, as the `herald` binary writes them (text), into a buffer.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_log_line_written_while_a_traced_message_is_handled_carries_its_trace_id() {
    let (tracing, _spans) = tracing(0.0);
    let (name, _) = topic();
    let publish = (tracing.publish(carried(SAMPLED), "http", &name, 1)).unwrap();
    let lines = Lines::default();
    let writer = lines.clone();
    // Only warnings shown, as with `log_filter = "warn"`.
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("warn")
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    ::tracing::subscriber::with_default(subscriber, || {
        ::tracing::warn!("before");
        let _traced = publish.log_span().entered();
        ::tracing::warn!("the log refused it");
    });
    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(!lines[0].contains("trace_id"), "{text}");
    assert!(
        lines[1].contains("traced{trace_id=4bf92f3577b34da6a3ce929d0e0e4736}"),
        "{text}"
    );
}

#[test]
fn an_unsampled_parent_is_never_traced_and_the_ratio_decides_the_rest() {
    let (_name, _) = topic();
    let name = TopicName::new("t").unwrap();
    let (always, spans) = tracing(1.0);
    assert!(always.publish(carried(UNSAMPLED), "ws", &name, 1).is_none());
    let at = Cursor::new(1, 1);
    assert!(
        always
            .ingest(carried(UNSAMPLED), "kafka", &name, at, 0)
            .is_none()
    );
    assert!(
        always
            .ingest(Carried::NONE, "kafka", &name, at, 0)
            .is_none()
    );
    let root = always
        .publish(Carried::NONE, "ws", &name, 1)
        .expect("ratio 1");
    drop(root);
    assert_eq!(spans.len(), 1, "only the root publish was recorded");

    let (never, spans) = tracing(0.0);
    assert!(never.publish(Carried::NONE, "http", &name, 1).is_none());
    assert!(
        never
            .publish(carried("garbage"), "http", &name, 1)
            .is_none()
    );
    assert_eq!(spans.len(), 0);

    let off = Tracing::off();
    assert!(!off.is_on());
    assert!(off.publish(carried(SAMPLED), "http", &name, 1).is_none());
    assert!(
        off.ingest(carried(SAMPLED), "redis", &name, at, 0)
            .is_none()
    );
}
