//! Fan-out: one publish delivered to N subscribers, as deliveries per second.
//!
//! `raw` measures the broadcast channel alone (publish + N `try_recv`); `feed` goes through
//! the per-connection `Feed` every transport uses (dedupe by position, lag handling) and
//! takes the message's shared SSE frame, as the SSE transport does.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use herald_benches::{small_payload, topic};
use herald_core::{Feed, FeedEvent, LagPolicy};

fn fanout(c: &mut Criterion) {
    let mut group = c.benchmark_group("fanout");
    for subscribers in [1usize, 1_000, 10_000] {
        group.throughput(Throughput::Elements(subscribers as u64));

        let t = topic("bench", 16);
        let mut receivers: Vec<_> = (0..subscribers)
            .map(|_| t.subscribe(None).receiver)
            .collect();
        group.bench_with_input(
            BenchmarkId::new("raw", subscribers),
            &subscribers,
            |b, _| {
                b.iter(|| {
                    t.publish(None, small_payload());
                    for r in receivers.iter_mut() {
                        black_box(r.try_recv().expect("message is there"));
                    }
                })
            },
        );
        drop(receivers);

        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let _guard = rt.enter();
        let t = topic("bench-feed", 16);
        let mut feeds: Vec<Feed> = (0..subscribers)
            .map(|_| {
                let mut f = Feed::new(LagPolicy::default(), 1);
                f.subscribe(t.clone(), None).expect("subscribes");
                f
            })
            .collect();
        group.bench_with_input(
            BenchmarkId::new("feed", subscribers),
            &subscribers,
            |b, _| {
                b.iter(|| {
                    t.publish(None, small_payload());
                    for f in feeds.iter_mut() {
                        match f.try_next() {
                            Some(FeedEvent::Message(m)) => {
                                black_box(m.sse_frame());
                            }
                            other => panic!("expected a message, got {other:?}"),
                        }
                    }
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, fanout);
criterion_main!(benches);
