//! Multi-process programs of tmpi's fault and resource-exhaustion tests,
//! one case per run: `tmpirun -n N fault-check CASE [ARGS]`. Driven by
//! `tests/tests/faults.rs` (see `docs/reliability.md`).
//!
//! * `traffic`: every rank exchanges eager and rendezvous messages around a
//!   ring forever and prints `fault-check: rank R pid P running` once the
//!   traffic is under way (rank 0 also prints the job id and session
//!   directory). The test kills one rank from outside; the job never ends
//!   by itself.
//! * `lateinit`: before `init`, each rank prints `fault-check: early rank
//!   R pid P job J SESSION_DIR`; rank 1 then sleeps 60 s before initializing, so rank 0
//!   waits in init's fence with its btl-sm segment still in `/dev/shm`
//!   (unlinked only once every peer attached). The test kills rank 0.
//! * `nofinalize`: rank 1 returns from `main` without finalizing while
//!   every other rank is blocked in a receive from it.
//! * `collearly` (3 or more ranks): rank 0 prints `fault-check: coll rank
//!   0 pid P job J SESSION_DIR` and enters an allreduce, whose first call
//!   creates coll sm's segment; the last rank sleeps 60 s before it, so the
//!   segment stays in `/dev/shm` (unlinked only once every rank attached).
//!   The test kills the last rank.
//! * `bigsend`: rank 0 sends rank 1 messages of 16 MiB, each sent as many
//!   fragments, until an error (the tests break the connection under it
//!   with `btl_tcp_inject_reset`); rank 1 receives them. Both print their
//!   error and exit 1.
//! * `peerdeath` (2 ranks): rank 1 waits for rank 0's go-ahead and then
//!   dies (SIGKILL to itself), while rank 0 waits in a receive from it and
//!   then calls an allreduce. Rank 0 prints what each call returned and
//!   exits 3 when both failed. (The tests run rank 1 under a shell that
//!   outlives it, so that the launcher does not end the job: only the
//!   library can free rank 0.) `peerdeath-coll`: the same after a first
//!   allreduce of both ranks (which attaches coll sm's segment).
//! * `rmadeath` (2 ranks): rank 1 dies inside a lock epoch on rank 0's
//!   window while rank 0 holds an exclusive lock epoch on rank 1's; rank 0's
//!   flush, unlock and fence towards it must end (the flush and the fence
//!   failing), not wait forever. Run like `peerdeath`.
//! * `outstanding N`: N receives posted at once, matched by N non-blocking
//!   sends outstanding at once; every payload checked.
//! * `finalized` (2 or more ranks): rank 0 sends rank 1 one message and
//!   calls `MPI_Finalize` at once. Rank 1 then receives from rank 0 with
//!   a tag rank 0 never sent (must fail, not hang), receives the message it
//!   did send (must arrive), with 3 or more ranks posts an `MPI_ANY_SOURCE`
//!   receive that rank 2 satisfies after the failure (must arrive: a live
//!   member can still send), with 2 ranks one that nobody can satisfy
//!   (must fail); ranks 1.. then call an allreduce (must fail). Each check
//!   prints `fault-check: rank R CHECK: ok|FAILED ...`; all ranks exit 0.
//!   `finalized-coll`: the same after a first allreduce of all ranks
//!   (which attaches coll sm's segment: the last allreduce then waits
//!   there, not in messages).
//! * `flooded FILE`: each rank prints `fault-check: rank R pid P waiting`
//!   once initialized (its tcp listener is up, no peer connected yet) and
//!   waits until FILE exists (at most 120 s); then every rank exchanges
//!   eager and rendezvous messages with every other (each pair's first
//!   connection) and the job runs an allreduce. `ci/security-checks.sh`
//!   floods the listeners from outside meanwhile.

use std::process::ExitCode;
use std::time::Instant;

use tmpi::{Comm, Error, Request};
use tmpi_tests::check::{e, say, R};
use tmpi_tests::ensure;

/// Ring traffic until killed: eager (8 B) and rendezvous (100 KB)
/// messages, payload checked.
fn traffic(w: &Comm) -> R {
    let (rank, size) = (w.rank(), w.size());
    ensure!(size >= 2, "needs 2 ranks");
    let right = (rank + 1) % size;
    let left = (rank + size - 1) % size;
    let mut announced = false;
    for i in 0u64.. {
        let len = if i % 4 == 3 { 100_000 } else { 8 };
        let out: Vec<u8> = (0..len).map(|k| (i as usize + k) as u8).collect();
        let mut inb = vec![0u8; len];
        tmpi::scope(|s| -> Result<(), Error> {
            let r = w.irecv(s, inb.as_mut_slice(), left, 5)?;
            let q = w.isend(s, out.as_slice(), right, 5)?;
            Request::wait_all(vec![r, q])?;
            Ok(())
        })
        .map_err(e)?;
        ensure!(inb == out, "iteration {i}: wrong payload from {left}");
        if i == 40 && !announced {
            announced = true;
            if rank == 0 {
                say(&format!(
                    "fault-check: job {} {}",
                    std::env::var("TMPI_JOB_ID").unwrap_or_default(),
                    std::env::var("TMPI_SESSION_DIR").unwrap_or_default()
                ));
            }
            say(&format!(
                "fault-check: rank {rank} pid {} running",
                std::process::id()
            ));
        }
    }
    Ok(())
}

/// The `finalized` case: calls aimed at a rank inside `MPI_Finalize`.
fn finalized(w: &Comm, coll_first: bool) -> R {
    let (rank, size) = (w.rank(), w.size());
    ensure!(size >= 2, "needs 2 ranks");
    if coll_first {
        let mut sum = [0u64];
        w.allreduce(&[1u64], &mut sum, &tmpi::Op::Sum).map_err(e)?;
        ensure!(sum[0] == size as u64, "first allreduce gave {}", sum[0]);
    }
    if rank == 0 {
        w.send(&[42u8], 1, 7).map_err(e)?;
        return Ok(());
    }
    let report = |what: &str, good: bool, detail: String| {
        let verdict = if good { "ok" } else { "FAILED" };
        say(&format!(
            "fault-check: rank {rank} {what}: {verdict} ({detail})"
        ));
    };
    if rank == 1 {
        let mut b = [0u8; 1];
        let r = w.recv(&mut b, 0, 8);
        report(
            "receive-never-sent",
            r.is_err(),
            r.map_or_else(|x| x.to_string(), |_| "completed".into()),
        );
        let mut b = [0u8; 1];
        let r = w.recv(&mut b, 0, 7);
        report(
            "receive-sent-before-finalize",
            r.is_ok() && b[0] == 42,
            r.map_or_else(|x| x.to_string(), |_| format!("got {}", b[0])),
        );
        let mut b = [0u8; 1];
        if size >= 3 {
            let r = tmpi::scope(|s| -> Result<(), Error> {
                let q = w.irecv(s, &mut b[..], tmpi::ANY_SOURCE, 9)?;
                w.send(&[1u8], 2, 10)?;
                q.wait()?;
                Ok(())
            });
            report(
                "any-source-live-sender",
                r.is_ok() && b[0] == 2,
                r.map_or_else(|x| x.to_string(), |_| format!("got {}", b[0])),
            );
        } else {
            let r = w.recv(&mut b, tmpi::ANY_SOURCE, 9);
            report(
                "any-source-nobody-left",
                r.is_err(),
                r.map_or_else(|x| x.to_string(), |_| "completed".into()),
            );
        }
    } else if rank == 2 {
        let mut b = [0u8; 1];
        w.recv(&mut b, 1, 10).map_err(e)?;
        w.send(&[2u8], 1, 9).map_err(e)?;
    }
    let mut sum = [0u64];
    let r = w.allreduce(&[1u64], &mut sum, &tmpi::Op::Sum);
    report(
        "allreduce",
        r.is_err(),
        r.map_or_else(|x| x.to_string(), |_| format!("completed with {}", sum[0])),
    );
    Ok(())
}

/// Waits for `go` to exist, then every pair of ranks connects and
/// exchanges messages (the `flooded` case).
fn flooded(w: &Comm, go: String) -> R {
    ensure!(
        !go.is_empty(),
        "flooded needs the path of the go-ahead file"
    );
    let (rank, size) = (w.rank(), w.size());
    say(&format!(
        "fault-check: rank {rank} pid {} waiting",
        std::process::id()
    ));
    let deadline = Instant::now() + std::time::Duration::from_secs(120);
    while !std::path::Path::new(&go).exists() {
        ensure!(Instant::now() < deadline, "{go} never appeared");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for d in 1..size {
        let (to, from) = ((rank + d) % size, (rank + size - d) % size);
        for len in [8usize, 300_000] {
            let out: Vec<u8> = (0..len).map(|k| (k as i32 + rank) as u8).collect();
            let mut inb = vec![0u8; len];
            tmpi::scope(|s| -> Result<(), Error> {
                let r = w.irecv(s, inb.as_mut_slice(), from, 9)?;
                let q = w.isend(s, out.as_slice(), to, 9)?;
                Request::wait_all(vec![r, q])?;
                Ok(())
            })
            .map_err(e)?;
            let want: Vec<u8> = (0..len).map(|k| (k as i32 + from) as u8).collect();
            ensure!(inb == want, "wrong {len}-byte payload from {from}");
        }
    }
    let mut sum = [0u64];
    w.allreduce(&[rank as u64 + 1], &mut sum, &tmpi::Op::Sum)
        .map_err(e)?;
    let n = size as u64;
    ensure!(sum[0] == n * (n + 1) / 2, "allreduce gave {}", sum[0]);
    say(&format!(
        "fault-check: rank {rank} exchanged with every peer"
    ));
    Ok(())
}

/// Every rank but 1 waits for a message from rank 1, which never sends it.
fn nofinalize_peer(w: &Comm) -> R {
    let mut b = [0u8; 8];
    // Let rank 1 know we are about to block (so it leaves while we wait).
    w.send(&[1u8], 1, 1).map_err(e)?;
    match w.recv(&mut b, 1, 2) {
        Ok(_) => say(&format!(
            "fault-check: UNEXPECTED rank {} received from the departed rank",
            w.rank()
        )),
        Err(x) => say(&format!(
            "fault-check: rank {} receive failed: {x}",
            w.rank()
        )),
    }
    Ok(())
}

/// 16 MiB messages from rank 0 to rank 1 until one fails.
fn bigsend(w: &Comm) -> R {
    ensure!(w.size() == 2, "needs 2 ranks");
    let mut b = vec![0u8; 16 << 20];
    for i in 0u32.. {
        if w.rank() == 0 {
            b[0] = i as u8;
            w.send(&b[..], 1, 3).map_err(e)?;
        } else {
            w.recv(&mut b[..], 0, 3).map_err(e)?;
            ensure!(b[0] == i as u8, "message {i}: wrong payload");
        }
    }
    Ok(())
}

/// Rank 1 dies while rank 0 waits for it (see the module docs).
fn peerdeath(w: &Comm, coll_first: bool) -> R {
    ensure!(w.size() == 2, "needs 2 ranks");
    if coll_first {
        let mut sum = [0u64];
        w.allreduce(&[1u64], &mut sum, &tmpi::Op::Sum).map_err(e)?;
        ensure!(sum[0] == 2, "first allreduce gave {}", sum[0]);
    }
    if w.rank() == 1 {
        let mut go = [0u8];
        w.recv(&mut go, 0, 1).map_err(e)?;
        say("fault-check: rank 1 dies now");
        // SAFETY: raising a signal in this process.
        unsafe { libc::raise(libc::SIGKILL) };
        unreachable!("SIGKILL returned");
    }
    w.send(&[1u8], 1, 1).map_err(e)?;
    let mut b = [0u8; 8];
    let recv = w.recv(&mut b, 1, 2);
    say(&format!(
        "fault-check: rank 0 receive from rank 1: {}",
        match &recv {
            Ok(_) => "UNEXPECTED success".to_string(),
            Err(x) => format!("failed: {x}"),
        }
    ));
    let mut sum = [0u64];
    let red = w.allreduce(&[1u64], &mut sum, &tmpi::Op::Sum);
    say(&format!(
        "fault-check: rank 0 allreduce: {}",
        match &red {
            Ok(()) => "UNEXPECTED success".to_string(),
            Err(x) => format!("failed: {x}"),
        }
    ));
    if recv.is_err() && red.is_err() {
        std::process::exit(3);
    }
    Err("a call on the dead rank did not fail".into())
}

/// Rank 1 dies (SIGKILL) inside a passive-target epoch rank 0 holds on
/// its window, after a first put and flush went through; rank 0 then puts
/// and flushes again (the flush waits for rank 1's reply), unlocks and
/// calls a fence. Each call must fail or return, none may wait forever;
/// rank 0 exits 3 when the flush and the fence failed. Rank 1 also holds a
/// shared lock epoch on rank 0's window when it dies (its lock is never
/// released).
fn rmadeath(w: &Comm) -> R {
    ensure!(w.size() == 2, "needs 2 ranks");
    let win = w.window(vec![0u64; 64]).map_err(e)?;
    if w.rank() == 1 {
        win.lock(tmpi::Lock::Shared, 0).map_err(e)?;
        win.put(&[11u64], 0, 1).map_err(e)?;
        win.flush(Some(0)).map_err(e)?;
        let mut go = [0u8];
        // Rank 0's first epoch on this window is served while waiting here.
        w.recv(&mut go, 0, 1).map_err(e)?;
        say("fault-check: rank 1 dies now, inside a lock epoch");
        // SAFETY: raising a signal in this process.
        unsafe { libc::raise(libc::SIGKILL) };
        unreachable!("SIGKILL returned");
    }
    win.lock(tmpi::Lock::Exclusive, 1).map_err(e)?;
    win.put(&[7u64; 8], 1, 0).map_err(e)?;
    win.flush(Some(1)).map_err(e)?;
    say("fault-check: rank 0 first epoch on rank 1: flushed");
    w.send(&[1u8], 1, 1).map_err(e)?;
    // Wait until rank 1 is gone: a receive that only its death ends.
    let mut b = [0u8; 8];
    let gone = w.recv(&mut b, 1, 2);
    ensure!(gone.is_err(), "a receive from the dead rank succeeded");
    win.put(&[8u64; 8], 1, 8).map_err(e)?;
    let flush = win.flush(Some(1));
    let unlock = win.unlock(1);
    let fence = win.fence();
    for (what, r) in [("flush", &flush), ("unlock", &unlock), ("fence", &fence)] {
        say(&format!(
            "fault-check: rank 0 {what} towards the dead rank: {}",
            match r {
                Ok(()) => "returned".to_string(),
                Err(x) => format!("failed: {x}"),
            }
        ));
    }
    if flush.is_err() && fence.is_err() {
        std::process::exit(3);
    }
    Err("an RMA call needing the dead rank did not fail".into())
}

/// The first allreduce (coll sm creates its segment) with the last rank
/// 60 s late.
fn collearly(w: &Comm) -> R {
    ensure!(w.size() >= 3, "needs 3 ranks");
    if w.rank() == 0 {
        say(&format!(
            "fault-check: coll rank 0 pid {} job {} {}",
            std::process::id(),
            std::env::var("TMPI_JOB_ID").unwrap_or_default(),
            std::env::var("TMPI_SESSION_DIR").unwrap_or_default()
        ));
    }
    if w.rank() + 1 == w.size() {
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
    let mut sum = [0u64];
    w.allreduce(&[1u64], &mut sum, &tmpi::Op::Sum).map_err(e)?;
    ensure!(sum[0] == w.size() as u64, "allreduce gave {}", sum[0]);
    Ok(())
}

/// `n` receives posted at once, then `n` sends outstanding at once.
fn outstanding(w: &Comm, n: usize) -> R {
    ensure!(w.size() >= 2, "needs 2 ranks");
    let t0 = Instant::now();
    match w.rank() {
        0 => {
            let mut go = [0u8];
            w.recv(&mut go, 1, 0).map_err(e)?;
            let out: Vec<[u64; 2]> = (0..n as u64).map(|i| [i, !i]).collect();
            tmpi::scope(|s| -> Result<(), Error> {
                let reqs = out
                    .iter()
                    .enumerate()
                    .map(|(i, m)| w.isend(s, m.as_slice(), 1, (i % 32_000) as i32))
                    .collect::<Result<Vec<_>, _>>()?;
                Request::wait_all(reqs)?;
                Ok(())
            })
            .map_err(e)?;
        }
        1 => {
            let mut inb = vec![[0u64; 2]; n];
            tmpi::scope(|s| -> Result<(), Error> {
                let reqs = inb
                    .iter_mut()
                    .enumerate()
                    .map(|(i, b)| w.irecv(s, b.as_mut_slice(), 0, (i % 32_000) as i32))
                    .collect::<Result<Vec<_>, _>>()?;
                // Every receive is posted before the first send starts.
                w.send(&[1u8], 0, 0)?;
                let st = Request::wait_all(reqs)?;
                if st.len() != n {
                    return Err(Error::new(
                        tmpi::MpiErrorClass::Intern,
                        format!("{} statuses for {n} requests", st.len()),
                    ));
                }
                Ok(())
            })
            .map_err(e)?;
            for (i, b) in inb.iter().enumerate() {
                let i = i as u64;
                ensure!(*b == [i, !i], "receive {i} got {b:?}");
            }
            say(&format!(
                "fault-check: outstanding {n} requests completed in {:.3} s",
                t0.elapsed().as_secs_f64()
            ));
        }
        _ => {}
    }
    w.barrier().map_err(e)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_default();
    let num = args.next().and_then(|a| a.parse::<usize>().ok());
    if case == "lateinit" {
        let rank = std::env::var("PMI_RANK").unwrap_or_default();
        say(&format!(
            "fault-check: early rank {rank} pid {} job {} {}",
            std::process::id(),
            std::env::var("TMPI_JOB_ID").unwrap_or_default(),
            std::env::var("TMPI_SESSION_DIR").unwrap_or_default()
        ));
        if rank == "1" {
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
    }
    let mpi = match tmpi::init() {
        Ok(m) => m,
        Err(x) => {
            eprintln!("fault-check: init: {x}");
            return ExitCode::FAILURE;
        }
    };
    let w = mpi.world();
    let r = match case.as_str() {
        "traffic" => traffic(&w),
        "lateinit" => Ok(()),
        "collearly" => collearly(&w),
        "bigsend" => bigsend(&w),
        "peerdeath" => peerdeath(&w, false),
        "peerdeath-coll" => peerdeath(&w, true),
        "rmadeath" => rmadeath(&w),
        "nofinalize" => {
            if w.rank() == 1 {
                for p in (0..w.size()).filter(|&p| p != 1) {
                    let mut b = [0u8];
                    if let Err(x) = w.recv(&mut b, p, 1) {
                        eprintln!("fault-check: rank 1: {x}");
                        return ExitCode::FAILURE;
                    }
                }
                say("fault-check: rank 1 returns from main without finalize");
                // What a C program does by returning without MPI_Finalize.
                std::mem::forget(w);
                std::mem::forget(mpi);
                return ExitCode::SUCCESS;
            }
            nofinalize_peer(&w)
        }
        "outstanding" => outstanding(&w, num.unwrap_or(100_000)),
        "finalized" => finalized(&w, false),
        "finalized-coll" => finalized(&w, true),
        "flooded" => flooded(&w, std::env::args().nth(2).unwrap_or_default()),
        _ => Err(format!("unknown case {case:?}")),
    };
    match r {
        Ok(()) => {
            if w.rank() == 0 {
                say(&format!("fault-check {case}: OK ({} ranks)", w.size()));
            }
            ExitCode::SUCCESS
        }
        Err(x) => {
            eprintln!("fault-check {case}: rank {} FAILED: {x}", w.rank());
            std::process::exit(1)
        }
    }
}
