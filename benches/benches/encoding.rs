//! Encoding one message into its SSE (text and JSON form) and WebSocket frames (done once per
//! message and form, whatever the number of subscribers).

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use herald_benches::small_payload;
use herald_core::{Cursor, EventName, Message, Payload, TopicName};

fn message(data: Payload) -> Message {
    Message::new(
        TopicName::new("orders.eu").expect("valid"),
        Cursor::new(0x9f86_d081_884c_7d65, 123_456),
        Some(EventName::new("order.updated").expect("valid")),
        data,
    )
}

fn encoding(c: &mut Criterion) {
    let mut group = c.benchmark_group("encoding");
    group.throughput(Throughput::Elements(1));
    let text = Payload::from_value(&serde_json::json!("line one\nline two\nline three"));
    for (name, payload) in [("object", small_payload()), ("multiline_string", text)] {
        group.bench_function(format!("sse/{name}"), |b| {
            b.iter_batched(
                || message(payload.clone()),
                |m| black_box(m.sse_frame().len()),
                BatchSize::SmallInput,
            )
        });
        group.bench_function(format!("ws/{name}"), |b| {
            b.iter_batched(
                || message(payload.clone()),
                |m| black_box(m.ws_frame().len()),
                BatchSize::SmallInput,
            )
        });
        // The `herald.msgpack` frame of a JSON payload: converted, once per message.
        group.bench_function(format!("ws_msgpack/{name}"), |b| {
            b.iter_batched(
                || message(payload.clone()),
                |m| black_box(m.ws_msgpack_frame().len()),
                BatchSize::SmallInput,
            )
        });
        // The JSON form of SSE (`format=json`): the WebSocket frame, then the SSE event
        // around it.
        group.bench_function(format!("sse_json/{name}"), |b| {
            b.iter_batched(
                || message(payload.clone()),
                |m| black_box(m.sse_json_frame().len()),
                BatchSize::SmallInput,
            )
        });
    }
    // permessage-deflate: the WebSocket frame compressed (once per message, shared by every
    // compressed subscriber), for a ~2 KB JSON array of records; and the inflate of a client's
    // compressed message of that size.
    let records: Vec<serde_json::Value> = (0..40)
        .map(|i| serde_json::json!({"id": i, "name": "sensor", "state": "ok", "value": i * 7}))
        .collect();
    let records = Payload::from_value(&serde_json::json!(records));
    group.bench_function("ws_deflate/records_2k", |b| {
        b.iter_batched(
            || message(records.clone()),
            |m| black_box(m.ws_deflate_wire_frame().map(|f| f.len())),
            BatchSize::SmallInput,
        )
    });
    let packed = herald_core::deflate::compress(records.as_bytes()).expect("compresses");
    group.bench_function("ws_inflate/records_2k", |b| {
        b.iter(|| black_box(herald_core::deflate::inflate(&packed, 64 * 1024).map(|v| v.len())))
    });
    group.bench_function("payload_from_json", |b| {
        let raw = br#"{ "order": 123456, "status": "shipped", "carrier": "dhl", "eta": "2026-11-23T10:00:00Z" }"#;
        b.iter(|| black_box(Payload::from_json(raw).expect("valid JSON")))
    });
    // A MessagePack publish: checked and given its JSON form, once per message.
    let packed = herald_core::msgpack::from_json(&serde_json::json!(
        {"order": 123456, "status": "shipped", "carrier": "dhl", "eta": "2026-11-23T10:00:00Z"}
    ));
    group.bench_function("payload_from_msgpack", |b| {
        b.iter(|| black_box(Payload::from_msgpack(&packed).expect("valid MessagePack")))
    });
    // A client's `ping` with data as W4 sends it (256 bytes): parsed, its data checked for
    // depth and kept as written, once per frame a WebSocket client sends.
    let ping = format!(
        r#"{{"type":"ping","data":{{"ts":1764151200000000,"seq":42,"pad":"{}"}}}}"#,
        "x".repeat(192)
    );
    assert_eq!(ping.len(), 256);
    group.bench_function("command/ping_256", |b| {
        b.iter(|| black_box(herald_core::protocol::parse(black_box(&ping)).is_ok()))
    });
    group.finish();
}

criterion_group!(benches, encoding);
criterion_main!(benches);
