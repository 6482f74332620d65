//! The registration cache's eviction rule on real regions of the soft NIC:
//! hits for covered ranges, LRU eviction of unpinned entries beyond the
//! entry and byte bounds, pinned entries never dropped, invalidation.

use tmpi_btl_openib::RegCache;
use tmpi_verbs::soft::{SoftConfig, SoftProvider};
use tmpi_verbs::{AccessFlags, Context, Provider};

type P = SoftProvider;

fn pd() -> <P as Provider>::Pd {
    let p = SoftProvider::new(SoftConfig::default()).unwrap();
    p.open("tmsoft0").unwrap().alloc_pd().unwrap()
}

#[test]
fn lru_bounds_pins_and_invalidation() {
    let pd = pd();
    let bufs: Vec<Vec<u8>> = (0..4).map(|_| vec![0u8; 3 * 4096]).collect();
    let mut c: RegCache<P> = RegCache::new(2, 1 << 30);
    let rr = AccessFlags::REMOTE_READ;
    // SAFETY (all registrations): the buffers outlive the cache.
    let regs: Vec<_> = bufs
        .iter()
        .map(|b| unsafe { c.register(&pd, b.as_ptr(), b.len(), rr) }.unwrap())
        .collect();
    assert_eq!(c.stats().misses, 4);
    // All pinned: nothing is dropped whatever the bound.
    c.trim();
    assert_eq!(c.stats().entries, 4);
    // A covered sub-range with fewer rights is a hit on the same region.
    let sub = unsafe { c.register(&pd, bufs[1][100..].as_ptr(), 500, rr) }.unwrap();
    assert_eq!(c.stats().hits, 1);
    assert_eq!(sub.rkey(), regs[1].rkey());
    assert_eq!(sub.addr(), bufs[1][100..].as_ptr() as u64);
    // More rights than cached: a new registration.
    let rw = unsafe { c.register(&pd, bufs[2].as_ptr(), 10, AccessFlags::LOCAL_WRITE) }.unwrap();
    assert_eq!(c.stats().misses, 5);
    drop(rw);
    drop(sub);
    drop(regs);
    // Five unused entries, bound 2: the two most recently used stay
    // (buffer 1, hit by `sub`, and the LOCAL_WRITE entry of buffer 2).
    c.trim();
    let st = c.stats();
    assert_eq!(st.entries, 2, "{st:?}");
    assert_eq!(st.evictions, 3);
    // Buffer 1 is still cached, buffer 0 (least recently used) is not.
    drop(unsafe { c.register(&pd, bufs[1].as_ptr(), 1, rr) }.unwrap());
    assert_eq!((c.stats().hits, c.stats().misses), (2, 5));
    drop(unsafe { c.register(&pd, bufs[0].as_ptr(), 1, rr) }.unwrap());
    assert_eq!(c.stats().misses, 6);
    // Three unused now: the next lookup first drops the LRU one (the
    // bounds hold at every lookup, not only at progress).
    let pinned = unsafe { c.register(&pd, bufs[3].as_ptr(), 8, rr) }.unwrap();
    assert_eq!(c.stats().misses, 7);
    assert_eq!(c.stats().evictions, 4);
    // Invalidation: a pinned entry turns stale (no more hits), dropped when unpinned.
    c.invalidate(bufs[3].as_ptr(), bufs[3].len());
    let again = unsafe { c.register(&pd, bufs[3].as_ptr(), 8, rr) }.unwrap();
    assert_eq!(c.stats().misses, 8, "stale entry not handed out");
    drop((pinned, again));
    c.invalidate(std::ptr::null(), usize::MAX);
    assert_eq!(c.stats().entries, 0);
    // Bad input: a typed error.
    assert!(unsafe { c.register(&pd, bufs[0].as_ptr(), 0, rr) }.is_err());
}

#[test]
fn byte_bound_and_no_caching() {
    let pd = pd();
    let big = vec![0u8; 64 * 4096];
    let small = vec![0u8; 4096];
    let mut c: RegCache<P> = RegCache::new(100, 16 * 4096);
    // SAFETY: the buffers outlive the cache.
    drop(unsafe { c.register(&pd, big.as_ptr(), big.len(), AccessFlags::REMOTE_READ) }.unwrap());
    drop(
        unsafe { c.register(&pd, small.as_ptr(), small.len(), AccessFlags::REMOTE_READ) }.unwrap(),
    );
    c.trim();
    assert!(c.stats().entries <= 1, "byte bound: {:?}", c.stats());
    let mut none: RegCache<P> = RegCache::new(0, 1 << 30);
    let r = unsafe { none.register(&pd, small.as_ptr(), 10, AccessFlags::REMOTE_READ) }.unwrap();
    none.trim();
    assert_eq!(none.stats().entries, 1, "pinned");
    drop(r);
    none.trim();
    assert_eq!(
        none.stats().entries,
        0,
        "max_entries=0: dropped once unused"
    );
}

#[test]
fn no_caching_never_hands_out_an_unused_registration() {
    let pd = pd();
    let buf = vec![0u8; 8 * 4096];
    let rr = AccessFlags::REMOTE_READ;
    let mut none: RegCache<P> = RegCache::new(0, 1 << 30);
    // SAFETY: `buf` outlives the cache.
    let r = unsafe { none.register(&pd, buf.as_ptr(), buf.len(), rr) }.unwrap();
    // A second user while the first pins it: shared (its pages are mapped).
    let r2 = unsafe { none.register(&pd, buf.as_ptr(), 100, rr) }.unwrap();
    assert_eq!((none.stats().hits, none.stats().misses), (1, 1));
    drop(r);
    drop(r2);
    // Unused now, and no progress (trim) in between, as when the pml
    // deregisters after a FIN and the application reallocates the buffer
    // at the same address before the next progress: a fresh registration.
    let r3 = unsafe { none.register(&pd, buf.as_ptr(), buf.len(), rr) }.unwrap();
    assert_eq!(none.stats().misses, 2, "{:?}", none.stats());
    assert_eq!(none.stats().entries, 1, "{:?}", none.stats());
    drop(r3);
    // With caching on, an unused entry within the bounds is a hit.
    let mut some: RegCache<P> = RegCache::new(4, 1 << 30);
    drop(unsafe { some.register(&pd, buf.as_ptr(), buf.len(), rr) }.unwrap());
    drop(unsafe { some.register(&pd, buf.as_ptr(), buf.len(), rr) }.unwrap());
    assert_eq!((some.stats().hits, some.stats().misses), (1, 1));
}
