//! Blocking collectives run their schedules over the caller's memory (the
//! input read in place, the result built in the receive buffer: see
//! docs/journal/coll-performance.md "Large messages"). These tests give every blocking call a
//! receive buffer full of garbage and check that every byte of the result
//! is written, that the input is never written (it is only lent read-only),
//! and that non-commutative ops still combine in rank order now that the
//! first step receives into the result buffer; every algorithm forced in
//! turn, 1-5 ranks, on the simulated transport with random delays.

mod common;

use common::*;

use tmpi_coll::{CollKind, Input};
use tmpi_comm::Comm;

const GARBAGE: u8 = 0xA5;
/// Element counts: 1, an odd count, and one over 64 KiB of i32.
const COUNTS: &[usize] = &[1, 1031, 17_000];
/// Reductions: groups of 4 elements (the 2x2 matrix op), up to 68 KB.
const RED_GROUPS: &[usize] = &[1, 257, 4250];

/// tuned with each algorithm of `kind` forced in turn, tuned deciding, and basic alone.
fn configs(kind: CollKind) -> Vec<Vec<(String, String)>> {
    let name = format!("coll_tuned_{}_algorithm", kind.name());
    let mut v: Vec<Vec<(String, String)>> = (0..=tmpi_coll::tuned_algorithms(kind).len())
        .map(|a| vec![(name.clone(), a.to_string())])
        .collect();
    v.push(vec![("coll".to_string(), "basic,self".to_string())]);
    v
}

fn each(kind: CollKind, body: fn(&Comm, u32)) {
    for cfg in configs(kind) {
        for n in 1..=5u32 {
            let params: Vec<(&str, &str)> =
                cfg.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
            let out = job(n, &params, move |w, _| {
                body(&w, n);
                w.rank()
            });
            assert_eq!(out, (0..n).collect::<Vec<_>>(), "{kind} {cfg:?} {n} ranks");
        }
    }
}

#[test]
fn allreduce_and_reduce_write_every_byte_and_never_the_input() {
    each(CollKind::Allreduce, |w, n| {
        for op in [tmpi_coll::Op::Sum, matmul()] {
            for &count in RED_GROUPS {
                let inputs: Vec<Vec<u8>> = (0..n).map(|r| bytes(&ints(r, count * 4, 5))).collect();
                let want = fold(&op, tmpi_coll::Datatype::I32, &inputs);
                let mine = inputs[w.rank() as usize].clone();
                let mut out = vec![GARBAGE; mine.len()];
                w.allreduce(Input::Buf(&mine), &mut out, tmpi_coll::Datatype::I32, &op)
                    .unwrap();
                assert_eq!(out, want, "{} count {count}", op.name());
                assert_eq!(mine, inputs[w.rank() as usize], "input written");
            }
        }
    });
    each(CollKind::Reduce, |w, n| {
        for op in [tmpi_coll::Op::Sum, matmul()] {
            for &count in RED_GROUPS {
                let inputs: Vec<Vec<u8>> = (0..n).map(|r| bytes(&ints(r, count * 4, 6))).collect();
                let want = fold(&op, tmpi_coll::Datatype::I32, &inputs);
                let mine = inputs[w.rank() as usize].clone();
                for root in 0..n {
                    let mut out = vec![GARBAGE; mine.len()];
                    let recv = (w.rank() == root).then_some(&mut out[..]);
                    w.reduce(Input::Buf(&mine), recv, tmpi_coll::Datatype::I32, &op, root)
                        .unwrap();
                    if w.rank() == root {
                        assert_eq!(out, want, "{} count {count} root {root}", op.name());
                    } else {
                        assert!(out.iter().all(|&b| b == GARBAGE), "non-root buffer written");
                    }
                    assert_eq!(mine, inputs[w.rank() as usize], "input written");
                }
            }
        }
    });
}

#[test]
fn bcast_gather_allgather_alltoall_fill_garbage_buffers() {
    each(CollKind::Bcast, |w, n| {
        for &count in COUNTS {
            for root in 0..n {
                let want = bytes(&ints(root, count, 7));
                let mut buf = if w.rank() == root {
                    want.clone()
                } else {
                    vec![GARBAGE; want.len()]
                };
                w.bcast(&mut buf, root).unwrap();
                assert_eq!(buf, want, "count {count} root {root}");
            }
        }
    });
    each(CollKind::Gather, |w, n| {
        for &count in COUNTS {
            let mine = bytes(&ints(w.rank(), count, 8));
            let want: Vec<u8> = (0..n).flat_map(|r| bytes(&ints(r, count, 8))).collect();
            for root in 0..n {
                let mut out = vec![GARBAGE; want.len()];
                let recv = (w.rank() == root).then_some(&mut out[..]);
                w.gather(Input::Buf(&mine), recv, root).unwrap();
                if w.rank() == root {
                    assert_eq!(out, want, "count {count} root {root}");
                }
                assert_eq!(mine, bytes(&ints(w.rank(), count, 8)), "input written");
            }
        }
    });
    each(CollKind::Allgather, |w, n| {
        for &count in COUNTS {
            let mine = bytes(&ints(w.rank(), count, 9));
            let want: Vec<u8> = (0..n).flat_map(|r| bytes(&ints(r, count, 9))).collect();
            let mut out = vec![GARBAGE; want.len()];
            w.allgather(Input::Buf(&mine), &mut out).unwrap();
            assert_eq!(out, want, "count {count}");
            assert_eq!(mine, bytes(&ints(w.rank(), count, 9)), "input written");
        }
    });
    each(CollKind::Alltoall, |w, n| {
        for &count in COUNTS {
            let me = w.rank();
            let send: Vec<u8> = (0..n)
                .flat_map(|d| bytes(&ints(me * 100 + d, count, 10)))
                .collect();
            let want: Vec<u8> = (0..n)
                .flat_map(|s| bytes(&ints(s * 100 + me, count, 10)))
                .collect();
            let copy = send.clone();
            let mut out = vec![GARBAGE; want.len()];
            w.alltoall(Input::Buf(&send), &mut out).unwrap();
            assert_eq!(out, want, "count {count}");
            assert_eq!(send, copy, "input written");
        }
    });
}
