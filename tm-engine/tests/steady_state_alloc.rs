//! "No allocation per operation in steady state": count heap allocations with a wrapping global
//! allocator while the engine runs a mixed workload whose depths stay bounded. Only the test's
//! own thread is counted: libtest's main thread allocates when it parks on its result channel.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use tmpi_tm_engine::{ArriveOutcome, Engine, Envelope, PostOutcome, RecvSpec, SourceSpec, TagSpec};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Whether this thread's allocations are counted (const-initialised, no destructor: reading
    /// it never allocates).
    static COUNTED: Cell<bool> = const { Cell::new(false) };
}

fn count_if_counted() {
    if COUNTED.try_with(Cell::get).unwrap_or(false) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to the system allocator with the caller's arguments unchanged,
// so `Counting` upholds exactly the contract `System` does; the counter has no effect on memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_if_counted();
        // SAFETY: same layout the caller gave us, which satisfies `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` (through `alloc` above) with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_if_counted();
        // SAFETY: forwarded unchanged; `ptr`/`layout` come from `System` as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One round: a background of receives and unexpected messages on rotating tags, exact and
/// wildcard receives, probes, cancels; every round leaves the queues as it found them.
fn round(e: &mut Engine<u64, u64>, r: u64) {
    let tag = (r % 97) as i32;
    let any_src = RecvSpec {
        context: 1,
        source: SourceSpec::Any,
        tag: TagSpec::Tag(tag),
    };
    let any_tag = RecvSpec {
        context: 1,
        source: SourceSpec::Rank(3),
        tag: TagSpec::Any,
    };
    // Unexpected first, then receives that take them (wildcard index built and dropped).
    for s in 0..4u32 {
        assert_eq!(
            e.arrive(Envelope::new(1, s, tag), r).unwrap(),
            ArriveOutcome::Unexpected
        );
    }
    assert!(e.probe(&any_src).is_some());
    assert!(matches!(
        e.post_recv(any_src, r).unwrap(),
        PostOutcome::Matched { .. }
    ));
    assert!(e.mprobe(&any_tag).is_some());
    for s in 1..3u32 {
        let spec = RecvSpec::exact(1, s, tag);
        assert!(matches!(
            e.post_recv(spec, r).unwrap(),
            PostOutcome::Matched { .. }
        ));
    }
    // Receives first, then messages (wildcard and exact classes merged by sequence).
    let key = match e.post_recv(any_tag, r).unwrap() {
        PostOutcome::Posted { key, .. } => key,
        other => panic!("{other:?}"),
    };
    for s in 0..3u32 {
        e.post_recv(RecvSpec::exact(1, s, tag), r).unwrap();
    }
    e.post_recv(any_src, r).unwrap();
    for s in 0..3u32 {
        assert!(matches!(
            e.arrive(Envelope::new(1, s, tag), r).unwrap(),
            ArriveOutcome::Matched { .. }
        ));
    }
    assert!(matches!(
        e.arrive(Envelope::new(1, 5, tag), r).unwrap(),
        ArriveOutcome::Matched { .. }
    ));
    assert!(matches!(
        e.cancel(key),
        tmpi_tm_engine::CancelOutcome::Removed(_)
    ));
    assert_eq!((e.posted_len(), e.unexpected_len()), (100, 0));
}

#[test]
fn no_allocation_per_operation_in_steady_state() {
    COUNTED.with(|c| c.set(true));
    // The counter sees allocations at all.
    let c0 = ALLOCS.load(Ordering::Relaxed);
    let v: Vec<u8> = std::hint::black_box(Vec::with_capacity(16));
    assert!(ALLOCS.load(Ordering::Relaxed) > c0);
    drop(v);
    let mut e = Engine::<u64, u64>::new();
    // A standing background of 100 exact receives that never match.
    for k in 0..100 {
        e.post_recv(RecvSpec::exact(1, 7, 10_000 + k), u64::MAX)
            .unwrap();
    }
    // Warm up: slabs and tables reach their working size.
    for r in 0..2_000 {
        round(&mut e, r);
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    for r in 2_000..22_000 {
        round(&mut e, r);
    }
    let after = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(
        after - before,
        0,
        "allocations during 20 000 steady-state rounds"
    );
}
