//! Every collective against a locally computed reference: 1-8 ranks, several
//! counts, every root, in place and not, every algorithm forced in turn
//! (and basic alone), on the simulated transport with random delays.

mod common;

use common::*;

use tmpi_coll::sim::SimConfig;
use tmpi_coll::{CollKind, Datatype, Input, Op};
use tmpi_comm::Comm;

const COUNTS: &[usize] = &[0, 1, 5, 64, 1031];

/// A parameter set and whether the simulated ranks offer shared memory
/// (the `sm` component then takes the small blocking collectives).
type Config = (bool, Vec<(String, String)>);

/// Parameter sets for `kind`: basic alone, then tuned with each algorithm
/// forced, then tuned deciding; for the collectives `sm` covers, also `sm`
/// (default limit, and a 64-byte limit so that calls cross between the
/// segment and the messages).
fn configs(kind: CollKind) -> Vec<Config> {
    let mut v = vec![(false, vec![("coll".to_string(), "basic,self".to_string())])];
    let name = format!("coll_tuned_{}_algorithm", kind.name());
    for a in 0..=tmpi_coll::tuned_algorithms(kind).len() {
        v.push((false, vec![(name.clone(), a.to_string())]));
    }
    if tmpi_coll::SM_KINDS.contains(&kind) {
        v.push((true, vec![]));
        v.push((true, vec![("coll_sm_max".to_string(), "64".to_string())]));
    }
    v
}

fn each_config(kind: CollKind, sizes: &[u32], body: fn(&Comm, u32)) {
    for (shm, cfg) in configs(kind) {
        let sim = |n: u32| SimConfig {
            shared_memory: shm,
            ..SimConfig::new(n)
        };
        for &n in sizes {
            let params: Vec<(&str, &str)> =
                cfg.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
            let ctx = format!("{kind} with {cfg:?} (shared memory {shm}) on {n} ranks");
            let out = job_cfg(sim(n), &params, move |w, _| {
                body(&w, n);
                w.rank()
            });
            assert_eq!(out, (0..n).collect::<Vec<_>>(), "{ctx}");
        }
        // Odd-sized communicators from a split of 8 ranks: 5 ranks in
        // reversed order and 3 ranks, both running the body at once.
        let params: Vec<(&str, &str)> = cfg.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        let out = job_cfg(sim(8), &params, move |w, _| {
            let me = w.rank();
            let sub = w
                .split(Some(u32::from(me < 5)), -(me as i32))
                .unwrap()
                .unwrap();
            body(&sub, sub.size());
            (sub.size(), sub.rank())
        });
        let want: Vec<(u32, u32)> = (0..8)
            .map(|r| if r < 5 { (5, 4 - r) } else { (3, 7 - r) })
            .collect();
        assert_eq!(
            out, want,
            "{kind} with {cfg:?} (shared memory {shm}) on split communicators"
        );
    }
}

const ALL_SIZES: &[u32] = &[1, 2, 3, 4, 5, 6, 7, 8];

#[test]
fn barrier() {
    each_config(CollKind::Barrier, ALL_SIZES, |w, _| {
        for _ in 0..5 {
            w.barrier().unwrap();
        }
    });
}

#[test]
fn barrier_really_waits() {
    // A rank leaving the barrier must see every other rank's pre-barrier flag.
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    // Each tuned algorithm forced, then sm's shared-memory barrier.
    for (alg, shm) in [("1", false), ("2", false), ("3", false), ("0", true)] {
        let arrived = Arc::new(AtomicU32::new(0));
        let a = Arc::clone(&arrived);
        let cfg = SimConfig {
            shared_memory: shm,
            ..SimConfig::new(7)
        };
        job_cfg(
            cfg,
            &[("coll_tuned_barrier_algorithm", alg)],
            move |w, _| {
                std::thread::sleep(std::time::Duration::from_millis(u64::from(w.rank()) * 3));
                a.fetch_add(1, Ordering::SeqCst);
                w.barrier().unwrap();
                assert_eq!(a.load(Ordering::SeqCst), 7, "left the barrier early");
            },
        );
    }
}

#[test]
fn bcast() {
    each_config(CollKind::Bcast, ALL_SIZES, |w, n| {
        for &count in COUNTS {
            for root in 0..n {
                let want = bytes(&ints(root, count, 1));
                let mut buf = if w.rank() == root {
                    want.clone()
                } else {
                    vec![0xEE; want.len()]
                };
                w.bcast(&mut buf, root).unwrap();
                assert_eq!(buf, want, "count {count} root {root}");
            }
        }
    });
}

fn reduce_cases() -> Vec<(Op, Datatype)> {
    vec![
        (Op::Sum, Datatype::I32),
        (Op::Bxor, Datatype::I32),
        (Op::Max, Datatype::I32),
        (matmul(), Datatype::I32),
    ]
}

#[test]
fn reduce() {
    each_config(CollKind::Reduce, ALL_SIZES, |w, n| {
        for (op, t) in reduce_cases() {
            for &count in COUNTS {
                let count = count * 4;
                let inputs: Vec<Vec<u8>> = (0..n).map(|r| bytes(&ints(r, count, 2))).collect();
                let want = fold(&op, t, &inputs);
                for root in 0..n {
                    let me = w.rank();
                    let mine = &inputs[me as usize];
                    if me == root {
                        let mut out = vec![0u8; mine.len()];
                        w.reduce(Input::Buf(mine), Some(&mut out), t, &op, root)
                            .unwrap();
                        assert_eq!(out, want, "{} count {count} root {root}", op.name());
                        // In place at the root.
                        let mut io = mine.clone();
                        w.reduce(Input::InPlace, Some(&mut io), t, &op, root)
                            .unwrap();
                        assert_eq!(
                            io,
                            want,
                            "in place, {} count {count} root {root}",
                            op.name()
                        );
                    } else {
                        w.reduce(Input::Buf(mine), None, t, &op, root).unwrap();
                        w.reduce(Input::Buf(mine), None, t, &op, root).unwrap();
                    }
                }
            }
        }
    });
}

#[test]
fn allreduce() {
    each_config(CollKind::Allreduce, ALL_SIZES, |w, n| {
        for (op, t) in reduce_cases() {
            for &count in COUNTS {
                let count = count * 4;
                let inputs: Vec<Vec<u8>> = (0..n).map(|r| bytes(&ints(r, count, 3))).collect();
                let want = fold(&op, t, &inputs);
                let mine = &inputs[w.rank() as usize];
                let mut out = vec![0u8; mine.len()];
                w.allreduce(Input::Buf(mine), &mut out, t, &op).unwrap();
                assert_eq!(out, want, "{} count {count}", op.name());
                let mut io = mine.clone();
                w.allreduce(Input::InPlace, &mut io, t, &op).unwrap();
                assert_eq!(io, want, "in place {} count {count}", op.name());
            }
        }
    });
}

#[test]
fn gather_and_gatherv() {
    for kind in [CollKind::Gather, CollKind::Gatherv] {
        let body: fn(&Comm, u32) = |w, n| {
            for &count in COUNTS {
                for root in 0..n {
                    let me = w.rank();
                    let mine = bytes(&ints(me, count, 4));
                    let want: Vec<u8> = (0..n).flat_map(|r| bytes(&ints(r, count, 4))).collect();
                    if me == root {
                        let mut out = vec![0u8; want.len()];
                        w.gather(Input::Buf(&mine), Some(&mut out), root).unwrap();
                        assert_eq!(out, want, "count {count} root {root}");
                        let mut io = vec![0u8; want.len()];
                        let b = mine.len();
                        io[me as usize * b..(me as usize + 1) * b].copy_from_slice(&mine);
                        w.gather(Input::InPlace, Some(&mut io), root).unwrap();
                        assert_eq!(io, want);
                    } else {
                        w.gather(Input::Buf(&mine), None, root).unwrap();
                        w.gather(Input::Buf(&mine), None, root).unwrap();
                    }
                    // gatherv: rank r sends r*count ints, in reverse order with gaps of 3 bytes.
                    let sizes: Vec<usize> = (0..n as usize).map(|r| r * count * 4).collect();
                    let mut displs = vec![0usize; n as usize];
                    let mut at = 0;
                    for r in (0..n as usize).rev() {
                        displs[r] = at;
                        at += sizes[r] + 3;
                    }
                    let mine_v = bytes(&ints(me, me as usize * count, 5));
                    if me == root {
                        let mut out = vec![0xAB; at];
                        w.gatherv(Input::Buf(&mine_v), Some((&mut out, &sizes, &displs)), root)
                            .unwrap();
                        for r in 0..n as usize {
                            assert_eq!(
                                &out[displs[r]..displs[r] + sizes[r]],
                                &bytes(&ints(r as u32, r * count, 5))[..]
                            );
                            assert_eq!(out[displs[r] + sizes[r]], 0xAB, "gap overwritten");
                        }
                    } else {
                        w.gatherv(Input::Buf(&mine_v), None, root).unwrap();
                    }
                }
            }
        };
        each_config(kind, ALL_SIZES, body);
    }
}

#[test]
fn scatter_and_scatterv() {
    for kind in [CollKind::Scatter, CollKind::Scatterv] {
        let body: fn(&Comm, u32) = |w, n| {
            for &count in COUNTS {
                for root in 0..n {
                    let me = w.rank();
                    let all: Vec<u8> = (0..n).flat_map(|r| bytes(&ints(r, count, 6))).collect();
                    let want = bytes(&ints(me, count, 6));
                    let mut out = vec![0u8; want.len()];
                    if me == root {
                        w.scatter(Some(&all), Some(&mut out), root).unwrap();
                        w.scatter(Some(&all), None, root).unwrap();
                    } else {
                        w.scatter(None, Some(&mut out), root).unwrap();
                        let mut again = vec![0u8; want.len()];
                        w.scatter(None, Some(&mut again), root).unwrap();
                        assert_eq!(again, want);
                    }
                    assert_eq!(out, want, "count {count} root {root}");
                    // scatterv: rank r gets (r+1)*count ints from a reversed layout.
                    let sizes: Vec<usize> = (0..n as usize).map(|r| (r + 1) * count * 4).collect();
                    let mut displs = vec![0usize; n as usize];
                    let mut data = Vec::new();
                    for r in (0..n as usize).rev() {
                        displs[r] = data.len();
                        data.extend(bytes(&ints(r as u32, (r + 1) * count, 7)));
                        data.push(0);
                    }
                    let want = bytes(&ints(me, (me as usize + 1) * count, 7));
                    let mut out = vec![0u8; want.len()];
                    if me == root {
                        w.scatterv(Some((&data, &sizes, &displs)), Some(&mut out), root)
                            .unwrap();
                    } else {
                        w.scatterv(None, Some(&mut out), root).unwrap();
                    }
                    assert_eq!(out, want);
                }
            }
        };
        each_config(kind, ALL_SIZES, body);
    }
}

#[test]
fn allgather() {
    each_config(CollKind::Allgather, ALL_SIZES, |w, n| {
        for &count in COUNTS {
            let me = w.rank();
            let mine = bytes(&ints(me, count, 8));
            let want: Vec<u8> = (0..n).flat_map(|r| bytes(&ints(r, count, 8))).collect();
            let mut out = vec![0u8; want.len()];
            w.allgather(Input::Buf(&mine), &mut out).unwrap();
            assert_eq!(out, want, "count {count}");
            let mut io = vec![0u8; want.len()];
            let b = mine.len();
            io[me as usize * b..(me as usize + 1) * b].copy_from_slice(&mine);
            w.allgather(Input::InPlace, &mut io).unwrap();
            assert_eq!(io, want, "in place count {count}");
        }
    });
}

#[test]
fn allgatherv() {
    each_config(CollKind::Allgatherv, ALL_SIZES, |w, n| {
        for &count in COUNTS {
            let me = w.rank() as usize;
            let sizes: Vec<usize> = (0..n as usize).map(|r| (r % 3) * count * 4).collect();
            let mut displs = vec![0; n as usize];
            let mut at = 1;
            for r in (0..n as usize).rev() {
                displs[r] = at;
                at += sizes[r] + 2;
            }
            let mine = bytes(&ints(me as u32, (me % 3) * count, 9));
            let mut out = vec![0x5A; at];
            w.allgatherv(Input::Buf(&mine), &mut out, &sizes, &displs)
                .unwrap();
            for r in 0..n as usize {
                assert_eq!(
                    &out[displs[r]..displs[r] + sizes[r]],
                    &bytes(&ints(r as u32, (r % 3) * count, 9))[..]
                );
            }
            assert_eq!(out[0], 0x5A, "gap overwritten");
            let mut io = vec![0x5A; at];
            io[displs[me]..displs[me] + sizes[me]].copy_from_slice(&mine);
            let copy = io.clone();
            w.allgatherv(Input::InPlace, &mut io, &sizes, &displs)
                .unwrap();
            assert_eq!(io, out);
            assert_ne!(copy.len(), 0);
        }
    });
}

#[test]
fn alltoall() {
    each_config(CollKind::Alltoall, ALL_SIZES, |w, n| {
        for &count in COUNTS {
            let me = w.rank();
            // Block for destination d from source s: ints(s * 100 + d).
            let send: Vec<u8> = (0..n)
                .flat_map(|d| bytes(&ints(me * 100 + d, count, 10)))
                .collect();
            let want: Vec<u8> = (0..n)
                .flat_map(|s| bytes(&ints(s * 100 + me, count, 10)))
                .collect();
            let mut out = vec![0u8; want.len()];
            w.alltoall(Input::Buf(&send), &mut out).unwrap();
            assert_eq!(out, want, "count {count}");
            let mut io = send.clone();
            w.alltoall(Input::InPlace, &mut io).unwrap();
            assert_eq!(io, want, "in place count {count}");
        }
    });
}

fn alltoallv_body(w: &Comm, n: u32, kind: CollKind) {
    for &count in COUNTS {
        let me = w.rank() as usize;
        let p = n as usize;
        // s sends (s + d) % 3 * count ints to d.
        let len = |s: usize, d: usize| ((s + d) % 3) * count * 4;
        let scounts: Vec<usize> = (0..p).map(|d| len(me, d)).collect();
        let rcounts: Vec<usize> = (0..p).map(|s| len(s, me)).collect();
        let mut sdispls = vec![0; p];
        let mut send = Vec::new();
        for d in (0..p).rev() {
            sdispls[d] = send.len();
            send.extend(bytes(&ints((me * 100 + d) as u32, len(me, d) / 4, 11)));
        }
        let mut rdispls = vec![0; p];
        let mut at = 0;
        for s in 0..p {
            rdispls[s] = at;
            at += rcounts[s] + 1;
        }
        let mut out = vec![0x77; at];
        match kind {
            CollKind::Alltoallv => w.alltoallv(
                Input::Buf(&send),
                &scounts,
                &sdispls,
                &mut out,
                &rcounts,
                &rdispls,
            ),
            _ => w.alltoallw(
                Input::Buf(&send),
                &scounts,
                &sdispls,
                &mut out,
                &rcounts,
                &rdispls,
            ),
        }
        .unwrap();
        for s in 0..p {
            assert_eq!(
                &out[rdispls[s]..rdispls[s] + rcounts[s]],
                &bytes(&ints((s * 100 + me) as u32, len(s, me) / 4, 11))[..]
            );
            assert_eq!(out[rdispls[s] + rcounts[s]], 0x77);
        }
    }
}

#[test]
fn alltoallv_and_w() {
    each_config(CollKind::Alltoallv, ALL_SIZES, |w, n| {
        alltoallv_body(w, n, CollKind::Alltoallv)
    });
    each_config(CollKind::Alltoallw, &[3, 4, 8], |w, n| {
        alltoallv_body(w, n, CollKind::Alltoallw)
    });
}

#[test]
fn reduce_scatter() {
    for kind in [CollKind::ReduceScatter, CollKind::ReduceScatterBlock] {
        let body: fn(&Comm, u32) = |w, n| {
            for (op, t) in reduce_cases() {
                for &count in COUNTS {
                    let me = w.rank() as usize;
                    let p = n as usize;
                    // reduce_scatter: rank r gets (r % 3) * 4 * count elements.
                    let counts: Vec<usize> = (0..p).map(|r| (r % 3) * 4 * count).collect();
                    let total: usize = counts.iter().sum();
                    let inputs: Vec<Vec<u8>> = (0..n).map(|r| bytes(&ints(r, total, 12))).collect();
                    let full = fold(&op, t, &inputs);
                    let off: usize = counts[..me].iter().sum::<usize>() * 4;
                    let want = &full[off..off + counts[me] * 4];
                    let mut out = vec![0u8; counts[me] * 4];
                    w.reduce_scatter(Input::Buf(&inputs[me]), &mut out, &counts, t, &op)
                        .unwrap();
                    assert_eq!(out, want, "{} count {count}", op.name());
                    let mut io = inputs[me].clone();
                    w.reduce_scatter(Input::InPlace, &mut io, &counts, t, &op)
                        .unwrap();
                    assert_eq!(&io[..want.len()], want);
                    // block variant: 4 * count elements each.
                    let b = 4 * count;
                    let inputs: Vec<Vec<u8>> = (0..n).map(|r| bytes(&ints(r, b * p, 13))).collect();
                    let full = fold(&op, t, &inputs);
                    let mut out = vec![0u8; b * 4];
                    w.reduce_scatter_block(Input::Buf(&inputs[me]), &mut out, t, &op)
                        .unwrap();
                    assert_eq!(out, &full[me * b * 4..(me + 1) * b * 4]);
                    let mut io = inputs[me].clone();
                    w.reduce_scatter_block(Input::InPlace, &mut io, t, &op)
                        .unwrap();
                    assert_eq!(&io[..b * 4], &full[me * b * 4..(me + 1) * b * 4]);
                }
            }
        };
        each_config(kind, ALL_SIZES, body);
    }
}

#[test]
fn scan_and_exscan() {
    for kind in [CollKind::Scan, CollKind::Exscan] {
        let body: fn(&Comm, u32) = |w, n| {
            for (op, t) in reduce_cases() {
                for &count in COUNTS {
                    let count = count * 4;
                    let me = w.rank() as usize;
                    let inputs: Vec<Vec<u8>> = (0..n).map(|r| bytes(&ints(r, count, 14))).collect();
                    let incl = fold(&op, t, &inputs[..=me]);
                    let mut out = vec![0u8; count * 4];
                    w.scan(Input::Buf(&inputs[me]), &mut out, t, &op).unwrap();
                    assert_eq!(out, incl, "scan {} count {count}", op.name());
                    let mut io = inputs[me].clone();
                    w.scan(Input::InPlace, &mut io, t, &op).unwrap();
                    assert_eq!(io, incl);
                    let mut ex = vec![0x11u8; count * 4];
                    w.exscan(Input::Buf(&inputs[me]), &mut ex, t, &op).unwrap();
                    if me == 0 {
                        assert!(
                            ex.iter().all(|&b| b == 0x11),
                            "exscan touched rank 0's buffer"
                        );
                    } else {
                        assert_eq!(
                            ex,
                            fold(&op, t, &inputs[..me]),
                            "exscan {} count {count}",
                            op.name()
                        );
                    }
                }
            }
        };
        each_config(kind, ALL_SIZES, body);
    }
}
