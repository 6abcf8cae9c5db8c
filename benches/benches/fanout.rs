//! Fan-out: one publish delivered to N subscribers, as deliveries per second.
//!
//! `raw` measures the broadcast channel alone (publish + N `try_recv`); `feed` goes through
//! the per-connection `Feed` every transport uses (dedupe by position, lag handling) and
//! takes the message's shared SSE frame, as the SSE transport does. `direct` links each feed
//! to the topic's fan-out (herald_core::direct), as an idle single-topic SSE stream on plain
//! TCP is: the publish itself hands the frame to every subscriber's writer, here one that
//! only counts bytes, so the figure is the fan-out's own cost per delivery, before send(2).

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use herald_benches::{small_payload, topic};
use herald_core::{DeliveryCounter, DirectSub, DirectWriter, Feed, FeedEvent, LagPolicy, Message};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A socket that takes everything and counts it.
struct Counting(Arc<AtomicUsize>);

impl DirectWriter for Counting {
    fn frame<'m>(&self, message: &'m Message, _delta: bool) -> &'m bytes::Bytes {
        message.sse_frame()
    }

    fn try_write(&self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.fetch_add(buf.len(), Ordering::Relaxed);
        Ok(buf.len())
    }

    fn counter(&self) -> &'static dyn DeliveryCounter {
        &DELIVERIES
    }
}

/// Counts deliveries as the gateway's metrics do, a batch at a time.
struct Deliveries(AtomicUsize);

impl DeliveryCounter for Deliveries {
    fn delivered(&self, n: u64, _bytes: u64, _latency: std::time::Duration) {
        self.0.fetch_add(n as usize, Ordering::Relaxed);
    }
}

static DELIVERIES: Deliveries = Deliveries(AtomicUsize::new(0));

/// N feeds linked to one topic's fan-out and gone direct. Outside a runtime, so every cohort
/// is fanned out on the publishing thread.
fn direct(c: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, n: usize) {
    let t = topic("bench-direct", 16);
    let written = Arc::new(AtomicUsize::new(0));
    let _feeds: Vec<Feed> = (0..n)
        .map(|_| {
            let mut f = Feed::new(LagPolicy::default(), 1);
            f.subscribe(t.clone(), None).expect("subscribes");
            assert!(f.link(Arc::new(DirectSub::new(Counting(written.clone())))));
            assert!(f.try_next().is_none() && f.is_direct());
            f
        })
        .collect();
    c.bench_with_input(BenchmarkId::new("direct", n), &n, |b, _| {
        b.iter(|| t.publish(None, small_payload()))
    });
    assert!(written.load(Ordering::Relaxed) > 0);
}

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

        direct(&mut group, subscribers);

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
