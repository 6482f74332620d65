//! Two rendezvous sends of one buffer in flight at once (legal MPI), the
//! receiver taking the second one later: `tmpirun -n 2 same-buffer-sends`.
//! Minimal reproducer of stress finding 4 (docs/journal/stress-soaks.md): btl-openib
//! kept one pin per exported region *value*, so the first FIN unpinned the
//! buffer while the second read was pending (`RemAccessErr`, then a hang,
//! with `btl_openib_rcache_max_entries=0`). Rank 1 prints
//! `same-buffer-sends: OK` when both arrive intact.

use tmpi::Request;

const LEN: usize = 200_000;

fn main() {
    let mpi = tmpi::init().expect("init");
    let w = mpi.world();
    if w.rank() == 0 {
        let buf: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
        tmpi::scope(|s| {
            let a = w.isend(s, &buf, 1, 1).expect("isend");
            let b = w.isend(s, &buf, 1, 2).expect("isend");
            Request::wait_all(vec![a, b]).expect("sends");
        });
    } else if w.rank() == 1 {
        let mut x = vec![0u8; LEN];
        let mut y = vec![0u8; LEN];
        w.recv(&mut x, 0, 1).expect("recv 1");
        // The first send completes (FIN) before the second is matched.
        std::thread::sleep(std::time::Duration::from_millis(200));
        w.recv(&mut y, 0, 2).expect("recv 2");
        let ok = x
            .iter()
            .chain(&y)
            .enumerate()
            .all(|(i, &b)| b == ((i % LEN) % 251) as u8);
        if !ok {
            eprintln!("same-buffer-sends: FAILED (wrong data)");
            std::process::exit(1);
        }
        println!("same-buffer-sends: OK");
    }
}
