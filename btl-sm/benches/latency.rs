//! Fragment latency and streaming bandwidth of the sm BTL between two real
//! processes (this binary re-executes itself as rank 1).
//!
//! `cargo bench -p tmpi-btl-sm --bench latency` prints one line per size:
//! half round-trip latency of a ping-pong, then the one-way streaming
//! bandwidth with `max_send_size` fragments. Without `--bench` (as run by
//! `cargo test --all-targets`) it does a short smoke run.

use std::time::{Duration, Instant};

use tmpi_base::identity::ProcessInfo;
use tmpi_base::modex::Modex;
use tmpi_btl::testing::FileModex;
use tmpi_btl::{BtlError, BtlModule};
use tmpi_btl_sm::{SmConfig, SmModule};

fn send(m: &mut SmModule, peer: u32, tag: u8, p: &[u8]) {
    loop {
        match m.send(peer, tag, &[], p) {
            Ok(()) => return,
            Err(BtlError::WouldBlock) => {
                m.progress(&mut |_: u32, _: u8, _: &[u8]| {});
            }
            Err(e) => panic!("send: {e}"),
        }
    }
}

fn recv(m: &mut SmModule) -> usize {
    let mut got = None;
    while got.is_none() {
        m.progress(&mut |_: u32, _: u8, b: &[u8]| got = Some(b.len()));
    }
    got.unwrap_or(0)
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let child = std::env::var("TMPI_SM_BENCH_CHILD").ok();
    let (rank, dir, job) = match &child {
        Some(v) => {
            let (d, j) = v.split_once('|').expect("child spec");
            (1u32, std::path::PathBuf::from(d), j.to_string())
        }
        None => {
            let job = format!("bench{}", std::process::id());
            let dir = std::env::temp_dir().join(format!("tmpi-sm-bench-{job}"));
            std::fs::create_dir_all(&dir).unwrap();
            (0, dir, job)
        }
    };
    let mut kid = if rank == 0 {
        let mut c = std::process::Command::new(std::env::current_exe().unwrap());
        c.env("TMPI_SM_BENCH_CHILD", format!("{}|{job}", dir.display()));
        if full {
            c.arg("--bench");
        }
        Some(c.spawn().expect("spawn rank 1"))
    } else {
        None
    };
    let info = ProcessInfo {
        rank,
        size: 2,
        local_rank: rank,
        local_size: 2,
        node_id: 0,
        node_of: vec![0, 0],
        job_id: job.clone(),
        hostname: "localhost".into(),
    };
    let mut modex = FileModex::new(&dir, rank, 2, Duration::from_secs(30));
    let mut m = SmModule::open(&info, &mut modex, SmConfig::default())
        .unwrap()
        .unwrap();
    modex.fence().unwrap();
    m.add_procs(&[0, 1], &mut modex).unwrap();
    let peer = 1 - rank;
    let iters = if full { 20_000 } else { 200 };
    let buf = vec![0xa5u8; 32 * 1024];
    for &size in &[0usize, 8, 64, 256, 1024, 4096, 16384, 32768] {
        let n = if size > 4096 { iters / 4 } else { iters };
        let mut t0 = Instant::now();
        for i in 0..n + n / 10 {
            if i == n / 10 {
                t0 = Instant::now(); // after the warm-up
            }
            if rank == 0 {
                send(&mut m, peer, 1, &buf[..size]);
                assert_eq!(recv(&mut m), size);
            } else {
                assert_eq!(recv(&mut m), size);
                send(&mut m, peer, 1, &buf[..size]);
            }
        }
        let dt = t0.elapsed();
        if rank == 0 {
            let half = dt.as_nanos() as f64 / (2.0 * n as f64);
            println!("sm ping-pong {size:>6} B: {half:>8.0} ns half round trip");
        }
    }
    // streaming bandwidth, max-size fragments, one ack at the end
    let frags = if full { 20_000 } else { 200 };
    let t0 = Instant::now();
    if rank == 0 {
        for _ in 0..frags {
            send(&mut m, peer, 2, &buf);
        }
        recv(&mut m);
        let dt = t0.elapsed().as_secs_f64();
        println!(
            "sm stream {} B fragments: {:.2} GB/s",
            buf.len(),
            frags as f64 * buf.len() as f64 / dt / 1e9
        );
    } else {
        let mut got = 0;
        while got < frags {
            got += m.progress(&mut |_: u32, _: u8, _: &[u8]| {});
        }
        send(&mut m, peer, 3, &[]);
    }
    modex.fence().unwrap();
    m.finalize().unwrap();
    if let Some(k) = kid.as_mut() {
        assert!(k.wait().unwrap().success());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
