//! The Rust API's one-sided windows across real processes: `tmpirun -n N
//! api-window-check`. Fence epochs (put to the next rank, get from it,
//! sum-accumulates from everyone), passive-target epochs (exclusive locks
//! with fetch-and-op as a shared counter, compare-and-swap, shared locks
//! with gets flushed per target, lock_all), windows of different lengths
//! per rank (one rank exposing nothing), and the errors: an operation
//! outside an epoch, a result taken before the synchronisation that
//! completes it, a ticket taken twice, an out-of-window target; PSCW rounds
//! (ended by wait and by test) on a shared window, get_accumulate and
//! flush_local under lock_all; an allocated window. The final
//! memory comes back through `into_vec`. Rank 0 prints
//! `api-window-check: OK (N ranks)`. Driven by `tests/tests/api_window.rs`.

use std::process::ExitCode;

use tmpi::{Comm, Lock, MpiErrorClass, Op};
use tmpi_tests::check::{e, say, R};
use tmpi_tests::ensure;

fn class(r: Result<impl Sized, tmpi::Error>) -> Option<MpiErrorClass> {
    r.err().map(|x| x.class())
}

fn fences(w: &Comm) -> R {
    let (me, p) = (w.rank(), w.size());
    let (next, prev) = ((me + 1) % p, (me + p - 1) % p);
    let win = w.window(vec![0i64; 8]).map_err(e)?;
    ensure!(win.len() == 8, "window length");
    // An operation before any epoch.
    ensure!(
        class(win.put(&[1], next, 0)) == Some(MpiErrorClass::RmaSync),
        "put outside an epoch"
    );
    win.fence().map_err(e)?;
    win.put(&[me as i64 * 10, me as i64 * 10 + 1], next, 0)
        .map_err(e)?;
    for r in 0..p {
        win.accumulate(&[me as i64 + 1], r, 7, Some(&Op::Sum))
            .map_err(e)?;
    }
    win.fence().map_err(e)?;
    let t = win.get(next, 0, 2).map_err(e)?;
    // Not complete before the next fence.
    ensure!(
        class(win.take(t)) == Some(MpiErrorClass::RmaSync),
        "take before the completing fence"
    );
    // Out of the target's window: 8 elements.
    ensure!(
        class(win.put(&[0, 0], next, 7)) == Some(MpiErrorClass::RmaRange),
        "put past the window"
    );
    win.fence().map_err(e)?;
    let got = win.take(t).map_err(e)?;
    ensure!(
        got == vec![me as i64 * 10, me as i64 * 10 + 1],
        "get after fence: {got:?}"
    );
    ensure!(
        class(win.take(t)) == Some(MpiErrorClass::Arg),
        "a ticket taken twice"
    );
    let mem = win.into_vec().map_err(e)?;
    let total: i64 = (1..=p as i64).sum();
    ensure!(
        mem[0] == prev as i64 * 10 && mem[1] == prev as i64 * 10 + 1 && mem[7] == total,
        "window memory after fences: {mem:?}"
    );
    Ok(())
}

fn passive(w: &Comm) -> R {
    let (me, p) = (w.rank(), w.size());
    // Rank 0 holds a counter and a flag; the others expose nothing.
    let win = w
        .window(if me == 0 { vec![0u64; 2] } else { Vec::new() })
        .map_err(e)?;
    ensure!(win.is_empty() == (me != 0), "lengths per rank");
    let mut mine = Vec::new();
    for _ in 0..5 {
        win.lock(Lock::Exclusive, 0).map_err(e)?;
        let t = win.fetch_and_op(1, 0, 0, Some(&Op::Sum)).map_err(e)?;
        win.unlock(0).map_err(e)?;
        mine.push(win.take(t).map_err(e)?[0]);
    }
    // Whoever swaps 0 -> me+1 first wins; the others see the winner.
    win.lock(Lock::Exclusive, 0).map_err(e)?;
    let t = win.compare_and_swap(me as u64 + 1, 0, 0, 1).map_err(e)?;
    win.flush(Some(0)).map_err(e)?;
    let before = win.take(t).map_err(e)?[0];
    win.unlock(0).map_err(e)?;
    // Every fetched counter value is distinct across ranks.
    let mut all = vec![0u64; 5 * p as usize];
    w.allgather(&mine, &mut all).map_err(e)?;
    all.sort_unstable();
    ensure!(
        all == (0..5 * p as u64).collect::<Vec<_>>(),
        "fetch_and_op values: {all:?}"
    );
    let mut winners = vec![0u64; p as usize];
    w.allgather(&[u64::from(before == 0)], &mut winners)
        .map_err(e)?;
    ensure!(
        winners.iter().sum::<u64>() == 1,
        "one compare-and-swap wins: {winners:?}"
    );
    w.barrier().map_err(e)?;
    // Everyone reads the final values under a shared lock_all.
    win.lock_all().map_err(e)?;
    let t = win.get(0, 0, 2).map_err(e)?;
    win.flush(None).map_err(e)?;
    let v = win.take(t).map_err(e)?;
    win.unlock_all().map_err(e)?;
    ensure!(
        v[0] == 5 * p as u64 && v[1] >= 1 && v[1] <= p as u64,
        "final values {v:?}"
    );
    // A flush outside a passive epoch.
    ensure!(
        class(win.flush(Some(0))) == Some(MpiErrorClass::RmaSync),
        "flush without lock"
    );
    drop(win); // collective free through Drop
    Ok(())
}

/// PSCW between ring neighbours on a shared window, with
/// `get_accumulate` and `flush_local` under lock_all.
fn pscw_shared(w: &Comm) -> R {
    let (me, p) = (w.rank(), w.size());
    let (next, prev) = ((me + 1) % p, (me + p - 1) % p);
    let win = w.shared_window::<u32>(4).map_err(e)?;
    ensure!(win.len() == 4, "shared window length");
    // Exposed to prev (which writes to me), accessing next.
    win.post(&[prev]).map_err(e)?;
    win.start(&[next]).map_err(e)?;
    win.put(&[me as u32 + 100], next, 0).map_err(e)?;
    let t = win.get(next, 3, 1).map_err(e)?;
    ensure!(
        class(win.take(t)) == Some(MpiErrorClass::RmaSync),
        "take before complete"
    );
    win.complete().map_err(e)?;
    ensure!(win.take(t).map_err(e)? == vec![0], "get under PSCW");
    win.wait().map_err(e)?;
    ensure!(
        class(win.complete()) == Some(MpiErrorClass::RmaSync),
        "complete without start"
    );
    // A second round ended by test.
    win.post(&[prev]).map_err(e)?;
    win.start(&[next]).map_err(e)?;
    win.accumulate(&[1], next, 1, Some(&Op::Sum)).map_err(e)?;
    win.complete().map_err(e)?;
    while !win.test().map_err(e)? {}
    w.barrier().map_err(e)?;
    win.lock_all().map_err(e)?;
    let t = win
        .get_accumulate(&[5, 7], 0, 2, Some(&Op::Sum))
        .map_err(e)?;
    win.flush_local(Some(0)).map_err(e)?;
    let old = win.take(t).map_err(e)?;
    ensure!(
        old[0] % 5 == 0 && old[1] % 7 == 0 && old[0] / 5 == old[1] / 7 && old[0] / 5 < p as u32,
        "get_accumulate fetched {old:?}"
    );
    win.unlock_all().map_err(e)?;
    let mem = win.into_vec().map_err(e)?;
    let want2 = if me == 0 { 5 * p as u32 } else { 0 };
    let want3 = if me == 0 { 7 * p as u32 } else { 0 };
    ensure!(
        mem == vec![prev as u32 + 100, 1, want2, want3],
        "shared window memory after PSCW: {mem:?}"
    );
    Ok(())
}

/// An allocated window (`MPI_Win_allocate`): zeroed, written by every
/// rank under a fence, copied out by `into_vec`.
fn allocated(w: &Comm) -> R {
    let (me, p) = (w.rank(), w.size());
    let win = w.allocate_window::<i16>(me as usize + 1).map_err(e)?;
    ensure!(win.len() == me as usize + 1, "allocated window length");
    win.fence().map_err(e)?;
    for r in 0..p {
        win.accumulate(&[me as i16 + 1], r, r as usize, Some(&Op::Sum))
            .map_err(e)?;
    }
    win.fence().map_err(e)?;
    let mem = win.into_vec().map_err(e)?;
    let mut want = vec![0i16; me as usize + 1];
    want[me as usize] = (1..=p as i16).sum();
    ensure!(mem == want, "allocated window memory: {mem:?}");
    Ok(())
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
    let r = fences(&w)
        .and_then(|()| passive(&w))
        .and_then(|()| pscw_shared(&w))
        .and_then(|()| allocated(&w))
        .and_then(|()| fences(&mpi.self_comm()));
    match r {
        Ok(()) => {
            if w.rank() == 0 {
                say(&format!("api-window-check: OK ({} ranks)", w.size()));
            }
            ExitCode::SUCCESS
        }
        Err(m) => {
            eprintln!("rank {}: api-window-check FAILED: {m}", w.rank());
            ExitCode::FAILURE
        }
    }
}
