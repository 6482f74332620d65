//! A bounded registration cache for user buffers.
//!
//! Registering memory (`ibv_reg_mr`) pins pages and costs tens of
//! microseconds; MPI programs send from the same buffers again and again.
//! The cache keeps regions registered after their last user released them,
//! and hands out an existing region when it covers the requested range with
//! the requested rights.
//!
//! # Entries and pins
//! [`RegCache::register`] returns a [`Reg`], a counted handle: an entry is
//! *pinned* while any `Reg` to it is alive (a rendezvous send keeps its
//! `Reg` until the FIN arrived; a tagged receive until its buffer came back
//! from the NIC). Ranges are widened to whole pages.
//!
//! # When an entry is dropped (deregistered)
//! 1. **Capacity**: after each release ([`RegCache::trim`], run by the
//!    module's progress), while more than `max_entries` unpinned entries, or
//!    more than `max_bytes` bytes in unpinned entries, are cached, the least
//!    recently used unpinned entry is deregistered. Pinned entries are never
//!    dropped; with `max_entries == 0` every entry is deregistered as soon as
//!    it is unpinned (no caching).
//! 2. **Invalidation**: [`RegCache::invalidate`] must be called before memory
//!    that may have been registered is unmapped or returned to the operating
//!    system (tmpi's `MPI_Free_mem`, or a memory hook). Unpinned overlapping
//!    entries are deregistered at once; pinned ones are marked stale: never
//!    handed out again, deregistered when unpinned.
//!    Without invalidation a cached entry may describe pages that are no
//!    longer the buffer's (the classic registration-cache hazard); set
//!    `btl_openib_rcache_max_entries=0` when the application frees and
//!    reallocates communication buffers behind tmpi's back.
//!
//! Lookups scan the entries (at most `max_entries` plus the pinned ones):
//! O(n) with small n, by design.

use std::sync::Arc;

use tmpi_verbs::{AccessFlags, MemoryRegion, ProtectionDomain, Provider};

use crate::error::{OpenibError, Result};

/// A cached registration.
pub struct RegEntry<P: Provider> {
    mr: P::Mr,
    base: u64,
    len: u64,
    access: AccessFlags,
}

impl<P: Provider> std::fmt::Debug for RegEntry<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegEntry")
            .field("base", &format_args!("{:#x}", self.base))
            .field("len", &self.len)
            .field("lkey", &self.mr.lkey())
            .finish()
    }
}

/// A pinned registration covering the range asked for.
pub struct Reg<P: Provider> {
    entry: Arc<RegEntry<P>>,
    addr: u64,
    len: u64,
}

impl<P: Provider> Clone for Reg<P> {
    fn clone(&self) -> Self {
        Reg {
            entry: self.entry.clone(),
            addr: self.addr,
            len: self.len,
        }
    }
}

impl<P: Provider> std::fmt::Debug for Reg<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reg")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("entry", &self.entry)
            .finish()
    }
}

impl<P: Provider> Reg<P> {
    /// Start of the requested range.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Length of the requested range.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// True for an empty range.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.entry.mr.lkey()
    }
    /// Remote key (goes into the RVH).
    pub fn rkey(&self) -> u32 {
        self.entry.mr.rkey()
    }
    /// SGE over `offset..offset+len` of the requested range.
    pub fn sge(&self, offset: u64, len: u32) -> Result<tmpi_verbs::Sge> {
        if offset
            .checked_add(u64::from(len))
            .is_none_or(|e| e > self.len)
        {
            return Err(OpenibError::InvalidArgument(format!(
                "range {offset}+{len} outside a registration of {} bytes",
                self.len
            )));
        }
        Ok(tmpi_verbs::Sge {
            addr: self.addr + offset,
            length: len,
            lkey: self.lkey(),
        })
    }
}

struct Slot<P: Provider> {
    entry: Arc<RegEntry<P>>,
    last_use: u64,
    stale: bool,
}

/// Cache statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RcacheStats {
    /// Lookups served by an existing entry.
    pub hits: u64,
    /// Lookups that registered memory.
    pub misses: u64,
    /// Entries deregistered (capacity or invalidation).
    pub evictions: u64,
    /// Entries currently registered.
    pub entries: usize,
}

/// The registration cache of one protection domain.
pub struct RegCache<P: Provider> {
    slots: Vec<Slot<P>>,
    max_entries: usize,
    max_bytes: u64,
    clock: u64,
    page: u64,
    stats: RcacheStats,
}

impl<P: Provider> RegCache<P> {
    /// A cache bounded as documented in the module.
    pub fn new(max_entries: usize, max_bytes: u64) -> Self {
        // SAFETY: sysconf has no memory-safety preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        RegCache {
            slots: Vec::new(),
            max_entries,
            max_bytes,
            clock: 0,
            page: if page > 0 { page as u64 } else { 4096 },
            stats: RcacheStats::default(),
        }
    }

    /// Returns a pinned registration covering `addr..addr+len` with at least
    /// `access`.
    ///
    /// # Safety
    /// The whole pages around `addr..addr+len` must stay mapped while any
    /// returned [`Reg`] (or a clone) is alive, and [`RegCache::invalidate`]
    /// must be called before they are unmapped (see the module docs).
    pub unsafe fn register(
        &mut self,
        pd: &P::Pd,
        addr: *const u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<Reg<P>> {
        let a = addr as u64;
        let l = len as u64;
        if len == 0 || a.checked_add(l).is_none() {
            return Err(OpenibError::InvalidArgument(format!(
                "cannot register {len} bytes at {a:#x}"
            )));
        }
        // Entries unpinned since the last trim and beyond the bounds are
        // gone before the lookup: with `max_entries == 0` only pinned
        // entries (whose pages are mapped by contract) can be hit. Without
        // this, a buffer freed and reallocated at the same address between
        // two progress calls got the old pages' registration back (the
        // cache-off hazard of docs/journal/stress-soaks.md, finding 2).
        self.trim();
        self.clock += 1;
        let now = self.clock;
        if let Some(s) = self.slots.iter_mut().find(|s| {
            !s.stale
                && s.entry.base <= a
                && a + l <= s.entry.base + s.entry.len
                && s.entry.access.contains(access)
        }) {
            s.last_use = now;
            self.stats.hits += 1;
            return Ok(Reg {
                entry: s.entry.clone(),
                addr: a,
                len: l,
            });
        }
        let base = a & !(self.page - 1);
        let end = (a + l).div_ceil(self.page) * self.page;
        // SAFETY: forwarded from this function's contract: the pages stay
        // mapped while the entry can be used (pinned), and are invalidated
        // before being unmapped.
        let mr = unsafe { pd.reg_mr(base as *mut u8, (end - base) as usize, access) }?;
        self.stats.misses += 1;
        let entry = Arc::new(RegEntry {
            mr,
            base,
            len: end - base,
            access,
        });
        self.slots.push(Slot {
            entry: entry.clone(),
            last_use: now,
            stale: false,
        });
        Ok(Reg {
            entry,
            addr: a,
            len: l,
        })
    }

    /// Deregisters unpinned entries beyond the bounds (LRU first) and stale
    /// unpinned entries.
    pub fn trim(&mut self) {
        let before = self.slots.len();
        self.slots
            .retain(|s| !(s.stale && Arc::strong_count(&s.entry) == 1));
        loop {
            let unpinned = self
                .slots
                .iter()
                .filter(|s| Arc::strong_count(&s.entry) == 1);
            let (n, bytes) = unpinned.fold((0usize, 0u64), |(n, b), s| (n + 1, b + s.entry.len));
            if n == 0 || (n <= self.max_entries && bytes <= self.max_bytes) {
                break;
            }
            let victim = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| Arc::strong_count(&s.entry) == 1)
                .min_by_key(|(_, s)| s.last_use)
                .map(|(i, _)| i);
            match victim {
                Some(i) => {
                    self.slots.swap_remove(i);
                }
                None => break,
            }
        }
        self.stats.evictions += (before - self.slots.len()) as u64;
    }

    /// Drops (or marks stale, when pinned) every entry overlapping
    /// `addr..addr+len`. Call before unmapping memory.
    pub fn invalidate(&mut self, addr: *const u8, len: usize) {
        let a = addr as u64;
        let e = a.saturating_add(len as u64);
        for s in &mut self.slots {
            if s.entry.base < e && a < s.entry.base + s.entry.len {
                s.stale = true;
            }
        }
        self.trim();
    }

    /// Statistics.
    pub fn stats(&self) -> RcacheStats {
        RcacheStats {
            entries: self.slots.len(),
            ..self.stats
        }
    }
}
