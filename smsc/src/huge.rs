//! Huge pages under reused single-copy sources.
//!
//! A peer's `process_vm_readv` pins every 4 KiB page of the source it
//! reads, one page-table walk and one reference count each (about a
//! quarter of the copy's time for a 1 MiB block whose pages are not in
//! cache, docs/coll.md "Huge pages under reused sources"). When the source
//! sits on a transparent huge page the kernel walks and counts once per
//! 2 MiB. Applications allocate their buffers as they like, so the owner
//! of a source that is read again and again (the same aligned range seen
//! `after` times) asks the kernel to back its whole 2 MiB ranges with huge
//! pages (`madvise(MADV_COLLAPSE)`, Linux 6.1): the contents stay the same,
//! only the backing changes, and the range is done once. Ranges with a page
//! not yet in memory are left alone, so the resident set does not grow.

use std::sync::Mutex;

/// Ranges remembered; the least recently seen is forgotten first.
const SLOTS: usize = 16;

/// What happened to a remembered range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Seen this many times, not asked yet.
    Seen(u32),
    /// On huge pages (or the kernel said no for good): nothing more to do.
    Settled,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    start: usize,
    end: usize,
    fate: Fate,
    /// Last time seen (a counter of calls).
    used: u64,
}

/// The sources one component has published, with how often.
#[derive(Debug)]
pub struct HugeSources {
    /// Times a range must be seen before it is collapsed; 0 = never.
    after: u32,
    /// The kernel's PMD page size (`hpage_pmd_size`); 0 = no THP here.
    huge: usize,
    page: usize,
    /// Log target of the owning component.
    target: &'static str,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    slots: Vec<Slot>,
    clock: u64,
    /// Ranges collapsed, for tests and logs.
    collapsed: u64,
}

/// What [`HugeSources::note`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Noted {
    /// Nothing to do (off, too small, seen too few times, settled).
    Nothing,
    /// The range went onto huge pages now.
    Collapsed,
    /// Asked and refused, or skipped (pages not all in memory).
    Refused,
}

impl HugeSources {
    /// A tracker collapsing a range once it was seen `after` times (0 =
    /// never); `target` names the component in the logs.
    pub fn new(after: u32, target: &'static str) -> Self {
        let huge = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .filter(|&h| h.is_power_of_two())
            .unwrap_or(0);
        // SAFETY: sysconf only reads a system constant.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let page = if page > 0 { page as usize } else { 4096 };
        // An empty range at an aligned address: kernels that know the
        // advice return 0 before looking at any mapping, older ones EINVAL.
        // SAFETY: a zero-length madvise touches no memory.
        let known =
            unsafe { libc::madvise(page as *mut libc::c_void, 0, libc::MADV_COLLAPSE) } == 0;
        HugeSources {
            after,
            huge: if known { huge } else { 0 },
            page,
            target,
            state: Mutex::new(State::default()),
        }
    }

    /// Whole huge pages of `[addr, addr + len)`, if any.
    fn aligned(&self, addr: usize, len: usize) -> Option<(usize, usize)> {
        if self.huge == 0 {
            return None;
        }
        let start = addr.checked_add(self.huge - 1)? & !(self.huge - 1);
        let end = addr.checked_add(len)? & !(self.huge - 1);
        (end > start).then_some((start, end))
    }

    /// Called by the owner of `[addr, addr + len)` of its own memory
    /// before peers read it: counts the range's whole huge pages and, the
    /// `after`-th time they are seen, collapses them (each at most once).
    pub fn note(&self, addr: usize, len: usize) -> Noted {
        if self.after == 0 {
            return Noted::Nothing;
        }
        let Some((start, end)) = self.aligned(addr, len) else {
            return Noted::Nothing;
        };
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.clock += 1;
        let now = st.clock;
        let i = match st
            .slots
            .iter()
            .position(|s| s.start == start && s.end == end)
        {
            Some(i) => {
                st.slots[i].used = now;
                if let Fate::Seen(n) = st.slots[i].fate {
                    st.slots[i].fate = Fate::Seen(n + 1);
                }
                i
            }
            None => {
                let slot = Slot {
                    start,
                    end,
                    fate: Fate::Seen(1),
                    used: now,
                };
                if st.slots.len() < SLOTS {
                    st.slots.push(slot);
                    st.slots.len() - 1
                } else {
                    let (i, _) = st
                        .slots
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, s)| s.used)
                        .expect("SLOTS > 0");
                    st.slots[i] = slot;
                    i
                }
            }
        };
        match st.slots[i].fate {
            Fate::Seen(n) if n >= self.after => {}
            _ => return Noted::Nothing,
        }
        if !self.resident(start, end) {
            // Collapsing would fill the missing pages: try again after
            // another `after` calls.
            st.slots[i].fate = Fate::Seen(0);
            return Noted::Refused;
        }
        // SAFETY: MADV_COLLAPSE only changes which physical pages back
        // this process's own range, keeping their contents (the kernel
        // copies them under the mmap lock); a range that is not mapped
        // or not eligible is refused with an error, nothing else happens.
        let r =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_COLLAPSE) };
        if r == 0 {
            st.slots[i].fate = Fate::Settled;
            st.collapsed += 1;
            tracing::debug!(
                target: "btl_sm",
                component = self.target,
                "{} KiB at {start:#x} now on huge pages",
                (end - start) / 1024
            );
            return Noted::Collapsed;
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            // Busy (a page pinned, e.g. by a peer's read of another call)
            // or no huge page free now: maybe later.
            Some(libc::EAGAIN) | Some(libc::EBUSY) => st.slots[i].fate = Fate::Seen(0),
            // EINVAL: huge pages are off for this range (hugetlbfs, a file,
            // MADV_NOHUGEPAGE, THP disabled for the process); ENOMEM: not
            // all mapped. Settled either way.
            _ => st.slots[i].fate = Fate::Settled,
        }
        tracing::debug!(
            target: "btl_sm",
            component = self.target,
            "{} KiB at {start:#x} stay on small pages: {e}",
            (end - start) / 1024
        );
        Noted::Refused
    }

    /// Whether every page of `[start, end)` is in memory (`mincore`).
    fn resident(&self, start: usize, end: usize) -> bool {
        let mut v = vec![0u8; (end - start).div_ceil(self.page)];
        // SAFETY: `start` is page aligned (a huge-page boundary) and `v`
        // holds one byte per page of the range, which is all mincore
        // writes.
        let r = unsafe {
            libc::mincore(
                start as *mut libc::c_void,
                end - start,
                v.as_mut_ptr().cast(),
            )
        };
        r == 0 && v.iter().all(|b| b & 1 == 1)
    }

    /// Ranges collapsed so far.
    pub fn collapsed(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .collapsed
    }

    /// Whether this host has transparent huge pages and `MADV_COLLAPSE`.
    pub fn available(&self) -> bool {
        self.huge != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `AnonHugePages` of this process (kB), from smaps_rollup.
    fn anon_huge_kb() -> u64 {
        let s = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
        s.lines()
            .find(|l| l.starts_with("AnonHugePages:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    #[test]
    fn a_reused_source_goes_onto_huge_pages_once_with_its_contents() {
        let h = HugeSources::new(2, "test");
        if !h.available() {
            eprintln!("no transparent huge pages or MADV_COLLAPSE on this host: skipped");
            return;
        }
        let len = 5 * h.huge;
        let mut buf: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let addr = buf.as_ptr() as usize;
        let before = anon_huge_kb();
        assert_eq!(h.note(addr, len), Noted::Nothing, "first sight");
        assert_eq!(h.note(addr, len), Noted::Collapsed);
        assert_eq!(h.collapsed(), 1);
        assert!(
            anon_huge_kb() >= before + 4 * h.huge as u64 / 1024,
            "at least 4 whole huge pages: {} -> {} kB",
            before,
            anon_huge_kb()
        );
        // Same contents, still ours to write.
        assert!(buf.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
        buf[len / 2] = 7;
        assert_eq!(buf[len / 2], 7);
        // Settled: no second collapse.
        assert_eq!(h.note(addr, len), Noted::Nothing);
        assert_eq!(h.collapsed(), 1);
    }

    #[test]
    fn small_sparse_or_unmapped_sources_are_left_alone() {
        let h = HugeSources::new(1, "test");
        if !h.available() {
            return;
        }
        // Smaller than a huge page: nothing to collapse.
        let small = vec![1u8; 64 * 1024];
        assert_eq!(h.note(small.as_ptr() as usize, small.len()), Noted::Nothing);
        // Mapped but never touched: not resident, so left alone.
        let len = 4 * h.huge;
        // SAFETY: a fresh anonymous private mapping, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        assert_eq!(h.note(p as usize, len), Noted::Refused);
        assert_eq!(h.collapsed(), 0);
        // SAFETY: the mapping made above, no reference into it remains.
        unsafe { libc::munmap(p, len) };
        // Off: never.
        let off = HugeSources::new(0, "test");
        let big = vec![1u8; 4 * h.huge];
        assert_eq!(off.note(big.as_ptr() as usize, big.len()), Noted::Nothing);
        assert_eq!(off.note(big.as_ptr() as usize, big.len()), Noted::Nothing);
    }
}
