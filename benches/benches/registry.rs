//! Topic lookups in the sharded registry, alone and while another thread looks up and
//! publishes at the same time (the machine has 2 cores).

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use herald_benches::small_payload;
use herald_core::{Registry, RegistryConfig, TopicName};

fn registry(c: &mut Criterion) {
    let registry = Arc::new(Registry::new(RegistryConfig::default()));
    let names: Vec<TopicName> = (0..10_000)
        .map(|i| TopicName::new(&format!("topic.{i}")).expect("valid"))
        .collect();
    for n in &names {
        registry.get_or_create(n).expect("room");
    }
    let mut group = c.benchmark_group("registry");
    group.throughput(Throughput::Elements(1));

    let mut i = 0;
    group.bench_function("get/uncontended", |b| {
        b.iter(|| {
            i = (i + 7919) % names.len();
            black_box(registry.get(names[i].as_str()))
        })
    });

    let stop = Arc::new(AtomicBool::new(false));
    let background = {
        let (registry, names, stop) = (registry.clone(), names.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut j = 0;
            while !stop.load(Ordering::Relaxed) {
                j = (j + 104_729) % names.len();
                if let Some(t) = registry.get(names[j].as_str()) {
                    t.publish(None, small_payload());
                }
            }
        })
    };
    group.bench_function("get/with_concurrent_publisher", |b| {
        b.iter(|| {
            i = (i + 7919) % names.len();
            black_box(registry.get(names[i].as_str()))
        })
    });
    stop.store(true, Ordering::Relaxed);
    background.join().expect("background thread");

    group.bench_function("get_or_create/existing", |b| {
        b.iter(|| {
            i = (i + 7919) % names.len();
            black_box(registry.get_or_create(&names[i]).expect("exists"))
        })
    });
    group.finish();
}

criterion_group!(benches, registry);
criterion_main!(benches);
