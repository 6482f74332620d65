//! Collectives across real processes: run under `tmpirun -n N coll-check MODE`.
//!
//! * `check`: every collective against a reference computed locally, every
//!   root, several counts, in place; communicators from dup/split/create;
//!   several non-blocking collectives outstanding at once. Rank 0 prints
//!   `coll-check check: OK (sm single copy: on|on through pipes|off|unused)`.
//! * `nodes [N]`: `split_type(SHARED)` against the hosts the ranks really
//!   run on (host name and network namespace), the job spanning N hosts;
//!   the node communicator passes `check` through coll's `sm` segment.
//!   Every rank prints `coll-check nodes: OK (H hosts, node of S ranks)`.
//! * `bench-threads N`: the benchmark with N threads over the pml's
//!   in-process loopback transport.
//! * `bench`: latency of barrier, bcast, allreduce, reduce, allgather and
//!   alltoall at 8 B, 1 KiB, 64 KiB and 1 MiB per rank (median of 5 runs of
//!   a timed loop, rank 0 prints µs per call).
//! * `reduce-copy N`: N blocking reduces of 64 KiB vectors (`u32` sums,
//!   checked exactly at the root), whose receives copy with the sender's
//!   help or alone as `tmpi_coll::reduce_copy` picks; rank 0 prints
//!   `coll-check reduce-copy: OK (N calls, A alone)`.
//! * `pingpong`: the point-to-point floor under the collectives: ranks 0
//!   and 1 bounce a message of each benchmark size through the same
//!   transport calls the schedules use (median of 5 timed loops, rank 0
//!   prints µs per round trip).

use std::sync::Arc;
use tmpi_coll::PmlP2p;
use tmpi_comm::selftest::{bench, check, check_nodes, pingpong};
use tmpi_comm::CommContext;
use tmpi_pml::{InitOptions, Pml};

/// `bench-threads N`: N ranks as threads of this process, each with its own
/// pml over the pml's in-process loopback transport (until the pml runs
/// across processes).
fn bench_threads(n: u32) {
    use tmpi_pml::transport::{Loopback, LoopbackConfig};
    let reg = tmpi_base::mca::registry();
    let handles: Vec<_> = Loopback::job(n, LoopbackConfig::default())
        .into_iter()
        .enumerate()
        .map(|(r, lb)| {
            std::thread::spawn(move || {
                let pml = Arc::new(Pml::with_transport(r as u32, Box::new(lb), true).expect("pml"));
                let p2p = PmlP2p::new(Arc::clone(&pml));
                let u = CommContext::init(Arc::new(p2p), reg).expect("coll init");
                bench(&u.world);
            })
        })
        .collect();
    for h in handles {
        h.join().expect("rank thread");
    }
}

/// `reduce-copy N` (see the module's documentation).
fn reduce_copy(w: &tmpi_comm::Comm, calls: u32) -> Result<(), String> {
    use tmpi_coll::{Datatype, Input, Op};
    const COUNT: u32 = 16 * 1024;
    let (me, p) = (w.rank(), w.size());
    let before = tmpi_coll::reduce_copy_calls_alone();
    for call in 0..calls {
        let v: Vec<u8> = (0..COUNT)
            .flat_map(|i| (i * 7 + me * 1000 + call).to_ne_bytes())
            .collect();
        let mut out = vec![0u8; v.len()];
        let recv = (me == 0).then_some(&mut out[..]);
        w.reduce(Input::Buf(&v), recv, Datatype::U32, &Op::Sum, 0)
            .map_err(|e| format!("call {call}: {e}"))?;
        if me == 0 {
            for (i, got) in out.chunks_exact(4).enumerate() {
                let i = i as u32;
                let want: u32 = (0..p).map(|r| i * 7 + r * 1000 + call).sum();
                let got = u32::from_ne_bytes(got.try_into().expect("4 bytes"));
                if got != want {
                    return Err(format!("call {call}, element {i}: {got} != {want}"));
                }
            }
        }
    }
    if me == 0 {
        let alone = tmpi_coll::reduce_copy_calls_alone() - before;
        println!("coll-check reduce-copy: OK ({calls} calls, {alone} alone)");
    }
    Ok(())
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "check".into());
    if mode == "bench-threads" {
        let n = std::env::args()
            .nth(2)
            .and_then(|a| a.parse().ok())
            .unwrap_or(2);
        bench_threads(n);
        return;
    }
    let pml = Arc::new(
        Pml::init(InitOptions {
            logging: true,
            btls: tmpi_components::btls(),
        })
        .expect("pml init"),
    );
    let reg = tmpi_base::mca::registry();
    let p2p = PmlP2p::new(Arc::clone(&pml));
    let u = CommContext::init(Arc::new(p2p), reg).expect("coll init");
    let w = u.world.clone();
    match mode.as_str() {
        "check" => match check(&w) {
            Ok(()) => {
                if w.rank() == 0 {
                    // Whether sm's single copy carried the large allgather
                    // and alltoall calls (the multi-process tests ask).
                    let sc = match (w.single_copy(), w.single_copy_piped()) {
                        (Some(true), Some(true)) => "on through pipes",
                        (Some(true), _) => "on",
                        (Some(false), _) => "off",
                        (None, _) => "unused",
                    };
                    println!("coll-check check: OK (sm single copy: {sc})");
                }
            }
            Err(e) => {
                eprintln!("rank {}: coll-check check FAILED: {e}", w.rank());
                std::process::exit(1);
            }
        },
        "nodes" => {
            let expect = std::env::args().nth(2).and_then(|a| a.parse().ok());
            match check_nodes(&w, expect) {
                Ok((hosts, size)) => {
                    println!("coll-check nodes: OK ({hosts} hosts, node of {size} ranks)")
                }
                Err(e) => {
                    eprintln!("rank {}: coll-check nodes FAILED: {e}", w.rank());
                    std::process::exit(1);
                }
            }
        }
        "reduce-copy" => {
            let n = std::env::args()
                .nth(2)
                .and_then(|a| a.parse().ok())
                .unwrap_or(40);
            if let Err(e) = reduce_copy(&w, n) {
                eprintln!("rank {}: coll-check reduce-copy FAILED: {e}", w.rank());
                std::process::exit(1);
            }
        }
        "bench" => bench(&w),
        "pingpong" => pingpong(&w),
        other => {
            eprintln!("unknown mode {other}");
            std::process::exit(2);
        }
    }
    drop(w);
    drop(u);
    pml.finalize().expect("finalize");
}
