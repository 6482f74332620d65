//! Software cost of the pml per message, without a real transport: two pml
//! instances in one thread over the in-memory loopback, ping-ponging 8-byte
//! eager messages (isend + irecv + progress + wait on each side). Also
//! measures one uncontended lock/unlock of the mutex type the pml uses,
//! to show what the MPI_THREAD_MULTIPLE critical section costs a
//! single-threaded program.
//!
//! `cargo run --release -p tmpi-pml --example overhead`

use std::sync::Mutex;
use std::time::Instant;

use tmpi_pml::raw::{RawBuf, RawBufMut};
use tmpi_pml::transport::{Loopback, LoopbackConfig};
use tmpi_pml::{Pml, SendMode, CTX_WORLD};

fn main() {
    let mut j = Loopback::job(2, LoopbackConfig::default()).into_iter();
    let a = Pml::with_transport(0, Box::new(j.next().unwrap()), false).unwrap();
    let b = Pml::with_transport(1, Box::new(j.next().unwrap()), false).unwrap();
    let msg = [7u8; 8];
    let mut buf = [0u8; 8];
    let iters = 1_000_000;
    let hop = |from: &Pml, to: &Pml, from_rank: i32, to_rank: i32, buf: &mut [u8; 8]| {
        // SAFETY: both buffers outlive the waits below.
        let r = unsafe { to.irecv(CTX_WORLD, from_rank, 1, RawBufMut::from_slice(buf)) }.unwrap();
        let s = unsafe {
            from.isend(
                CTX_WORLD,
                to_rank,
                1,
                RawBuf::from_slice(&msg),
                SendMode::Standard,
            )
        }
        .unwrap();
        from.wait(s).unwrap();
        to.wait(r).unwrap();
    };
    for _ in 0..10_000 {
        hop(&a, &b, 0, 1, &mut buf);
    }
    let t0 = Instant::now();
    for _ in 0..iters {
        hop(&a, &b, 0, 1, &mut buf);
        hop(&b, &a, 1, 0, &mut buf);
    }
    let per_msg = t0.elapsed().as_nanos() as f64 / (2 * iters) as f64;

    let m = Mutex::new(0u64);
    let t0 = Instant::now();
    for i in 0..10_000_000u64 {
        *m.lock().unwrap() += i;
    }
    let lock = t0.elapsed().as_nanos() as f64 / 1e7;
    println!("pml software cost per 8-byte message (send + receive, both sides, loopback): {per_msg:.0} ns");
    println!("uncontended std::sync::Mutex lock+unlock: {lock:.1} ns (the pml takes it 4 times per message: isend, irecv, and one wait round on each side)");
    std::hint::black_box(m);
}
