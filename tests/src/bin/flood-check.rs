//! The unexpected-message flood of tmpi's resource-exhaustion tests
//! (`tests/tests/exhaustion.rs`, `docs/reliability.md`):
//! `tmpirun -n 2 flood-check RNDV EAGER8 EAGER4K LIMIT`.
//!
//! Rank 0 floods rank 1, which posts no receive, in three phases: `RNDV`
//! 64 KiB rendezvous messages, `EAGER8` 8-byte and `EAGER4K` 4 KiB eager
//! messages, each phase's messages as non-blocking sends outstanding at
//! once, followed by an END message. `LIMIT` is the
//! `pml_ob1_unexpected_limit` the job runs with (bytes, 0 = unbounded).
//!
//! Per phase rank 1 waits (probing, so it progresses) until the END message
//! arrived or nothing new arrived for 300 ms (the sender is throttled),
//! then checks:
//! * bounded: the unexpected messages it holds charge at most `LIMIT`
//!   (payload of eager messages + 512 B each), and, when the phase's whole
//!   flood charges more than `LIMIT`, the END message did not arrive (the
//!   sender waits) while rank 0's `credit_waits` counter shows it waited;
//! * unbounded: END arrived and every message of the phase is held
//!   unexpected at once (Open MPI's behaviour);
//! * its peak RSS growth since start (`VmHWM`) stays under `LIMIT` + 8 MiB
//!   (bounded only; printed in both cases);
//!
//! then receives and checks every message of the phase in order, and the
//! END message; the sender's requests then complete.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use tmpi::{Comm, Error};

type R = Result<(), String>;

fn e(x: Error) -> String {
    x.to_string()
}

macro_rules! ensure {
    ($c:expr, $($f:tt)*) => {
        if !$c {
            return Err(format!($($f)*));
        }
    };
}

fn say(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

/// A field of `/proc/self/status` in bytes (`VmHWM`, `VmRSS`).
fn status_bytes(field: &str) -> Result<u64, String> {
    let s = std::fs::read_to_string("/proc/self/status").map_err(|x| x.to_string())?;
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| format!("no {field} in /proc/self/status"))
}

const TAG_END: i32 = 9;
/// Fixed charge per message (`tmpi_pml::core::CREDIT_OVERHEAD`).
const OVERHEAD: u64 = 512;
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

fn charge(len: usize) -> u64 {
    OVERHEAD + if len <= SM_EAGER { len as u64 } else { 0 }
}

struct Ctx<'a> {
    mpi: &'a tmpi::Mpi,
    w: &'a Comm,
    limit: u64,
    base: u64,
}

fn phase(c: &Ctx<'_>, ph: usize, n: usize, len: usize) -> R {
    let w = c.w;
    let tag = 1 + ph as i32;
    match w.rank() {
        0 => {
            let msgs: Vec<Vec<u8>> = (0..n).map(|i| payload(ph, i, len)).collect();
            let waits0 = c.mpi.stats().credit_waits;
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
            say(&format!(
                "flood-check: phase {ph}: {n} x {len} B sent in {:.3} s, {} sends waited for credit",
                t0.elapsed().as_secs_f64(),
                c.mpi.stats().credit_waits - waits0
            ));
            // Tell rank 1 whether the sender waited (for its check).
            w.send(&[c.mpi.stats().credit_waits - waits0], 1, TAG_END + 1)
                .map_err(e)?;
        }
        1 => {
            let u0 = c.mpi.stats().unexpected;
            let deadline = Instant::now() + Duration::from_secs(120);
            let mut last = (u0, Instant::now());
            let ended = loop {
                if w.iprobe(0, TAG_END).map_err(e)?.is_some() {
                    break true;
                }
                let u = c.mpi.stats().unexpected;
                if u != last.0 {
                    last = (u, Instant::now());
                } else if u > u0 && last.1.elapsed() > Duration::from_millis(300) {
                    break false;
                }
                ensure!(Instant::now() < deadline, "phase {ph}: nothing arrived");
                std::thread::yield_now();
            };
            let held = (c.mpi.stats().unexpected - u0) as usize;
            let hwm = status_bytes("VmHWM")?;
            let growth = hwm.saturating_sub(c.base);
            let held_charge =
                held.min(n) as u64 * charge(len) + if ended { 8 + OVERHEAD } else { 0 };
            let total_charge = n as u64 * charge(len) + 8 + OVERHEAD;
            say(&format!(
                "flood-check: phase {ph}: {n} x {len} B, limit {}: rank 1 holds {held} unexpected \
                 (charge {held_charge} B of {total_charge} B), END {}, peak RSS growth since \
                 start {growth} B",
                c.limit,
                if ended { "arrived" } else { "held back" }
            ));
            if c.limit == 0 {
                ensure!(ended, "phase {ph}: unbounded but END not arrived");
                // All of the phase and END (rank 0's next messages, not
                // throttled either, may have arrived too).
                ensure!(
                    held > n,
                    "phase {ph}: unbounded: {held} of {} messages held",
                    n + 1
                );
            } else {
                ensure!(
                    held_charge <= c.limit,
                    "phase {ph}: {held} unexpected messages charge {held_charge} B > limit {}",
                    c.limit
                );
                if total_charge > c.limit {
                    ensure!(!ended, "phase {ph}: END arrived past the limit");
                }
                ensure!(
                    growth <= c.limit + SLACK,
                    "phase {ph}: peak RSS grew by {growth} B > limit {} + {SLACK} B",
                    c.limit
                );
            }
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
            let mut waited = [0u64];
            w.recv(&mut waited, 0, TAG_END + 1).map_err(e)?;
            if c.limit > 0 && total_charge > c.limit {
                ensure!(waited[0] > 0, "phase {ph}: the sender never waited");
            }
            if c.limit == 0 {
                ensure!(
                    waited[0] == 0,
                    "phase {ph}: unbounded but the sender waited"
                );
            }
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
    let c = Ctx {
        mpi,
        w: &w,
        limit,
        base: status_bytes("VmHWM")?,
    };
    phase(&c, 0, rndv as usize, 64 * 1024)?;
    phase(&c, 1, e8 as usize, 8)?;
    phase(&c, 2, e4k as usize, 4096)?;
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
