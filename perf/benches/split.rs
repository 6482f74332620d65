//! Criterion benches of the split software/hardware matcher (tm-engine `split`), measured with
//! the soft NIC model (`tmpi_verbs::soft::tm::TmListModel`) executing the list operations, next
//! to software matching:
//! * `split/post_offloaded`: post a receive that goes to the NIC — `post_recv`, pull the ADD,
//!   post it on the NIC, poll its completion, feed `Added` (the NIC's own matching of the
//!   message afterwards is untimed);
//! * `split/sw_match_del`: an unexpected message from the NIC matches a receive the NIC holds —
//!   `nic_unexpected`, pull the DEL, post it, poll its completion, feed `Deleted`, take the
//!   match event;
//! * `split/sw_only_pair` and `split/engine_pair`: one post + one arrival matched in software,
//!   through the split matcher with offload off and through the bare engine.
//!
//! `cargo bench -p tmpi-perf --bench split`. The model is a simulation: its own cost is
//! included in the NIC rows (a real NIC executes the operation asynchronously; what the pml
//! pays there is the `ibv_post_srq_ops` call and the CQ poll instead).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tmpi_tm_engine::split::{RecvInfo, SplitConfig, SplitEvent, SplitMatcher};
use tmpi_tm_engine::{ArriveOutcome, Engine, Envelope, PostOutcome, RecvSpec};

mod rig;

use rig::{info, Rig};

fn split(c: &mut Criterion) {
    let mut g = c.benchmark_group("split");
    g.throughput(Throughput::Elements(1));
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(2));

    g.bench_function("post_offloaded", |b| {
        let mut rig = Rig::new();
        let mut r = 0u64;
        b.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            let mut done = 0;
            while done < iters {
                let batch = (iters - done).min(512);
                let start = Instant::now();
                for _ in 0..batch {
                    rig.m
                        .post_recv(RecvSpec::exact(0, 1, 3), r, info(3))
                        .unwrap();
                    r += 1;
                    rig.pump();
                }
                t += start.elapsed();
                // Untimed: the NIC matches them all.
                for _ in 0..batch {
                    rig.message(3);
                }
                rig.pump();
                done += batch;
            }
            assert_eq!(rig.m.posted_len(), 0);
            t
        })
    });

    g.bench_function("sw_match_del", |b| {
        let mut rig = Rig::new();
        let mut r = 0u64;
        b.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                // Untimed: one offloaded receive in the NIC list.
                rig.m
                    .post_recv(RecvSpec::exact(0, 1, 7), r, info(7))
                    .unwrap();
                r += 1;
                rig.pump();
                let start = Instant::now();
                rig.m.nic_unexpected(Envelope::new(0, 1, 7), r).unwrap();
                rig.pump();
                t += start.elapsed();
            }
            assert_eq!(rig.m.posted_len(), 0);
            t
        })
    });

    g.bench_function("sw_only_pair", |b| {
        let mut m: SplitMatcher<u64, u64> = SplitMatcher::new(SplitConfig {
            offload: false,
            ..SplitConfig::default()
        })
        .unwrap();
        let mut i = 0u64;
        b.iter(|| {
            m.post_recv(RecvSpec::exact(0, 1, 3), i, RecvInfo::software(4096))
                .unwrap();
            m.arrive(Envelope::new(0, 1, 3), i).unwrap();
            while let Some(e) = m.poll_event() {
                if let SplitEvent::Matched { recv, .. } = e {
                    black_box(recv);
                }
            }
            i += 1;
        })
    });

    g.bench_function("engine_pair", |b| {
        let mut e: Engine<u64, u64> = Engine::new();
        let mut i = 0u64;
        b.iter(|| {
            let p = e.post_recv(RecvSpec::exact(0, 1, 3), i).unwrap();
            assert!(matches!(p, PostOutcome::Posted { .. }));
            let a = e.arrive(Envelope::new(0, 1, 3), i).unwrap();
            assert!(matches!(a, ArriveOutcome::Matched { .. }));
            i += 1;
            black_box(a)
        })
    });
    g.finish();
}

criterion_group!(benches, split);
criterion_main!(benches);
