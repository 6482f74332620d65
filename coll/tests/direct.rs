//! The direct algorithms of small blocking collectives (barrier, bcast,
//! reduce, allreduce, allgather, alltoall <= 1 KiB; bcast and alltoall also
//! above, where tuned decides binomial / linear; `coll/src/direct.rs`) over the real pml
//! (one `Pml` per rank thread over the in-process loopback transport, as
//! `over_pml.rs`), at 1, 2, 3, 4, 5 and 8 ranks, every root, in place and
//! not, every predefined op on every type it applies to and a
//! non-commutative user op. Each call runs twice, once on the direct path
//! and once on the schedule path (`Comm::set_direct_max(0)`), and the
//! results must be bit-identical (floating-point sums included: the direct
//! algorithms combine in the schedules' order) and, where exact, equal to
//! a reference folded locally in rank order. `Comm::direct_calls` proves
//! which path ran. Also: ranks on different paths in one call (the paths
//! send the same messages), a `create_group` view and `split` sub-
//! communicators, no direct path while a non-blocking collective is
//! outstanding or when the algorithm is forced, and a length mismatch
//! reported as `MPI_ERR_TRUNCATE`. With the transport's eager limit at 256
//! bytes, messages above it go rendezvous: the direct path's blocking
//! sends and exchanges must not deadlock. The `sm` component is left out
//! (`coll=^sm`): its shared segment would take these calls.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{fold, matmul};
use tmpi_base::mca::{Registry, Sources};
use tmpi_coll::PmlP2p;
use tmpi_coll::{Datatype, Input, Op};
use tmpi_comm::{Comm, CommContext};
use tmpi_pml::transport::{Loopback, LoopbackConfig};
use tmpi_pml::{MpiErrorClass, Pml};

/// Runs `f(world)` on `n` ranks over the pml with MCA parameters `params`.
fn job(n: u32, params: &[(&str, &str)], f: impl Fn(Comm) + Send + Sync + 'static) {
    job_cfg(n, LoopbackConfig::default(), params, f)
}

/// [`job`] over a configured loopback transport.
fn job_cfg(
    n: u32,
    cfg: LoopbackConfig,
    params: &[(&str, &str)],
    f: impl Fn(Comm) + Send + Sync + 'static,
) {
    // Without the sm component (its segment would take the small blocking
    // calls these tests are about; `sm.rs` and the C suite test it), unless
    // a test chooses the components itself.
    let mut pairs: Vec<(String, String)> = params
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    if !pairs.iter().any(|(k, _)| k == "coll") {
        pairs.push(("coll".into(), "^sm".into()));
    }
    let reg = Arc::new(Registry::new(Sources::default().with_cmdline(pairs)));
    let f = Arc::new(f);
    let (tx, rx) = std::sync::mpsc::channel();
    for (r, lb) in Loopback::job(n, cfg).into_iter().enumerate() {
        let tx = tx.clone();
        let reg = Arc::clone(&reg);
        let f = Arc::clone(&f);
        std::thread::spawn(move || {
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let pml = Arc::new(Pml::with_transport(r as u32, Box::new(lb), true).expect("pml"));
                let p2p = PmlP2p::new(Arc::clone(&pml));
                let u = CommContext::init(Arc::new(p2p), &reg).expect("coll init");
                f(u.world);
            }));
            let _ = tx.send((r, res));
        });
    }
    drop(tx);
    for _ in 0..n {
        let (r, res) = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("job over the pml timed out (hang?)");
        if let Err(e) = res {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("rank {r} of {n} panicked: {msg}");
        }
    }
}

fn mix(a: u64) -> u64 {
    let mut x = a.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^ (x >> 29)
}

/// Deterministic input of `rank`: `count` elements of `dtype`. Floats span
/// many magnitudes and signs (sums depend on the order); pair types have
/// few distinct values (ties decide MAXLOC/MINLOC by index) and zero
/// padding.
fn input(dtype: Datatype, count: usize, rank: u32, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(count * dtype.size());
    for i in 0..count {
        let h = mix(seed ^ (u64::from(rank) << 32) ^ i as u64);
        let f = ((h % 2001) as f64 - 1000.0) * 10f64.powi((h >> 20) as i32 % 13 - 6);
        let small = (h >> 40) % 3;
        let idx = (rank as i32) * 7 - 3;
        match dtype {
            Datatype::Bool => out.push((h & 1) as u8),
            Datatype::F32 => out.extend((f as f32).to_ne_bytes()),
            Datatype::F64 => out.extend(f.to_ne_bytes()),
            Datatype::FloatInt => {
                out.extend((small as f32).to_ne_bytes());
                out.extend(idx.to_ne_bytes());
            }
            Datatype::DoubleInt => {
                out.extend((small as f64).to_ne_bytes());
                out.extend(idx.to_ne_bytes());
                out.extend([0; 4]);
            }
            Datatype::LongInt => {
                out.extend((small as i64).to_ne_bytes());
                out.extend(idx.to_ne_bytes());
                out.extend([0; 4]);
            }
            Datatype::TwoInt => {
                out.extend((small as i32).to_ne_bytes());
                out.extend(idx.to_ne_bytes());
            }
            Datatype::ShortInt => {
                out.extend((small as i16).to_ne_bytes());
                out.extend([0; 2]);
                out.extend(idx.to_ne_bytes());
            }
            _ => out.extend(&h.to_ne_bytes()[..dtype.size()]),
        }
    }
    out
}

/// (op, datatype) pairs: every predefined op on every type it applies to,
/// and the non-commutative 2x2 matrix product on I32.
fn cases() -> Vec<(Op, Datatype)> {
    let mut v: Vec<(Op, Datatype)> = Op::PREDEFINED
        .iter()
        .flat_map(|op| {
            Datatype::ALL
                .iter()
                .filter(|t| op.applies_to(**t))
                .map(|t| (op.clone(), *t))
        })
        .collect();
    v.push((matmul(), Datatype::I32));
    v
}

/// Whether the locally folded reference is exact (no float arithmetic).
fn exact(op: &Op, dtype: Datatype) -> bool {
    !matches!(dtype, Datatype::F32 | Datatype::F64)
        || matches!(op, Op::Max | Op::Min | Op::Maxloc | Op::Minloc)
}

/// Runs `f` on the direct path and on the schedule path of `c` and checks
/// the counter says so; returns both results.
fn both<T>(c: &Comm, mut f: impl FnMut() -> T) -> (T, T) {
    let before = c.direct_calls();
    let d = f();
    assert_eq!(c.direct_calls(), before + 1, "direct path not taken");
    c.set_direct_max(0);
    let s = f();
    c.set_direct_max(usize::MAX);
    assert_eq!(c.direct_calls(), before + 1, "direct path taken when off");
    (d, s)
}

/// Every direct collective on `c` against the schedule path and the
/// reference. `full`: every (op, type) pair at every root (else a subset).
fn check_comm(c: &Comm, seed: u64, full: bool) {
    let p = c.size();
    let me = c.rank();
    let direct_expected = p >= 2;
    let before = c.direct_calls();
    c.barrier().unwrap();
    assert_eq!(c.direct_calls() - before, u64::from(direct_expected));
    if !direct_expected {
        // Size 1 (the self component): no direct path; the calls still work.
        let mut b = [7u8; 8];
        c.bcast(&mut b, 0).unwrap();
        let mut out = [0u8; 8];
        c.allreduce(
            Input::Buf(&[1, 2, 3, 4, 5, 6, 7, 8]),
            &mut out,
            Datatype::U8,
            &Op::Sum,
        )
        .unwrap();
        assert_eq!(out, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(c.direct_calls(), before);
        return;
    }
    let (_, _) = both(c, || c.barrier().unwrap());

    // bcast: every root, 0 bytes to above the 1 KiB stack buffers (bcast
    // receives into the caller's buffer; the children's sends start together).
    for root in 0..p {
        for len in [0usize, 1, 13, 256, 300, 1024, 5000] {
            let want = input(Datatype::U8, len, root, seed ^ 0xb);
            let (d, s) = both(c, || {
                let mut b = if me == root {
                    want.clone()
                } else {
                    vec![0xEE; len]
                };
                c.bcast(&mut b, root).unwrap();
                b
            });
            assert_eq!(d, want, "bcast root {root} len {len}");
            assert_eq!(s, want);
        }
    }

    // allgather (recursive doubling or Bruck) and alltoall (linear): blocks
    // up to the 1 KiB receive buffer (alltoall: up to 256-byte blocks).
    let pu = p as usize;
    let top = if p.is_power_of_two() { 1024 } else { 1024 / pu };
    for b in [0usize, 1, 8, top] {
        let blocks: Vec<Vec<u8>> = (0..p)
            .map(|r| input(Datatype::U8, b, r, seed ^ 0xa))
            .collect();
        let want: Vec<u8> = blocks.concat();
        for in_place in [false, true] {
            let (d, s) = both(c, || {
                let mut out = vec![0xA5u8; b * pu];
                if in_place {
                    out[me as usize * b..(me as usize + 1) * b]
                        .copy_from_slice(&blocks[me as usize]);
                    c.allgather(Input::InPlace, &mut out).unwrap();
                } else {
                    c.allgather(Input::Buf(&blocks[me as usize]), &mut out)
                        .unwrap();
                }
                out
            });
            assert_eq!(d, want, "allgather {b}-byte blocks in place {in_place}");
            assert_eq!(s, want);
        }
        // Blocks above 256 B: sends as requests (p <= 9); in place the
        // whole buffer must fit the 1 KiB stack copy.
        let b = if p <= 9 { top } else { b.min(256) };
        // Rank r's block for rank t: input of (r, t).
        let block = |r: u32, t: u32| input(Datatype::U8, b, r * 64 + t, seed ^ 0xc);
        let mine: Vec<u8> = (0..p).flat_map(|t| block(me, t)).collect();
        let want: Vec<u8> = (0..p).flat_map(|r| block(r, me)).collect();
        for in_place in [false, true] {
            let (d, s) = both(c, || {
                let mut out = vec![0xA5u8; b * pu];
                if in_place && b * pu <= 1024 {
                    out.copy_from_slice(&mine);
                    c.alltoall(Input::InPlace, &mut out).unwrap();
                } else {
                    c.alltoall(Input::Buf(&mine), &mut out).unwrap();
                }
                out
            });
            assert_eq!(d, want, "alltoall {b}-byte blocks in place {in_place}");
            assert_eq!(s, want);
        }
    }

    // reduce and allreduce.
    for (ci, (op, dtype)) in cases().into_iter().enumerate() {
        let e = dtype.size();
        let counts: Vec<usize> = if full || matches!(dtype, Datatype::F64 | Datatype::I32) {
            vec![0, 1, 3, 256 / e, 1024 / e]
        } else {
            vec![3]
        };
        for count in counts {
            let count = if matches!(op, Op::User(_)) {
                count / 4 * 4
            } else {
                count
            };
            let seed = seed ^ (ci as u64) << 8 ^ count as u64;
            let all: Vec<Vec<u8>> = (0..p).map(|r| input(dtype, count, r, seed)).collect();
            let reference = exact(&op, dtype).then(|| fold(&op, dtype, &all));
            let mine = &all[me as usize];
            let what = format!("{} {} x{count}", op.name(), dtype.name());
            for in_place in [false, true] {
                let (d, s) = both(c, || {
                    let mut out = vec![0xA5u8; mine.len()];
                    if in_place {
                        out.copy_from_slice(mine);
                        c.allreduce(Input::InPlace, &mut out, dtype, &op).unwrap();
                    } else {
                        c.allreduce(Input::Buf(mine), &mut out, dtype, &op).unwrap();
                    }
                    out
                });
                assert_eq!(d, s, "allreduce {what}: direct != schedule");
                if let Some(r) = &reference {
                    assert_eq!(&d, r, "allreduce {what}");
                }
            }
            let roots: Vec<u32> = if full || p <= 3 {
                (0..p).collect()
            } else {
                vec![0, p - 1, p / 2]
            };
            for root in roots {
                for in_place in [false, true] {
                    let (d, s) = both(c, || {
                        let mut out = vec![0xA5u8; mine.len()];
                        if me != root {
                            c.reduce(Input::Buf(mine), None, dtype, &op, root).unwrap();
                        } else if in_place {
                            out.copy_from_slice(mine);
                            c.reduce(Input::InPlace, Some(&mut out), dtype, &op, root)
                                .unwrap();
                        } else {
                            c.reduce(Input::Buf(mine), Some(&mut out), dtype, &op, root)
                                .unwrap();
                        }
                        out
                    });
                    assert_eq!(d, s, "reduce {what} root {root}: direct != schedule");
                    if me == root {
                        if let Some(r) = &reference {
                            assert_eq!(&d, r, "reduce {what} root {root}");
                        }
                    } else {
                        assert!(d.iter().all(|&b| b == 0xA5), "non-root buffer written");
                    }
                }
            }
        }
    }
}

fn world_check(n: u32) {
    job(n, &[], move |w| {
        check_comm(&w, 17, n <= 5);
    });
}

#[test]
fn direct_matches_schedules_1_2_3_ranks() {
    for n in 1..=3 {
        world_check(n);
    }
}

#[test]
fn direct_matches_schedules_4_5_ranks() {
    world_check(4);
    world_check(5);
}

#[test]
fn direct_matches_schedules_8_ranks_and_sub_communicators() {
    job(8, &[], |w| {
        check_comm(&w, 23, false);
        // Odd sizes from split (5 and 3 ranks, reversed order by key).
        let me = w.rank();
        let sub = w
            .split(Some(u32::from(me >= 5)), -(me as i32))
            .unwrap()
            .unwrap();
        assert_eq!(sub.size(), if me >= 5 { 3 } else { 5 });
        check_comm(&sub, 29, false);
        // A create_group view (its context-id agreement runs on the
        // parent's context with a rank map) and the communicator it makes.
        let g = w.group().incl(&[6, 1, 4]).unwrap();
        if g.rank_of(me).is_some() {
            let before = w.direct_calls();
            let cg = w.create_group(&g, 5).unwrap();
            assert_eq!(w.direct_calls(), before, "the view is a separate handle");
            check_comm(&cg, 31, false);
        }
        w.barrier().unwrap();
    });
}

#[test]
fn direct_over_rendezvous_reordering_and_busy_transport() {
    // Eager limit 256 B: the 300 B-1 KiB messages go rendezvous (a blocking
    // send waits for its receiver); fragments reordered, sends refused now
    // and then.
    for n in [2u32, 3, 5] {
        let mut cfg = LoopbackConfig {
            swap_pairs: true,
            busy_every: 7,
            ..LoopbackConfig::default()
        };
        cfg.limits.eager = 256;
        job_cfg(n, cfg, &[], move |w| check_comm(&w, 41, false));
    }
}

#[test]
fn ranks_on_different_paths_interoperate() {
    // Even ranks direct, odd ranks schedules, in the same calls: both paths
    // must send the same messages (else: truncation errors or a hang).
    for n in [2u32, 3, 5, 8] {
        job(n, &[], move |w| {
            let me = w.rank();
            let direct = me % 2 == 0;
            w.set_direct_max(if direct { usize::MAX } else { 0 });
            let before = w.direct_calls();
            let mut calls = 0;
            for root in 0..n {
                w.barrier().unwrap();
                let want = input(Datatype::U8, 40, root, 3);
                let mut b = if me == root {
                    want.clone()
                } else {
                    vec![0; 40]
                };
                w.bcast(&mut b, root).unwrap();
                assert_eq!(b, want);
                // Above the stack buffers: requests to the children.
                let want = input(Datatype::U8, 5000, root, 4);
                let mut b = if me == root {
                    want.clone()
                } else {
                    vec![0; 5000]
                };
                w.bcast(&mut b, root).unwrap();
                assert_eq!(b, want);
                // Allgather of blocks above 1 KiB (direct at 2 ranks: ring
                // here) and alltoall (requests to every peer).
                let big = 70_001;
                let mut out = vec![0u8; big * n as usize];
                w.allgather(Input::Buf(&vec![me as u8 ^ root as u8; big]), &mut out)
                    .unwrap();
                for r in 0..n as usize {
                    assert!(out[r * big..(r + 1) * big]
                        .iter()
                        .all(|&x| x == r as u8 ^ root as u8));
                }
                let send: Vec<u8> = (0..n)
                    .flat_map(|t| vec![(me * 16 + t) as u8; 5000])
                    .collect();
                let mut out = vec![0u8; 5000 * n as usize];
                w.alltoall(Input::Buf(&send), &mut out).unwrap();
                for r in 0..n {
                    assert!(out[r as usize * 5000..(r as usize + 1) * 5000]
                        .iter()
                        .all(|&x| x == (r * 16 + me) as u8));
                }
                // Reduce above 1 KiB (direct at 2 ranks).
                let all: Vec<Vec<u8>> = (0..n).map(|r| input(Datatype::I64, 8192, r, 6)).collect();
                let mut out = vec![0u8; all[0].len()];
                w.reduce(
                    Input::Buf(&all[me as usize]),
                    Some(&mut out),
                    Datatype::I64,
                    &Op::Sum,
                    root,
                )
                .unwrap();
                if me == root {
                    assert_eq!(out, fold(&Op::Sum, Datatype::I64, &all));
                }
                calls += if n == 2 { 4 } else { 2 };
                for (op, dtype) in [(Op::Sum, Datatype::I64), (matmul(), Datatype::I32)] {
                    let all: Vec<Vec<u8>> = (0..n).map(|r| input(dtype, 16, r, 5)).collect();
                    let reference = fold(&op, dtype, &all);
                    let mut out = vec![0u8; all[0].len()];
                    w.reduce(
                        Input::Buf(&all[me as usize]),
                        Some(&mut out),
                        dtype,
                        &op,
                        root,
                    )
                    .unwrap();
                    if me == root {
                        assert_eq!(out, reference);
                    }
                    let mut out = vec![0u8; all[0].len()];
                    w.allreduce(Input::Buf(&all[me as usize]), &mut out, dtype, &op)
                        .unwrap();
                    assert_eq!(out, reference);
                    calls += 2;
                }
                let mut out = vec![0u8; 24 * n as usize];
                w.allgather(Input::Buf(&[me as u8 + root as u8; 24]), &mut out)
                    .unwrap();
                for r in 0..n as usize {
                    assert!(out[r * 24..(r + 1) * 24]
                        .iter()
                        .all(|&x| x == r as u8 + root as u8));
                }
                let send: Vec<u8> = (0..n).flat_map(|t| [(me * 16 + t) as u8; 5]).collect();
                let mut out = vec![0u8; 5 * n as usize];
                w.alltoall(Input::Buf(&send), &mut out).unwrap();
                for r in 0..n {
                    assert!(out[r as usize * 5..(r as usize + 1) * 5]
                        .iter()
                        .all(|&x| x == (r * 16 + me) as u8));
                }
                calls += 4;
            }
            let expect = if direct { calls } else { 0 };
            assert_eq!(w.direct_calls() - before, expect);
        });
    }
}

#[test]
fn no_direct_path_with_nonblocking_outstanding_or_forced_algorithm() {
    job(4, &[], |w| {
        let me = w.rank();
        // An outstanding ibarrier: the blocking calls must keep progressing
        // it, so they take the schedule path.
        let req = w.ibarrier().unwrap();
        let before = w.direct_calls();
        let mut out = [0u8; 8];
        w.allreduce(
            Input::Buf(&u64::from(me).to_ne_bytes()),
            &mut out,
            Datatype::U64,
            &Op::Sum,
        )
        .unwrap();
        assert_eq!(u64::from_ne_bytes(out), 6);
        assert_eq!(
            w.direct_calls(),
            before,
            "direct with an ibarrier outstanding"
        );
        req.wait().unwrap();
        // Completed and released: the direct path is back.
        w.barrier().unwrap();
        assert_eq!(w.direct_calls(), before + 1);
    });
    job(
        3,
        &[
            ("coll_tuned_bcast_algorithm", "1"),
            ("coll_tuned_direct_max", "64"),
        ],
        |w| {
            let before = w.direct_calls();
            let mut b = [w.rank() as u8; 16];
            w.bcast(&mut b, 2).unwrap();
            assert_eq!(b, [2u8; 16]);
            assert_eq!(w.direct_calls(), before, "forced bcast algorithm");
            // Above coll_tuned_direct_max: schedule; at it: direct.
            let mut out = [0u8; 72];
            w.allreduce(Input::Buf(&[1u8; 72]), &mut out, Datatype::U8, &Op::Sum)
                .unwrap();
            assert_eq!(out, [3u8; 72]);
            assert_eq!(w.direct_calls(), before);
            let mut out = [0u8; 64];
            w.allreduce(Input::Buf(&[1u8; 64]), &mut out, Datatype::U8, &Op::Sum)
                .unwrap();
            assert_eq!(out, [3u8; 64]);
            assert_eq!(w.direct_calls(), before + 1);
        },
    );
}

#[test]
fn large_bcast_alltoall_allgather_reduce_direct_where_decided() {
    // Above 1 KiB a blocking bcast runs directly wherever tuned decides
    // binomial (every size up to 4 ranks or when ranks yield, below 64 KiB
    // otherwise) and an alltoall (not in place, at most 9 ranks) wherever it
    // decides linear (every block size at 2 ranks or when ranks yield, blocks
    // below 32 KiB otherwise), and an allgather and a reduce at 2 ranks;
    // `coll_tuned_direct_large=0` keeps schedules
    // above `coll_tuned_direct_max`. Eager limit 256 B: every message here
    // is a rendezvous, fragments reordered, sends refused now and then.
    for (n, large, yielding) in [
        (2u32, true, false),
        (3, true, false),
        (4, true, false),
        (5, true, false),
        (8, true, false),
        (5, true, true),
        (4, false, false),
    ] {
        let mut cfg = LoopbackConfig {
            swap_pairs: true,
            busy_every: 5,
            ..LoopbackConfig::default()
        };
        cfg.limits.eager = 256;
        let mut params = vec![];
        if !large {
            params.push(("coll_tuned_direct_large", "0"));
        }
        if yielding {
            params.push(("mpi_yield_when_idle", "1"));
        }
        job_cfg(n, cfg, &params, move |w| {
            let me = w.rank();
            let what = format!("{n} ranks, large {large}, yielding {yielding}");
            for root in 0..n {
                for len in [1025usize, 4099, 65535, 65536, 200_001] {
                    let want = input(Datatype::U8, len, root, 77);
                    let mut b = if me == root {
                        want.clone()
                    } else {
                        vec![0x5A; len]
                    };
                    let before = w.direct_calls();
                    w.bcast(&mut b, root).unwrap();
                    assert!(b == want, "bcast {len} B from {root}, {what}");
                    let direct = large && (n <= 4 || yielding || len < 65536);
                    assert_eq!(
                        w.direct_calls() - before,
                        u64::from(direct),
                        "bcast {len} B, {what}"
                    );
                }
            }
            for b in [1025usize, 32767, 32768, 70_001] {
                // Rank r's block for rank t: input of (r, t).
                let block = |r: u32, t: u32| input(Datatype::U8, b, r * 64 + t, 78);
                let mine: Vec<u8> = (0..n).flat_map(|t| block(me, t)).collect();
                let want: Vec<u8> = (0..n).flat_map(|r| block(r, me)).collect();
                for in_place in [false, true] {
                    let mut out = vec![0xA5u8; b * n as usize];
                    let before = w.direct_calls();
                    if in_place {
                        out.copy_from_slice(&mine);
                        w.alltoall(Input::InPlace, &mut out).unwrap();
                    } else {
                        w.alltoall(Input::Buf(&mine), &mut out).unwrap();
                    }
                    assert!(
                        out == want,
                        "alltoall {b}-byte blocks in place {in_place}, {what}"
                    );
                    // In place the direct path would copy the whole buffer to its stack.
                    let direct = large && !in_place && (n <= 2 || yielding || b < 32768);
                    assert_eq!(
                        w.direct_calls() - before,
                        u64::from(direct),
                        "alltoall {b}-byte blocks in place {in_place}, {what}"
                    );
                }
            }
            // Reduce above 1 KiB: direct at 2 ranks (linear), every root,
            // in place and not, against the reference.
            for count in [129usize, 8192, 25_000] {
                let dtype = Datatype::I64;
                let all: Vec<Vec<u8>> = (0..n).map(|r| input(dtype, count, r, 80)).collect();
                let reference = fold(&Op::Sum, dtype, &all);
                let mine = &all[me as usize];
                for root in 0..n {
                    for in_place in [false, true] {
                        let mut out = vec![0xA5u8; mine.len()];
                        let before = w.direct_calls();
                        if me != root {
                            w.reduce(Input::Buf(mine), None, dtype, &Op::Sum, root)
                                .unwrap();
                        } else if in_place {
                            out.copy_from_slice(mine);
                            w.reduce(Input::InPlace, Some(&mut out), dtype, &Op::Sum, root)
                                .unwrap();
                        } else {
                            w.reduce(Input::Buf(mine), Some(&mut out), dtype, &Op::Sum, root)
                                .unwrap();
                        }
                        if me == root {
                            assert!(out == reference, "reduce x{count} to {root}, {what}");
                        }
                        assert_eq!(
                            w.direct_calls() - before,
                            u64::from(large && n == 2),
                            "reduce x{count} to {root}, {what}"
                        );
                    }
                }
            }
            // Allgather above 1 KiB blocks: direct at 2 ranks only (one
            // exchange in the caller's buffer, recursive doubling or ring).
            for b in [1025usize, 4099, 32769, 70_001] {
                let blocks: Vec<Vec<u8>> = (0..n).map(|r| input(Datatype::U8, b, r, 79)).collect();
                let want: Vec<u8> = blocks.concat();
                for in_place in [false, true] {
                    let mut out = vec![0xA5u8; b * n as usize];
                    let before = w.direct_calls();
                    if in_place {
                        out[me as usize * b..(me as usize + 1) * b]
                            .copy_from_slice(&blocks[me as usize]);
                        w.allgather(Input::InPlace, &mut out).unwrap();
                    } else {
                        w.allgather(Input::Buf(&blocks[me as usize]), &mut out)
                            .unwrap();
                    }
                    assert!(
                        out == want,
                        "allgather {b}-byte blocks in place {in_place}, {what}"
                    );
                    // In place, recursive doubling (result <= 64 KiB) copies
                    // the block to its 1 KiB stack buffer; ring needs none.
                    let direct = large && n == 2 && (!in_place || 2 * b > 65536);
                    assert_eq!(
                        w.direct_calls() - before,
                        u64::from(direct),
                        "allgather {b}-byte blocks in place {in_place}, {what}"
                    );
                }
            }
        });
    }
}

#[test]
fn direct_length_mismatch_is_truncate() {
    job(2, &[], |w| {
        let me = w.rank();
        // Rank 0 broadcasts 8 bytes, rank 1 expects 4: MPI_ERR_TRUNCATE.
        let mut b = vec![1u8; if me == 0 { 8 } else { 4 }];
        let before = w.direct_calls();
        let r = w.bcast(&mut b, 0);
        assert_eq!(w.direct_calls(), before + 1);
        if me == 0 {
            r.unwrap();
        } else {
            assert_eq!(r.unwrap_err().class(), MpiErrorClass::Truncate);
        }
        // A shorter message than expected is reported too.
        let mut out = vec![0u8; if me == 0 { 4 } else { 8 }];
        let inp = vec![1u8; out.len()];
        let r = w.allreduce(Input::Buf(&inp), &mut out, Datatype::U8, &Op::Sum);
        assert_eq!(r.unwrap_err().class(), MpiErrorClass::Truncate);
        // The communicator is still usable.
        w.barrier().unwrap();
        let mut out = [0u8; 4];
        w.allreduce(Input::Buf(&[1u8; 4]), &mut out, Datatype::U8, &Op::Sum)
            .unwrap();
        assert_eq!(out, [2u8; 4]);
    });
}

#[test]
fn sm_keeps_the_direct_path_for_calls_above_its_limit() {
    // sm wins bcast and reduce but passes its message path down:
    // calls above its limit still run tuned's direct algorithms.
    job(
        3,
        &[("coll", "basic,tuned,sm,self"), ("coll_sm_max", "256")],
        |w| {
            assert_eq!(w.table().providers(tmpi_coll::CollKind::Bcast)[0], "sm");
            let me = w.rank();
            let mut small = if me == 0 { vec![7u8; 64] } else { vec![0; 64] };
            w.bcast(&mut small, 0).unwrap();
            assert_eq!(small, [7u8; 64]);
            // Attaching the segment ran one bcast and one allreduce on
            // messages (direct), the bcast itself went through it.
            assert_eq!((w.shared_calls(), w.direct_calls()), (1, 2));
            // (A reduce: from 3 ranks sm takes allreduce of any size.)
            let mine = vec![me as u8; 512];
            let mut sum = vec![0u8; 512];
            let recv = (me == 1).then_some(&mut sum[..]);
            w.reduce(Input::Buf(&mine), recv, Datatype::U8, &Op::Sum, 1)
                .unwrap();
            if me == 1 {
                assert_eq!(sum, vec![3u8; 512]);
            }
            assert_eq!((w.shared_calls(), w.direct_calls()), (1, 3));
        },
    );
}
