//! Non-blocking collectives: several outstanding at once (completed in
//! another order than started), overlapped with point-to-point traffic on
//! the same communicator, whose wildcard receives never see collective
//! messages.

mod common;

use common::*;
use tmpi_coll::sim::TagSpec;
use tmpi_coll::{Datatype, Op};

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
