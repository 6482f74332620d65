//! The collectives over the real point-to-point layer: one `Pml` per rank
//! (threads) over the pml's in-process loopback transport, through the
//! [`PmlP2p`] adapter; the same self-test `coll-check` runs under tmpirun.
//! With `swap_pairs` the transport delivers fragments out of order (the
//! pml restores order), with `busy_every` it refuses sends now and then.

use std::sync::Arc;
use std::time::Duration;

use tmpi_base::mca::{Registry, Sources};
use tmpi_coll::PmlP2p;
use tmpi_comm::{selftest, CommContext};
use tmpi_pml::transport::{Loopback, LoopbackConfig};
use tmpi_pml::Pml;

/// Runs `f(rank, pml)` on `n` threads, one pml each over the loopback
/// transport; panics naming the rank that failed or panicked, or with
/// `stuck` when the job did not finish within `timeout`.
fn ranks(
    n: u32,
    cfg: LoopbackConfig,
    timeout: Duration,
    stuck: &str,
    f: impl Fn(u32, Arc<Pml>) -> Result<(), String> + Send + Sync + 'static,
) {
    let f = Arc::new(f);
    let (tx, rx) = std::sync::mpsc::channel();
    for (r, lb) in Loopback::job(n, cfg).into_iter().enumerate() {
        let tx = tx.clone();
        let f = Arc::clone(&f);
        std::thread::spawn(move || {
            let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let pml = Arc::new(Pml::with_transport(r as u32, Box::new(lb), true).expect("pml"));
                f(r as u32, pml)
            }));
            let _ = tx.send((r, res.map_err(|_| "panicked".to_string()).and_then(|x| x)));
        });
    }
    drop(tx);
    for _ in 0..n {
        let (r, res) = rx.recv_timeout(timeout).expect(stuck);
        if let Err(e) = res {
            panic!("rank {r} of {n}: {e}");
        }
    }
}

fn run(n: u32, cfg: LoopbackConfig, params: &[(&str, &str)]) {
    let pairs: Vec<(String, String)> = params
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let reg = Arc::new(Registry::new(Sources::default().with_cmdline(pairs)));
    ranks(
        n,
        cfg,
        Duration::from_secs(300),
        "job over the pml timed out",
        move |_, pml| {
            let p2p = PmlP2p::new(pml);
            let u = CommContext::init(Arc::new(p2p), &reg).expect("coll init");
            selftest::check(&u.world)
        },
    );
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

/// Two coll contexts over one pml per rank (an embedder with two
/// frameworks, or a test harness beside the process's own): a rank
/// blocked in a point-to-point receive keeps both contexts' non-blocking
/// collectives moving. 4 ranks, an iallreduce in each context (recursive
/// doubling: the second round needs every rank's first), every rank but
/// the last blocked in a receive of a token that the next rank sends only
/// after both its collectives completed. Hangs (timeout) when the pml
/// runs only the first context's hook.
#[test]
fn blocked_receive_drives_the_collectives_of_two_contexts() {
    use tmpi_coll::{Datatype, Op};
    use tmpi_pml::raw::{RawBuf, RawBufMut};
    use tmpi_pml::{SendMode, CTX_WORLD};
    const TOKEN: i32 = 77;
    let n = 4u32;
    let reg = Arc::new(Registry::new(Sources::default()));
    ranks(
        n,
        LoopbackConfig::default(),
        Duration::from_secs(60),
        "a rank blocked in a receive did not drive the second context's collective",
        move |me, pml| {
            let first = CommContext::init(Arc::new(PmlP2p::new(Arc::clone(&pml))), &reg)
                .expect("first context");
            let second = CommContext::init(Arc::new(PmlP2p::new(Arc::clone(&pml))), &reg)
                .expect("second context");
            // The second context's collectives on a communicator of
            // their own (the two contexts share the pml's world).
            let c2 = second.world.dup().expect("dup");
            let word = |x: u64| x.to_ne_bytes().to_vec();
            let a = first
                .world
                .iallreduce(word(u64::from(me) + 1), Datatype::U64, &Op::Sum)
                .expect("iallreduce, first context");
            let b = c2
                .iallreduce(word(10 * (u64::from(me) + 1)), Datatype::U64, &Op::Sum)
                .expect("iallreduce, second context");
            if me + 1 < n {
                let mut tok = [0u8; 4];
                // SAFETY: `tok` outlives the wait below and is not
                // touched until it returns.
                let id = unsafe {
                    pml.irecv(
                        CTX_WORLD,
                        (me + 1) as i32,
                        TOKEN,
                        RawBufMut::from_slice(&mut tok),
                    )
                }
                .expect("irecv");
                pml.wait(id).expect("token");
                assert_eq!(u32::from_ne_bytes(tok), me + 1, "token");
            }
            let sum = |v: Vec<u8>| u64::from_ne_bytes(v[..8].try_into().unwrap());
            let want: u64 = (1..=u64::from(n)).sum();
            assert_eq!(sum(a.wait().expect("first wait")), want);
            assert_eq!(sum(b.wait().expect("second wait")), 10 * want);
            if me > 0 {
                let tok = me.to_ne_bytes();
                // SAFETY: `tok` outlives the wait below.
                let id = unsafe {
                    pml.isend(
                        CTX_WORLD,
                        me as i32 - 1,
                        TOKEN,
                        RawBuf::from_slice(&tok),
                        SendMode::Standard,
                    )
                }
                .expect("isend");
                pml.wait(id).expect("token sent");
            }
            Ok(())
        },
    );
}
