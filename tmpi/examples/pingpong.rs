//! Ping-pong between ranks 0 and 1 over message sizes from 0 bytes to
//! 4 MiB, checking a checksum of every message, and printing one-way
//! latency and bandwidth. Other ranks wait at a barrier.
//!
//! `tmpirun -n 2 target/release/examples/pingpong`

fn fill(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in buf.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

fn main() -> Result<(), tmpi::Error> {
    let mpi = tmpi::init()?;
    let world = mpi.world();
    let (rank, size) = (world.rank(), world.size());
    if size < 2 {
        println!("pingpong: needs 2 ranks (got {size}); nothing to do");
        return Ok(());
    }
    if rank == 0 {
        println!(
            "{:>10} {:>8} {:>14} {:>12}",
            "bytes", "iters", "latency (us)", "MB/s"
        );
    }
    let mut n = 0usize;
    let mut bad = 0;
    while n <= 4 << 20 {
        let iters = if n <= 64 * 1024 { 200 } else { 20 };
        let mut out = vec![0u8; n];
        let mut inb = vec![0u8; n];
        fill(&mut out, n as u64);
        if rank <= 1 {
            let peer = 1 - rank;
            world.barrier()?;
            let t0 = mpi.wtime();
            for _ in 0..iters {
                if rank == 0 {
                    world.send(&out, peer, 1)?;
                    world.recv(&mut inb, peer, 1)?;
                } else {
                    world.recv(&mut inb, peer, 1)?;
                    world.send(&inb, peer, 1)?;
                }
            }
            let dt = mpi.wtime() - t0;
            if rank == 0 {
                if inb != out {
                    bad += 1;
                    eprintln!("pingpong: checksum mismatch at {n} bytes");
                }
                let lat = dt * 1e6 / (2.0 * iters as f64);
                let bw = if lat > 0.0 { n as f64 / lat } else { 0.0 };
                println!("{n:>10} {iters:>8} {lat:>14.2} {bw:>12.1}");
            }
        } else {
            world.barrier()?;
        }
        n = if n == 0 { 1 } else { n * 4 };
    }
    world.barrier()?;
    if rank == 0 {
        println!(
            "pingpong: {}",
            if bad == 0 {
                "all payloads verified OK"
            } else {
                "ERRORS"
            }
        );
        if bad != 0 {
            std::process::exit(1);
        }
    }
    Ok(())
}
