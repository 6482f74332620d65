//! `tmpi-bench pingpong|bw|rss [--csv] [--max BYTES] [--iters N]`: OSU-style
//! point-to-point benchmarks over tmpi, run with `tmpirun -n 2` (rss: any
//! number of ranks).
//!
//! * `pingpong` (osu_latency): ranks 0 and 1 bounce one message; one-way
//!   latency = round trip / 2, in microseconds.
//! * `bw` (osu_bw): rank 0 posts a window of 64 non-blocking sends, rank 1
//!   64 receives, then a 4-byte acknowledgement; MB/s = 10^6 bytes/s.
//! * `rss`: every rank exchanges a message with its neighbours, then prints
//!   its peak resident set size (VmHWM).
//!
//! Output: a table (`# Size  Latency (us)` / `# Size  Bandwidth (MB/s)`),
//! or with `--csv` lines `size,latency_us` / `size,mb_per_s`. Every rank
//! prints its peak RSS at the end in table mode (`# peak RSS rank R: N kB`).

use std::process::ExitCode;

const WINDOW: usize = 64;

struct Opts {
    mode: String,
    csv: bool,
    max: usize,
    iters: Option<usize>,
}

fn usage() -> ExitCode {
    eprintln!("usage: tmpi-bench pingpong|bw|rss [--csv] [--max BYTES] [--iters N]");
    ExitCode::from(2)
}

fn parse() -> Option<Opts> {
    let mut a = std::env::args().skip(1);
    let mode = a.next()?;
    let mut o = Opts {
        mode,
        csv: false,
        max: 4 << 20,
        iters: None,
    };
    while let Some(x) = a.next() {
        match x.as_str() {
            "--csv" => o.csv = true,
            "--max" => o.max = a.next()?.parse().ok()?,
            "--iters" => o.iters = Some(a.next()?.parse().ok()?),
            _ => return None,
        }
    }
    if !matches!(o.mode.as_str(), "pingpong" | "bw" | "rss") {
        return None;
    }
    Some(o)
}

fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn sizes(max: usize) -> Vec<usize> {
    let mut v = vec![0];
    let mut n = 1;
    while n <= max {
        v.push(n);
        n *= 2;
    }
    v
}

fn lat_iters(n: usize) -> (usize, usize) {
    // (warm-up, measured) as osu_latency: fewer for large messages.
    if n <= 8192 {
        (1000, 10_000)
    } else if n <= 1 << 20 {
        (100, 1000)
    } else {
        (10, 100)
    }
}

fn pingpong(mpi: &tmpi::Mpi, o: &Opts) -> Result<(), tmpi::Error> {
    let w = mpi.world();
    let rank = w.rank();
    if rank == 0 && !o.csv {
        println!(
            "# tmpi-bench pingpong (one-way latency)\n# {:<10} {:>14}",
            "Size", "Latency (us)"
        );
    }
    for n in sizes(o.max) {
        let (warm, iters) = lat_iters(n);
        let iters = o.iters.unwrap_or(iters);
        let sbuf = vec![b'a'; n];
        let mut rbuf = vec![0u8; n];
        w.barrier()?;
        let mut t0 = 0.0;
        for i in 0..warm + iters {
            if i == warm {
                t0 = mpi.wtime();
            }
            if rank == 0 {
                w.send(&sbuf, 1, 1)?;
                w.recv(&mut rbuf, 1, 1)?;
            } else if rank == 1 {
                w.recv(&mut rbuf, 0, 1)?;
                w.send(&sbuf, 0, 1)?;
            }
        }
        let us = (mpi.wtime() - t0) * 1e6 / (2.0 * iters as f64);
        if rank == 0 {
            if o.csv {
                println!("{n},{us:.3}");
            } else {
                println!("  {n:<10} {us:>14.2}");
            }
        }
    }
    Ok(())
}

fn bw(mpi: &tmpi::Mpi, o: &Opts) -> Result<(), tmpi::Error> {
    let w = mpi.world();
    let rank = w.rank();
    if rank == 0 && !o.csv {
        println!(
            "# tmpi-bench bw (window {WINDOW})\n# {:<10} {:>16}",
            "Size", "Bandwidth (MB/s)"
        );
    }
    for n in sizes(o.max).into_iter().filter(|&n| n > 0) {
        let (warm, iters) = if n <= 8192 { (10, 100) } else { (2, 20) };
        let iters = o.iters.unwrap_or(iters);
        let sbuf = vec![b'b'; n];
        let mut rbufs: Vec<Vec<u8>> = (0..WINDOW).map(|_| vec![0u8; n]).collect();
        let mut ack = [0u8; 4];
        w.barrier()?;
        let mut t0 = 0.0;
        for i in 0..warm + iters {
            if i == warm {
                t0 = mpi.wtime();
            }
            if rank == 0 {
                tmpi::scope(|s| -> Result<(), tmpi::Error> {
                    let reqs = (0..WINDOW)
                        .map(|_| w.isend(s, &sbuf, 1, 100))
                        .collect::<Result<Vec<_>, _>>()?;
                    tmpi::Request::wait_all(reqs)?;
                    Ok(())
                })?;
                w.recv(&mut ack, 1, 101)?;
            } else if rank == 1 {
                tmpi::scope(|s| -> Result<(), tmpi::Error> {
                    let reqs = rbufs
                        .iter_mut()
                        .map(|b| w.irecv(s, b.as_mut_slice(), 0, 100))
                        .collect::<Result<Vec<_>, _>>()?;
                    tmpi::Request::wait_all(reqs)?;
                    Ok(())
                })?;
                w.send(&ack, 0, 101)?;
            }
        }
        let dt = mpi.wtime() - t0;
        let mbs = (n * WINDOW * iters) as f64 / dt / 1e6;
        if rank == 0 {
            if o.csv {
                println!("{n},{mbs:.1}");
            } else {
                println!("  {n:<10} {mbs:>16.1}");
            }
        }
    }
    Ok(())
}

fn rss(mpi: &tmpi::Mpi) -> Result<(), tmpi::Error> {
    let w = mpi.world();
    let (rank, size) = (w.rank(), w.size());
    let sbuf = vec![1u8; 1 << 20];
    let mut rbuf = vec![0u8; 1 << 20];
    w.sendrecv(
        &sbuf,
        (rank + 1) % size,
        0,
        &mut rbuf,
        (rank + size - 1) % size,
        0,
    )?;
    w.barrier()?;
    Ok(())
}

fn main() -> ExitCode {
    let Some(o) = parse() else { return usage() };
    let mpi = match tmpi::init() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("tmpi-bench: init: {e}");
            return ExitCode::FAILURE;
        }
    };
    let w = mpi.world();
    if o.mode != "rss" && w.size() < 2 {
        eprintln!("tmpi-bench: {} needs 2 ranks (tmpirun -n 2)", o.mode);
        return ExitCode::from(2);
    }
    let r = match o.mode.as_str() {
        "pingpong" => pingpong(&mpi, &o),
        "bw" => bw(&mpi, &o),
        _ => rss(&mpi),
    };
    if let Err(e) = r {
        eprintln!("tmpi-bench: rank {}: {e}", w.rank());
        return ExitCode::FAILURE;
    }
    if !o.csv || o.mode == "rss" {
        let _ = w.barrier();
        println!("# peak RSS rank {}: {} kB", w.rank(), peak_rss_kb());
    }
    drop(w);
    drop(mpi);
    ExitCode::SUCCESS
}
