//! Publish cost with prefix patterns held on the node (`orders.*` subscriptions): the
//! pattern index is looked up once per separator of the topic's name, so the cost should
//! not grow with the number of patterns, only with the name's depth and with the patterns
//! that match.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use herald_benches::small_payload;
use herald_core::{Registry, RegistryConfig, Topic, TopicConfig, TopicName};

/// A registry holding `patterns` distinct patterns that do not match the benchmark's
/// topics (`p<i>.x.*`), plus `orders.*` when `matching`; returns the receivers that keep
/// them held.
fn registry_with(patterns: usize, matching: bool) -> (Registry, Vec<impl Sized>) {
    let registry = Registry::new(RegistryConfig {
        max_patterns: patterns + 1,
        topic: TopicConfig {
            // A never-drained pattern channel overwrites its oldest slot: 16 keeps the
            // 100,000 channels of the largest case at ~64 MB.
            channel_capacity: 16,
            history_len: 64,
            history_ttl: Duration::from_secs(60),
            ..TopicConfig::default()
        },
        ..RegistryConfig::default()
    });
    let mut held: Vec<_> = (0..patterns)
        .map(|i| {
            registry
                .patterns()
                .subscribe(&format!("p{i}.x."))
                .expect("room")
        })
        .collect();
    if matching {
        held.push(registry.patterns().subscribe("orders.").expect("room"));
    }
    (registry, held)
}

fn topic(registry: &Registry, name: &str) -> Arc<Topic> {
    registry
        .get_or_create(&TopicName::new(name).expect("valid"))
        .expect("room")
}

fn wildcard(c: &mut Criterion) {
    let mut group = c.benchmark_group("wildcard");
    group.throughput(Throughput::Elements(1));
    for patterns in [0, 10, 1_000, 100_000] {
        for matching in [false, true] {
            if patterns == 0 && matching {
                continue;
            }
            let (registry, _held) = registry_with(patterns, matching);
            let topic = topic(&registry, "orders.eu.paris");
            let name = if matching { "one_match" } else { "no_match" };
            group.bench_with_input(
                BenchmarkId::new(format!("publish/{name}"), patterns),
                &topic,
                |b, topic| b.iter(|| black_box(topic.publish(None, small_payload()))),
            );
        }
    }
    // The index alone: what a publish adds for the patterns (no topic, history or channel).
    for patterns in [0, 10, 1_000, 100_000] {
        let (registry, _held) = registry_with(patterns, true);
        let message = topic(&registry, "orders.eu.paris").publish(None, small_payload());
        group.bench_with_input(
            BenchmarkId::new("index/one_match", patterns),
            &message,
            |b, message| b.iter(|| registry.patterns().deliver(black_box(message))),
        );
    }
    // Depth: one lookup per separator (1000 non-matching patterns held).
    let (registry, _held) = registry_with(1_000, false);
    for name in ["a.b", "a.b.c.d.e", "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p"] {
        let depth = name.matches('.').count();
        let topic = topic(&registry, name);
        group.bench_with_input(
            BenchmarkId::new("publish/depth", depth),
            &topic,
            |b, topic| b.iter(|| black_box(topic.publish(None, small_payload()))),
        );
    }
    group.finish();
}

criterion_group!(benches, wildcard);
criterion_main!(benches);
