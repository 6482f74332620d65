//! A self-test and a benchmark of the collectives over whatever transport a
//! communicator runs on; used by the `coll-check` binary (under `tmpirun`)
//! and by the tests over the pml's in-process transport.

use std::time::Instant;

use crate::Comm;
use tmpi_coll::{Datatype, Input, Op};

fn ints(rank: u32, n: usize, seed: u32) -> Vec<u8> {
    (0..n)
        .flat_map(|i| {
            ((rank + 1).wrapping_mul(7919) ^ (i as u32).wrapping_mul(31) ^ seed).to_ne_bytes()
        })
        .collect()
}

fn fold_sum(inputs: &[Vec<u8>]) -> Vec<u8> {
    let mut acc = inputs[0].clone();
    for x in &inputs[1..] {
        Op::Sum.apply(Datatype::U32, x, &mut acc).expect("sum");
    }
    acc
}

/// Every collective against a local reference, every root, several
/// counts up to 300 000 elements (allreduce and allgather also in place); sub-communicators (split, dup with
/// context id reuse after free, create, create_group); several
/// non-blocking collectives outstanding at once on two communicators.
/// `Err` names the first mismatch.
pub fn check(w: &Comm) -> Result<(), String> {
    let p = w.size();
    let me = w.rank();
    for count in [0usize, 1, 100, 5000, 16_385, 300_000] {
        let inputs: Vec<Vec<u8>> = (0..p).map(|r| ints(r, count, count as u32)).collect();
        let sum = fold_sum(&inputs);
        let mut out = vec![0u8; count * 4];
        w.allreduce(
            Input::Buf(&inputs[me as usize]),
            &mut out,
            Datatype::U32,
            &Op::Sum,
        )
        .map_err(|e| e.to_string())?;
        if out != sum {
            return Err(format!("allreduce count {count}"));
        }
        let mut io = inputs[me as usize].clone();
        w.allreduce(Input::InPlace, &mut io, Datatype::U32, &Op::Sum)
            .map_err(|e| e.to_string())?;
        if io != sum {
            return Err(format!("allreduce in place count {count}"));
        }
        for root in 0..p {
            let mut b = if me == root {
                inputs[root as usize].clone()
            } else {
                vec![0; count * 4]
            };
            w.bcast(&mut b, root).map_err(|e| e.to_string())?;
            if b != inputs[root as usize] {
                return Err(format!("bcast count {count} root {root}"));
            }
            let mut r = vec![0u8; count * 4];
            let recv = (me == root).then_some(&mut r[..]);
            w.reduce(
                Input::Buf(&inputs[me as usize]),
                recv,
                Datatype::U32,
                &Op::Sum,
                root,
            )
            .map_err(|e| e.to_string())?;
            if me == root && r != sum {
                return Err(format!("reduce count {count} root {root}"));
            }
        }
        let all: Vec<u8> = inputs.concat();
        let mut g = vec![0u8; all.len()];
        w.allgather(Input::Buf(&inputs[me as usize]), &mut g)
            .map_err(|e| e.to_string())?;
        if g != all {
            return Err(format!("allgather count {count}"));
        }
        let b = count * 4;
        let mut g = vec![0u8; all.len()];
        g[me as usize * b..(me as usize + 1) * b].copy_from_slice(&inputs[me as usize]);
        w.allgather(Input::InPlace, &mut g)
            .map_err(|e| e.to_string())?;
        if g != all {
            return Err(format!("allgather in place count {count}"));
        }
        let send: Vec<u8> = (0..p)
            .flat_map(|d| ints(me * 64 + d, count / 4, 3))
            .collect();
        let want: Vec<u8> = (0..p)
            .flat_map(|s| ints(s * 64 + me, count / 4, 3))
            .collect();
        let mut a = vec![0u8; want.len()];
        w.alltoall(Input::Buf(&send), &mut a)
            .map_err(|e| e.to_string())?;
        if a != want {
            return Err(format!("alltoall count {count}"));
        }
        let mut s = vec![0u8; count * 4];
        w.scan(
            Input::Buf(&inputs[me as usize]),
            &mut s,
            Datatype::U32,
            &Op::Sum,
        )
        .map_err(|e| e.to_string())?;
        if s != fold_sum(&inputs[..=me as usize]) {
            return Err(format!("scan count {count}"));
        }
        w.barrier().map_err(|e| e.to_string())?;
    }
    // Sub-communicators: odd/even split with reversed keys, dup, create.
    let sub = w
        .split(Some(me % 2), -(me as i32))
        .map_err(|e| e.to_string())?
        .ok_or("split gave no communicator")?;
    let expect_size = (p + 1 - me % 2) / 2;
    if sub.size() != expect_size {
        return Err(format!("split size {} != {expect_size}", sub.size()));
    }
    let mut v = (me as u64).to_ne_bytes().to_vec();
    sub.allreduce(Input::InPlace, &mut v, Datatype::U64, &Op::Sum)
        .map_err(|e| e.to_string())?;
    let want: u64 = (0..p).filter(|r| r % 2 == me % 2).map(u64::from).sum();
    if u64::from_ne_bytes(v.try_into().expect("8")) != want {
        return Err("allreduce on split".into());
    }
    let d = w.dup().map_err(|e| e.to_string())?;
    if d.context_id() == w.context_id() || d.context_id() == sub.context_id() {
        return Err("dup reused a live context id".into());
    }
    // Several non-blocking collectives outstanding at once on two communicators.
    let r1 = d
        .ibcast(
            if d.rank() == 0 {
                vec![7; 1000]
            } else {
                vec![0; 1000]
            },
            0,
        )
        .map_err(|e| e.to_string())?;
    let r2 = w
        .iallreduce(1u64.to_ne_bytes().to_vec(), Datatype::U64, &Op::Sum)
        .map_err(|e| e.to_string())?;
    let r3 = d.ibarrier().map_err(|e| e.to_string())?;
    let r4 = w.iallgather(vec![me as u8; 3]).map_err(|e| e.to_string())?;
    // Blocking collectives on `w` while two non-blocking ones are
    // outstanding on it: they take the next sequence numbers (tags) and
    // must neither match the outstanding ones' messages nor stall them.
    let mut x = [0u8; 8];
    w.allreduce(
        Input::Buf(&(u64::from(me) + 1).to_ne_bytes()),
        &mut x,
        Datatype::U64,
        &Op::Sum,
    )
    .map_err(|e| e.to_string())?;
    let mut y = if me == p - 1 { [9u8; 5] } else { [0u8; 5] };
    w.bcast(&mut y, p - 1).map_err(|e| e.to_string())?;
    if u64::from_ne_bytes(x) != u64::from(p) * (u64::from(p) + 1) / 2 || y != [9u8; 5] {
        return Err("blocking collectives among outstanding non-blocking ones".into());
    }
    let g4 = r4.wait().map_err(|e| e.to_string())?;
    r3.wait().map_err(|e| e.to_string())?;
    let s2 = r2.wait().map_err(|e| e.to_string())?;
    let b1 = r1.wait().map_err(|e| e.to_string())?;
    if b1 != vec![7; 1000] || u64::from_ne_bytes(s2.try_into().expect("8")) != u64::from(p) {
        return Err("non-blocking results".into());
    }
    if g4 != (0..p).flat_map(|r| [r as u8; 3]).collect::<Vec<_>>() {
        return Err("iallgather result".into());
    }
    let cid = d.context_id();
    d.free().map_err(|e| e.to_string())?;
    let d2 = w.dup().map_err(|e| e.to_string())?;
    if d2.context_id() != cid {
        return Err(format!(
            "freed context id {cid} not reused ({})",
            d2.context_id()
        ));
    }
    let half = w
        .group()
        .range_incl(&[(0, i64::from(p) - 1, 2)])
        .map_err(|e| e.to_string())?;
    let c = w.create(&half).map_err(|e| e.to_string())?;
    if c.is_some() != me.is_multiple_of(2) {
        return Err("create membership".into());
    }
    if let Some(c) = c {
        c.barrier().map_err(|e| e.to_string())?;
        let g = w.group().incl(&[0]).map_err(|e| e.to_string())?;
        if me == 0 {
            let solo = c.create_group(&g, 5).map_err(|e| e.to_string())?;
            solo.barrier().map_err(|e| e.to_string())?;
        }
    }
    w.barrier().map_err(|e| e.to_string())?;
    Ok(())
}

/// Bytes of a host identity exchanged by [`check_nodes`].
const HOST_ID_LEN: usize = 96;

/// What makes this process's host itself, found without the launcher: the
/// host name and the network namespace (the multinode CI stage's "hosts"
/// are namespaces of one machine, with one host name).
fn host_identity() -> Vec<u8> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let netns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut id = format!("{}|{netns}", host.trim()).into_bytes();
    id.resize(HOST_ID_LEN, 0);
    id
}

/// `split_type(SHARED)` against the hosts the processes really run on:
/// every rank's host identity (host name and network namespace) is
/// exchanged, and the shared communicator must hold exactly the ranks with
/// this rank's identity, in world order. With `expect_nodes`, the job must
/// span that many hosts. The node communicator then passes [`check`] with
/// its small blocking collectives through the `sm` segment (when it has
/// two ranks or more), and a job spanning hosts passes [`check`] on `w`
/// without attaching one. Returns the number of hosts and this rank's node size.
pub fn check_nodes(w: &Comm, expect_nodes: Option<u32>) -> Result<(u32, u32), String> {
    let e = |e: tmpi_coll::CollError| e.to_string();
    let p = w.size() as usize;
    let mine = host_identity();
    let mut all = vec![0u8; p * HOST_ID_LEN];
    w.allgather(Input::Buf(&mine), &mut all).map_err(e)?;
    let ids: Vec<&[u8]> = all.chunks(HOST_ID_LEN).collect();
    let mut distinct = ids.clone();
    distinct.sort();
    distinct.dedup();
    let hosts = distinct.len() as u32;
    if let Some(n) = expect_nodes {
        if hosts != n {
            return Err(format!("job spans {hosts} hosts, expected {n}"));
        }
    }
    let want: Vec<u32> = (0..p as u32)
        .filter(|&r| ids[r as usize] == &mine[..])
        .map(|r| w.group().world_ranks()[r as usize])
        .collect();
    let node = w
        .split_type(crate::SplitType::Shared, w.rank() as i32)
        .map_err(e)?
        .ok_or("split_type(SHARED) gave no communicator")?;
    let got: Vec<u32> = node.group().world_ranks().to_vec();
    if got != want {
        return Err(format!(
            "split_type(SHARED) holds world ranks {got:?}, this host runs {want:?}"
        ));
    }
    check(&node).map_err(|m| format!("node communicator: {m}"))?;
    if node.size() > 1 && node.shared_calls() == 0 {
        return Err(format!(
            "no collective of the {}-rank node communicator went through sm (segment: {:?})",
            node.size(),
            node.shared_segment()
        ));
    }
    if hosts > 1 {
        check(w).map_err(|m| format!("communicator spanning hosts: {m}"))?;
    }
    if hosts > 1 && w.shared_segment().is_some() {
        return Err("a communicator spanning hosts attached an sm segment".into());
    }
    let size = node.size();
    node.free().map_err(e)?;
    Ok((hosts, size))
}

/// Latency of barrier, bcast, allreduce, reduce, allgather and alltoall at
/// 8 B, 1 KiB, 64 KiB and 1 MiB per rank (median of 5 timed loops); rank 0
/// prints one line per point.
pub fn bench(w: &Comm) {
    let sizes = [8usize, 1024, 64 * 1024, 1024 * 1024];
    let p = w.size() as usize;
    type Case = (&'static str, fn(&Comm, &[u8], &mut Vec<u8>));
    let cases: [Case; 6] = [
        ("barrier", |w, _, _| w.barrier().expect("barrier")),
        // In a persistent buffer, as coll_bench.c's MPI_Bcast(s, ...): no
        // allocation per call in the measured loop.
        ("bcast", |w, s, o| {
            if o.len() != s.len() {
                o.clear();
                o.extend_from_slice(s);
            }
            w.bcast(o, 0).expect("bcast")
        }),
        ("allreduce", |w, s, o| {
            o.resize(s.len(), 0);
            w.allreduce(Input::Buf(s), o, Datatype::F64, &Op::Sum)
                .expect("allreduce")
        }),
        ("reduce", |w, s, o| {
            o.resize(s.len(), 0);
            let r = (w.rank() == 0).then_some(&mut o[..]);
            w.reduce(Input::Buf(s), r, Datatype::F64, &Op::Sum, 0)
                .expect("reduce")
        }),
        ("allgather", |w, s, o| {
            o.resize(s.len() * w.size() as usize, 0);
            w.allgather(Input::Buf(s), o).expect("allgather")
        }),
        ("alltoall", |w, s, o| {
            let p = w.size() as usize;
            let blk = s.len().max(p) / p;
            o.resize(blk * p, 0);
            w.alltoall(Input::Buf(&s[..blk * p]), o).expect("alltoall")
        }),
    ];
    // COLL_BENCH_OPS=bcast,allreduce and COLL_BENCH_SIZES=65536,1048576
    // restrict a run (short runs on a shared machine).
    let pick = |var: &str| std::env::var(var).ok().filter(|v| !v.is_empty());
    let ops = pick("COLL_BENCH_OPS");
    let only_sizes: Option<Vec<usize>> = pick("COLL_BENCH_SIZES")
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect());
    for (name, f) in cases {
        if ops
            .as_ref()
            .is_some_and(|o| !o.split(',').any(|x| x == name))
        {
            continue;
        }
        for &n in &sizes {
            if name == "barrier" && n != 8 {
                continue;
            }
            if only_sizes.as_ref().is_some_and(|s| !s.contains(&n)) {
                continue;
            }
            let send = vec![1u8; n.max(p)];
            let mut out = Vec::new();
            let iters = (200_000_000 / (n * p + 20_000)).clamp(5, 2000);
            for _ in 0..iters.min(50) {
                f(w, &send, &mut out);
            }
            let mut runs = Vec::new();
            for _ in 0..5 {
                w.barrier().expect("barrier");
                let t = Instant::now();
                for _ in 0..iters {
                    f(w, &send, &mut out);
                }
                runs.push(t.elapsed().as_secs_f64() * 1e6 / iters as f64);
            }
            runs.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
            if w.rank() == 0 {
                println!("bench {name} {} ranks {n} B: {:.2} us", w.size(), runs[2]);
            }
        }
    }
}

/// Round-trip time of a message between ranks 0 and 1 over the
/// communicator's transport (the same `isend_shared`/`irecv`/`test` calls
/// as the schedules), for the benchmark's sizes (`COLL_BENCH_SIZES`
/// restricts them): the point-to-point floor of a 2-rank collective.
/// Other ranks only take part in the barriers.
pub fn pingpong(w: &Comm) {
    use std::sync::Arc;
    use tmpi_coll::{Done, P2pHandle, SharedBytes};
    let p2p = Arc::clone(w.context().p2p());
    let ep = w.endpoint().clone();
    let me = w.rank();
    let wait = |h: P2pHandle| -> Done {
        loop {
            if let Some(d) = p2p.test(h).expect("pingpong test") {
                return d;
            }
            if !p2p.progress() {
                p2p.idle();
            }
        }
    };
    let only_sizes: Option<Vec<usize>> = std::env::var("COLL_BENCH_SIZES")
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect());
    const TAG: i32 = 7;
    for n in [8usize, 1024, 64 * 1024, 1024 * 1024] {
        if only_sizes.as_ref().is_some_and(|s| !s.contains(&n)) {
            continue;
        }
        let data = Arc::new(vec![1u8; n]);
        let iters = (200_000_000 / (2 * n + 20_000)).clamp(5, 2000);
        let one = || match me {
            0 => {
                let s = SharedBytes::new(Arc::clone(&data), 0..n).expect("range");
                let hs = p2p.isend_shared(&ep, 1, TAG, s).expect("isend");
                wait(hs);
                let hr = p2p.irecv(&ep, 1, TAG, n).expect("irecv");
                wait(hr);
            }
            1 => {
                let hr = p2p.irecv(&ep, 0, TAG, n).expect("irecv");
                let Done::Received(b) = wait(hr) else {
                    panic!("receive completed as a send")
                };
                let hs = p2p.isend(&ep, 0, TAG, b).expect("isend");
                wait(hs);
            }
            _ => {}
        };
        for _ in 0..iters.min(50) {
            one();
        }
        let mut runs = Vec::new();
        for _ in 0..5 {
            w.barrier().expect("barrier");
            let t = Instant::now();
            for _ in 0..iters {
                one();
            }
            runs.push(t.elapsed().as_secs_f64() * 1e6 / iters as f64);
        }
        runs.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
        if me == 0 {
            println!("pingpong {n} B: {:.2} us per round trip", runs[2]);
        }
    }
}
