//! Raw views of user buffers held by requests between the call that
//! starts an operation and its completion. The only `unsafe` memory access
//! of the pml lives here; callers uphold the validity contract documented
//! on the `unsafe` entry points of the protocol core (`core::Core`) and [`crate::Pml`].

use std::ptr::NonNull;

use crate::convertor::Convertor;

/// Names a packed fragment: (convertor id, packed offset, length).
type PackKey = (u64, usize, usize);

thread_local! {
    /// The last packed fragment and its bytes.
    static PACKED: std::cell::RefCell<(Option<PackKey>, Vec<u8>)> =
        const { std::cell::RefCell::new((None, Vec::new())) };
}

/// A read-only buffer held by a send request: contiguous bytes, or a
/// non-contiguous user layout seen through a [`Convertor`] (typed views:
/// their bytes are the packed form, packed per fragment as it leaves).
#[derive(Debug, Clone, Copy)]
pub struct RawBuf {
    ptr: *const u8,
    len: usize,
    /// A non-contiguous buffer: `ptr` is the user base address, `len` the
    /// packed length of this view, `pos` its packed offset in the message.
    conv: Option<NonNull<Convertor>>,
    pos: usize,
}

/// A writable buffer held by a receive request.
#[derive(Debug, Clone, Copy)]
pub struct RawBufMut {
    ptr: *mut u8,
    len: usize,
    /// As for [`RawBuf`].
    conv: Option<NonNull<Convertor>>,
    pos: usize,
}

// SAFETY: a RawBuf is an address and a length (and, typed, a pointer to a
// convertor the request's owner keeps alive, which is Sync); it is only
// dereferenced under the pml's lock by whichever thread holds it, and the owner of the
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
            conv: None,
            pos: 0,
        }
    }
    /// A view from parts.
    pub fn from_raw(ptr: *const u8, len: usize) -> Self {
        RawBuf {
            ptr,
            len,
            conv: None,
            pos: 0,
        }
    }
    /// A typed view: the message `conv` describes, laid out at `base`. The
    /// caller keeps `conv` (and the memory) alive and unmoved while the view
    /// is used (the unsafe accessors' contract).
    pub fn typed(base: *const u8, conv: &Convertor) -> Self {
        RawBuf {
            ptr: base,
            len: conv.packed_len(),
            conv: Some(NonNull::from(conv)),
            pos: 0,
        }
    }
    /// Whether the view is plain bytes (`false`: a typed view, which cannot
    /// be registered for a get or handed to a NIC as is).
    pub fn is_contiguous(&self) -> bool {
        self.conv.is_none()
    }
    /// The empty view.
    pub fn empty() -> Self {
        RawBuf {
            ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(),
            len: 0,
            conv: None,
            pos: 0,
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
        if self.conv.is_some() {
            return RawBuf {
                len,
                pos: self.pos + off,
                ..*self
            };
        }
        RawBuf {
            // SAFETY: off <= self.len, so the result stays within (or one
            // past the end of) the same allocation.
            ptr: unsafe { self.ptr.add(off) },
            len,
            conv: None,
            pos: 0,
        }
    }
    /// Calls `f` with the bytes of the view: the memory itself when
    /// contiguous, else this view's bytes packed (one fragment's worth, not
    /// the message). The last packed view is kept per thread, so a fragment
    /// retried after a busy transport is not packed again.
    ///
    /// # Safety
    /// As [`RawBuf::as_slice`]; a typed view's convertor must be alive.
    pub unsafe fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let Some(c) = self.conv else {
            // SAFETY: the caller's contract.
            return f(unsafe { self.as_slice() });
        };
        // SAFETY: the convertor outlives the view (contract of `typed`).
        let c = unsafe { c.as_ref() };
        let key = (c.id(), self.pos, self.len);
        PACKED.with(|p| {
            let mut p = p.borrow_mut();
            let (k, v) = &mut *p;
            if *k != Some(key) {
                v.clear();
                v.resize(self.len, 0);
                // SAFETY: the convertor describes the memory at `ptr`,
                // readable (caller's contract).
                let n = unsafe { c.pack(self.ptr, self.pos, v) };
                v.truncate(n);
                *k = Some(key);
            }
            f(v)
        })
    }
    /// A copy of the view's bytes (packed for a typed view).
    ///
    /// # Safety
    /// As [`RawBuf::with_bytes`].
    pub unsafe fn to_vec(&self) -> Vec<u8> {
        let Some(c) = self.conv else {
            // SAFETY: the caller's contract.
            return unsafe { self.as_slice() }.to_vec();
        };
        // Packed straight into the copy (not through the per-thread
        // fragment cache, which would keep a message-sized buffer).
        let mut v = vec![0u8; self.len];
        // SAFETY: the convertor outlives the view (contract of `typed`) and
        // describes the memory at `ptr`, readable (caller's contract).
        let n = unsafe { c.as_ref().pack(self.ptr, self.pos, &mut v) };
        v.truncate(n);
        v
    }
    /// The bytes of a contiguous view (a typed view has none: use
    /// [`RawBuf::with_bytes`]; here it reads as empty).
    ///
    /// # Safety
    /// The memory must be valid for reads of `len` bytes and not mutated
    /// while the returned slice lives.
    pub unsafe fn as_slice<'a>(&self) -> &'a [u8] {
        debug_assert!(self.conv.is_none(), "as_slice of a typed view");
        if self.len == 0 || self.conv.is_some() {
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
            conv: None,
            pos: 0,
        }
    }
    /// A view from parts.
    pub fn from_raw(ptr: *mut u8, len: usize) -> Self {
        RawBufMut {
            ptr,
            len,
            conv: None,
            pos: 0,
        }
    }
    /// A typed view (see [`RawBuf::typed`]): arriving bytes are unpacked
    /// into the layout at `base` fragment by fragment.
    pub fn typed(base: *mut u8, conv: &Convertor) -> Self {
        RawBufMut {
            ptr: base,
            len: conv.packed_len(),
            conv: Some(NonNull::from(conv)),
            pos: 0,
        }
    }
    /// Whether the view is plain bytes (see [`RawBuf::is_contiguous`]).
    pub fn is_contiguous(&self) -> bool {
        self.conv.is_none()
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
            len: n.min(self.len),
            ..*self
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
        if let Some(c) = self.conv {
            // SAFETY: the convertor outlives the view (contract of `typed`)
            // and the caller guarantees the layout at `ptr` writable and
            // exclusive; `data` is not part of it.
            unsafe { c.as_ref().unpack(self.ptr, self.pos + off, &data[..n]) };
            return;
        }
        // SAFETY: off + n <= len and the caller guarantees validity and
        // exclusivity; source and destination cannot overlap because the
        // destination is exclusively ours.
        unsafe { tmpi_btl::bytes::copy_bytes(data.as_ptr(), self.ptr.add(off), n) };
    }
    /// The bytes of a contiguous view, mutably (a typed view reads as
    /// empty: it is never handed out whole).
    ///
    /// # Safety
    /// As [`RawBufMut::write_at`], for the life of the slice.
    pub unsafe fn as_mut_slice<'a>(&self) -> &'a mut [u8] {
        debug_assert!(self.conv.is_none(), "as_mut_slice of a typed view");
        if self.len == 0 || self.conv.is_some() {
            return &mut [];
        }
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}
