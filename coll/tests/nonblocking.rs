//! Non-blocking collectives: several outstanding at once (completed in
//! another order than started), overlapped with point-to-point traffic on
//! the same communicator, whose wildcard receives never see collective
//! messages.

mod common;

use common::*;
use tmpi_base::error::MpiErrorClass;
use tmpi_coll::sim::{SimP2p, TagSpec};
use tmpi_coll::{Datatype, Op};
use tmpi_comm::Comm;

#[test]
fn several_outstanding_completed_in_reverse_order() {
    for n in [2u32, 3, 5, 8] {
        job(n, &[], move |w, _| {
            let me = w.rank();
            let p = w.size();
            let r_bar = w.ibarrier().unwrap();
            let r_b = w
                .ibcast(
                    if me == 1 % p {
                        bytes(&ints(1, 3000, 1))
                    } else {
                        vec![0; 12000]
                    },
                    1 % p,
                )
                .unwrap();
            let r_ar = w
                .iallreduce(bytes(&ints(me, 1000, 2)), Datatype::I32, &Op::Sum)
                .unwrap();
            let r_red = w
                .ireduce(bytes(&ints(me, 100, 3)), Datatype::I32, &matmul(), p - 1)
                .unwrap();
            let r_g = w.igather(bytes(&[me as i32; 7]), 0).unwrap();
            let r_s = w
                .iscatter(
                    if me == 0 {
                        (0..p * 5).flat_map(|i| (i as i32).to_ne_bytes()).collect()
                    } else {
                        Vec::new()
                    },
                    20,
                    0,
                )
                .unwrap();
            let r_ag = w.iallgather(bytes(&[me as i32 * 3])).unwrap();
            let r_a2a = w
                .ialltoall(
                    (0..p)
                        .flat_map(|d| bytes(&[(me * 100 + d) as i32]))
                        .collect(),
                )
                .unwrap();
            let r_sc = w
                .iscan(bytes(&[1, me as i32]), Datatype::I32, &Op::Sum)
                .unwrap();
            let r_ex = w.iexscan(bytes(&[1]), Datatype::I32, &Op::Sum).unwrap();
            let r_rsb = w
                .ireduce_scatter_block(
                    bytes(&vec![me as i32; p as usize * 2]),
                    Datatype::I32,
                    &Op::Max,
                )
                .unwrap();
            assert!(w.context().outstanding() >= 1);
            // Complete in reverse order.
            assert_eq!(from_bytes(&r_rsb.wait().unwrap()), [p as i32 - 1; 2]);
            let ex = r_ex.wait().unwrap();
            if me == 0 {
                assert!(ex.is_empty());
            } else {
                assert_eq!(from_bytes(&ex), [me as i32]);
            }
            let s: i32 = (0..=me as i32).sum();
            assert_eq!(from_bytes(&r_sc.wait().unwrap()), [me as i32 + 1, s]);
            assert_eq!(
                from_bytes(&r_a2a.wait().unwrap()),
                (0..p).map(|s| (s * 100 + me) as i32).collect::<Vec<_>>()
            );
            assert_eq!(
                from_bytes(&r_ag.wait().unwrap()),
                (0..p).map(|r| r as i32 * 3).collect::<Vec<_>>()
            );
            assert_eq!(
                from_bytes(&r_s.wait().unwrap()),
                (me * 5..me * 5 + 5).map(|i| i as i32).collect::<Vec<_>>()
            );
            let g = r_g.wait().unwrap();
            if me == 0 {
                assert_eq!(
                    from_bytes(&g),
                    (0..p).flat_map(|r| [r as i32; 7]).collect::<Vec<_>>()
                );
            }
            let red = r_red.wait().unwrap();
            if me == p - 1 {
                let inputs: Vec<Vec<u8>> = (0..p).map(|r| bytes(&ints(r, 100, 3))).collect();
                assert_eq!(red, fold(&matmul(), Datatype::I32, &inputs));
            } else {
                assert!(red.is_empty());
            }
            let inputs: Vec<Vec<u8>> = (0..p).map(|r| bytes(&ints(r, 1000, 2))).collect();
            assert_eq!(r_ar.wait().unwrap(), fold(&Op::Sum, Datatype::I32, &inputs));
            assert_eq!(r_b.wait().unwrap(), bytes(&ints(1, 3000, 1)));
            r_bar.wait().unwrap();
            assert_eq!(w.context().outstanding(), 0);
        });
    }
}

#[test]
fn overlapped_with_point_to_point_on_the_same_communicator() {
    // Each rank starts an ibcast and an iallreduce, then exchanges user
    // messages around a ring on the same communicator (ANY_SOURCE/ANY_TAG
    // receives), polling the collectives in between; user receives must
    // only ever see user messages, and everything completes.
    for n in [2u32, 4, 7] {
        job(
            n,
            &[
                ("coll_tuned_bcast_algorithm", "4"),
                ("coll_tuned_bcast_segment_size", "1000"),
            ],
            move |w, p2p| {
                let me = w.rank();
                let p = w.size();
                let ep = w.endpoint().clone();
                let big = bytes(&ints(0, 20_000, 4));
                let rb = w
                    .ibcast(
                        if me == 0 {
                            big.clone()
                        } else {
                            vec![0; big.len()]
                        },
                        0,
                    )
                    .unwrap();
                let ra = w
                    .iallreduce(bytes(&[me as i32; 64]), Datatype::I32, &Op::Sum)
                    .unwrap();
                let mut got = Vec::new();
                for round in 0..20u32 {
                    p2p.send_raw(
                        &ep,
                        (me + 1) % p,
                        (round % 5) as i32,
                        vec![me as u8, round as u8],
                    )
                    .unwrap();
                    let h = p2p.irecv_spec(ep.context_id, None, TagSpec::AnyUser, 16);
                    let r = loop {
                        if let Some(r) = p2p.test_recv(h) {
                            break r.unwrap();
                        }
                        // Poll the collectives while waiting, as a pml progress hook would.
                        w.context().progress();
                        tmpi_coll::P2p::idle(&p2p);
                    };
                    assert!(r.tag >= 0, "a user receive matched internal tag {}", r.tag);
                    assert_eq!(r.source, (me + p - 1) % p);
                    got.push(r.data);
                    let _ = rb.test().unwrap();
                }
                assert_eq!(got.len(), 20);
                for (i, d) in got.iter().enumerate() {
                    assert_eq!(
                        d,
                        &vec![((me + p - 1) % p) as u8, i as u8],
                        "user messages in order"
                    );
                }
                assert_eq!(rb.wait().unwrap(), big);
                let s: i32 = (0..p as i32).sum();
                assert_eq!(from_bytes(&ra.wait().unwrap()), vec![s; 64]);
                // A blocking collective after the non-blocking ones keeps the sequence aligned.
                w.barrier().unwrap();
            },
        );
    }
}

/// Layout of a v-collective over `p` ranks, in i32 elements: rank `i`'s
/// count is `count(i)`, blocks placed in reversed rank order with a
/// one-element gap after each (so displacements are not monotone and
/// the gaps must stay untouched). Returns byte counts, byte displacements
/// and the buffer length in bytes.
fn vlayout(p: u32, count: impl Fn(u32) -> usize) -> (Vec<usize>, Vec<usize>, usize) {
    let counts: Vec<usize> = (0..p).map(|i| count(i) * 4).collect();
    let mut displs = vec![0; p as usize];
    let mut pos = 0;
    for i in (0..p as usize).rev() {
        displs[i] = pos;
        pos += counts[i] + 4;
    }
    (counts, displs, pos)
}

/// Every non-blocking v-collective (igatherv, iscatterv, iallgatherv,
/// ialltoallv, ialltoallw, ireduce_scatter with a non-commutative op) and
/// ireduce_scatter_block started at once on `w`, user point-to-point
/// messages exchanged around a ring on the same communicator while they
/// are outstanding, then completed in an order other than started; each
/// result is checked against a reference computed locally.
fn v_body(w: &Comm, p2p: &SimP2p) {
    let me = w.rank();
    let p = w.size();
    let groot = p - 1;
    let sroot = p / 2;
    let cnt = |i: u32| ((i * 7 + 2) % 5) as usize;
    let (vc, vd, vlen) = vlayout(p, cnt);
    let blk = |i: u32, seed: u32| bytes(&ints(i, cnt(i), seed));

    let r_gv = w
        .igatherv(
            blk(me, 11),
            (me == groot).then_some((vlen, &vc[..], &vd[..])),
            groot,
        )
        .unwrap();
    let r_sv = if me == sroot {
        let mut s = vec![0xEEu8; vlen];
        for i in 0..p {
            let d = vd[i as usize];
            s[d..d + vc[i as usize]].copy_from_slice(&blk(i, 12));
        }
        w.iscatterv(s, Some((&vc, &vd)), vc[me as usize], sroot)
            .unwrap()
    } else {
        w.iscatterv(Vec::new(), None, vc[me as usize], sroot)
            .unwrap()
    };
    let r_agv = w.iallgatherv(blk(me, 13), vlen, &vc, &vd).unwrap();
    // alltoallv: rank r sends f(r, j) elements to j; sends packed in
    // ascending order, receives in the reversed layout.
    let f = |r: u32, j: u32| ((r + 2 * j) % 4) as usize;
    let a2a = |seed: u32| {
        let (sc, sd, slen) = {
            let sc: Vec<usize> = (0..p).map(|j| f(me, j) * 4).collect();
            let mut sd = Vec::new();
            let mut pos = 0;
            for c in &sc {
                sd.push(pos);
                pos += c;
            }
            (sc, sd, pos)
        };
        let mut s = vec![0u8; slen];
        for j in 0..p {
            let d = sd[j as usize];
            s[d..d + sc[j as usize]].copy_from_slice(&bytes(&ints(me * 31 + j, f(me, j), seed)));
        }
        (s, sc, sd, vlayout(p, |i| f(i, me)))
    };
    let (s, sc, sd, (rc, rd, rlen)) = a2a(14);
    let r_a2av = w.ialltoallv(s, &sc, &sd, (rlen, &rc, &rd)).unwrap();
    let (s, sc, sd, _) = a2a(15);
    let r_a2aw = w.ialltoallw(s, &sc, &sd, (rlen, &rc, &rd)).unwrap();
    // reduce_scatter with 2x2 matrices (non-commutative), 0-2 per rank.
    let rs_counts: Vec<usize> = (0..p).map(|i| 4 * ((i as usize + 1) % 3)).collect();
    let total: usize = rs_counts.iter().sum();
    let rs_in = |r: u32| bytes(&ints(r, total, 16));
    let r_rs = w
        .ireduce_scatter(rs_in(me), &rs_counts, Datatype::I32, &matmul())
        .unwrap();
    let r_rsb = w
        .ireduce_scatter_block(
            bytes(&ints(me, 3 * p as usize, 17)),
            Datatype::I32,
            &Op::Sum,
        )
        .unwrap();

    // User traffic on the same communicator while they are outstanding.
    let ep = w.endpoint().clone();
    for round in 0..5u32 {
        p2p.send_raw(&ep, (me + 1) % p, round as i32, vec![me as u8, round as u8])
            .unwrap();
        let h = p2p.irecv_spec(ep.context_id, None, TagSpec::AnyUser, 16);
        let r = loop {
            if let Some(r) = p2p.test_recv(h) {
                break r.unwrap();
            }
            w.context().progress();
            tmpi_coll::P2p::idle(p2p);
        };
        assert!(r.tag >= 0, "a user receive matched internal tag {}", r.tag);
        assert_eq!(r.data, vec![((me + p - 1) % p) as u8, round as u8]);
    }

    // Complete in another order than started.
    let got = r_rsb.wait().unwrap();
    let want: Vec<i32> = (0..3)
        .map(|k| {
            (0..p)
                .map(|r| ints(r, 3 * p as usize, 17)[me as usize * 3 + k])
                .fold(0i32, |a, b| a.wrapping_add(b))
        })
        .collect();
    assert_eq!(from_bytes(&got), want, "ireduce_scatter_block");

    let got = r_a2aw.wait().unwrap();
    let got_v = r_a2av.wait().unwrap();
    for (seed, got) in [(15, got), (14, got_v)] {
        assert_eq!(got.len(), rlen);
        for i in 0..p {
            let d = rd[i as usize];
            assert_eq!(
                &got[d..d + rc[i as usize]],
                &bytes(&ints(i * 31 + me, f(i, me), seed))[..],
                "ialltoallv/w block from {i} (seed {seed})"
            );
        }
    }

    let got = r_rs.wait().unwrap();
    let inputs: Vec<Vec<u8>> = (0..p).map(rs_in).collect();
    let all = fold(&matmul(), Datatype::I32, &inputs);
    let off: usize = rs_counts[..me as usize].iter().sum::<usize>() * 4;
    assert_eq!(
        got,
        all[off..off + rs_counts[me as usize] * 4],
        "ireduce_scatter"
    );

    let got = r_agv.wait().unwrap();
    assert_eq!(got.len(), vlen);
    for i in 0..p {
        let d = vd[i as usize];
        assert_eq!(
            &got[d..d + vc[i as usize]],
            &blk(i, 13)[..],
            "iallgatherv block {i}"
        );
    }

    assert_eq!(r_sv.wait().unwrap(), blk(me, 12), "iscatterv");

    let got = r_gv.wait().unwrap();
    if me == groot {
        assert_eq!(got.len(), vlen);
        for i in 0..p {
            let d = vd[i as usize];
            assert_eq!(
                &got[d..d + vc[i as usize]],
                &blk(i, 11)[..],
                "igatherv block {i}"
            );
        }
    } else {
        assert!(got.is_empty());
    }
    assert_eq!(w.context().outstanding(), 0);
    // A blocking collective afterwards keeps the sequence aligned.
    w.barrier().unwrap();
}

#[test]
fn v_collectives_outstanding_together_and_overlapped_with_p2p() {
    // Default selection, basic alone, and the tuned alternatives forced
    // (allgatherv gatherv_bcast, alltoallv pairwise, reduce_scatter ring
    // which falls back for the non-commutative op).
    let cfgs: [&[(&str, &str)]; 3] = [
        &[],
        &[("coll", "basic,self")],
        &[
            ("coll_tuned_allgatherv_algorithm", "1"),
            ("coll_tuned_alltoallv_algorithm", "2"),
            ("coll_tuned_alltoallw_algorithm", "2"),
            ("coll_tuned_reduce_scatter_algorithm", "2"),
        ],
    ];
    for cfg in cfgs {
        for n in 1..=5u32 {
            let out = job(n, cfg, |w, p2p| {
                v_body(&w, &p2p);
                w.rank()
            });
            assert_eq!(out, (0..n).collect::<Vec<_>>(), "{cfg:?} on {n} ranks");
        }
        // Odd-sized split communicators (5 ranks in reversed order and 3),
        // both running at once.
        let out = job(8, cfg, |w, p2p| {
            let me = w.rank();
            let sub = w
                .split(Some(u32::from(me < 5)), -(me as i32))
                .unwrap()
                .unwrap();
            v_body(&sub, &p2p);
            (sub.size(), sub.rank())
        });
        let want: Vec<(u32, u32)> = (0..8)
            .map(|r| if r < 5 { (5, 4 - r) } else { (3, 7 - r) })
            .collect();
        assert_eq!(out, want, "{cfg:?} on split communicators");
    }
}

#[test]
fn v_collectives_bad_arguments_are_typed_errors() {
    job(3, &[], |w, _| {
        let me = w.rank();
        // Block outside the buffer.
        let e = w
            .iallgatherv(vec![0; 4], 8, &[4, 4, 4], &[0, 4, 8])
            .unwrap_err();
        assert_eq!(e.class(), MpiErrorClass::Buffer);
        // Wrong number of counts.
        let e = w.iallgatherv(vec![0; 4], 12, &[4, 4], &[0, 4]).unwrap_err();
        assert_eq!(e.class(), MpiErrorClass::Count);
        // Own block of another length than its count: every rank takes
        // part (its block zero-padded), so the call completes, and fails.
        let e = w
            .iallgatherv(vec![0; 3], 12, &[4, 4, 4], &[0, 4, 8])
            .unwrap()
            .wait()
            .unwrap_err();
        assert_eq!(e.class(), MpiErrorClass::Count);
        // Root without a layout.
        if me == 0 {
            let e = w.igatherv(vec![0; 4], None, 0).unwrap_err();
            assert_eq!(e.class(), MpiErrorClass::Buffer);
            let e = w.iscatterv(vec![0; 12], None, 4, 0).unwrap_err();
            assert_eq!(e.class(), MpiErrorClass::Buffer);
        }
        // Bad root.
        let e = w.igatherv(vec![0; 4], None, 3).unwrap_err();
        assert_eq!(e.class(), MpiErrorClass::Root);
        // reduce_scatter: vector of another length than the counts say.
        let e = w
            .ireduce_scatter(vec![0; 8], &[1, 1, 1], Datatype::I32, &Op::Sum)
            .unwrap_err();
        assert_eq!(e.class(), MpiErrorClass::Count);
        // alltoallv: send block outside the send buffer.
        let e = w
            .ialltoallv(
                vec![0; 4],
                &[4, 4, 4],
                &[0, 0, 4],
                (12, &[4, 4, 4], &[0, 4, 8]),
            )
            .unwrap_err();
        assert_eq!(e.class(), MpiErrorClass::Buffer);
        // Nothing was started: a collective afterwards still matches up.
        w.barrier().unwrap();
        assert_eq!(w.context().outstanding(), 0);
    });
}

#[test]
fn neighbour_exchanges_pair_repeated_neighbours_in_order() {
    // Every rank sends three blocks to its right neighbour (the second
    // large enough for the rendezvous path) and one to itself, and receives
    // from its left neighbour and itself into blocks listed in another
    // order than their offsets; one exchange blocking, one outstanding
    // beside an ibarrier. Blocks between one pair match in listed order.
    for n in [1u32, 2, 3] {
        job(n, &[], move |w, _| {
            let me = w.rank();
            let (right, left) = ((me + 1) % n, (me + n - 1) % n);
            let blocks = [
                bytes(&[me as i32; 2]),
                bytes(&ints(me, 20_000, 9)),
                bytes(&[me as i32 * 7; 1]),
            ];
            let own = bytes(&[-(me as i32) - 1; 3]);
            let mut send = Vec::new();
            let mut sends = Vec::new();
            for b in &blocks {
                sends.push((right, send.len(), b.len()));
                send.extend_from_slice(b);
            }
            sends.push((me, send.len(), own.len()));
            send.extend_from_slice(&own);
            // Result layout: own block first, then the neighbour's three in
            // reverse order of offset.
            let (l0, l1, l2) = (blocks[0].len(), blocks[1].len(), blocks[2].len());
            let recvs = [
                (left, 12 + l2 + l1, l0),
                (left, 12 + l2, l1),
                (left, 12, l2),
                (me, 0, 12),
            ];
            let total = 12 + l0 + l1 + l2;
            let check = |got: &[u8]| {
                let want_left = |i: usize| -> Vec<u8> {
                    match i {
                        0 => bytes(&[left as i32; 2]),
                        1 => bytes(&ints(left, 20_000, 9)),
                        _ => bytes(&[left as i32 * 7; 1]),
                    }
                };
                assert_eq!(&got[..12], &bytes(&[-(me as i32) - 1; 3])[..], "own block");
                assert_eq!(got[12..12 + l2], want_left(2)[..], "block 2");
                assert_eq!(got[12 + l2..12 + l2 + l1], want_left(1)[..], "block 1");
                assert_eq!(got[12 + l2 + l1..], want_left(0)[..], "block 0");
            };
            let got = w
                .neighbor_exchange(send.clone(), &sends, total, &recvs)
                .unwrap();
            check(&got);
            let r = w.ineighbor_exchange(send, &sends, total, &recvs).unwrap();
            let b = w.ibarrier().unwrap();
            b.wait().unwrap();
            check(&r.wait().unwrap());
            // A peer outside the communicator is an argument error.
            let bad = w.neighbor_exchange(Vec::new(), &[(n, 0, 0)], 0, &[]);
            assert_eq!(
                bad.map(|_| ()).map_err(|e| e.class()),
                Err(MpiErrorClass::Arg)
            );
        });
    }
}
