//! Large counts (1 Mi elements = 4 MiB per rank) through the algorithms that
//! cut vectors into chunks, on 8 and 5 ranks.

mod common;

use common::*;
use tmpi_coll::{Datatype, Input, Op};

const N: usize = 1 << 20;

#[test]
fn one_mebi_elements() {
    for (n, alg) in [(8u32, "3"), (5, "3"), (8, "2")] {
        let params = [
            ("coll_tuned_allreduce_algorithm", alg),
            (
                "coll_tuned_bcast_algorithm",
                if alg == "3" { "3" } else { "4" },
            ),
            ("coll_tuned_reduce_scatter_block_algorithm", "2"),
            // 3: rabenseifner (on 5 ranks it falls back to binomial).
            ("coll_tuned_reduce_algorithm", alg),
        ];
        job(n, &params, move |w, _| {
            let me = w.rank();
            let p = w.size();
            let mine = bytes(&ints(me, N, 5));
            let mut out = vec![0u8; N * 4];
            w.allreduce(Input::Buf(&mine), &mut out, Datatype::I32, &Op::Sum)
                .unwrap();
            let inputs: Vec<Vec<u8>> = (0..p).map(|r| bytes(&ints(r, N, 5))).collect();
            let want = fold(&Op::Sum, Datatype::I32, &inputs);
            assert!(out == want, "allreduce of 1 Mi elements differs");
            let root = p / 2;
            let mut red = vec![0u8; if me == root { N * 4 } else { 0 }];
            let recv = (me == root).then_some(&mut red[..]);
            w.reduce(Input::Buf(&mine), recv, Datatype::I32, &Op::Sum, root)
                .unwrap();
            assert!(me != root || red == want, "reduce of 1 Mi elements differs");
            let mut b = if me == p - 1 {
                mine.clone()
            } else {
                vec![0; N * 4]
            };
            w.bcast(&mut b, p - 1).unwrap();
            assert!(b == inputs[p as usize - 1], "bcast of 4 MiB differs");
            let blk = N / p as usize;
            let send = &want[..blk * p as usize * 4];
            let mut rs = vec![0u8; blk * 4];
            w.reduce_scatter_block(Input::Buf(send), &mut rs, Datatype::I32, &Op::Max)
                .unwrap();
            assert!(
                rs == want[me as usize * blk * 4..(me as usize + 1) * blk * 4],
                "reduce_scatter_block"
            );
        });
    }
}

/// Buffers of >= 64 KiB come from a process-wide pool and may hold the bytes
/// of an earlier collective (`Schedule::scratch`): results must still be
/// exactly the new data, and results with gaps (iallgatherv/ialltoallv with
/// a hole) must keep the gaps zero. 4 ranks (threads of one process, one
/// pool), several iterations with different data, every large-block
/// algorithm of allgather, alltoall and bcast forced in turn.
#[test]
fn pooled_buffers_never_leak_old_bytes() {
    const B: usize = 96 * 1024; // bytes per block: above the pool's 64 KiB
    for (ag, a2a, bc) in [("2", "1", "3"), ("3", "2", "4"), ("4", "2", "2")] {
        let params = [
            ("coll_tuned_allgather_algorithm", ag),
            ("coll_tuned_allgatherv_algorithm", "2"),
            ("coll_tuned_alltoall_algorithm", a2a),
            ("coll_tuned_alltoallv_algorithm", a2a),
            ("coll_tuned_bcast_algorithm", bc),
        ];
        job(4, &params, move |w, _| {
            let me = w.rank() as usize;
            let p = w.size() as usize;
            let block = |r: usize, it: usize, salt: usize| -> Vec<u8> {
                (0..B)
                    .map(|i| ((i * 7 + r * 31 + it * 13 + salt) % 251 + 1) as u8)
                    .collect()
            };
            for it in 0..4 {
                let mut out = vec![0u8; B * p];
                w.allgather(Input::Buf(&block(me, it, 1)), &mut out)
                    .unwrap();
                let want: Vec<u8> = (0..p).flat_map(|r| block(r, it, 1)).collect();
                assert!(out == want, "allgather iteration {it}");

                // Block for peer j from rank r: block(r * p + j, it, 2).
                let send: Vec<u8> = (0..p).flat_map(|j| block(me * p + j, it, 2)).collect();
                w.alltoall(Input::Buf(&send), &mut out).unwrap();
                let want: Vec<u8> = (0..p).flat_map(|r| block(r * p + me, it, 2)).collect();
                assert!(out == want, "alltoall iteration {it}");

                let mut b = if me == 1 {
                    block(99, it, 3)
                } else {
                    vec![0; B]
                };
                w.bcast(&mut b, 1).unwrap();
                assert!(b == block(99, it, 3), "bcast iteration {it}");

                // A one-block hole at the start of the receive layout. A
                // bcast of that length first leaves non-zero buffers of
                // the same size in the pool.
                let counts = vec![B; p];
                let displs: Vec<usize> = (0..p).map(|i| (i + 1) * B).collect();
                let len = (p + 1) * B;
                let mut fill = vec![0xa5u8; len];
                w.bcast(&mut fill, 0).unwrap();
                let got = w
                    .iallgatherv(block(me, it, 4), len, &counts, &displs)
                    .unwrap()
                    .wait()
                    .unwrap();
                assert!(got[..B].iter().all(|&x| x == 0), "iallgatherv gap not zero");
                let want: Vec<u8> = (0..p).flat_map(|r| block(r, it, 4)).collect();
                assert!(got[B..] == want[..], "iallgatherv iteration {it}");

                let send: Vec<u8> = (0..p).flat_map(|j| block(me * p + j, it, 5)).collect();
                let sd: Vec<usize> = (0..p).map(|i| i * B).collect();
                w.bcast(&mut fill, 2).unwrap();
                let got = w
                    .ialltoallv(send, &counts, &sd, (len, &counts, &displs))
                    .unwrap()
                    .wait()
                    .unwrap();
                assert!(got[..B].iter().all(|&x| x == 0), "ialltoallv gap not zero");
                let want: Vec<u8> = (0..p).flat_map(|r| block(r * p + me, it, 5)).collect();
                assert!(got[B..] == want[..], "ialltoallv iteration {it}");
            }
        });
    }
}
