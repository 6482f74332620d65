//! Registered slabs of fixed-size slots: the untagged receive buffers of the
//! SRQ and the send bounce buffers. All raw-memory access of btl-openib
//! lives here.
//!
//! A [`Slab`] owns one zeroed, page-aligned allocation shared (`Arc`) by the
//! module and every [`RecvFrag`] handed to the pml. The memory region over it
//! is owned by the module and dropped before the slab's memory can be freed
//! (the slab outlives it through the `Arc`).
//!
//! Ownership of a slot is exclusive at any time: either the NIC holds it
//! (posted), or the module (free list), or exactly one `RecvFrag`. A
//! dropped `RecvFrag` pushes its slot onto the slab's return list, and the
//! module reposts it at its next progress.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::{Arc, Mutex};

use tmpi_verbs::wire::{Rvh, Tmh, TmhOpcode, RVH_LEN, TMH_LEN};

use crate::error::{OpenibError, Result};

/// One allocation cut into `count` slots of `slot_size` bytes.
pub struct Slab {
    ptr: *mut u8,
    layout: Layout,
    slot_size: usize,
    count: u32,
    returned: Mutex<Vec<u32>>,
}

// SAFETY: the slab is a plain byte allocation; concurrent access to a slot is
// excluded by the ownership discipline of the module doc (one owner per
// slot); the return list is behind a mutex.
unsafe impl Send for Slab {}
// SAFETY: as above.
unsafe impl Sync for Slab {}

impl std::fmt::Debug for Slab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slab")
            .field("slot_size", &self.slot_size)
            .field("count", &self.count)
            .finish()
    }
}

impl Slab {
    /// Allocates `count` zeroed slots of `slot_size` bytes (rounded up to 64).
    pub fn new(slot_size: usize, count: u32) -> Result<Arc<Slab>> {
        let slot_size = slot_size.div_ceil(64) * 64;
        let bytes = slot_size
            .checked_mul(count as usize)
            .filter(|b| *b > 0 && *b <= isize::MAX as usize / 2)
            .ok_or_else(|| {
                OpenibError::Config(format!(
                    "buffer pool of {count} x {slot_size} bytes is too large"
                ))
            })?;
        let layout = Layout::from_size_align(bytes, 4096)
            .map_err(|e| OpenibError::Config(format!("buffer pool layout: {e}")))?;
        // SAFETY: the layout has a non-zero size (checked above).
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(OpenibError::Config(format!(
                "cannot allocate {bytes} bytes of buffers"
            )));
        }
        Ok(Arc::new(Slab {
            ptr,
            layout,
            slot_size,
            count,
            returned: Mutex::new(Vec::new()),
        }))
    }

    /// Start of the allocation (for `reg_mr`).
    pub fn base(&self) -> *mut u8 {
        self.ptr
    }
    /// Total bytes.
    pub fn bytes(&self) -> usize {
        self.layout.size()
    }
    /// Bytes per slot.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }
    /// Address of slot `i`.
    pub fn slot_addr(&self, i: u32) -> u64 {
        debug_assert!(i < self.count);
        self.ptr as u64 + u64::from(i) * self.slot_size as u64
    }

    /// Copies `parts` one after another into slot `i` (owned by the caller,
    /// not posted); returns the bytes written.
    pub fn fill(&self, i: u32, parts: &[&[u8]]) -> Result<usize> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if i >= self.count || total > self.slot_size {
            return Err(OpenibError::TooLarge {
                len: total,
                limit: self.slot_size,
            });
        }
        let mut off = 0;
        for p in parts {
            // SAFETY: slot `i` is inside the allocation (checked), `off +
            // p.len() <= slot_size` (checked total), the caller owns the slot
            // (not posted, not lent to a RecvFrag), and `p` cannot alias the
            // slab (it is borrowed from elsewhere or from the same slot's
            // earlier contents is never passed).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    p.as_ptr(),
                    self.ptr.add(i as usize * self.slot_size + off),
                    p.len(),
                );
            }
            off += p.len();
        }
        Ok(total)
    }

    /// The first `len` bytes of slot `i`.
    ///
    /// Callers must own the slot (a completion returned it and it is not
    /// reposted), which the module and `RecvFrag` guarantee.
    fn slot(&self, i: u32, len: usize) -> &[u8] {
        let len = len.min(self.slot_size);
        assert!(i < self.count, "slot index out of range");
        // SAFETY: in bounds (asserted, len clamped); the NIC does not write
        // the slot while it is owned by the caller (see the module docs), so
        // no concurrent writes happen during the borrow.
        unsafe { std::slice::from_raw_parts(self.ptr.add(i as usize * self.slot_size), len) }
    }

    /// Slots whose `RecvFrag`s were dropped since the last call.
    pub fn take_returned(&self, out: &mut Vec<u32>) {
        let mut r = self.returned.lock().unwrap_or_else(|p| p.into_inner());
        out.append(&mut r);
    }
}

impl Drop for Slab {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; the memory region over
        // it was dropped before (the module drops its MR before its `Arc`
        // and every frag holds an `Arc`, so the last owner drops it).
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

/// What an untagged message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FragKind {
    /// An eager message (`TMH | payload`); `payload()` is the user data.
    Eager,
    /// A rendezvous request (`TMH | RVH | optional data`); `payload()` is the
    /// optional data, [`RecvFrag::rvh`] the sender's region.
    Rndv,
    /// A generic fragment (`TMH(NO_TAG) | bytes`), e.g. the pml's own
    /// protocol headers; `payload()` is the bytes.
    NoTag,
}

/// An untagged message handed to the pml: an eager message or rendezvous
/// request on the software path (or one the NIC found no tagged buffer for:
/// [`RecvFrag::unexpected`]), or a generic fragment.
///
/// The bytes stay in the receive buffer (zero copy). Dropping the frag gives
/// the buffer back to the SRQ: holding many frags for long starves the SRQ
/// (the pool grows up to `btl_openib_srq_max`, then senders see RNR).
pub struct RecvFrag {
    slab: Arc<Slab>,
    slot: u32,
    len: usize,
    /// Sender's rank.
    pub peer: u32,
    /// Message kind.
    pub kind: FragKind,
    /// The TMH (tag, app_ctx).
    pub tmh: Tmh,
    /// The RVH of a rendezvous request.
    pub rvh: Option<Rvh>,
    /// True when the TM-SRQ delivered a tagged message unmatched (counted
    /// in the NIC's unexpected counter; see `tm.rs`).
    pub unexpected: bool,
}

impl std::fmt::Debug for RecvFrag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvFrag")
            .field("peer", &self.peer)
            .field("kind", &self.kind)
            .field("tmh", &self.tmh)
            .field("rvh", &self.rvh)
            .field("len", &self.len)
            .field("unexpected", &self.unexpected)
            .finish()
    }
}

impl RecvFrag {
    /// A frag over slot `slot` (`len` bytes received) of `slab`, whose
    /// header was parsed by the caller (see [`parse_header`]).
    pub(crate) fn new(
        slab: &Arc<Slab>,
        slot: u32,
        len: usize,
        peer: u32,
        unexpected: bool,
        header: (FragKind, Tmh, Option<Rvh>),
    ) -> RecvFrag {
        RecvFrag {
            slab: slab.clone(),
            slot,
            len: len.min(slab.slot_size()),
            peer,
            kind: header.0,
            tmh: header.1,
            rvh: header.2,
            unexpected,
        }
    }

    /// All received bytes, headers included.
    pub fn bytes(&self) -> &[u8] {
        self.slab.slot(self.slot, self.len)
    }

    /// The bytes after the headers (eager data, rendezvous inline data, or
    /// the generic fragment).
    pub fn payload(&self) -> &[u8] {
        let h = TMH_LEN + if self.rvh.is_some() { RVH_LEN } else { 0 };
        &self.bytes()[h.min(self.len)..]
    }
}

impl Drop for RecvFrag {
    fn drop(&mut self) {
        self.slab
            .returned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.slot);
    }
}

/// Parses the headers of `len` received bytes in slot `slot` (owned by the
/// module: just polled, not yet reposted or lent). `Ok(None)` for a FIN
/// (returned with its RVH separately by [`parse_fin`]).
pub(crate) fn parse_header(
    slab: &Slab,
    slot: u32,
    len: usize,
) -> Result<Option<(FragKind, Tmh, Option<Rvh>)>> {
    let bytes = slab.slot(slot, len);
    let tmh = Tmh::parse(bytes)?;
    Ok(match tmh.opcode {
        TmhOpcode::Eager => Some((FragKind::Eager, tmh, None)),
        TmhOpcode::Rndv => Some((FragKind::Rndv, tmh, Some(Rvh::parse(&bytes[TMH_LEN..])?))),
        TmhOpcode::NoTag => Some((FragKind::NoTag, tmh, None)),
        TmhOpcode::Fin => None,
    })
}

/// Parses a FIN in slot `slot` (same ownership rule as [`parse_header`]).
pub(crate) fn parse_fin(slab: &Slab, slot: u32, len: usize) -> Result<(Tmh, Option<Rvh>)> {
    let h = tmpi_verbs::wire::TagHeader::parse(slab.slot(slot, len))?;
    Ok((h.tmh, h.rvh))
}

/// Copies `len` bytes at `addr` of a tagged receive buffer that the NIC has
/// just returned (its completion is being processed).
pub(crate) fn read_user(addr: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    // SAFETY: `addr..addr+len` lies inside a tagged buffer posted through
    // `Module::tm_post_recv`, whose contract keeps it valid until its
    // completion event was returned; we are processing that completion, so
    // the NIC no longer writes it and the caller does not access it yet.
    unsafe { std::ptr::copy_nonoverlapping(addr as usize as *const u8, v.as_mut_ptr(), len) };
    v
}
