//! A peer that dies mid-traffic over btl-tcp (`tests/tests/tcp.rs`), run as
//! `tmpirun -n 3 --mca btl self,tcp tcp-peer-fail`:
//!
//! * every rank exchanges messages with every other (the connections are
//!   up), then rank 2 starts a large send to rank 1 and aborts itself;
//! * ranks 0 and 1 ignore SIGTERM (so that `tmpirun` ending the job after
//!   rank 2's death does not race with what they report; SIGKILL after the
//!   kill grace still ends them), then wait for a message from rank 2 that
//!   never comes, with a receive from MPI_ANY_SOURCE and a 4 MiB
//!   (rendezvous) send to rank 2 pending: all three must fail
//!   (`tcp-peer-fail: rank R: receive from rank 2 failed: ...`, `pending
//!   any-source receive failed`, `rendezvous send to rank 2 failed`); a
//!   receive from MPI_ANY_SOURCE and a send to rank 2 issued afterwards
//!   fail at once. They then exit with status 3 (no finalize: its fence
//!   would wait for the dead rank).

use std::time::Instant;

use tmpi_tests::check::say;

fn main() {
    let mpi = match tmpi::init() {
        Ok(m) => m,
        Err(x) => {
            eprintln!("tcp-peer-fail: init: {x}");
            std::process::exit(1);
        }
    };
    let w = mpi.world();
    let (me, n) = (w.rank(), w.size());
    if n != 3 {
        eprintln!("tcp-peer-fail: needs 3 ranks");
        std::process::exit(1);
    }
    if me != 2 {
        // SAFETY: setting a signal disposition to SIG_IGN installs no
        // handler code; nothing else in this process changes SIGTERM.
        unsafe {
            libc::signal(libc::SIGTERM, libc::SIG_IGN);
        }
    }
    // Traffic between every pair: every connection is established.
    for round in 0..20u64 {
        for p in (0..n).filter(|&p| p != me) {
            if let Err(x) = w.send(&[round, me as u64], p, 1) {
                eprintln!("tcp-peer-fail: rank {me}: send: {x}");
                std::process::exit(1);
            }
        }
        for p in (0..n).filter(|&p| p != me) {
            let mut b = [0u64; 2];
            match w.recv(&mut b, p, 1) {
                Ok(_) if b == [round, p as u64] => {}
                r => {
                    eprintln!("tcp-peer-fail: rank {me}: recv from {p}: {r:?} {b:?}");
                    std::process::exit(1);
                }
            }
        }
    }
    if me == 2 {
        // A rendezvous send to rank 1 under way, then death.
        let big = vec![7u8; 4 << 20];
        let r: Result<(), tmpi::Error> = tmpi::scope(|s| {
            let _req = w.isend(s, &big, 1, 9)?;
            for _ in 0..50 {
                w.iprobe(0, 9)?;
            }
            say("tcp-peer-fail: rank 2 aborts");
            std::process::abort();
        });
        eprintln!("tcp-peer-fail: rank 2: {r:?}");
        std::process::exit(1);
    }
    let t0 = Instant::now();
    let big = vec![1u8; 4 << 20];
    let mut any = [0u8; 8];
    let mut b = [0u8; 8];
    let r: Result<(), tmpi::Error> = tmpi::scope(|s| {
        // Pending when rank 2 dies: a receive from any source and a
        // rendezvous send to rank 2 (it never receives it).
        let any_req = w.irecv(s, &mut any, tmpi::ANY_SOURCE, 6)?;
        let send_req = w.isend(s, &big, 2, 8)?;
        match w.recv(&mut b, 2, 5) {
            Ok(st) => {
                say(&format!("tcp-peer-fail: rank {me}: UNEXPECTED receive from rank 2 completed: {st:?}"));
                std::process::exit(1);
            }
            Err(x) => say(&format!(
                "tcp-peer-fail: rank {me}: receive from rank 2 failed: {x} (class {:?}) after {:.3} s",
                x.class(),
                t0.elapsed().as_secs_f64()
            )),
        }
        for (what, req) in [
            ("pending any-source receive", any_req),
            ("rendezvous send to rank 2", send_req),
        ] {
            match req.wait() {
                Ok(st) => {
                    say(&format!(
                        "tcp-peer-fail: rank {me}: UNEXPECTED {what} completed: {st:?}"
                    ));
                    std::process::exit(1);
                }
                Err(x) => say(&format!(
                    "tcp-peer-fail: rank {me}: {what} failed: {x} (class {:?})",
                    x.class()
                )),
            }
        }
        Ok(())
    });
    if let Err(x) = r {
        say(&format!("tcp-peer-fail: rank {me}: UNEXPECTED error: {x}"));
        std::process::exit(1);
    }
    match w.recv(&mut b, tmpi::ANY_SOURCE, 6) {
        Ok(st) => {
            say(&format!(
                "tcp-peer-fail: rank {me}: UNEXPECTED any-source receive completed: {st:?}"
            ));
            std::process::exit(1);
        }
        Err(x) => say(&format!(
            "tcp-peer-fail: rank {me}: any-source receive failed: {x} (class {:?})",
            x.class()
        )),
    }
    match w.send(&[0u8; 8], 2, 5) {
        Ok(()) => {
            say(&format!(
                "tcp-peer-fail: rank {me}: UNEXPECTED send to rank 2 completed"
            ));
            std::process::exit(1);
        }
        Err(x) => say(&format!(
            "tcp-peer-fail: rank {me}: later send to rank 2 failed: {x} (class {:?})",
            x.class()
        )),
    }
    std::process::exit(3);
}
