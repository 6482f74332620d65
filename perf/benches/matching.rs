//! Criterion benches: ns per post+match pair, per workload, matcher and depth.
//! `cargo bench -p tmpi-perf --bench matching` (add a filter such as `specific/` to narrow).
//! The `matchbench` binary gives the same figures as one table, alternating the matchers.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tmpi_perf::list::ListMatcher;
use tmpi_perf::workload::{pair, prepared, BenchMatcher, Workload};
use tmpi_tm_engine::{Engine, EngineConfig};

const DEPTHS: [usize; 5] = [1, 16, 256, 4096, 65536];

fn bench_one<X: BenchMatcher>(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    m: X,
    w: Workload,
    depth: usize,
) {
    let mut m = prepared(m, w, depth);
    let mut i = 20u64;
    g.bench_with_input(BenchmarkId::new(X::NAME, depth), &depth, |b, _| {
        b.iter(|| {
            let got = pair(&mut m, w, i);
            assert_eq!(got, i);
            i += 1;
            black_box(got)
        })
    });
}

fn matching(c: &mut Criterion) {
    for w in Workload::ALL {
        let mut g = c.benchmark_group(w.name());
        g.throughput(Throughput::Elements(1));
        g.warm_up_time(Duration::from_millis(500));
        g.measurement_time(Duration::from_secs(2));
        for depth in DEPTHS {
            let engine = Engine::<u64, u64>::with_config(EngineConfig {
                initial_capacity: depth + 64,
                ..EngineConfig::default()
            })
            .expect("valid configuration");
            bench_one(&mut g, engine, w, depth);
            bench_one(&mut g, ListMatcher::<u64, u64>::new(), w, depth);
        }
        g.finish();
    }
}

criterion_group!(benches, matching);
criterion_main!(benches);
