//! Steady state allocates nothing: after a warm-up, thousands of
//! send/progress calls (fast box, eager and max fragments) run with a
//! counting global allocator that must see zero allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tmpi_base::modex::Modex;
use tmpi_btl::testing::{child_context, run_ranks};
use tmpi_btl::{BtlError, BtlModule};
use tmpi_btl_sm::{SmConfig, SmModule};

struct Counting;
static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn steady_state_allocates_nothing() {
    let out = run_ranks("noalloc_child", 2, &[], Duration::from_secs(120));
    out.assert_success();
}

const SIZES: [usize; 5] = [16, 200, 3000, 9000, 32000];

fn exchange(m: &mut SmModule, me: u32, rounds: u32, sink: &mut u64) {
    let peer = 1 - me;
    let payload = [7u8; 32000];
    let t0 = Instant::now();
    let got = std::cell::Cell::new(0u32);
    let mut sent = 0u32;
    let mut h = |_: u32, _: u8, b: &[u8]| {
        *sink = sink.wrapping_add(b.len() as u64);
        got.set(got.get() + 1);
    };
    while sent < rounds || got.get() < rounds {
        if sent < rounds {
            match m.send(
                peer,
                1,
                b"hdr",
                &payload[..SIZES[sent as usize % SIZES.len()]],
            ) {
                Ok(()) => sent += 1,
                Err(BtlError::WouldBlock) => {}
                Err(e) => panic!("{e}"),
            }
        }
        m.progress(&mut h);
        assert!(t0.elapsed() < Duration::from_secs(60), "stalled");
    }
}

#[test]
fn noalloc_child() {
    let Some(ctx) = child_context() else { return };
    let info = ctx.process_info();
    let mut modex = ctx.modex();
    let mut m = SmModule::open(&info, &mut modex, SmConfig::default())
        .unwrap()
        .unwrap();
    modex.fence().unwrap();
    m.add_procs(&[0, 1], &mut modex).unwrap();
    let mut sink = 0u64;
    exchange(&mut m, ctx.rank, 500, &mut sink); // warm-up
    modex.fence().unwrap();
    // the counter works
    COUNTING.store(true, Ordering::SeqCst);
    let v = std::hint::black_box(vec![1u8; 10]);
    COUNTING.store(false, Ordering::SeqCst);
    drop(v);
    assert_eq!(ALLOCS.swap(0, Ordering::SeqCst), 1);
    COUNTING.store(true, Ordering::SeqCst);
    exchange(&mut m, ctx.rank, 5000, &mut sink);
    COUNTING.store(false, Ordering::SeqCst);
    let n = ALLOCS.load(Ordering::SeqCst);
    let st = m.stats();
    modex.fence().unwrap();
    m.finalize().unwrap();
    assert!(st.fbox_sends > 0 && st.fifo_sends > 0, "{st:?}");
    assert_eq!(n, 0, "allocations in steady state ({st:?})");
    assert!(sink > 0);
}
