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
use tmpi_tm_engine::split::{
    NicAction, NicEvent, NicId, RecvInfo, SplitConfig, SplitEvent, SplitMatcher,
};
use tmpi_tm_engine::{ArriveOutcome, Engine, Envelope, PostOutcome, RecvSpec};
use tmpi_verbs::soft::tm::{Arrival, TmAction, TmConfig, TmListModel, TmOp};
use tmpi_verbs::wire::{Tmh, TmhOpcode};
use tmpi_verbs::{WcFlags, WcOpcode, WcStatus};

const DEL_BIT: u64 = 1 << 62;
const SYNC_WR: u64 = 1 << 61;

struct Rig {
    m: SplitMatcher<u64, u64>,
    nic: TmListModel<u32, Vec<u8>>,
    handles: rustc_hash::FxHashMap<u64, u32>,
    untagged: u32,
}

fn tag_of(tag: i32) -> u64 {
    (1u64 << 24) | tag as u32 as u64
}

impl Rig {
    fn new() -> Self {
        let mut nic = TmListModel::new(TmConfig::default());
        for b in 0..4096 {
            nic.post_untagged(1 << 60 | u64::from(b), b, 256).unwrap();
        }
        Rig {
            m: SplitMatcher::new(SplitConfig::default()).unwrap(),
            nic,
            handles: Default::default(),
            untagged: 4096,
        }
    }

    /// Pull every action, post it, run the NIC, feed every completion back.
    fn pump(&mut self) {
        loop {
            let mut moved = false;
            while let Some(a) = self.m.poll_action() {
                moved = true;
                match a {
                    NicAction::Add {
                        id,
                        tag,
                        unexpected_cnt,
                        ..
                    } => {
                        let h = self
                            .nic
                            .post_op(
                                id.0,
                                TmOp::Add {
                                    recv_wr_id: id.0,
                                    buffer: u32::MAX,
                                    len: 4096,
                                    tag: tag.tag,
                                    mask: tag.mask,
                                },
                                true,
                                Some(unexpected_cnt),
                            )
                            .unwrap();
                        self.handles.insert(id.0, h);
                    }
                    NicAction::Del { id, unexpected_cnt } => {
                        let h = self.handles[&id.0];
                        self.nic
                            .post_op(
                                id.0 | DEL_BIT,
                                TmOp::Del { handle: h },
                                true,
                                Some(unexpected_cnt),
                            )
                            .unwrap();
                    }
                    NicAction::Sync { unexpected_cnt } => {
                        self.nic
                            .post_op(SYNC_WR, TmOp::Sync, true, Some(unexpected_cnt))
                            .unwrap();
                    }
                }
            }
            while let Some(a) = self.nic.poll_action() {
                moved = true;
                let TmAction::Complete { wc, tm_ref } = a else {
                    continue;
                };
                self.nic.completion_polled(tm_ref);
                let ev = match wc.opcode {
                    WcOpcode::TmAdd => NicEvent::Added {
                        id: NicId(wc.wr_id),
                        sync_req: wc.flags.contains(WcFlags::TM_SYNC_REQ),
                    },
                    WcOpcode::TmDel if wc.status == WcStatus::Success => NicEvent::Deleted {
                        id: NicId(wc.wr_id & !DEL_BIT),
                    },
                    WcOpcode::TmDel => NicEvent::DelConsumed {
                        id: NicId(wc.wr_id & !DEL_BIT),
                    },
                    WcOpcode::TmSync => NicEvent::Synced,
                    WcOpcode::TmRecv if wc.flags.contains(WcFlags::TM_MATCH) => {
                        let info = wc.tm_info.unwrap();
                        NicEvent::Matched {
                            id: NicId(wc.wr_id),
                            envelope: Envelope::new(0, 1, (info.tag & 0xff_ffff) as i32),
                            complete: true,
                        }
                    }
                    _ => {
                        // Unexpected: hand it to the matcher, give the buffer back.
                        let b = self.untagged;
                        self.untagged += 1;
                        self.nic
                            .post_untagged(1 << 60 | u64::from(b), b, 256)
                            .unwrap();
                        self.m.nic_unexpected(Envelope::new(0, 1, 7), 0).unwrap();
                        continue;
                    }
                };
                self.m.nic_event(ev).unwrap();
            }
            while let Some(e) = self.m.poll_event() {
                black_box(e);
            }
            if !moved {
                return;
            }
        }
    }

    fn message(&mut self, tag: i32) {
        let mut b = Tmh {
            opcode: TmhOpcode::Eager,
            app_ctx: 0,
            tag: tag_of(tag),
        }
        .to_bytes()
        .to_vec();
        b.extend_from_slice(&[0; 8]);
        self.nic.message_arrived(Arrival {
            qp_num: 1,
            src_qp: 2,
            message: b,
        });
    }
}

fn info(tag: i32) -> RecvInfo {
    RecvInfo::offloadable(4096, tag_of(tag), !0)
}

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
