//! The collectives over the real point-to-point layer: one `Pml` per rank
//! (threads) over the pml's in-process loopback transport, through the
//! [`PmlP2p`] adapter; the same self-test `coll-check` runs under tmpirun.
//! With `swap_pairs` the transport delivers fragments out of order (the
//! pml restores order), with `busy_every` it refuses sends now and then.

use std::sync::Arc;
use std::time::Duration;

use tmpi_base::mca::{Registry, Sources};
use tmpi_coll::pml_adapter::PmlP2p;
use tmpi_coll::{selftest, CollContext};
use tmpi_pml::transport::{Loopback, LoopbackConfig};
use tmpi_pml::Pml;

fn run(n: u32, cfg: LoopbackConfig, params: &[(&str, &str)]) {
    let pairs: Vec<(String, String)> = params
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let reg = Arc::new(Registry::new(Sources::default().with_cmdline(pairs)));
    let (tx, rx) = std::sync::mpsc::channel();
    for (r, lb) in Loopback::job(n, cfg).into_iter().enumerate() {
        let tx = tx.clone();
        let reg = Arc::clone(&reg);
        std::thread::spawn(move || {
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let pml = Arc::new(Pml::with_transport(r as u32, Box::new(lb), true).expect("pml"));
                let p2p = PmlP2p::new(Arc::clone(&pml));
                let u = CollContext::init(Arc::new(p2p), &reg).expect("coll init");
                selftest::check(&u.world)
            }));
            let _ = tx.send((r, res.map_err(|_| "panicked".to_string()).and_then(|x| x)));
        });
    }
    drop(tx);
    for _ in 0..n {
        let (r, res) = rx
            .recv_timeout(Duration::from_secs(300))
            .expect("job over the pml timed out");
        if let Err(e) = res {
            panic!("rank {r} of {n}: {e}");
        }
    }
}

#[test]
fn selftest_over_pml_2_to_5_ranks() {
    for n in 2..=5 {
        run(n, LoopbackConfig::default(), &[]);
    }
}

#[test]
fn selftest_over_pml_reordering_and_busy_transport() {
    let cfg = LoopbackConfig {
        swap_pairs: true,
        busy_every: 7,
        ..LoopbackConfig::default()
    };
    run(4, cfg, &[]);
    run(3, cfg, &[("coll", "basic,self")]);
}

#[test]
fn selftest_over_pml_8_ranks_forced_bandwidth_algorithms() {
    run(
        8,
        LoopbackConfig::default(),
        &[
            // Without sm, so that the forced algorithms run at every size.
            ("coll", "^sm"),
            ("coll_tuned_allreduce_algorithm", "3"),
            ("coll_tuned_bcast_algorithm", "3"),
            ("coll_tuned_alltoall_algorithm", "2"),
            ("coll_tuned_allgather_algorithm", "2"),
            ("coll_tuned_reduce_algorithm", "3"),
        ],
    );
}
