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
