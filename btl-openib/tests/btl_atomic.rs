//! NIC atomics through the generic `tmpi-btl` interface, across real
//! processes over the soft NIC (`IBV_ATOMIC_HCA`: atomic only among the
//! device's own atomics, so the owner of the memory must go through the
//! NIC too): every rank, the owner included (through the module's
//! loopback pair), adds to one counter in every rank's window by
//! fetch-add and to another by a compare-swap loop; no update may be
//! lost and no old value seen twice. Then the errors: 8 bytes past the
//! region, and a misaligned address, which the responder refuses.

mod common;

use common::*;
use tmpi_base::modex::Modex;
use tmpi_btl::{AtomicOp, BtlError, BtlFlags, BtlModule};

/// Increments per rank per target, per counter.
const K: u64 = 200;

#[test]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    assert_eq!(role, "atomic");
    let mut job = child_job();
    let mut mods = init_btl(&mut job);
    let m: &mut Box<dyn BtlModule> = &mut mods[0];
    assert!(
        m.flags().contains(BtlFlags::ATOMIC),
        "the soft NIC has atomics"
    );
    let all: Vec<u32> = (0..job.size).collect();
    let mut others: Vec<u32> = m.add_procs(&all, &mut job.modex).unwrap();
    job.modex.fence().unwrap();
    let me = job.rank;
    let n = u64::from(job.size);
    others.push(me);

    // Word 0: fetch-add counter; word 1: compare-swap counter.
    let mut window = vec![0u64; 4];
    // SAFETY: `window` outlives the registration (deregistered below,
    // after the last peer's access: the barrier before it).
    let region =
        unsafe { m.register_window(window.as_mut_ptr().cast(), window.len() * 8) }.unwrap();
    let regions = exchange_regions(&mut job, &region, &others);
    let mut seen: Vec<Vec<u64>> = vec![Vec::new(); regions.len()];
    for _ in 0..K {
        for (i, (p, r)) in regions.iter().enumerate() {
            let old = m
                .atomic(*p, r, 0, AtomicOp::FetchAdd(1))
                .expect("fetch-add");
            seen[i].push(old);
            let mut expect = 0;
            loop {
                let found = m
                    .atomic(
                        *p,
                        r,
                        8,
                        AtomicOp::CmpSwap {
                            compare: expect,
                            swap: expect + 1,
                        },
                    )
                    .expect("compare-swap");
                if found == expect {
                    break;
                }
                expect = found;
            }
        }
    }
    for (i, s) in seen.iter_mut().enumerate() {
        let len = s.len();
        s.sort_unstable();
        s.dedup();
        assert_eq!(s.len(), len, "an old value seen twice at {}", regions[i].0);
        assert!(s.iter().all(|&v| v < n * K));
    }
    let (p, r) = regions[0];
    assert!(matches!(
        m.atomic(p, &r, r.len - 4, AtomicOp::FetchAdd(1)),
        Err(BtlError::OutOfBounds { .. })
    ));
    let mut sink = |_: u32, _: u8, _: &[u8]| panic!("no fragments expected");
    job.modex
        .barrier_with(|| {
            m.progress(&mut sink);
        })
        .unwrap();
    // SAFETY: every rank's atomics completed before the barrier.
    let words = unsafe { std::ptr::read_volatile(window.as_ptr().cast::<[u64; 2]>()) };
    assert_eq!(words, [n * K, n * K], "no update lost");
    // A misaligned address: the responder refuses it (the loopback
    // connection breaks; nothing else uses it any more).
    let (p, r) = *regions.last().unwrap();
    assert_eq!(p, me);
    assert!(m.atomic(p, &r, 4, AtomicOp::FetchAdd(1)).is_err());
    // SAFETY: as above; the refused atomic wrote nothing.
    let words = unsafe { std::ptr::read_volatile(window.as_ptr().cast::<[u64; 2]>()) };
    assert_eq!(words, [n * K, n * K]);
    job.modex
        .barrier_with(|| {
            m.progress(&mut sink);
        })
        .unwrap();
    m.deregister_region(&region);
    m.finalize().unwrap();
    drop(window);
}

#[test]
fn atomics_from_every_rank_and_the_owner_lose_no_update() {
    run_job("atomic", 3, &[("btl_openib_if_include", "tmsoft0")]);
}
