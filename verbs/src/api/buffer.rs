//! An owned, registered buffer: the safe way to get memory the NIC may use.
//!
//! The buffer is allocated (page-aligned by default) and registered together;
//! the region is deregistered before the memory is freed, so the NIC can never
//! see a dangling region. Posting it still goes through the `unsafe` posting
//! functions, whose contract says the memory is not accessed while posted;
//! the accessors here are safe because that obligation lies with the poster.

use std::alloc::{self, Layout};
use std::ptr::NonNull;

use super::{AccessFlags, MemoryRegion, ProtectionDomain, Provider, Result, Sge, VerbsError};

/// An owned heap allocation, freed when dropped.
struct Alloc {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Drop for Alloc {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout by `RegisteredBuffer::with_align`
        // and freed only here.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// A heap buffer registered on a protection domain.
pub struct RegisteredBuffer<P: Provider> {
    // Field order matters: the region is dropped (deregistered) before the
    // memory is freed.
    mr: P::Mr,
    mem: Alloc,
}

// SAFETY: the buffer is uniquely owned heap memory; `P::Mr` is Send + Sync
// by the `MemoryRegion` bound.
unsafe impl<P: Provider> Send for RegisteredBuffer<P> {}
// SAFETY: `&RegisteredBuffer` only gives shared (read) access to the bytes.
unsafe impl<P: Provider> Sync for RegisteredBuffer<P> {}

impl<P: Provider> RegisteredBuffer<P> {
    /// Allocates `len` zeroed bytes aligned to a page (4096) and registers
    /// them with `access`.
    pub fn new(pd: &P::Pd, len: usize, access: AccessFlags) -> Result<Self> {
        Self::with_align(pd, len, 4096, access)
    }

    /// As [`RegisteredBuffer::new`] with a chosen alignment (a power of two).
    pub fn with_align(pd: &P::Pd, len: usize, align: usize, access: AccessFlags) -> Result<Self> {
        if len == 0 {
            return Err(VerbsError::InvalidArgument("empty buffer".into()));
        }
        let layout = Layout::from_size_align(len, align)
            .map_err(|e| VerbsError::InvalidArgument(format!("buffer layout: {e}")))?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(|| VerbsError::verb("alloc", libc::ENOMEM))?;
        let mem = Alloc { ptr, layout };
        // SAFETY: `mem` is stored next to the region and dropped after it
        // (field order), so the memory outlives the registration.
        let mr = unsafe { pd.reg_mr(ptr.as_ptr(), len, access) }?;
        Ok(RegisteredBuffer { mr, mem })
    }

    /// The memory region (lkey, rkey, address).
    pub fn mr(&self) -> &P::Mr {
        &self.mr
    }

    /// Start address.
    pub fn addr(&self) -> u64 {
        self.mem.ptr.as_ptr() as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.mem.layout.size()
    }

    /// Always false (empty buffers are refused).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// An SGE for `offset..offset+len`, bounds-checked.
    pub fn sge(&self, offset: usize, len: usize) -> Result<Sge> {
        let fits = offset.checked_add(len).is_some_and(|e| e <= self.len());
        if !fits || len > u32::MAX as usize {
            return Err(VerbsError::InvalidArgument(format!(
                "SGE {offset}+{len} outside a buffer of {} bytes",
                self.len()
            )));
        }
        Ok(self.mr.sge(offset, len as u32))
    }

    /// The bytes. Do not call while the buffer is posted (posting contract).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr/len describe our live allocation; aliasing with the NIC
        // is excluded by the posting contract.
        unsafe { std::slice::from_raw_parts(self.mem.ptr.as_ptr(), self.len()) }
    }

    /// The bytes, mutably. Do not call while the buffer is posted.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as for `as_slice`, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.mem.ptr.as_ptr(), self.len()) }
    }
}
