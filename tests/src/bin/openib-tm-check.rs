//! A deterministic point-to-point program for comparing software and NIC
//! (split) matching over btl-openib: `tmpirun -n N openib-tm-check [MODE]`.
//! Rank 0 prints one line per receive (index, source, tag, bytes, FNV of
//! the data); the output depends only on MPI semantics, so runs with
//! `btl_openib_tm_enable=1` and `=0` must print the same. Driven by
//! `tests/tests/openib_soft.rs`.
//!
//! Mode `all` (default): rank 0 posts one receive it then cancels (posted
//! first, so the NIC holds it when tag matching is on), then `K` receives
//! with a named source and tag (more than a small NIC list holds: the
//! overflow stays in software), and one ANY_SOURCE receive; the other ranks
//! then send the matching messages (eager and rendezvous sizes). Mode
//! `cancel`: only the cancelled receive.

use std::process::ExitCode;

use tmpi::{Comm, Error, ANY_SOURCE};

const K: usize = 24;
const BUF: usize = 32 * 1024;

fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
        (h ^ c as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Receive `i`: from rank `1 + i % (size-1)` with tag `i % 3`.
fn src_of(i: usize, size: i32) -> i32 {
    1 + (i % (size as usize - 1)) as i32
}

/// Message length of receive `i` (eager and rendezvous).
fn len_of(i: usize) -> usize {
    match i % 4 {
        0 => 100,
        1 => 3000,
        2 => 20_000,
        _ => 0,
    }
}

fn cancel_one(w: &Comm) -> Result<bool, Error> {
    let mut a = vec![0u8; 4096];
    let st = tmpi::scope(|s| -> Result<tmpi::Status, Error> {
        let r = w.irecv(s, &mut a, 1, 50)?;
        r.cancel()?;
        r.wait()
    })?;
    Ok(st.cancelled() && a.iter().all(|&b| b == 0))
}

fn run(w: &Comm, mode: &str) -> Result<Vec<String>, String> {
    let (rank, size) = (w.rank(), w.size());
    let e = |x: Error| x.to_string();
    if size < 2 {
        return Err("needs 2 ranks".into());
    }
    let mut out = Vec::new();
    if mode == "cancel" {
        if rank == 0 {
            out.push(format!("cancel cancelled={}", cancel_one(w).map_err(e)?));
        }
        w.barrier().map_err(e)?;
        return Ok(out);
    }
    if rank == 0 {
        out.push(format!("cancel cancelled={}", cancel_one(w).map_err(e)?));
        let mut bufs: Vec<Vec<u8>> = (0..K).map(|_| vec![0u8; BUF]).collect();
        let mut any = vec![0u8; 64];
        let (sts, any_st) = tmpi::scope(|s| -> Result<_, Error> {
            let mut reqs = Vec::new();
            for (i, b) in bufs.iter_mut().enumerate() {
                reqs.push(w.irecv(s, b, src_of(i, size), (i % 3) as i32)?);
            }
            let ra = w.irecv(s, &mut any, ANY_SOURCE, 7)?;
            // Everything posted: the senders may go. (A "go" message rank 0
            // sends, not a barrier: a message rank 0 received unexpectedly
            // would make the NIC pause matching until software resyncs.)
            for r in 1..size {
                w.send(b"go", r, 1000)?;
            }
            let mut sts = Vec::new();
            for r in reqs {
                sts.push(r.wait()?);
            }
            Ok((sts, ra.wait()?))
        })
        .map_err(e)?;
        for (i, (st, b)) in sts.iter().zip(&bufs).enumerate() {
            let n = st.bytes();
            let want = payload(i as u64, len_of(i));
            if b[..n] != want[..] {
                return Err(format!("receive {i}: wrong data ({n} bytes)"));
            }
            out.push(format!(
                "recv {i} src={} tag={} bytes={n} fnv={:016x}",
                st.source(),
                st.tag(),
                fnv(&b[..n])
            ));
        }
        out.push(format!(
            "anysrc src={} bytes={} fnv={:016x}",
            any_st.source(),
            any_st.bytes(),
            fnv(&any[..any_st.bytes()])
        ));
    } else {
        let mut go = [0u8; 2];
        w.recv(&mut go, 0, 1000).map_err(e)?;
        for i in (0..K).filter(|&i| src_of(i, size) == rank) {
            let m = payload(i as u64, len_of(i));
            w.send(&m, 0, (i % 3) as i32).map_err(e)?;
        }
        if rank == 1 {
            w.send(b"any source", 0, 7).map_err(e)?;
        }
    }
    w.barrier().map_err(e)?;
    Ok(out)
}

fn main() -> ExitCode {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let mpi = match tmpi::init() {
        Ok(m) => m,
        Err(x) => {
            eprintln!("openib-tm-check: init: {x}");
            return ExitCode::FAILURE;
        }
    };
    let w = mpi.world();
    match run(&w, &mode) {
        Ok(lines) => {
            for l in lines {
                println!("{l}");
            }
            ExitCode::SUCCESS
        }
        Err(x) => {
            eprintln!("openib-tm-check: rank {} FAILED: {x}", w.rank());
            std::process::exit(1)
        }
    }
}
