//! Every access to memory the osc layer does not own: the user's origin
//! buffers (packed into messages, results unpacked into them) and the
//! window's memory at the target. Bounds are checked here against the
//! window's size before any byte is touched.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::{OscError, Result};

/// Positions (offset, length) of `count` items of a layout with `blocks`
/// and `extent`, starting at `start`, in type-map order.
pub(crate) fn regions<'a>(
    start: i128,
    count: u64,
    extent: i128,
    blocks: &'a [(i64, u64)],
) -> impl Iterator<Item = (i128, u64)> + 'a {
    (0..count).flat_map(move |i| {
        blocks
            .iter()
            .map(move |&(o, l)| (start + i as i128 * extent + o as i128, l))
    })
}

/// Packs `count` items of `layout` at `ptr`.
///
/// # Safety
/// Every block of the `count` items must be readable.
pub(crate) unsafe fn pack(ptr: *const u8, count: usize, layout: &crate::Layout) -> Vec<u8> {
    let mut v = Vec::with_capacity(layout.size.saturating_mul(count));
    if layout.is_contig(count) {
        if count > 0 && layout.size > 0 {
            // SAFETY: the caller's contract: `count * size` contiguous
            // bytes at `ptr` are readable.
            v.extend_from_slice(unsafe { std::slice::from_raw_parts(ptr, layout.size * count) });
        }
        return v;
    }
    for i in 0..count {
        for &(o, l) in &layout.blocks {
            let off = i as isize * layout.extent + o;
            // SAFETY: the caller's contract: each block of each item is
            // readable (`off` is its offset from `ptr` by the type map).
            v.extend_from_slice(unsafe { std::slice::from_raw_parts(ptr.wrapping_offset(off), l) });
        }
    }
    v
}

/// The `n` contiguous bytes at `ptr` (a contiguous origin buffer).
///
/// # Safety
/// `n` bytes at `ptr` must be readable, and not written, while the slice
/// is used.
pub(crate) unsafe fn bytes<'a>(ptr: *const u8, n: usize) -> &'a [u8] {
    if n == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(ptr, n) }
}

/// The `n` contiguous bytes at `ptr`, to write (a contiguous result
/// buffer).
///
/// # Safety
/// `n` bytes at `ptr` must be writable and not otherwise accessed while
/// the slice is used.
pub(crate) unsafe fn bytes_mut<'a>(ptr: *mut u8, n: usize) -> &'a mut [u8] {
    if n == 0 {
        return &mut [];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(ptr, n) }
}

/// Unpacks `data` into `count` items of `layout` at `ptr` (as many bytes
/// as both have).
///
/// # Safety
/// Every block of the `count` items must be writable and not otherwise
/// accessed during the call.
pub(crate) unsafe fn unpack(ptr: *mut u8, count: usize, layout: &crate::Layout, data: &[u8]) {
    if layout.is_contig(count) {
        let n = data.len().min(layout.size.saturating_mul(count));
        // SAFETY: the caller's contract: `count * size` contiguous bytes
        // at `ptr` are writable; `n` is at most that and `data`'s length.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, n) };
        return;
    }
    let mut pos = 0usize;
    'items: for i in 0..count {
        for &(o, l) in &layout.blocks {
            if pos >= data.len() {
                break 'items;
            }
            let n = l.min(data.len() - pos);
            let off = i as isize * layout.extent + o;
            // SAFETY: the caller's contract: the block is writable; `n`
            // bytes of `data` from `pos` exist (checked above).
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr().add(pos), ptr.wrapping_offset(off), n)
            };
            pos += n;
        }
    }
}

/// The memory regions attached to a dynamic window (`MPI_Win_attach`):
/// (address, length), in attach order. The target holds the lock while it
/// checks and applies a request, so a detach waits for the access in
/// flight and no access reaches memory detached before it.
#[derive(Debug, Default)]
pub(crate) struct Attached(Mutex<Vec<(usize, usize)>>);

impl Attached {
    fn lock(&self) -> MutexGuard<'_, Vec<(usize, usize)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `MPI_Win_attach`: the user vouches that `len` bytes at `addr` stay
    /// valid until they are detached.
    pub fn attach(&self, addr: usize, len: usize) -> Result<()> {
        if addr.checked_add(len).is_none() {
            return Err(OscError::Attach(format!(
                "{len} bytes at {addr:#x} run past the end of the address space"
            )));
        }
        self.lock().push((addr, len));
        Ok(())
    }

    /// `MPI_Win_detach` of the region attached last at `addr`.
    pub fn detach(&self, addr: usize) -> Result<()> {
        let mut l = self.lock();
        match l.iter().rposition(|&(a, _)| a == addr) {
            Some(i) => {
                l.remove(i);
                Ok(())
            }
            None => Err(OscError::Range(format!(
                "no region attached to the window starts at {addr:#x}"
            ))),
        }
    }
}

/// A target's window memory: `size` bytes at `base`, or for a dynamic
/// window (`attached`) the regions attached to it, with `base` 0 (request
/// offsets are then absolute addresses).
#[derive(Debug, Clone)]
pub(crate) struct WinMem {
    pub base: usize,
    pub size: usize,
    pub attached: Option<Arc<Attached>>,
}

impl WinMem {
    /// The memory as requests may use it now (for a dynamic window: the
    /// attached regions, locked until the view is dropped).
    pub fn view(&self) -> View<'_> {
        View {
            base: self.base,
            size: self.size,
            attached: self.attached.as_deref().map(Attached::lock),
        }
    }
}

/// Whether attached regions cover every byte of `lo..hi`. Regions that
/// touch count as one: MPICH's `rma/win_dynamic_rma_flush_get` attaches two
/// halves of one array and accesses across the seam; every byte touched
/// is attached either way.
fn covered(attached: &[(usize, usize)], lo: i128, hi: i128) -> bool {
    let mut at = lo;
    while at < hi {
        let reach = attached
            .iter()
            .map(|&(b, n)| (b as i128, b as i128 + n as i128))
            .filter(|&(b, e)| b <= at && at < e)
            .map(|(_, e)| e)
            .max();
        match reach {
            Some(e) => at = e,
            None => return false,
        }
    }
    true
}

/// [`WinMem`] while one request is applied.
pub(crate) struct View<'a> {
    base: usize,
    size: usize,
    attached: Option<MutexGuard<'a, Vec<(usize, usize)>>>,
}

impl View<'_> {
    /// Checks that every region lies in the window (for a dynamic window:
    /// in attached memory); their total length.
    pub fn check(&self, regs: impl Iterator<Item = (i128, u64)>) -> Result<usize> {
        let mut total = 0usize;
        for (o, l) in regs {
            let end = o + l as i128;
            match &self.attached {
                None if o < 0 || end > self.size as i128 => {
                    return Err(OscError::Range(format!(
                        "bytes {o}..{end} are outside the target's window of {} bytes",
                        self.size
                    )));
                }
                Some(a) if l > 0 && !covered(a, o, end) => {
                    return Err(OscError::Range(format!(
                        "bytes {o:#x}..{end:#x} are not in memory the target attached to its dynamic window"
                    )));
                }
                _ => {}
            }
            total += l as usize;
        }
        Ok(total)
    }

    /// Whether the `n` bytes from `off` lie in the window (never for a
    /// dynamic window, whose regions [`View::check`] checks): the one-block
    /// check of the operations' fast path, which stands for
    /// [`View::check`] before [`View::copy_out`] and [`View::copy_in`].
    #[inline]
    pub fn holds(&self, off: usize, n: usize) -> bool {
        self.attached.is_none() && off.checked_add(n).is_some_and(|end| end <= self.size)
    }

    /// Writes `data` at `off` (checked with [`View::check`] or
    /// [`View::holds`]).
    #[inline]
    pub fn copy_in(&self, off: usize, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        // SAFETY: as in `scatter`, for the one region `off..off +
        // data.len()` the caller checked.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), (self.base + off) as *mut u8, data.len())
        };
    }

    /// The address of a region checked with [`View::check`].
    fn addr(&self, o: i128) -> usize {
        (self.base as i128 + o) as usize
    }

    /// Copies the regions (checked with [`View::check`]) out of the window.
    pub fn gather(&self, regs: impl Iterator<Item = (i128, u64)>, out: &mut Vec<u8>) {
        for (o, l) in regs {
            if l == 0 {
                continue;
            }
            // SAFETY: the window memory `base..base + size` stays valid
            // while the window exists (the caller serves requests only for
            // live windows; an sm origin reaches another rank's part of the
            // segment its module keeps mapped), and `check` placed the
            // region inside it; a
            // dynamic window's region lies in an attached region, which the
            // user keeps valid until detaching it, and detaching waits for
            // this view's lock.
            out.extend_from_slice(unsafe {
                std::slice::from_raw_parts(self.addr(o) as *const u8, l as usize)
            });
        }
    }

    /// Copies the one region `off..off + out.len()` (checked with
    /// [`View::check`]) out of the window into `out`.
    pub fn copy_out(&self, off: i128, out: &mut [u8]) {
        if out.is_empty() {
            return;
        }
        // SAFETY: as in `gather`; `out` is a distinct buffer of the
        // caller (the origin's result buffer, never window memory MPI lets
        // a get overlap).
        unsafe {
            std::ptr::copy_nonoverlapping(self.addr(off) as *const u8, out.as_mut_ptr(), out.len())
        };
    }

    /// Writes `data` over the regions (checked with [`View::check`];
    /// `data` holds their total length).
    pub fn scatter(&self, regs: impl Iterator<Item = (i128, u64)>, data: &[u8]) {
        let mut pos = 0usize;
        for (o, l) in regs {
            let l = l as usize;
            let Some(src) = data.get(pos..pos + l) else {
                return;
            };
            if l > 0 {
                // SAFETY: as in `gather`; the window's memory is only
                // written here, by the one thread serving the window at a
                // time, or by an origin of the sm component under the
                // target's accumulate lock or the user's synchronisation
                // (MPI leaves conflicting puts, concurrent local stores,
                // and the other processes' stores into a shared window, to
                // the user's synchronisation).
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.addr(o) as *mut u8, l) };
            }
            pos += l;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attached_regions_cover_accesses_across_their_seams() {
        let a = [(100, 50), (150, 50), (300, 10)];
        assert!(covered(&a, 100, 200), "two touching regions");
        assert!(covered(&a, 120, 160));
        assert!(covered(&a, 300, 310));
        assert!(!covered(&a, 190, 210), "past the end");
        assert!(!covered(&a, 90, 110), "before the start");
        assert!(!covered(&a, 250, 260), "between regions");
        assert!(!covered(&[], 0, 1));
        assert!(covered(&[(0, 10), (2, 3)], 0, 10), "nested regions");
    }
}
