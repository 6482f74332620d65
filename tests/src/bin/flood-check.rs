//! The unexpected-message flood of tmpi's resource-exhaustion tests
//! (`tests/tests/exhaustion.rs`, `docs/reliability.md`):
//! `tmpirun -n 2 flood-check RNDV EAGER8 EAGER4K LIMIT`.
//!
//! Rank 0 floods rank 1, which posts no receive, in three phases: `RNDV`
//! 64 KiB rendezvous messages, `EAGER4K` 4 KiB and `EAGER8` 8-byte eager
//! messages, each phase's messages as non-blocking sends outstanding at
//! once, followed by an END message. `LIMIT` is the
//! `pml_ob1_unexpected_limit` the job runs with (bytes, 0 = unbounded).
//!
//! Per phase rank 1 probes (so it progresses) until the END message arrived
//! (it must: MPI's progress rule, nothing is held back), notes its peak RSS
//! growth in the phase (`VmHWM` reset at its start through `clear_refs`), receives and checks every message of the
//! phase in order and the END message, then learns from rank 0 how many of
//! its eager-sized sends went as rendezvous because the window was full,
//! and checks:
//! * every message and END were held unexpected at once;
//! * bounded, 4 KiB phase: the eager messages it held charged at most
//!   `LIMIT` (payload + 512 B each) and, when the phase charges more, some
//!   sends switched; 8-byte messages (at most `CREDIT_SWITCH_MIN`) and
//!   rendezvous messages never switch; unbounded: none switched;
//! * the peak RSS growth stays under the documented bound: 8 MiB slack +
//!   512 B per message + the eager payload it may hold (`LIMIT` when
//!   bounded and switching applies, else every payload).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use tmpi::{Comm, Error};
use tmpi_tests::check::{e, say, status_bytes, R};
use tmpi_tests::ensure;

const TAG_END: i32 = 9;
/// Fixed charge per eager message (the pml's `CREDIT_OVERHEAD`).
const OVERHEAD: u64 = 512;
/// Eager payloads that never switch (the pml's `CREDIT_SWITCH_MIN`).
const SWITCH_MIN: usize = 256;
/// Slack of the RSS bound: allocator, matching tables, the BTL's segment.
const SLACK: u64 = 8 << 20;
/// Largest eager payload over sm (`btl_sm_eager_limit`).
const SM_EAGER: usize = 4096;

fn payload(phase: usize, i: usize, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|k| (k as u8).wrapping_mul(13) ^ (i as u8) ^ (phase as u8))
        .collect();
    // The index in the first bytes (order check), when it fits.
    let b = (i as u64).to_le_bytes();
    let n = len.min(8);
    v[..n].copy_from_slice(&b[..n]);
    v
}

struct Ctx<'a> {
    mpi: &'a tmpi::Mpi,
    w: &'a Comm,
    limit: u64,
}

fn phase(c: &Ctx<'_>, ph: usize, n: usize, len: usize) -> R {
    let w = c.w;
    let tag = 1 + ph as i32;
    let eager = len <= SM_EAGER;
    let switchable = c.limit > 0 && eager && len > SWITCH_MIN;
    match w.rank() {
        0 => {
            let msgs: Vec<Vec<u8>> = (0..n).map(|i| payload(ph, i, len)).collect();
            let sw0 = c.mpi.stats().credit_rndv;
            let t0 = Instant::now();
            let end = [n as u64];
            tmpi::scope(|s| -> Result<(), Error> {
                let mut reqs = msgs
                    .iter()
                    .map(|b| w.isend(s, b.as_slice(), 1, tag))
                    .collect::<Result<Vec<_>, _>>()?;
                reqs.push(w.isend(s, end.as_slice(), 1, TAG_END)?);
                // In order, one at a time: they complete in order, and a
                // wait_all would test all N outstanding requests per round.
                for r in reqs {
                    r.wait()?;
                }
                Ok(())
            })
            .map_err(e)?;
            let switched = c.mpi.stats().credit_rndv - sw0;
            say(&format!(
                "flood-check: phase {ph}: {n} x {len} B sent in {:.3} s, {switched} switched to \
                 rendezvous (window full)",
                t0.elapsed().as_secs_f64(),
            ));
            w.send(&[switched], 1, TAG_END + 1).map_err(e)?;
        }
        1 => {
            // The peak RSS of this phase alone: reset VmHWM to the current
            // RSS (Linux `clear_refs` 5), measure from the current RSS.
            std::fs::write("/proc/self/clear_refs", "5")
                .map_err(|x| format!("resetting VmHWM: {x}"))?;
            let base = status_bytes("VmRSS")?;
            let u0 = c.mpi.stats().unexpected;
            let deadline = Instant::now() + Duration::from_secs(120);
            while w.iprobe(0, TAG_END).map_err(e)?.is_none() {
                ensure!(
                    Instant::now() < deadline,
                    "phase {ph}: END did not arrive within 120 s"
                );
                std::thread::yield_now();
            }
            let held = (c.mpi.stats().unexpected - u0) as usize;
            let growth = status_bytes("VmHWM")?.saturating_sub(base);
            let mut buf = vec![0u8; len];
            for i in 0..n {
                w.recv(&mut buf, 0, tag).map_err(e)?;
                ensure!(
                    buf == payload(ph, i, len),
                    "phase {ph}: message {i} wrong or out of order"
                );
            }
            let mut end = [0u64];
            w.recv(&mut end, 0, TAG_END).map_err(e)?;
            ensure!(end[0] == n as u64, "phase {ph}: END says {}", end[0]);
            let mut sw = [0u64];
            w.recv(&mut sw, 0, TAG_END + 1).map_err(e)?;
            let switched = sw[0];
            let charge = OVERHEAD + len as u64;
            let eager_held = if eager { n as u64 - switched } else { 0 };
            let eager_charge = eager_held * charge;
            let bound = SLACK
                + n as u64 * OVERHEAD
                + if switchable {
                    c.limit
                } else if eager {
                    (n * len) as u64
                } else {
                    0
                };
            say(&format!(
                "flood-check: phase {ph}: {n} x {len} B, limit {}: rank 1 held {held} unexpected \
                 at once, {switched} sent as rendezvous (window full), eager charge held \
                 {eager_charge} B, peak RSS growth in the phase {growth} B (bound {bound} B)",
                c.limit
            ));
            ensure!(
                held > n,
                "phase {ph}: END arrived with {held} of {} messages",
                n + 1
            );
            if switchable {
                ensure!(
                    eager_charge <= c.limit.max(charge),
                    "phase {ph}: {eager_held} eager messages held, charge {eager_charge} B > \
                     limit {}",
                    c.limit
                );
                if n as u64 * charge > c.limit {
                    ensure!(switched > 0, "phase {ph}: no send switched to rendezvous");
                }
            } else {
                ensure!(
                    switched == 0,
                    "phase {ph}: {switched} sends switched (limit {}, {len} B)",
                    c.limit
                );
            }
            ensure!(
                growth <= bound,
                "phase {ph}: peak RSS grew by {growth} B > bound {bound} B"
            );
        }
        _ => {}
    }
    w.barrier().map_err(e)
}

fn run(mpi: &tmpi::Mpi, args: &[u64]) -> R {
    let &[rndv, e8, e4k, limit] = args else {
        return Err("usage: flood-check RNDV EAGER8 EAGER4K LIMIT".into());
    };
    let w = mpi.world();
    ensure!(w.size() == 2, "needs 2 ranks");
    let c = Ctx { mpi, w: &w, limit };
    phase(&c, 0, rndv as usize, 64 * 1024)?;
    // The 4 KiB phase before the 8-byte one: the 8-byte flood leaves ~34 MB
    // of freed heap that a later phase would reuse without any RSS growth.
    phase(&c, 1, e4k as usize, 4096)?;
    phase(&c, 2, e8 as usize, 8)?;
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let mpi = match tmpi::init() {
        Ok(m) => m,
        Err(x) => {
            eprintln!("flood-check: init: {x}");
            return ExitCode::FAILURE;
        }
    };
    let rank = mpi.world().rank();
    match run(&mpi, &args) {
        Ok(()) => {
            if rank == 0 {
                say("flood-check: OK");
            }
            ExitCode::SUCCESS
        }
        Err(x) => {
            eprintln!("flood-check: rank {rank} FAILED: {x}");
            std::process::exit(1)
        }
    }
}
