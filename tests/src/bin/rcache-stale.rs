//! Minimal reproducer of a stale registration-cache entry (found by the
//! stress generator over btl openib on rxe): in each round rank 0 sends a
//! fresh 40 MiB vector filled with the round number and rank 1 receives it
//! into a fresh 40 MiB vector; both are dropped after the round. Above
//! glibc's mmap threshold each vector is its own mapping: the next round
//! gets the same addresses backed by other pages. A registration cache
//! that is not invalidated when memory goes back to the OS hands out the
//! old registration, and a real RDMA device then moves data from or into
//! the old pages (rank 1 reads zeros / an earlier round's bytes).
//! `tmpirun -n 2 --mca btl self,openib --mca btl_openib_if_include rxe0
//! rcache-stale`: prints `rcache-stale: OK`, or each corrupted round and
//! exits 1. (tmsoft0 copies by virtual address and is not affected.)

use std::process::exit;

/// Above glibc's largest mmap threshold (32 MiB): every vector is its own
/// mapping, unmapped when dropped.
const LEN: usize = 40 << 20;
const ROUNDS: u8 = 4;

fn main() {
    let mpi = tmpi::init().expect("init");
    let w = mpi.world();
    if w.size() != 2 {
        eprintln!("rcache-stale: needs 2 ranks");
        exit(2);
    }
    // Optional argument: MiB per message (default 40).
    let len = std::env::args()
        .nth(1)
        .and_then(|a| a.parse::<usize>().ok())
        .map_or(LEN, |m| m << 20);
    let mut bad = 0;
    for k in 1..=ROUNDS {
        if w.rank() == 0 {
            let buf = vec![k; len];
            eprintln!("rcache-stale: round {k} buffer at {:p}", buf.as_ptr());
            w.send(&buf, 1, k as i32).expect("send");
            drop(buf);
        } else {
            let mut buf = vec![0u8; len];
            w.recv(&mut buf, 0, k as i32).expect("recv");
            let wrong = buf.iter().filter(|&&b| b != k).count();
            if wrong > 0 {
                let first = buf.iter().position(|&b| b != k).unwrap_or(0);
                eprintln!(
                    "rcache-stale: round {k}: {wrong} of {len} bytes wrong, first at {first} \
                     (holds {}: data of an earlier round)",
                    buf[first]
                );
                bad += 1;
            }
        }
        w.barrier().expect("barrier");
    }
    if w.rank() == 1 {
        if bad > 0 {
            eprintln!("rcache-stale: FAILED in {bad} of {ROUNDS} rounds");
            exit(1);
        }
        println!("rcache-stale: OK");
    }
}
