//! Every access to memory the osc layer does not own: the user's origin
//! buffers (packed into messages, results unpacked into them) and the
//! window's memory at the target. Bounds are checked here against the
//! window's size before any byte is touched.

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

/// A target's window memory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WinMem {
    pub base: usize,
    pub size: usize,
}

impl WinMem {
    /// Checks that every region lies in the window; their total length.
    pub fn check(&self, regs: impl Iterator<Item = (i128, u64)>) -> Result<usize> {
        let mut total = 0usize;
        for (o, l) in regs {
            if o < 0 || o + l as i128 > self.size as i128 {
                return Err(OscError::Range(format!(
                    "bytes {o}..{} are outside the target's window of {} bytes",
                    o + l as i128,
                    self.size
                )));
            }
            total += l as usize;
        }
        Ok(total)
    }

    /// Copies the regions (checked with [`WinMem::check`]) out of the window.
    pub fn gather(&self, regs: impl Iterator<Item = (i128, u64)>, out: &mut Vec<u8>) {
        for (o, l) in regs {
            // SAFETY: the window memory `base..base + size` stays valid
            // while the window exists (the caller serves requests only for
            // live windows), and `check` placed the region inside it.
            out.extend_from_slice(unsafe {
                std::slice::from_raw_parts((self.base as *const u8).add(o as usize), l as usize)
            });
        }
    }

    /// Writes `data` over the regions (checked with [`WinMem::check`];
    /// `data` holds their total length).
    pub fn scatter(&self, regs: impl Iterator<Item = (i128, u64)>, data: &[u8]) {
        let mut pos = 0usize;
        for (o, l) in regs {
            let l = l as usize;
            let Some(src) = data.get(pos..pos + l) else {
                return;
            };
            // SAFETY: as in `gather`; the window's memory is only written
            // here, by the one thread serving the window at a time (MPI
            // leaves concurrent local stores to the user's synchronisation).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.as_ptr(),
                    (self.base as *mut u8).add(o as usize),
                    l,
                )
            };
            pos += l;
        }
    }
}
