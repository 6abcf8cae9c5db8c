//! Traces of messages (OpenTelemetry) checked in a real Jaeger's query API (`deploy/test.sh`
//! starts one): a traced message is one trace holding its publish, its append and every
//! node's ingest and fan-out; an unsampled one is no trace; a collector that is down costs
//! only a counted export error.

use std::time::Duration;

use herald_gateway::Config;
use herald_gateway::config::OtlpProtocol;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use serde_json::{Value, json};

use crate::common::*;
use crate::kafka::{create_topic, kafka_config, producer, unique};

/// Long enough for both nodes' batch exporters (one second) and Jaeger's own batching.
const TRACE_WAIT: Duration = Duration::from_secs(30);

fn jaeger_query() -> String {
    std::env::var("HERALD_TEST_JAEGER_QUERY").unwrap()
}

/// `config` exporting every traced message to the test Jaeger as `service`, over `protocol`;
/// Herald starts no trace of its own (ratio 0): only publishes with a sampled `traceparent`.
fn traced(mut config: Config, service: &str, protocol: OtlpProtocol) -> Config {
    let var = match protocol {
        OtlpProtocol::Grpc => "HERALD_TEST_JAEGER_OTLP",
        OtlpProtocol::Http => "HERALD_TEST_JAEGER_OTLP_HTTP",
    };
    config.telemetry.otlp_endpoint = Some(std::env::var(var).unwrap());
    config.telemetry.otlp_protocol = protocol;
    config.telemetry.trace_sample_ratio = 0.0;
    config.telemetry.service_name = service.to_string();
    config
}

/// A fresh trace id and a sampled `traceparent` under it, as a caller's tracer would send.
fn new_traceparent() -> (String, String) {
    let trace_id = format!("{:032x}", rand::random::<u128>() | 1);
    let parent = format!("{:016x}", rand::random::<u64>() | 1);
    let traceparent = format!("00-{trace_id}-{parent}-01");
    (trace_id, traceparent)
}

/// One span of a trace as Jaeger's query API answers it.
#[derive(Debug)]
struct Span {
    id: String,
    name: String,
    parent: Option<String>,
    tags: Value,
}

impl Span {
    fn tag(&self, key: &str) -> &Value {
        (self.tags.as_array().unwrap().iter())
            .find(|t| t["key"] == key)
            .map(|t| &t["value"])
            .unwrap_or_else(|| panic!("{} has no tag {key}: {}", self.name, self.tags))
    }

    fn node(&self) -> &str {
        self.tag("herald.node").as_str().unwrap()
    }
}

/// The spans Jaeger holds for `trace_id` (none when it knows no such trace).
async fn trace_spans(trace_id: &str) -> Vec<Span> {
    let url = format!("{}/api/traces/{trace_id}", jaeger_query());
    let answer: Value = get(url, &[]).await.json().await.unwrap();
    let Some(trace) = answer["data"].as_array().and_then(|d| d.first()) else {
        return Vec::new();
    };
    (trace["spans"].as_array().unwrap().iter())
        .map(|s| Span {
            id: s["spanID"].as_str().unwrap().to_string(),
            name: s["operationName"].as_str().unwrap().to_string(),
            parent: (s["references"].as_array().unwrap().iter())
                .find(|r| r["refType"] == "CHILD_OF")
                .map(|r| r["spanID"].as_str().unwrap().to_string()),
            tags: s["tags"].clone(),
        })
        .collect()
}

/// Waits until Jaeger holds at least `n` spans of `trace_id`.
async fn spans_of(trace_id: &str, n: usize) -> Vec<Span> {
    eventually_some(
        TRACE_WAIT,
        &format!("{n} spans of trace {trace_id}"),
        || async {
            let spans = trace_spans(trace_id).await;
            (spans.len() >= n).then_some(spans)
        },
    )
    .await
}

/// The one span named `name` on `node` (`None`: the only one of that name).
fn one<'a>(spans: &'a [Span], name: &str, node: Option<&str>) -> &'a Span {
    let found: Vec<&Span> = (spans.iter())
        .filter(|s| s.name == name && node.is_none_or(|n| s.node() == n))
        .collect();
    assert_eq!(found.len(), 1, "one {name} on {node:?}: {spans:#?}");
    found[0]
}

/// Each node's ingest and fan-out: the ingest under `parent`, the fan-out under it, with
/// `subscribers[i]` subscribers reached on `nodes[i]`.
fn assert_ingested(spans: &[Span], parent: &str, nodes: &[&str], subscribers: &[i64], log: &str) {
    for (node, &expected) in nodes.iter().zip(subscribers) {
        let ingest = one(spans, "herald.ingest", Some(node));
        assert_eq!(ingest.parent.as_deref(), Some(parent), "{ingest:?}");
        assert_eq!(ingest.tag("herald.log"), log, "{ingest:?}");
        assert!(ingest.tag("herald.lag_ms").as_i64().is_some());
        let fan_out = one(spans, "herald.fanout", Some(node));
        assert_eq!(fan_out.parent.as_deref(), Some(ingest.id.as_str()));
        assert_eq!(fan_out.tag("herald.subscribers"), expected, "{fan_out:?}");
        let direct = fan_out.tag("herald.subscribers.direct").as_i64().unwrap();
        let woken = fan_out.tag("herald.subscribers.woken").as_i64().unwrap();
        assert_eq!(direct + woken, expected, "{fan_out:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traced_publish_is_one_trace_across_a_redis_cluster() {
    skip_without!("HERALD_TEST_REDIS_URL", "HERALD_TEST_JAEGER_QUERY");
    let service = unique("herald-redis");
    let p = unique("test-traces");
    let (a_id, b_id) = (unique("a"), unique("b"));
    let a = spawn_ready(traced(
        cluster_config(&p, &a_id),
        &service,
        OtlpProtocol::Grpc,
    ))
    .await;
    // Dev mode: its WebSocket clients may publish.
    let mut b_config = traced(cluster_config(&p, &b_id), &service, OtlpProtocol::Grpc);
    b_config.dev = true;
    let b = spawn_ready(b_config).await;
    // One subscriber on a, two on b.
    let mut sse_a = SseClient::connect(&a, "topic=traced", None).await;
    sse_a.next_block().await.unwrap();
    let mut sse_b = SseClient::connect(&b, "topic=traced", None).await;
    sse_b.next_block().await.unwrap();
    let mut ws_b = ws_connect(&b).await;
    ws_subscribe(&mut ws_b, &["traced"]).await;

    let (trace_id, traceparent) = new_traceparent();
    let url = format!("http://{}/v1/publish", a.admin_addr);
    let body = json!({"topic": "traced", "data": {"n": 1}});
    let answer = post_json(url, &[("traceparent", &traceparent)], &body).await;
    assert_eq!(answer.status(), 200);
    let id = answer.json::<Value>().await.unwrap()["id"].clone();
    assert_eq!(
        sse_a.next_event().await.unwrap().data.as_deref(),
        Some(r#"{"n":1}"#)
    );
    assert_eq!(
        sse_b.next_event().await.unwrap().data.as_deref(),
        Some(r#"{"n":1}"#)
    );
    assert_eq!(ws_next(&mut ws_b).await["id"], id);

    let spans = spans_of(&trace_id, 6).await;
    let publish = one(&spans, "herald.publish", None);
    assert_eq!(publish.parent.as_deref(), Some(&traceparent[36..52]));
    assert_eq!(publish.node(), a_id);
    assert_eq!(publish.tag("herald.source"), "http");
    assert_eq!(publish.tag("messaging.destination.name"), "traced");
    assert_eq!(publish.tag("messaging.message.id"), &id);
    assert_eq!(publish.tag("messaging.message.body.size"), 7);
    let append = one(&spans, "herald.append", None);
    assert_eq!(append.parent.as_deref(), Some(publish.id.as_str()));
    assert_eq!(append.tag("herald.log"), "redis");
    assert_ingested(&spans, &append.id, &[&a_id, &b_id], &[1, 2], "redis");
    assert_eq!(spans.len(), 6, "one span per node per step: {spans:#?}");

    // A WebSocket publish on b: the frame's traceparent field.
    let (trace_id, traceparent) = new_traceparent();
    let frame =
        json!({"type": "publish", "topic": "traced", "data": 2, "traceparent": traceparent});
    let mut publisher = ws_connect(&b).await;
    ws_send(&mut publisher, frame).await;
    assert_eq!(ws_next(&mut publisher).await["type"], "published");
    let spans = spans_of(&trace_id, 6).await;
    let publish = one(&spans, "herald.publish", None);
    assert_eq!(
        (publish.node(), publish.tag("herald.source").as_str()),
        (b_id.as_str(), Some("ws"))
    );
    let append = one(&spans, "herald.append", None);
    assert_ingested(&spans, &append.id, &[&a_id, &b_id], &[1, 2], "redis");
    for node in [a, b] {
        node.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_record_with_a_traceparent_header_is_one_trace_across_nodes() {
    skip_without!("HERALD_TEST_KAFKA_BROKERS", "HERALD_TEST_JAEGER_QUERY");
    let service = unique("herald-kafka");
    let kt = unique("traces");
    create_topic(&kt).await;
    let (a_id, b_id) = (unique("a"), unique("b"));
    let a = spawn_ready(traced(
        kafka_config(&kt, &a_id),
        &service,
        OtlpProtocol::Http,
    ))
    .await;
    let b = spawn_ready(traced(
        kafka_config(&kt, &b_id),
        &service,
        OtlpProtocol::Http,
    ))
    .await;
    let mut sse_a = SseClient::connect(&a, "topic=orders", None).await;
    sse_a.next_block().await.unwrap();
    let mut ws_b = ws_connect(&b).await;
    ws_subscribe(&mut ws_b, &["orders"]).await;

    // Another service's record, its trace context in the W3C header.
    let (trace_id, traceparent) = new_traceparent();
    let headers = OwnedHeaders::new()
        .insert(Header {
            key: "herald-topic",
            value: Some("orders"),
        })
        .insert(Header {
            key: "traceparent",
            value: Some(traceparent.as_str()),
        });
    let record = FutureRecord::to(&kt)
        .key("orders")
        .payload("{\"order\":1}")
        .headers(headers);
    (producer().send(record, Duration::from_secs(10)).await)
        .map_err(|(e, _)| e)
        .unwrap();
    assert_eq!(
        sse_a.next_event().await.unwrap().data.as_deref(),
        Some(r#"{"order":1}"#)
    );
    assert_eq!(ws_next(&mut ws_b).await["data"], json!({"order": 1}));
    let spans = spans_of(&trace_id, 4).await;
    assert_ingested(
        &spans,
        &traceparent[36..52],
        &[&a_id, &b_id],
        &[1, 1],
        "kafka",
    );
    assert_eq!(spans.len(), 4, "{spans:#?}");

    // Herald's own publish through Kafka: the record carries the append's context.
    let (trace_id, traceparent) = new_traceparent();
    let url = format!("http://{}/v1/publish", b.admin_addr);
    let body = json!({"topic": "orders", "data": 2});
    assert_eq!(
        post_json(url, &[("traceparent", &traceparent)], &body)
            .await
            .status(),
        200
    );
    let spans = spans_of(&trace_id, 6).await;
    let append = one(&spans, "herald.append", Some(&b_id));
    assert_eq!(append.tag("herald.log"), "kafka");
    assert_ingested(&spans, &append.id, &[&a_id, &b_id], &[1, 1], "kafka");
    for node in [a, b] {
        node.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_ratio_0_an_unsampled_publish_gives_no_trace() {
    skip_without!("HERALD_TEST_JAEGER_QUERY");
    let service = unique("herald-unsampled");
    let gw = spawn_ready(traced(test_config(), &service, OtlpProtocol::Grpc)).await;
    let mut sse = SseClient::connect(&gw, "topic=quiet", None).await;
    sse.next_block().await.unwrap();
    let url = format!("http://{}/v1/publish", gw.admin_addr);
    let body = json!({"topic": "quiet", "data": 0});
    // Without a context, and with one that is not sampled.
    let (unsampled_id, traceparent) = new_traceparent();
    let unsampled = traceparent.replace("-01", "-00");
    for headers in [vec![], vec![("traceparent", unsampled.as_str())]] {
        assert_eq!(post_json(&url, &headers, &body).await.status(), 200);
    }
    // Then a sampled one: once its trace is in Jaeger, whatever came before would be too.
    let (sampled_id, traceparent) = new_traceparent();
    let headers = [("traceparent", traceparent.as_str())];
    assert_eq!(post_json(&url, &headers, &body).await.status(), 200);
    for _ in 0..3 {
        assert_eq!(sse.next_event().await.unwrap().data.as_deref(), Some("0"));
    }
    let spans = spans_of(&sampled_id, 2).await;
    one(&spans, "herald.publish", None);
    assert_eq!(
        one(&spans, "herald.fanout", None).tag("herald.subscribers"),
        1
    );
    assert!(trace_spans(&unsampled_id).await.is_empty());
    let search = format!("{}/api/traces?service={service}&limit=100", jaeger_query());
    let found = get_json(search).await;
    let traces = found["data"].as_array().unwrap();
    assert_eq!(traces.len(), 1, "only the sampled publish: {found}");
    assert_eq!(traces[0]["traceID"], sampled_id.as_str());
    gw.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_costs_only_a_counted_export_error() {
    // No Jaeger needed: nothing listens where the spans go.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let mut config = test_config();
    config.telemetry.otlp_endpoint = Some(endpoint);
    config.telemetry.trace_sample_ratio = 1.0;
    let gw = spawn_ready(config).await;
    let mut sse = SseClient::connect(&gw, "topic=t", None).await;
    sse.next_block().await.unwrap();
    assert_eq!(metric(&gw, "herald_trace_export_errors_total").await, 0.0);
    let started = std::time::Instant::now();
    for i in 0..20 {
        publish(&gw, "t", json!(i)).await;
        let event = sse.next_event().await.unwrap();
        assert_eq!(event.data, Some(i.to_string()));
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "publishing waited for the exporter: {:?}",
        started.elapsed()
    );
    eventually(TRACE_WAIT, || async {
        metric(&gw, "herald_trace_export_errors_total").await >= 1.0
    })
    .await;
    assert_eq!(
        metric(&gw, "herald_messages_published_total{source=\"http\"}").await,
        20.0
    );
    gw.stop().await.unwrap();
}
