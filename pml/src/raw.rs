//! Raw views of user buffers held by requests between the call that
//! starts an operation and its completion. The only `unsafe` memory access
//! of the pml lives here; callers uphold the validity contract documented
//! on the `unsafe` entry points of [`crate::core::Core`] and [`crate::Pml`].

/// A read-only buffer held by a send request.
#[derive(Debug, Clone, Copy)]
pub struct RawBuf {
    ptr: *const u8,
    len: usize,
}

/// A writable buffer held by a receive request.
#[derive(Debug, Clone, Copy)]
pub struct RawBufMut {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a RawBuf is an address and a length; it is only dereferenced
// under the pml's lock by whichever thread holds it, and the owner of the
// memory guarantees (contract of the unsafe entry points) that the memory
// stays valid and unaliased until the request completes, whatever thread
// completes it.
unsafe impl Send for RawBuf {}
// SAFETY: as for RawBuf.
unsafe impl Send for RawBufMut {}

impl RawBuf {
    /// A view of `s` (the caller keeps `s` alive while the view is used).
    pub fn from_slice(s: &[u8]) -> Self {
        RawBuf {
            ptr: s.as_ptr(),
            len: s.len(),
        }
    }
    /// A view from parts.
    pub fn from_raw(ptr: *const u8, len: usize) -> Self {
        RawBuf { ptr, len }
    }
    /// The empty view.
    pub fn empty() -> Self {
        RawBuf {
            ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(),
            len: 0,
        }
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Start address.
    pub fn ptr(&self) -> *const u8 {
        self.ptr
    }
    /// `len` bytes from `off` (clamped to the view).
    pub fn sub(&self, off: usize, len: usize) -> RawBuf {
        let off = off.min(self.len);
        let len = len.min(self.len - off);
        RawBuf {
            // SAFETY: off <= self.len, so the result stays within (or one
            // past the end of) the same allocation.
            ptr: unsafe { self.ptr.add(off) },
            len,
        }
    }
    /// The bytes.
    ///
    /// # Safety
    /// The memory must be valid for reads of `len` bytes and not mutated
    /// while the returned slice lives.
    pub unsafe fn as_slice<'a>(&self) -> &'a [u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl RawBufMut {
    /// A view of `s` (the caller keeps `s` alive while the view is used).
    pub fn from_slice(s: &mut [u8]) -> Self {
        RawBufMut {
            ptr: s.as_mut_ptr(),
            len: s.len(),
        }
    }
    /// A view from parts.
    pub fn from_raw(ptr: *mut u8, len: usize) -> Self {
        RawBufMut { ptr, len }
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Start address.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    /// The first `n` bytes (clamped).
    pub fn prefix(&self, n: usize) -> RawBufMut {
        RawBufMut {
            ptr: self.ptr,
            len: n.min(self.len),
        }
    }
    /// Copies `data` to offset `off`; bytes beyond the view are never
    /// written (the copy is clamped).
    ///
    /// # Safety
    /// The memory must be valid for writes and not accessed by anyone else
    /// during the call.
    pub unsafe fn write_at(&self, off: usize, data: &[u8]) {
        if off >= self.len {
            return;
        }
        let n = data.len().min(self.len - off);
        // SAFETY: off + n <= len and the caller guarantees validity and
        // exclusivity; source and destination cannot overlap because the
        // destination is exclusively ours.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(off), n) };
    }
    /// The bytes, mutably.
    ///
    /// # Safety
    /// As [`RawBufMut::write_at`], for the life of the slice.
    pub unsafe fn as_mut_slice<'a>(&self) -> &'a mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}
