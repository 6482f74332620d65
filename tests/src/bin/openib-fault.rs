//! A two-rank rendezvous used by the openib tests (`tests/tests/openib_soft.rs`):
//! `tmpirun -n 2 openib-fault BYTES [OFFSET [late|trunc|linger]]`.
//!
//! Rank 0 sends `BYTES` bytes (taken at `OFFSET` inside a larger vector, so
//! the buffer need not be page-aligned) to rank 1 with tag 5; rank 1
//! receives them into a buffer at the same offset. By default rank 1 posts
//! its receive first and then tells rank 0 to go (so with tag matching the
//! receive is in the NIC's list before the request arrives); with `late`
//! rank 0 sends at once and rank 1 probes for the message before posting
//! (the request arrives unexpected); with `trunc` rank 1's buffer holds
//! only half the message: it expects `MPI_ERR_TRUNCATE` with the first half
//! of the data, prints `rank 1 recv truncated bytes=N` and goes on; with
//! `linger` rank 1, when its receive fails, prints its error line and then
//! waits (up to a minute) instead of exiting, so the job ends only when
//! rank 0 learns of the failure by itself (its send fails). Each
//! rank prints one line: `rank R send ok`, `rank R recv ok
//! bytes=N fnv=H` (the data checked against the pattern), or `rank R
//! {send|recv} error class=CLASS: message` and then exits with status 3
//! without waiting for the other rank (the launcher ends the job). Both
//! ranks finish with a barrier when they succeeded.

use std::io::Write;
use std::process::ExitCode;

use tmpi::{Comm, Error};

fn byte(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 9)) as u8
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
        (h ^ c as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

fn report(rank: i32, what: &str, e: &Error) -> ! {
    println!("rank {rank} {what} error class={}: {e}", e.class().name());
    let _ = std::io::stdout().flush();
    std::process::exit(3)
}

fn run(w: &Comm, len: usize, off: usize, mode: &str) -> Result<(), String> {
    let late = mode == "late";
    let trunc = mode == "trunc";
    let rank = w.rank();
    if w.size() != 2 {
        return Err("needs exactly 2 ranks".into());
    }
    if rank == 0 {
        let mut v = vec![0u8; off + len];
        for (i, b) in v[off..].iter_mut().enumerate() {
            *b = byte(i);
        }
        if !late {
            let mut go = [0u8; 2];
            if let Err(e) = w.recv(&mut go, 1, 6) {
                report(rank, "recv", &e);
            }
        }
        if let Err(e) = w.send(&v[off..], 1, 5) {
            report(rank, "send", &e);
        }
        println!("rank 0 send ok");
    } else {
        let cap = if trunc { len / 2 } else { len };
        let mut v = vec![0u8; off + cap];
        if late {
            // Wait until the request is here, unexpected (a probe
            // progresses; the soft NIC moves data only then).
            if let Err(e) = w.probe(0, 5) {
                report(rank, "probe", &e);
            }
        }
        let r = tmpi::scope(|s| -> Result<tmpi::Status, (&'static str, Error)> {
            let r = w.irecv(s, &mut v[off..], 0, 5).map_err(|e| ("recv", e))?;
            if !late {
                w.send(b"go", 0, 6).map_err(|e| ("send", e))?;
            }
            r.wait().map_err(|e| ("recv", e))
        });
        let st = match r {
            Ok(st) if !trunc => st,
            Ok(st) => return Err(format!("not truncated ({} bytes)", st.bytes())),
            Err(("recv", e)) if trunc && e.class() == tmpi::MpiErrorClass::Truncate => {
                let got = &v[off..off + cap];
                if got.iter().enumerate().any(|(i, &b)| b != byte(i)) {
                    return Err("truncated receive: wrong data".into());
                }
                println!("rank 1 recv truncated bytes={cap}");
                let _ = std::io::stdout().flush();
                return w.barrier().map_err(|e| e.to_string());
            }
            Err((what, e)) if mode == "linger" => {
                println!("rank {rank} {what} error class={}: {e}", e.class().name());
                let _ = std::io::stdout().flush();
                std::thread::sleep(std::time::Duration::from_secs(60));
                std::process::exit(3)
            }
            Err((what, e)) => report(rank, what, &e),
        };
        let got = &v[off..off + st.bytes()];
        if st.bytes() != len || got.iter().enumerate().any(|(i, &b)| b != byte(i)) {
            return Err(format!("wrong data ({} bytes)", st.bytes()));
        }
        println!("rank 1 recv ok bytes={} fnv={:016x}", st.bytes(), fnv(got));
    }
    let _ = std::io::stdout().flush();
    w.barrier().map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let len: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1 << 20);
    let off: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let mode = args.next().unwrap_or_default();
    let mpi = match tmpi::init() {
        Ok(m) => m,
        Err(x) => {
            eprintln!("openib-fault: init: {x}");
            return ExitCode::FAILURE;
        }
    };
    let w = mpi.world();
    match run(&w, len, off, &mode) {
        Ok(()) => ExitCode::SUCCESS,
        Err(x) => {
            eprintln!("openib-fault: rank {} FAILED: {x}", w.rank());
            std::process::exit(1)
        }
    }
}
