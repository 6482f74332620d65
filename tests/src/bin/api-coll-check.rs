//! The Rust API's collectives across real processes: `tmpirun -n N
//! api-coll-check`. Every collective of `tmpi::Comm` on typed slices
//! against a reference each rank computes itself, at sizes on both sides of
//! coll's shared-memory limits (64 KiB: the segment, chunks, single copy),
//! every root; the non-blocking ones several at once with point-to-point
//! traffic among them and a receive that blocks until they complete
//! elsewhere (the progress rule); dup, split and split_shared with point-to-point traffic on
//! the new communicators; the error classes of bad calls. Rank 0 prints
//! `api-coll-check: OK (N ranks)`. Driven by `tests/tests/api_coll.rs`.

use std::process::ExitCode;

use tmpi::{Comm, MpiErrorClass, Op};
use tmpi_tests::check::{e, say, R};
use tmpi_tests::ensure;

/// Rank `r`'s input of `n` elements (small values: sums stay exact in f64).
fn input(r: i32, n: usize, seed: i64) -> Vec<i64> {
    (0..n as i64)
        .map(|i| (i * 31 + seed * 7 + r as i64 * 1009) % 4093 - 2000)
        .collect()
}

fn collectives(w: &Comm) -> R {
    let (me, p) = (w.rank(), w.size());
    for n in [0usize, 1, 7, 1000, 8193, 70_000] {
        let all: Vec<Vec<i64>> = (0..p).map(|r| input(r, n, n as i64)).collect();
        let mine = &all[me as usize];
        let sum: Vec<i64> = (0..n).map(|i| all.iter().map(|v| v[i]).sum()).collect();
        let max: Vec<i64> = (0..n)
            .map(|i| all.iter().map(|v| v[i]).max().unwrap_or(0))
            .collect();
        // allreduce, in place, on f64 and i32 views of the same numbers
        let mut out = vec![0i64; n];
        w.allreduce(mine, &mut out, &Op::Sum).map_err(e)?;
        ensure!(out == sum, "allreduce i64 sum n={n}");
        let mut io = mine.clone();
        w.allreduce_in_place(&mut io, &Op::Max).map_err(e)?;
        ensure!(io == max, "allreduce in place max n={n}");
        let f: Vec<f64> = mine.iter().map(|&x| x as f64).collect();
        let mut fo = vec![0f64; n];
        w.allreduce(&f, &mut fo, &Op::Sum).map_err(e)?;
        ensure!(
            fo.iter().zip(&sum).all(|(&a, &b)| a == b as f64),
            "allreduce f64 n={n}"
        );
        let h: Vec<i32> = mine.iter().map(|&x| x as i32).collect();
        let mut ho = vec![0i32; n];
        w.allreduce(&h, &mut ho, &Op::Min).map_err(e)?;
        let min: Vec<i32> = (0..n)
            .map(|i| all.iter().map(|v| v[i] as i32).min().unwrap_or(0))
            .collect();
        ensure!(ho == min, "allreduce i32 min n={n}");
        for root in 0..p {
            let mut b = if me == root { mine.clone() } else { vec![0; n] };
            w.bcast(&mut b, root).map_err(e)?;
            ensure!(b == all[root as usize], "bcast n={n} root {root}");
            let mut r = vec![0i64; n];
            let recv = (me == root).then_some(&mut r[..]);
            w.reduce(mine, recv, &Op::Sum, root).map_err(e)?;
            ensure!(me != root || r == sum, "reduce n={n} root {root}");
            let mut g = vec![0i64; n * p as usize];
            let recv = (me == root).then_some(&mut g[..]);
            w.gather(mine, recv, root).map_err(e)?;
            ensure!(me != root || g == all.concat(), "gather n={n} root {root}");
            let whole = all.concat();
            let send = (me == root).then_some(&whole[..]);
            let mut part = vec![0i64; n];
            w.scatter(send, &mut part, root).map_err(e)?;
            let at = me as usize * n;
            ensure!(part == whole[at..at + n], "scatter n={n} root {root}");
        }
        let mut g = vec![0i64; n * p as usize];
        w.allgather(mine, &mut g).map_err(e)?;
        ensure!(g == all.concat(), "allgather n={n}");
        // alltoall: block d of rank s is input(s * 100 + d)
        let b = n.div_ceil(p as usize).max(1);
        let send: Vec<i64> = (0..p).flat_map(|d| input(me * 100 + d, b, 5)).collect();
        let want: Vec<i64> = (0..p).flat_map(|s| input(s * 100 + me, b, 5)).collect();
        let mut got = vec![0i64; want.len()];
        w.alltoall(&send, &mut got).map_err(e)?;
        ensure!(got == want, "alltoall block {b}");
        let mut sc = vec![0i64; n];
        w.scan(mine, &mut sc, &Op::Sum).map_err(e)?;
        let pre: Vec<i64> = (0..n)
            .map(|i| all[..=me as usize].iter().map(|v| v[i]).sum())
            .collect();
        ensure!(sc == pre, "scan n={n}");
        let mut ex = vec![-1i64; n];
        w.exscan(mine, &mut ex, &Op::Sum).map_err(e)?;
        if me > 0 {
            let pre: Vec<i64> = (0..n)
                .map(|i| all[..me as usize].iter().map(|v| v[i]).sum())
                .collect();
            ensure!(ex == pre, "exscan n={n}");
        }
    }
    Ok(())
}

/// Non-blocking collectives, several outstanding at once with
/// point-to-point traffic on the same communicator between their start
/// and their completion, completed in another order than started.
fn nonblocking(w: &Comm) -> R {
    let (me, p) = (w.rank(), w.size());
    for n in [0usize, 1, 1000, 70_000] {
        let all: Vec<Vec<i64>> = (0..p).map(|r| input(r, n, n as i64 + 3)).collect();
        let mine = all[me as usize].clone();
        let sum: Vec<i64> = (0..n).map(|i| all.iter().map(|v| v[i]).sum()).collect();
        let root = (n % p as usize) as i32;
        let bar = w.ibarrier().map_err(e)?;
        let bc = w
            .ibcast(
                if me == p - 1 {
                    mine.clone()
                } else {
                    vec![0; n]
                },
                p - 1,
            )
            .map_err(e)?;
        let ar = w.iallreduce(mine.clone(), &Op::Sum).map_err(e)?;
        let rd = w.ireduce(mine.clone(), &Op::Max, root).map_err(e)?;
        let ga = w.igather(mine.clone(), root).map_err(e)?;
        let whole = all.concat();
        let sc = w
            .iscatter((me == root).then(|| whole.clone()), n, root)
            .map_err(e)?;
        let ag = w.iallgather(mine.clone()).map_err(e)?;
        let b = n.div_ceil(p as usize).max(1);
        let send: Vec<i64> = (0..p).flat_map(|d| input(me * 100 + d, b, 9)).collect();
        let want: Vec<i64> = (0..p).flat_map(|s| input(s * 100 + me, b, 9)).collect();
        let aa = w.ialltoall(send).map_err(e)?;
        let f: Vec<f64> = mine.iter().map(|&x| x as f64).collect();
        let scn = w.iscan(f, &Op::Sum).map_err(e)?;
        let exs = w.iexscan(mine.clone(), &Op::Sum).map_err(e)?;
        // Point-to-point on the same communicator while they run.
        let mut got = [0i32; 2];
        let (right, left) = ((me + 1) % p, (me + p - 1) % p);
        w.sendrecv(&[me, n as i32], right, 11, &mut got, left, 11)
            .map_err(e)?;
        ensure!(
            got == [left, n as i32],
            "sendrecv among collectives: {got:?}"
        );
        let mut spins = 0u64;
        while !ar.test().map_err(e)? {
            spins += 1;
            ensure!(spins < 100_000_000, "iallreduce never completed (n={n})");
        }
        // Completed in reverse order of starting.
        if me > 0 {
            let pre: Vec<i64> = (0..n)
                .map(|i| all[..me as usize].iter().map(|v| v[i]).sum())
                .collect();
            ensure!(exs.wait().map_err(e)? == pre, "iexscan n={n}");
        } else {
            ensure!(exs.wait().map_err(e)?.is_empty(), "iexscan on rank 0 n={n}");
        }
        let pre: Vec<f64> = (0..n)
            .map(|i| all[..=me as usize].iter().map(|v| v[i] as f64).sum())
            .collect();
        ensure!(scn.wait().map_err(e)? == pre, "iscan f64 n={n}");
        ensure!(aa.wait().map_err(e)? == want, "ialltoall block {b}");
        ensure!(ag.wait().map_err(e)? == whole, "iallgather n={n}");
        let at = me as usize * n;
        ensure!(sc.wait().map_err(e)? == whole[at..at + n], "iscatter n={n}");
        let g = ga.wait().map_err(e)?;
        ensure!(
            if me == root { g == whole } else { g.is_empty() },
            "igather n={n} root {root}"
        );
        let max: Vec<i64> = (0..n)
            .map(|i| all.iter().map(|v| v[i]).max().unwrap_or(0))
            .collect();
        let r = rd.wait().map_err(e)?;
        ensure!(
            if me == root { r == max } else { r.is_empty() },
            "ireduce n={n} root {root}"
        );
        ensure!(ar.wait().map_err(e)? == sum, "iallreduce n={n}");
        ensure!(bc.wait().map_err(e)? == all[p as usize - 1], "ibcast n={n}");
        ensure!(bar.wait().map_err(e)?.is_empty(), "ibarrier result");
    }
    // MPI's progress rule: every rank but the last blocks in a receive from
    // the next one, which sends only once its ibcast completed; the last
    // rank's copy is forwarded by ranks sitting in that receive.
    for n in [2usize, 300_000] {
        let data: Vec<i64> = (0..n as i64).map(|i| i * 5 + 1).collect();
        let bc = w
            .ibcast(if me == 0 { data.clone() } else { vec![0; n] }, 0)
            .map_err(e)?;
        if me < p - 1 {
            let mut t = [0i32];
            w.recv(&mut t, me + 1, 78).map_err(e)?;
            ensure!(t[0] == me + 1, "token from {}: {}", me + 1, t[0]);
        }
        ensure!(
            bc.wait().map_err(e)? == data,
            "ibcast with a blocked receive n={n}"
        );
        if me > 0 {
            w.send(&[me], me - 1, 78).map_err(e)?;
        }
    }
    // A request dropped unfinished still completes on every rank: the
    // blocking allreduce after it must not wait for it.
    drop(w.iallreduce(vec![me as u64; 5], &Op::Sum).map_err(e)?);
    let mut s = [1u64];
    w.allreduce_in_place(&mut s, &Op::Sum).map_err(e)?;
    ensure!(s[0] == p as u64, "allreduce after a dropped request");
    // Errors at the start: a bad root, an alltoall that is not size blocks.
    let class = |r: Result<tmpi::CollRequest<i64>, tmpi::Error>| r.err().map(|x| x.class());
    ensure!(
        class(w.ibcast(vec![0i64; 2], p)) == Some(MpiErrorClass::Root),
        "ibcast root {p}"
    );
    if p > 1 {
        ensure!(
            class(w.ialltoall(vec![0i64; p as usize + 1])) == Some(MpiErrorClass::Count),
            "ialltoall of size + 1 elements"
        );
    }
    Ok(())
}

fn communicators(mpi: &tmpi::Mpi, w: &Comm) -> R {
    let (me, p) = (w.rank(), w.size());
    // dup: same ranks, its own traffic.
    let d = w.dup().map_err(e)?;
    ensure!(d.rank() == me && d.size() == p, "dup rank/size");
    ensure!(d.context_id() != w.context_id(), "dup kept the context id");
    let mut s = [me as u64];
    d.allreduce_in_place(&mut s, &Op::Sum).map_err(e)?;
    ensure!(s[0] == (0..p as u64).sum::<u64>(), "sum over the dup");
    // split by parity, reversed order; point-to-point ring on it.
    let half = w
        .split(Some((me % 2) as u32), -me)
        .map_err(e)?
        .ok_or("split gave none")?;
    let members: Vec<i32> = (0..p).filter(|r| r % 2 == me % 2).rev().collect();
    ensure!(half.size() as usize == members.len(), "split size");
    ensure!(members[half.rank() as usize] == me, "split rank order");
    let (hr, hs) = (half.rank(), half.size());
    let mut got = [0i32];
    let right = (hr + 1) % hs;
    let left = (hr + hs - 1) % hs;
    half.sendrecv(&[me], right, 3, &mut got, left, 3)
        .map_err(e)?;
    ensure!(
        got[0] == members[left as usize],
        "ring on the split: {} from {left}",
        got[0]
    );
    let none = w.split(None, 0).map_err(e)?;
    ensure!(none.is_none(), "MPI_UNDEFINED gave a communicator");
    // One host under tmpirun: split_shared holds everyone.
    let node = w.split_shared(0).map_err(e)?;
    ensure!(
        node.size() == p && node.rank() == me,
        "split_shared on one host"
    );
    // Errors: a bad root, a sum of bytes (u128), lengths that differ, a
    // point-to-point handle's collectives.
    let mut b = [0u8; 4];
    let class = |r: Result<(), tmpi::Error>| r.err().map(|x| x.class());
    ensure!(
        class(w.bcast(&mut b, p)) == Some(MpiErrorClass::Root),
        "bcast root {p}"
    );
    ensure!(
        class(w.bcast(&mut b, -1)) == Some(MpiErrorClass::Root),
        "bcast root -1"
    );
    let mut o = [0u128; 2];
    ensure!(
        class(w.allreduce(&[1u128, 2], &mut o, &Op::Sum)) == Some(MpiErrorClass::Op),
        "sum of u128"
    );
    let mut o = [0i64; 3];
    ensure!(
        class(w.allreduce(&[1i64, 2], &mut o, &Op::Sum)) == Some(MpiErrorClass::Count),
        "allreduce with different lengths"
    );
    let raw = mpi.comm_for_context(d.context_id()).map_err(e)?;
    ensure!(
        class(raw.bcast(&mut b, 0)) == Some(MpiErrorClass::Comm),
        "comm_for_context bcast"
    );
    w.barrier().map_err(e)
}

fn main() -> ExitCode {
    let mpi = match tmpi::init() {
        Ok(m) => m,
        Err(x) => {
            eprintln!("init: {x}");
            return ExitCode::FAILURE;
        }
    };
    let w = mpi.world();
    let r = collectives(&w)
        .and_then(|()| collectives(&mpi.self_comm()))
        .and_then(|()| nonblocking(&w))
        .and_then(|()| nonblocking(&mpi.self_comm()))
        .and_then(|()| communicators(&mpi, &w));
    match r {
        Ok(()) => {
            if w.rank() == 0 {
                say(&format!("api-coll-check: OK ({} ranks)", w.size()));
            }
            ExitCode::SUCCESS
        }
        Err(m) => {
            eprintln!("rank {}: api-coll-check FAILED: {m}", w.rank());
            ExitCode::FAILURE
        }
    }
}
