//! RDMA write through the generic `tmpi-btl` interface, across real
//! processes over the soft NIC: `register_window` (remote write access),
//! blocking `put` of odd lengths to odd offsets into every peer's window,
//! the data read back with `get`, bounds errors; with the port's
//! `max_msg_sz` and the send queue small, so that one put is split into
//! chunks and into pieces that fit the queue; and bursts of non-blocking
//! writes (`put_start`, `rdma_test`), more than the queue holds.

mod common;

use common::*;
use tmpi_base::modex::Modex;
use tmpi_btl::{BtlError, BtlFlags, BtlModule};

/// Bytes each origin writes into each target's window (odd: the slots
/// start at odd offsets).
const L: usize = 150_001;

#[test]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    assert_eq!(role, "put");
    let mut job = child_job();
    let mut mods = init_btl(&mut job);
    let m: &mut Box<dyn BtlModule> = &mut mods[0];
    assert!(m.flags().contains(BtlFlags::PUT | BtlFlags::GET));
    let all: Vec<u32> = (0..job.size).collect();
    let others: Vec<u32> = m.add_procs(&all, &mut job.modex).unwrap();
    job.modex.fence().unwrap();

    let me = job.rank;
    let n = job.size as usize;
    // Slot `o` of the window is written by origin `o`.
    let mut window = vec![0u8; n * L];
    // SAFETY: `window` outlives the registration (deregistered below,
    // after the last peer's access: the barrier before it).
    let region = unsafe { m.register_window(window.as_mut_ptr(), window.len()) }.unwrap();
    let regions = exchange_regions(&mut job, &region, &others);
    for (p, r) in &regions {
        let data = pattern(me * 10 + p, L);
        m.put(*p, r, (me as usize * L) as u64, &data).expect("put");
        assert!(matches!(
            m.put(*p, r, r.len - 8, &[0u8; 16]),
            Err(BtlError::OutOfBounds { .. })
        ));
        // Read back what this rank wrote: the put was complete at the
        // target when it returned.
        let mut back = vec![0u8; L];
        m.get(*p, r, (me as usize * L) as u64, &mut back)
            .expect("get");
        assert!(back == data, "read back from {p}");
    }
    // Non-blocking writes: a burst of small ones into the first 4 KiB of
    // this rank's slot at every peer (more than a 16-entry send queue
    // holds: a full queue says WouldBlock and the oldest is tested until
    // room comes), each tested to completion, then read back.
    let burst: Vec<u8> = (0..4096u32).map(|i| (i * 7 + me) as u8).collect();
    for (p, r) in &regions {
        let base = (me as usize * L) as u64;
        let mut live: std::collections::VecDeque<u64> = Default::default();
        for (k, chunk) in burst.chunks(64).enumerate() {
            loop {
                // SAFETY: `burst` outlives every write (all are tested to
                // completion below, before it is dropped).
                match unsafe {
                    m.put_start(*p, r, base + (k * 64) as u64, chunk.as_ptr(), chunk.len())
                } {
                    Ok(t) => {
                        live.push_back(t);
                        break;
                    }
                    Err(BtlError::WouldBlock) => {
                        let t = live.pop_front().expect("a full queue holds writes");
                        while !m.rdma_test(t).expect("write") {}
                    }
                    Err(e) => panic!("put_start: {e}"),
                }
            }
        }
        for t in live {
            while !m.rdma_test(t).expect("write") {}
        }
        let mut back = vec![0u8; burst.len()];
        m.get(*p, r, base, &mut back).expect("get");
        assert!(back == burst, "burst read back from {p}");
        // Restore the slot for the checks below.
        let data = pattern(me * 10 + p, L);
        m.put(*p, r, base, &data[..burst.len()]).expect("put");
    }
    let mut sink = |_: u32, _: u8, _: &[u8]| panic!("no fragments expected");
    job.modex
        .barrier_with(|| {
            m.progress(&mut sink);
        })
        .unwrap();
    for o in 0..n {
        let slot = &window[o * L..(o + 1) * L];
        if o as u32 == me {
            assert!(slot.iter().all(|&b| b == 0), "own slot untouched");
        } else {
            assert!(slot == &pattern(o as u32 * 10 + me, L)[..], "slot of {o}");
        }
    }
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
fn put_into_every_peers_window_three_ranks() {
    run_job("put", 3, &[("btl_openib_if_include", "tmsoft0")]);
}

#[test]
fn put_split_into_chunks_and_pieces() {
    run_job(
        "put",
        2,
        &[
            ("btl_openib_if_include", "tmsoft0"),
            ("btl_openib_tmsoft_max_msg_sz", "4096"),
            ("btl_openib_send_queue", "16"),
            ("btl_openib_eager_limit", "2048"),
        ],
    );
}
