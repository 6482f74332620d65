//! The `sm` component: which communicators it takes, that small blocking
//! collectives go through its segment (and larger ones, non-blocking ones
//! and point-to-point traffic keep working beside it), with the simulated
//! ranks (threads) sharing memory. Results against references for every
//! size, root and in-place variant are in `collectives.rs` (its sm
//! configurations); the multi-process runs in `over_pml.rs` and the C
//! suite.

mod common;

use common::*;
use tmpi_coll::sim::{SimConfig, TagSpec};
use tmpi_coll::{CollKind, Datatype, Input, Op};

fn shm(n: u32) -> SimConfig {
    SimConfig {
        shared_memory: true,
        ..SimConfig::new(n)
    }
}

#[test]
fn sm_takes_one_node_communicators_with_shared_memory_only() {
    // Shared memory, one node: sm first for what it covers, tuned below it.
    let out = job_cfg(shm(3), &[], |w, _| {
        let t = w.table();
        (
            t.providers(CollKind::Bcast),
            t.providers(CollKind::Gather),
            w.shared_segment(),
        )
    });
    for (bcast, gather, seg) in out {
        assert_eq!(bcast, ["sm", "tuned", "basic"]);
        assert_eq!(gather, ["tuned", "basic"], "sm does not provide gather");
        assert_eq!(seg, None, "attached lazily, on the first call");
    }
    // No shared memory (the default simulation): sm declines.
    let out = job(3, &[], |w, _| w.table().providers(CollKind::Bcast));
    assert!(out.iter().all(|p| p[0] == "tuned"), "{out:?}");
    // Two nodes: sm declines the world, takes each node's communicator.
    let cfg = SimConfig {
        node_of: vec![0, 0, 1, 1],
        ..shm(4)
    };
    let out = job_cfg(cfg, &[], |w, _| {
        let node = w
            .split_type(tmpi_comm::SplitType::Shared, 0)
            .unwrap()
            .unwrap();
        (
            w.table().providers(CollKind::Barrier)[0],
            node.table().providers(CollKind::Barrier)[0],
        )
    });
    assert!(
        out.iter().all(|&(w, n)| w == "tuned" && n == "sm"),
        "{out:?}"
    );
    // Excluded by the selection list.
    let out = job_cfg(shm(2), &[("coll", "^sm")], |w, _| {
        w.table().providers(CollKind::Bcast)
    });
    assert!(out.iter().all(|p| !p.contains(&"sm")), "{out:?}");
}

#[test]
fn small_blocking_calls_use_the_segment_and_large_ones_the_messages() {
    // (Large allgather/alltoall by single copy: the next test.)
    let params = [("coll_sm_max", "256"), ("coll_sm_single_copy", "0")];
    let out = job_cfg(shm(4), &params, |w, _| {
        let me = w.rank();
        // Within the limit: the segment attaches, one op.
        let mut b = if me == 2 {
            bytes(&ints(2, 64, 1))
        } else {
            vec![0; 256]
        };
        w.bcast(&mut b, 2).unwrap();
        assert_eq!(b, bytes(&ints(2, 64, 1)));
        assert_eq!(w.shared_segment(), Some(true));
        assert_eq!(w.shared_calls(), 1, "a 256-byte bcast went over messages");
        // Above it, from 3 ranks: allreduce with an op that commutes in
        // chunks of the limit (256 + 16 bytes), two ops each after one
        // comparing the lengths; a non-commutative one over messages.
        let inputs: Vec<Vec<u8>> = (0..4).map(|r| bytes(&ints(r, 68, 1))).collect();
        let mine = &inputs[me as usize];
        let mut sum = vec![0u8; mine.len()];
        w.allreduce(Input::Buf(mine), &mut sum, Datatype::I32, &Op::Sum)
            .unwrap();
        assert_eq!(sum, fold(&Op::Sum, Datatype::I32, &inputs));
        assert_eq!(w.shared_calls(), 6, "a 272-byte sum: 1 + 2 chunks of 2 ops");
        let mut io = mine.clone();
        w.allreduce(Input::InPlace, &mut io, Datatype::I32, &Op::Sum)
            .unwrap();
        assert_eq!(io, sum, "in place");
        let mut prod = vec![0u8; mine.len()];
        w.allreduce(Input::Buf(mine), &mut prod, Datatype::I32, &matmul())
            .unwrap();
        assert_eq!(prod, fold(&matmul(), Datatype::I32, &inputs));
        assert_eq!(
            w.shared_calls(),
            11,
            "a 272-byte non-commutative allreduce went through the segment"
        );
        // Alltoall's limit is on the whole vector: 4 x 64 bytes fits, 4 x
        // 68 bytes goes over messages.
        for (count, ops) in [(16usize, 1u64), (17, 0)] {
            let before = w.shared_calls();
            let send: Vec<u8> = (0..4)
                .flat_map(|d| bytes(&ints(me * 10 + d, count, 4)))
                .collect();
            let mut out = vec![0u8; send.len()];
            w.alltoall(Input::Buf(&send), &mut out).unwrap();
            let want: Vec<u8> = (0..4)
                .flat_map(|s| bytes(&ints(s * 10 + me, count, 4)))
                .collect();
            assert_eq!(out, want, "count {count}");
            let mut io = send.clone();
            w.alltoall(Input::InPlace, &mut io).unwrap();
            assert_eq!(io, want, "in place, count {count}");
            assert_eq!(w.shared_calls() - before, 2 * ops, "count {count}");
        }
        // Bcast of any size from 3 ranks: the root's length, then 256-byte
        // chunks, far more than the ring's slots, the last one short.
        let before = w.shared_calls();
        let want = bytes(&ints(1, 25_001, 3));
        let mut big = if me == 1 {
            want.clone()
        } else {
            vec![0; want.len()]
        };
        w.bcast(&mut big, 1).unwrap();
        assert_eq!(big, want);
        assert_eq!(w.shared_calls() - before, 1 + 100_004u64.div_ceil(256));
        w.shared_calls()
    });
    assert!(out.iter().all(|&d| d == out[0]), "{out:?}");
    // 2 ranks: at most 8 KiB through the segment, bcast included.
    let out = job_cfg(shm(2), &[], |w, _| {
        let me = w.rank();
        for n in [8192usize, 8193] {
            let mut b = if me == 0 { vec![9u8; n] } else { vec![0; n] };
            w.bcast(&mut b, 0).unwrap();
            assert_eq!(b, vec![9u8; n]);
        }
        w.shared_calls()
    });
    assert_eq!(out, [1, 1]);
}

/// Allgather blocks of `count` ints and alltoall blocks of `count` ints
/// (rank r's data from seed r), in place and not, checked; returns the ops
/// they ran through the segment.
fn gather_and_exchange(w: &tmpi_comm::Comm, count: usize) -> u64 {
    let (me, p) = (w.rank(), w.size());
    let before = w.shared_calls();
    let blocks: Vec<Vec<u8>> = (0..p).map(|r| bytes(&ints(r, count, 5))).collect();
    let want = blocks.concat();
    let mut all = vec![0u8; want.len()];
    w.allgather(Input::Buf(&blocks[me as usize]), &mut all)
        .unwrap();
    assert_eq!(all, want, "allgather, {p} ranks, count {count}");
    let b = count * 4;
    let mut io = vec![0xee; want.len()];
    io[me as usize * b..(me as usize + 1) * b].copy_from_slice(&blocks[me as usize]);
    w.allgather(Input::InPlace, &mut io).unwrap();
    assert_eq!(io, want, "allgather in place, {p} ranks, count {count}");
    let send: Vec<u8> = (0..p)
        .flat_map(|d| bytes(&ints(me * 100 + d, count, 6)))
        .collect();
    let want: Vec<u8> = (0..p)
        .flat_map(|s| bytes(&ints(s * 100 + me, count, 6)))
        .collect();
    let mut out = vec![0u8; send.len()];
    w.alltoall(Input::Buf(&send), &mut out).unwrap();
    assert_eq!(out, want, "alltoall, {p} ranks, count {count}");
    let mut io = send.clone();
    w.alltoall(Input::InPlace, &mut io).unwrap();
    assert_eq!(io, want, "alltoall in place, {p} ranks, count {count}");
    w.shared_calls() - before
}

#[test]
fn large_allgather_and_alltoall_read_the_other_ranks_memory_once() {
    // Above coll_sm_max each rank reads its blocks straight from the
    // others' buffers (process_vm_readv; threads of this process here):
    // one small op per call after a probe of two.
    for n in [2u32, 3, 5] {
        let out = job_cfg(shm(n), &[("coll_sm_max", "256")], |w, _| {
            assert_eq!(w.single_copy(), None, "probed on first use");
            let first = gather_and_exchange(&w, 75);
            assert_eq!(w.single_copy(), Some(true));
            let again = gather_and_exchange(&w, 2000);
            // Within the limit: the segment's copy, no probe.
            let small = gather_and_exchange(&w, 3);
            (first, again, small)
        });
        assert!(out.iter().all(|&o| o == (6, 4, 4)), "{n} ranks: {out:?}");
    }
    // Through pipes (up to coll_sm_splice_max_ranks, default 4): blocks
    // of 1.2 MB, more than a pipe holds (the rest by process_vm_readv),
    // in place and not; blocks under 128 KiB and, with pipes off, every
    // block by process_vm_readv.
    for (n, limit, piped) in [
        (2u32, "4", true),
        (3, "4", true),
        (5, "4", false),
        (3, "0", false),
    ] {
        let params = [("coll_sm_max", "256"), ("coll_sm_splice_max_ranks", limit)];
        let out = job_cfg(shm(n), &params, move |w, _| {
            let ops = gather_and_exchange(&w, 75);
            let small = w.piped_bytes();
            let big = gather_and_exchange(&w, 300_000);
            // Each call: a pipe's worth from every other rank (1 MiB, less
            // an unaligned start's page, on an idle machine).
            let per_call = w.piped_bytes() / 4 / u64::from(n - 1);
            (ops, big, w.single_copy_piped(), small, per_call)
        });
        // The pipe's size is not this test's to choose: F_SETPIPE_SZ gives
        // less than 1 MiB (down to a page) once the user's pipe budget
        // (fs.pipe-user-pages-soft, shared by every process of the user,
        // other jobs included) is spent. Some bytes, at most a pipe's worth.
        let want = if piped { 4096..=1 << 20 } else { 0..=0 };
        for o in &out {
            let head = (o.0, o.1, o.2, o.3);
            assert_eq!(head, (6, 4, Some(piped), 0), "{n} ranks, limit {limit}");
            assert!(want.contains(&o.4), "{n} ranks, limit {limit}: {o:?}");
        }
    }
    // 2 ranks with the default limits: a 64 KiB block is above the 8 KiB
    // the segment copies.
    let out = job_cfg(shm(2), &[], |w, _| {
        let ops = gather_and_exchange(&w, 16 * 1024);
        (ops, w.single_copy())
    });
    assert_eq!(out, [(6, Some(true)); 2]);
    // Off: the same calls over messages, nothing through the segment.
    let out = job_cfg(
        shm(3),
        &[("coll_sm_max", "256"), ("coll_sm_single_copy", "0")],
        |w, _| (gather_and_exchange(&w, 75), w.single_copy()),
    );
    assert_eq!(out, [(0, None); 3]);
    // One rank's probe fails (testing parameter): every rank keeps the
    // calls on messages after the probe's 2 ops, results still exact.
    let out = job_cfg(
        shm(3),
        &[
            ("coll_sm_max", "256"),
            ("coll_sm_single_copy_fail_test", "1"),
        ],
        |w, _| (gather_and_exchange(&w, 75), w.single_copy()),
    );
    assert_eq!(out, [(2, Some(false)); 3]);
}

#[test]
fn a_rank_for_which_pipes_cost_more_is_sent_its_blocks_by_process_vm_readv() {
    // 2 ranks through pipes, 20 allgathers of 1.2 MB blocks. Each reader
    // says in every call which way it wants the next one; with pipes made
    // to read 1000 times dearer (testing parameter) the pipes carry only
    // the first three calls (each way's first figure is dropped, and a
    // reader's wish takes effect in the next call) and the sample of call
    // 16 (every 16 calls the other way once); as measured they carry at
    // least the first three. Results exact either way.
    for (factor, forced) in [("1000", true), ("0", false)] {
        let params = [("coll_sm_max", "256"), ("coll_sm_splice_cost_test", factor)];
        let out = job_cfg(shm(2), &params, move |w, _| {
            let (me, p) = (w.rank(), w.size());
            let count = 300_000;
            let block = bytes(&ints(me, count, 3));
            let want: Vec<u8> = (0..p).flat_map(|r| bytes(&ints(r, count, 3))).collect();
            let mut piped_calls = Vec::new();
            for call in 0..20 {
                let before = w.piped_bytes();
                let mut all = vec![0u8; want.len()];
                w.allgather(Input::Buf(&block), &mut all).unwrap();
                assert!(all == want, "call {call}");
                if w.piped_bytes() > before {
                    piped_calls.push(call);
                }
            }
            (w.single_copy_piped(), piped_calls)
        });
        for (piped, calls) in &out {
            assert_eq!(*piped, Some(true));
            if forced {
                assert_eq!(calls, &[0, 1, 2, 16], "factor {factor}");
            } else {
                assert!(calls.starts_with(&[0, 1, 2]), "as measured: {calls:?}");
            }
        }
    }
}

#[test]
fn a_reused_alltoall_source_goes_onto_huge_pages_with_its_data_intact() {
    // 3 ranks, blocks of 2 MiB: each send vector (6 MiB) spans at least two
    // whole 2 MiB ranges wherever it starts. The first call leaves it alone, the second
    // (coll_sm_huge_after=2; the default is 4) collapses it before the others read it,
    // later calls find it settled; every result exact. With the parameter
    // at 0 nothing is collapsed.
    let count = 512 * 1024;
    for (after, want) in [("2", 1..=2u64), ("0", 0..=0)] {
        let params = [("coll_sm_max", "256"), ("coll_sm_huge_after", after)];
        let out = job_cfg(shm(3), &params, move |w, _| {
            let (me, p) = (w.rank(), w.size());
            let mut send: Vec<u8> = (0..p)
                .flat_map(|d| bytes(&ints(me * 100 + d, count, 9)))
                .collect();
            let mut seen = Vec::new();
            for round in 0..4u32 {
                // New contents each round, same pages.
                let b = count * 4;
                for d in 0..p as usize {
                    send[d * b] = round as u8;
                }
                let mut out = vec![0u8; send.len()];
                w.alltoall(Input::Buf(&send), &mut out).unwrap();
                for s in 0..p as usize {
                    let mut block = bytes(&ints(s as u32 * 100 + me, count, 9));
                    block[0] = round as u8;
                    assert!(
                        out[s * b..(s + 1) * b] == block[..],
                        "rank {me}, round {round}, block from {s}"
                    );
                }
                seen.push(w.huge_source_ranges());
            }
            seen
        });
        for seen in &out {
            assert_eq!(seen[0], 0, "first call: left alone ({seen:?})");
            assert!(want.contains(&seen[1]), "after {after:?}: {seen:?}");
            assert_eq!(seen[1], seen[3], "settled: {seen:?}");
        }
    }
}

#[test]
fn single_copy_length_mismatch_is_a_truncation_error_not_a_hang() {
    let out = job_cfg(shm(3), &[("coll_sm_max", "256")], |w, _| {
        let me = w.rank();
        let b = if me == 0 { 300 } else { 400 };
        let send = vec![me as u8; 3 * b];
        let mut recv = vec![0u8; 3 * b];
        let a = w
            .alltoall(Input::Buf(&send), &mut recv)
            .map_err(|e| e.class());
        let g = w
            .allgather(Input::Buf(&send[..b]), &mut recv)
            .map_err(|e| e.class());
        // The communicator stays usable.
        let ops = gather_and_exchange(&w, 100);
        (a, g, ops)
    });
    for (a, g, ops) in out {
        assert_eq!(a, Err(tmpi_base::error::MpiErrorClass::Truncate));
        assert_eq!(g, Err(tmpi_base::error::MpiErrorClass::Truncate));
        assert_eq!(ops, 4);
    }
}

#[test]
fn many_calls_cycle_the_slots_with_ranks_running_apart() {
    // Far more calls than slots (1200 bcast and reduce calls on the stream
    // ring's 512), ranks sleeping at different points, every covered kind
    // in turn: a rank must never overwrite what a slower rank has not read
    // yet.
    for n in [2u32, 3, 8] {
        job_cfg(shm(n), &[], move |w, _| {
            let me = w.rank();
            for i in 0..600u32 {
                if (i + me) % 37 == 0 {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                let root = i % n;
                let mut b = if me == root {
                    bytes(&[i as i32; 9])
                } else {
                    vec![0; 36]
                };
                w.bcast(&mut b, root).unwrap();
                assert_eq!(from_bytes(&b), [i as i32; 9], "bcast {i}");
                // Within the stream ring's 16 bytes.
                let mut t = if me == root {
                    bytes(&[i as i32, -(i as i32), 7])
                } else {
                    vec![0; 12]
                };
                w.bcast(&mut t, root).unwrap();
                assert_eq!(from_bytes(&t), [i as i32, -(i as i32), 7], "bcast 12 B {i}");
                let mut s = [0u8; 4];
                w.allreduce(
                    Input::Buf(&bytes(&[me as i32 + i as i32])),
                    &mut s,
                    Datatype::I32,
                    &Op::Sum,
                )
                .unwrap();
                let want: i32 = (0..n as i32).map(|r| r + i as i32).sum();
                assert_eq!(from_bytes(&s), [want], "allreduce {i}");
                let mut r = [0u8; 4];
                let recv = (me == root).then_some(&mut r[..]);
                w.reduce(
                    Input::Buf(&bytes(&[1])),
                    recv,
                    Datatype::I32,
                    &Op::Sum,
                    root,
                )
                .unwrap();
                if me == root {
                    assert_eq!(from_bytes(&r), [n as i32], "reduce {i}");
                }
                let mut g = vec![0u8; 4 * n as usize];
                w.allgather(Input::Buf(&bytes(&[(me * 1000 + i) as i32])), &mut g)
                    .unwrap();
                let want: Vec<i32> = (0..n).map(|r| (r * 1000 + i) as i32).collect();
                assert_eq!(from_bytes(&g), want, "allgather {i}");
                if i % 10 == 0 {
                    w.barrier().unwrap();
                }
            }
        });
    }
}

#[test]
fn chunked_calls_with_ranks_preempted_mid_call() {
    // Allreduce and bcast above coll_sm_max (256 B): 48 KiB are 192 chunks
    // (batches of 4 for allreduce, two ops each), more ranks than cores,
    // roots rotating and ranks sleeping at different points, so ranks are
    // preempted in the middle of calls while others run ahead into later
    // slots: no rank may overwrite a chunk another has not read. (A reduce
    // in shares whose ops finished out of order failed this way in 3 runs
    // of 3; docs/journal/coll-performance.md "The slow placement's
    // remaining cells".)
    for n in [3u32, 5] {
        job_cfg(shm(n), &[("coll_sm_max", "256")], move |w, _| {
            let me = w.rank();
            for i in 0..12u32 {
                if (i * 7 + me) % 5 == 0 {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                let mine: Vec<i32> = (0..12_288).map(|k| (me * 1000 + k + i) as i32).collect();
                let want: Vec<i32> = (0..12_288)
                    .map(|k| (0..n).map(|r| (r * 1000 + k + i) as i32).sum())
                    .collect();
                let mut all = vec![0u8; 49_152];
                w.allreduce(Input::Buf(&bytes(&mine)), &mut all, Datatype::I32, &Op::Sum)
                    .unwrap();
                assert_eq!(from_bytes(&all), want, "allreduce {i}");
                let root = i % n;
                let mut b = if me == root {
                    bytes(&ints(root + i, 12_288, 5))
                } else {
                    vec![0u8; 49_152]
                };
                w.bcast(&mut b, root).unwrap();
                assert_eq!(from_bytes(&b), ints(root + i, 12_288, 5), "bcast {i}");
            }
        });
    }
}

#[test]
fn non_commutative_op_combines_in_rank_order() {
    for n in [2u32, 5, 8] {
        job_cfg(shm(n), &[], move |w, _| {
            let op = matmul();
            let inputs: Vec<Vec<u8>> = (0..n).map(|r| bytes(&ints(r, 8, 5))).collect();
            let want = fold(&op, Datatype::I32, &inputs);
            let mine = &inputs[w.rank() as usize];
            let mut out = vec![0u8; mine.len()];
            w.allreduce(Input::Buf(mine), &mut out, Datatype::I32, &op)
                .unwrap();
            assert_eq!(out, want);
            let root = n - 1;
            if w.rank() == root {
                let mut io = mine.clone();
                w.reduce(Input::InPlace, Some(&mut io), Datatype::I32, &op, root)
                    .unwrap();
                assert_eq!(io, want);
            } else {
                w.reduce(Input::Buf(mine), None, Datatype::I32, &op, root)
                    .unwrap();
            }
        });
    }
}

#[test]
fn blocking_sm_calls_beside_nonblocking_collectives_and_point_to_point() {
    for n in [2u32, 4, 7] {
        job_cfg(shm(n), &[], move |w, p| {
            let me = w.rank();
            let next = (me + 1) % n;
            let prev = (me + n - 1) % n;
            // A non-blocking collective and a user message outstanding
            // while blocking sm collectives run.
            let big = w
                .iallreduce(bytes(&ints(me, 5000, 6)), Datatype::I32, &Op::Sum)
                .unwrap();
            let ep = w.endpoint().clone();
            p.send_raw(&ep, next, 7, bytes(&[me as i32; 300])).unwrap();
            for i in 0..20 {
                let mut b = if me == 0 { bytes(&[i; 4]) } else { vec![0; 16] };
                w.bcast(&mut b, 0).unwrap();
                assert_eq!(from_bytes(&b), [i; 4]);
                w.barrier().unwrap();
            }
            let h = p.irecv_spec(ep.context_id, None, TagSpec::AnyUser, 4096);
            let got = p.wait_recv(h).unwrap();
            assert_eq!(got.tag, 7, "a wildcard receive saw a collective's message");
            assert_eq!(got.source, prev);
            assert_eq!(from_bytes(&got.data), [prev as i32; 300]);
            let inputs: Vec<Vec<u8>> = (0..n).map(|r| bytes(&ints(r, 5000, 6))).collect();
            assert_eq!(big.wait().unwrap(), fold(&Op::Sum, Datatype::I32, &inputs));
        });
    }
}

#[test]
fn length_mismatch_is_a_truncation_error_not_a_hang() {
    let out = job_cfg(shm(3), &[], |w, _| {
        let me = w.rank();
        let mut b = vec![1u8; if me == 0 { 8 } else { 16 }];
        let r = w.bcast(&mut b, 0).map_err(|e| e.class());
        // The communicator stays usable.
        w.barrier().unwrap();
        r
    });
    assert_eq!(out[0], Ok(()));
    for r in &out[1..] {
        assert_eq!(*r, Err(tmpi_base::error::MpiErrorClass::Truncate));
    }
}

#[test]
fn chunked_length_mismatch_is_a_truncation_error_not_a_hang() {
    // Above coll_sm_max bcast and allreduce run in chunks: lengths that
    // give the ranks different chunk counts (the root's bcast longer and
    // shorter than a reader's; allreduce) fail with MPI_ERR_TRUNCATE on
    // the ranks that differ (bcast) or on all (allreduce), and the next
    // calls still work.
    let out = job_cfg(shm(3), &[("coll_sm_max", "256")], |w, _| {
        let me = w.rank();
        let class = |r: tmpi_coll::Result<()>| r.map_err(|e| e.class());
        let mut b = vec![1u8; [4000, 1000, 4000][me as usize]];
        let short = class(w.bcast(&mut b, 0));
        let mut b = vec![2u8; [600, 5000, 600][me as usize]];
        let long = class(w.bcast(&mut b, 0));
        let mine = vec![1u8; if me == 2 { 900 } else { 3000 }];
        let mut out = vec![0u8; mine.len()];
        let ar = class(w.allreduce(Input::Buf(&mine), &mut out, Datatype::U8, &Op::Sum));
        // Still in step.
        let mut b = if me == 1 {
            vec![7u8; 2000]
        } else {
            vec![0u8; 2000]
        };
        w.bcast(&mut b, 1).unwrap();
        assert_eq!(b, vec![7u8; 2000]);
        let mut sum = vec![0u8; 2000];
        w.allreduce(Input::Buf(&[1u8; 2000]), &mut sum, Datatype::U8, &Op::Sum)
            .unwrap();
        assert_eq!(sum, vec![3u8; 2000]);
        w.barrier().unwrap();
        (short, long, ar)
    });
    let t = Err(tmpi_base::error::MpiErrorClass::Truncate);
    assert_eq!(out[0], (Ok(()), Ok(()), t));
    assert_eq!(out[1], (t, t, t));
    assert_eq!(out[2], (Ok(()), Ok(()), t));
}

#[test]
fn a_rank_in_an_sm_call_still_progresses_its_nonblocking_collectives() {
    // Rank 0 waits for its ibarrier before the bcast; the others enter the
    // bcast first and must keep forwarding their ibarrier's later rounds
    // from inside it (MPI's progress rule), or rank 0 never gets there.
    for n in [3u32, 5, 8] {
        job_cfg(shm(n), &[], move |w, _| {
            let me = w.rank();
            // Attach the segment first (attaching itself runs on messages).
            w.barrier().unwrap();
            if me == 0 {
                // Start last, so the others' ibarrier needs rounds after
                // they entered the bcast.
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let mut ib = Some(w.ibarrier().unwrap());
            if me == 0 {
                ib.take().unwrap().wait().unwrap();
            }
            let mut b = if me == 0 { bytes(&[5; 3]) } else { vec![0; 12] };
            w.bcast(&mut b, 0).unwrap();
            assert_eq!(from_bytes(&b), [5; 3]);
            if let Some(ib) = ib {
                ib.wait().unwrap();
            }
        });
    }
}

/// Ranks that disagree on sm's parameters keep the communicator on
/// messages instead of taking different paths for one call: the segment's
/// header carries `coll_sm_max` and `coll_sm_single_copy`, and a rank
/// whose values differ fails to attach, so no rank uses the segment (the
/// communicator's first covered call attaches; a barrier here). Then
/// allgather and alltoall of blocks between the two limits, which would
/// go through the segment or by single copy on some ranks and over
/// messages on others, complete with the right results.
#[test]
fn ranks_with_different_sm_parameters_stay_on_messages() {
    use std::sync::Arc;
    use std::time::Duration;
    use tmpi_base::mca::{Registry, Sources};
    use tmpi_coll::{sim, P2p};
    use tmpi_comm::CommContext;
    for (key, most, rank1) in [
        ("coll_sm_single_copy", "1", "0"),
        ("coll_sm_max", "256", "4096"),
    ] {
        let out = sim::run(shm(3), Duration::from_secs(120), move |p| {
            let v = if p.world_rank() == 1 { rank1 } else { most };
            let mut pairs = vec![(key.to_string(), v.to_string())];
            if key != "coll_sm_max" {
                pairs.push(("coll_sm_max".to_string(), "256".to_string()));
            }
            let reg = Registry::new(Sources::default().with_cmdline(pairs));
            let w = CommContext::init(Arc::new(p.clone()), &reg)
                .expect("init")
                .world;
            w.barrier().unwrap();
            // 75 i32 = 300-byte blocks: above 256, within 4096.
            let sm_calls = gather_and_exchange(&w, 75);
            (w.shared_calls(), sm_calls, w.single_copy())
        });
        assert_eq!(out, [(0, 0, None); 3], "{key} = {most} / {rank1} on rank 1");
    }
}

#[test]
fn ranks_on_different_paths_fail_instead_of_waiting_forever() {
    use tmpi_base::error::MpiErrorClass::{Other, Truncate};
    let class = |r: tmpi_coll::Result<()>| r.map_err(|e| e.class());
    // Bcast lengths on both sides of the stream ring's 16 bytes: the root
    // on the stream ring, the others wait on the small ring. They find the
    // root's call described differently, follow the root's ring and fail
    // (Truncate); the segment stays in step, so the barrier after it
    // works, and so does a reduce whose root's length sends it to another
    // ring than the others' (the root follows them and fails).
    let out = job_cfg(shm(3), &[], move |w, _| {
        let mut b = vec![1u8; if w.rank() == 0 { 8 } else { 32 }];
        let bc = class(w.bcast(&mut b, 0));
        let n = if w.rank() == 0 { 40 } else { 4 };
        let mut out = vec![0u8; n];
        let recv = (w.rank() == 0).then_some(&mut out[..]);
        let rd = class(w.reduce(Input::Buf(&vec![1u8; n]), recv, Datatype::U8, &Op::Sum, 0));
        (bc, rd, class(w.barrier()), w.shared_calls())
    });
    assert_eq!(
        (out[0].0, out[0].1, out[0].2),
        (Ok(()), Err(Truncate), Ok(())),
        "{out:?}"
    );
    for o in &out[1..] {
        assert_eq!((o.0, o.1, o.2), (Err(Truncate), Ok(()), Ok(())), "{out:?}");
    }
    assert!(
        out.iter().all(|o| o.3 == 3),
        "all three calls on the segment: {out:?}"
    );
    // The first call of a kind with one rank within the limit and the
    // other above it: both attach the segment (before, the rank within the
    // limit waited alone in the attach); the root goes over messages, the
    // other waits on the segment and finds the root on messages.
    let out = job_cfg(shm(2), &[("coll_sm_max", "256")], move |w, _| {
        let mut b = vec![1u8; if w.rank() == 0 { 300 } else { 200 }];
        let bc = class(w.bcast(&mut b, 0));
        (bc, class(w.barrier()), w.shared_segment())
    });
    assert_eq!(out[0], (Ok(()), Err(Other), Some(true)), "{out:?}");
    assert_eq!(out[1], (Err(Truncate), Err(Other), Some(true)), "{out:?}");
    // Different operations (barrier against bcast) and different roots.
    let out = job_cfg(shm(2), &[], move |w, _| {
        if w.rank() == 0 {
            class(w.barrier())
        } else {
            class(w.bcast(&mut [0u8; 8], 0))
        }
    });
    assert_eq!(out, [Err(Other), Err(Other)]);
    let out = job_cfg(shm(3), &[], move |w, _| {
        let mut b = [w.rank() as u8; 8];
        let root = if w.rank() == 2 { 1 } else { 0 };
        (class(w.bcast(&mut b, root)), class(w.barrier()))
    });
    assert_eq!(out[0], (Ok(()), Err(Other)), "{out:?}");
    assert_eq!(out[1], (Ok(()), Err(Other)), "{out:?}");
    assert_eq!(out[2], (Err(Other), Err(Other)), "{out:?}");
    // A blocking bcast against a non-blocking one (MPI does not match
    // them): the root's ibcast goes over messages, the other rank waits on
    // the segment and finds it.
    let out = job_cfg(shm(2), &[], move |w, _| {
        w.barrier().unwrap();
        if w.rank() == 1 {
            let r = w.ibcast(vec![5u8; 8], 1).unwrap();
            class(r.wait().map(drop))
        } else {
            class(w.bcast(&mut [0u8; 8], 1))
        }
    });
    assert_eq!(out, [Err(Other), Ok(())]);
}

#[test]
fn chunked_bcast_mismatch_follows_a_last_chunk_on_the_stream_ring() {
    // Root 3 x 256 + 8 bytes: its last chunk (8 bytes) goes on the stream
    // ring, and a rank whose length differs follows the root's chunks
    // there too (it waited on the small ring and hung).
    let out = job_cfg(shm(3), &[("coll_sm_max", "256")], |w, _| {
        let me = w.rank();
        let mut b = vec![me as u8; [776, 776, 1000][me as usize]];
        let r = w.bcast(&mut b, 0).map_err(|e| e.class());
        // Still in step.
        let mut c = vec![me as u8; 776];
        w.bcast(&mut c, 0).unwrap();
        assert_eq!(c, vec![0u8; 776]);
        w.barrier().unwrap();
        r
    });
    let t = Err(tmpi_base::error::MpiErrorClass::Truncate);
    assert_eq!(out, [Ok(()), Ok(()), t]);
}

#[test]
fn a_late_rank_is_waited_for_not_taken_for_a_mismatch() {
    // One rank arrives 300 ms late at each kind of call while the others
    // wait (looking at its call line many times meanwhile): no error, and
    // the results are right.
    let out = job_cfg(shm(3), &[("coll_sm_max", "256")], |w, _| {
        let me = w.rank();
        let late = |who: u32| {
            if me == who {
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
        };
        late(1);
        w.barrier().unwrap();
        late(2);
        let mut b = vec![me as u8; 8];
        w.bcast(&mut b, 0).unwrap();
        assert_eq!(b, vec![0u8; 8]);
        late(0);
        let mut sum = [0u8; 4];
        w.reduce(
            Input::Buf(&[1u8; 4]),
            Some(&mut sum),
            Datatype::U8,
            &Op::Sum,
            0,
        )
        .unwrap();
        late(2);
        let mut all = vec![0u8; 600];
        w.allreduce(Input::Buf(&[1u8; 600]), &mut all, Datatype::U8, &Op::Sum)
            .unwrap();
        assert_eq!(all, vec![3u8; 600]);
        late(1);
        let ops = gather_and_exchange(&w, 100);
        (sum, ops)
    });
    assert_eq!(out[0].0, [3u8; 4]);
    assert!(out.iter().all(|o| o.1 == out[0].1), "{out:?}");
}
